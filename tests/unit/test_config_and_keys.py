"""Topic config resolution (§0.10) and API-key parsing (§0.2)."""

from __future__ import annotations

import dataclasses

import pytest

from headwater.access.keys import ALL_SCOPES, KeyStore
from headwater.engine.config import DEFAULTS, TopicConfig, resolve, validate_config_patch
from headwater.engine.ports import Head
from headwater.errors import ConfigurationError, Forbidden, InvalidRequest, Unauthorized
from headwater.settings import Settings

pytestmark = pytest.mark.unit


def test_defaults_resolve_to_disk() -> None:
    cfg = resolve({})
    assert cfg == DEFAULTS and cfg["durability"] == "disk" and cfg["durable"] is False


@pytest.mark.parametrize(
    ("patch", "durability", "durable"),
    [
        ({"durable": True}, "fsync", True),
        ({"durable": False}, "disk", False),
        ({"durability": "memory"}, "memory", False),
        ({"durability": "ephemeral", "durable": True}, "ephemeral", False),
        ({"durability": "fsync", "durable": False}, "fsync", True),
    ],
)
def test_durability_resolution(patch: dict[str, object], durability: str, durable: bool) -> None:
    cfg = resolve(validate_config_patch(patch))
    assert (cfg["durability"], cfg["durable"]) == (durability, durable)


def test_update_keeps_unmentioned_fields_and_reresolves_durable() -> None:
    base = resolve(validate_config_patch({"durability": "fsync", "ttl_ms": 5}))
    cfg = resolve(validate_config_patch({"durability": "memory"}), base=base)
    assert cfg["ttl_ms"] == 5 and cfg["durable"] is False and cfg["durability"] == "memory"


@pytest.mark.parametrize(
    ("patch", "field", "value"),
    [
        ({"lease_ms": 1}, "lease_ms", 100),
        ({"lease_ms": 10**12}, "lease_ms", 86_400_000),
        ({"claim_jitter_ms": 99_999}, "claim_jitter_ms", 5000),
        ({"priority": 5000}, "priority", 1000),
        ({"priority": -5000}, "priority", -1000),
    ],
)
def test_clamps(patch: dict[str, object], field: str, value: int) -> None:
    assert validate_config_patch(patch)[field] == value


@pytest.mark.parametrize(
    "patch",
    [
        {"type": "stream"},
        {"discard": "new"},
        {"durability": "ssd"},
        {"ttl_ms": -1},
        {"ttl_ms": 1.5},
        {"ttl_ms": True},
        {"durable": "yes"},
        {"priority": "high"},
        {"dead_letter": "bad name"},
        {"unknown_field": 1},
    ],
)
def test_invalid_config_fields(patch: dict[str, object]) -> None:
    with pytest.raises(InvalidRequest):
        validate_config_patch(patch)


def test_dead_letter_must_differ_from_topic() -> None:
    with pytest.raises(InvalidRequest):
        validate_config_patch({"dead_letter": "jobs"}, topic="jobs")


def test_key_store_scopes_prefixes_and_digests() -> None:
    store = KeyStore.parse("full, ro:read, w:w:tenant42:|shared., adm::ops:, both:rw, x:r+d")
    assert store.authenticate("Bearer full").scopes == ALL_SCOPES
    assert store.authenticate("Bearer ro").scopes == {"read"}
    w = store.authenticate("Bearer w")
    assert w.scopes == {"write"} and w.prefixes == ("tenant42:", "shared.")
    assert w.allows_name("tenant42:jobs") and not w.allows_name("tenant43:jobs")
    assert store.authenticate("Bearer adm").scopes == ALL_SCOPES
    assert store.authenticate("Bearer both").scopes == {"read", "write"}
    assert store.authenticate("Bearer x").scopes == {"read", "delete"}
    with pytest.raises(Forbidden):
        store.authenticate("Bearer ro").require("write")
    with pytest.raises(Unauthorized):
        store.authenticate("Bearer nope")
    with pytest.raises(Unauthorized):
        store.authenticate(None)
    # Only digests are kept: no plaintext secret in the store's state.
    assert "full" not in repr(store._keys) and b"full" not in b"".join(
        k.digest for k in store._keys
    )


