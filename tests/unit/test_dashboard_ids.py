"""Event ids (docs/dashboard.md "Resume"): `evt_` + a version-8 UUID carrying the topic's
epoch (low 20 bits) and a seq; ids of other topics or shapes are unknown."""

from __future__ import annotations

import uuid

import pytest

from headwater.dashboard.ids import Position, event_id, parse_event_id, topic_check

pytestmark = pytest.mark.unit

CHECK = topic_check("sentiment")


@pytest.mark.parametrize(
    ("epoch", "seq"), [(1, 0), (1, 1), (3, 123_456), ((1 << 20) - 1, (1 << 48) - 1), (0, 7)]
)
def test_round_trip(epoch: int, seq: int) -> None:
    eid = event_id(CHECK, epoch, seq)
    assert eid.startswith("evt_")
    u = uuid.UUID(eid[4:])
    assert str(u) == eid[4:] and u.version == 8 and u.variant == uuid.RFC_4122
    assert parse_event_id(eid, CHECK) == Position(epoch, seq)


def test_epoch_keeps_its_low_20_bits() -> None:
    assert parse_event_id(event_id(CHECK, (1 << 20) + 5, 9), CHECK) == Position(5, 9)


def test_ids_are_unique() -> None:
    assert len({event_id(CHECK, 1, 1) for _ in range(200)}) == 200


def test_topic_check_is_12_bits_and_differs() -> None:
    checks = {topic_check(f"t{i}") for i in range(50)}
    assert all(0 <= c < 4096 for c in checks) and len(checks) > 40
    assert topic_check("sentiment") == topic_check("sentiment")


def test_foreign_topic_is_unknown() -> None:
    other = topic_check("other")
    assert other != CHECK
    assert parse_event_id(event_id(other, 1, 5), CHECK) is None


def _with_version(eid: str, version: int) -> str:
    value = uuid.UUID(eid[4:]).int
    value = (value & ~(0xF << 76)) | (version << 76)
    return "evt_" + str(uuid.UUID(int=value))


def test_wrong_version_or_variant_is_unknown() -> None:
    eid = event_id(CHECK, 1, 5)
    for v in (4, 7, 9, 0):
        assert parse_event_id(_with_version(eid, v), CHECK) is None
    value = uuid.UUID(eid[4:]).int & ~(0b11 << 62)  # variant 0b00
    assert parse_event_id("evt_" + str(uuid.UUID(int=value)), CHECK) is None
    assert parse_event_id(_with_version(eid, 8), CHECK) == Position(1, 5)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "",
        "evt_",
        "evt_abc123",
        "abc",
        # fixed values (stable test ids): a v4 and a v1 uuid, a bare v4, the prefix in caps
        "evt_9e0f65e3-45c8-40e7-b33e-6b11ab0c0cfc",
        "evt_6a1f2cac-e902-11f1-94e3-02fc00000001",
        "8293400c-e786-4e86-afdf-20ee53b6d6cd",
        "EVT_c4ebd906-a48f-4674-94f1-eebbcecf7d86",
        "evt_" + "0" * 200,
    ],
)
def test_malformed_ids_are_unknown(raw: str | None) -> None:
    assert parse_event_id(raw, CHECK) is None


def test_prefix_is_required() -> None:
    eid = event_id(CHECK, 2, 3)
    assert parse_event_id(eid[4:], CHECK) is None
    assert parse_event_id(eid, CHECK) == Position(2, 3)