@pytest.mark.parametrize("raw", ["k:bogus", "k:read+nope", ":read", "k:read+"])
def test_malformed_keys_fail_closed(raw: str) -> None:
    with pytest.raises(ConfigurationError):
        KeyStore.parse(raw)


def test_empty_key_store_is_dev_mode() -> None:
    store = KeyStore.parse("")
    assert not store.enabled and store.authenticate(None).scopes == ALL_SCOPES


@pytest.mark.parametrize(
    ("host", "keys", "insecure", "refuses"),
    [
        ("127.0.0.1", False, False, False),
        ("localhost", False, False, False),
        ("::1", False, False, False),
        ("0.0.0.0", False, False, True),
        ("0.0.0.0", True, False, False),
        ("0.0.0.0", False, True, False),
        ("10.1.2.3", False, False, True),
    ],
)
def test_bind_refusal(host: str, keys: bool, insecure: bool, refuses: bool) -> None:
    s = Settings(host=host, allow_insecure_no_auth=insecure)
    if refuses:
        with pytest.raises(ConfigurationError):
            s.check_bind(has_keys=keys)
    else:
        s.check_bind(has_keys=keys)


def test_settings_from_env_validates_numbers() -> None:
    with pytest.raises(ConfigurationError):
        Settings.from_env({"TOPICS_PORT": "eighty"})
    s = Settings.from_env({"TOPICS_MAX_BATCH_RECORDS": "5", "TOPICS_PORT": "4100"})
    assert s.limits.max_batch_records == 5 and s.port == 4100


def test_spill_threshold_cannot_exceed_an_item() -> None:
    from headwater.settings import MAX_INLINE_FRAME_BYTES

    assert Settings.from_env({}).spill_threshold_bytes <= MAX_INLINE_FRAME_BYTES
    with pytest.raises(ConfigurationError):
        Settings.from_env({"HEADWATER_SPILL_THRESHOLD_BYTES": str(MAX_INLINE_FRAME_BYTES + 1)})
    with pytest.raises(ConfigurationError):
        Settings.from_env({"HEADWATER_SPILL_THRESHOLD_BYTES": "100"})


def test_group_spill_threshold_is_off_by_default_and_bounded_like_the_spill_threshold() -> None:
    assert Settings.from_env({}).group_spill_threshold_bytes == 0
    env = {"HEADWATER_GROUP_SPILL_THRESHOLD_BYTES": "8192"}
    assert Settings.from_env(env).group_spill_threshold_bytes == 8192
    for bad in ("512", "-1", str(10**6)):
        with pytest.raises(ConfigurationError):
            Settings.from_env({"HEADWATER_GROUP_SPILL_THRESHOLD_BYTES": bad})


def test_topic_config_is_the_resolved_dict_typed_and_decoded_once_per_head() -> None:
    # GIVEN the defaults WHEN decoded THEN every field equals DEFAULTS' (same names, values)
    assert dataclasses.asdict(TopicConfig.of(resolve({}))) == DEFAULTS
    assert TopicConfig.of({}) == TopicConfig()
    # a resolved patch reads back typed; an older stored config missing fields gets defaults
    cfg = resolve(validate_config_patch({"type": "queue", "cap_records": 5, "discard": "reject"}))
    t = TopicConfig.of(cfg)
    assert t.is_queue and t.cap_records == 5 and t.rejects_over_cap
    assert t.over_cap(6, 0) and not t.over_cap(5, 10**9)
    old = TopicConfig.of({"type": "log", "ttl_ms": 9, "not_a_field": 1})
    assert old.ttl_ms == 9 and old.lease_ms == 30_000 and old.durability == "disk"
    assert not TopicConfig.of({"discard": "reject"}).rejects_over_cap  # no cap: nothing to reject
    # Head.cfg is decoded from Head.config when the head is made, and follows replace()
    head = Head("t", 1, config=cfg)
    assert head.cfg == t
    moved = dataclasses.replace(head, config=resolve({"ttl_ms": 5}))
    assert moved.cfg.ttl_ms == 5 and not moved.cfg.is_queue
    assert Head("t", 1).cfg == TopicConfig()
