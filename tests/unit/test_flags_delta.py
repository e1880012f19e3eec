"""Version deltas, delivery decisions, resync payloads (headwater.flags.delta) and the client's
three-point apply (headwater.flags.apply)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.flags.apply import ApplyMismatch, apply_inline, verify_snapshot
from headwater.flags.closure import FlagSelection, closure, closure_hash
from headwater.flags.delta import (
    DEFAULT_POLICY,
    DeliveryPolicy,
    FileChange,
    Op,
    ResyncReason,
    SnapshotCause,
    SnapshotRef,
    SseEvent,
    diff,
    digests,
    plan_version_event,
    resync_event,
    resync_reason,
)

pytestmark = pytest.mark.unit

URL = "https://hw.example/api/v1/tenants/acme/namespaces/billing/closure?version=42&subscription=Kg&token=t"
CHECKOUT = FlagSelection.of(["checkout"])

V41 = {
    "namespace.toml": b'name = "billing"\n',
    "flags/checkout.toml": b'segment = "legacy-tier"\n',
    "flags/banner.toml": b'segment = "employees"\n',
    "segments/employees.toml": b"emails = []\n",
    "segments/legacy-tier.toml": b"tiers = [1]\n",
}
V42 = {
    **V41,
    "namespace.toml": b'name = "billing"\nowner = "payments"\n',
    "flags/checkout.toml": b'segments = ["employees", "fresh"]\n',
    "segments/fresh.toml": b"percent = 10\n",
}


def step(
    old_tree: dict[str, bytes], new_tree: dict[str, bytes], selection: FlagSelection
) -> list[FileChange]:
    return diff(
        digests(closure(old_tree, selection)),
        closure(new_tree, selection),
        old_tree_paths=set(old_tree),
        new_tree_paths=set(new_tree),
    )


def ops(changes: list[FileChange]) -> list[tuple[str, str]]:
    return [(c.path, c.op.value) for c in changes]


def no_snapshot() -> SnapshotRef:
    raise AssertionError("no snapshot expected")


def a_snapshot() -> SnapshotRef:
    return SnapshotRef(URL, 18432)


def sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def b64(content: bytes) -> str:
    return base64.b64encode(content).decode()


# -- ops ------------------------------------------------------------------------------------


def test_closure_gains_and_loses_segments_enter_leave_added() -> None:
    assert ops(step(V41, V42, CHECKOUT)) == [
        ("flags/checkout.toml", "modified"),
        ("namespace.toml", "modified"),
        ("segments/employees.toml", "enter"),  # existed at 41, outside this closure
        ("segments/fresh.toml", "added"),  # new in the namespace
        ("segments/legacy-tier.toml", "leave"),  # still in the namespace at 42
    ]


def test_removed_when_the_file_leaves_the_namespace() -> None:
    v43 = {p: c for p, c in V42.items() if p != "segments/fresh.toml"}
    v43["flags/checkout.toml"] = b'segments = ["employees"]\n'
    assert ops(step(V42, v43, CHECKOUT)) == [
        ("flags/checkout.toml", "modified"),
        ("segments/fresh.toml", "removed"),
    ]


def test_subscribed_flag_created_then_deleted() -> None:
    ghost = FlagSelection.of(["ghost"])
    with_ghost = {**V41, "flags/ghost.toml": b'segment = "employees"\n'}
    assert ops(step(V41, with_ghost, ghost)) == [
        ("flags/ghost.toml", "added"),
        ("segments/employees.toml", "enter"),
    ]
    assert ops(step(with_ghost, V41, ghost)) == [
        ("flags/ghost.toml", "removed"),
        ("segments/employees.toml", "leave"),
    ]


def test_entries_carry_sha256_and_base64_only_when_they_have_content() -> None:
    by_path = {c.path: c.as_json() for c in step(V41, V42, CHECKOUT)}
    content = V42["segments/employees.toml"]
    assert by_path["segments/employees.toml"] == {
        "path": "segments/employees.toml",
        "op": "enter",
        "sha256": sha(content),
        "content_b64": b64(content),
    }
    assert by_path["segments/legacy-tier.toml"] == {
        "path": "segments/legacy-tier.toml",
        "op": "leave",
    }


def test_unrelated_change_is_no_change_for_this_subscription() -> None:
    v42 = {**V41, "flags/banner.toml": b"enabled = false\n"}
    assert step(V41, v42, CHECKOUT) == []


# -- delivery -------------------------------------------------------------------------------


def plan_or_none(
    changes: list[FileChange] | None,
    *,
    prev_hash: str | None = "sha256:old",
    new_hash: str = "sha256:new",
    prev_version: int | None = 41,
    policy: DeliveryPolicy = DEFAULT_POLICY,
    snapshot: Callable[[], SnapshotRef] = a_snapshot,
) -> SseEvent | None:
    return plan_version_event(
        label="billing",
        version=42,
        prev_version=prev_version,
        prev_closure_hash=prev_hash,
        closure_hash=new_hash,
        changes=changes,
        snapshot=snapshot,
        policy=policy,
    )


def plan(changes: list[FileChange] | None, **kwargs: Any) -> SseEvent:
    event = plan_or_none(changes, **kwargs)
    assert event is not None
    return event


def test_inline_event_bytes_exactly() -> None:
    changes = [
        FileChange("flags/a.toml", Op.MODIFIED, b"x = 1\n"),
        FileChange("segments/s.toml", Op.LEAVE),
    ]
    event = plan(changes, snapshot=no_snapshot)
    expected = (
        '{"protocol":"v2","namespace":"billing","version":42,"prev_version":41,'
        '"prev_closure_hash":"sha256:old","closure_hash":"sha256:new","delivery":"inline",'
        '"files":[{"path":"flags/a.toml","op":"modified","sha256":"'
        + sha(b"x = 1\n")
        + '","content_b64":"eCA9IDEK"},{"path":"segments/s.toml","op":"leave"}]}'
    )
    assert event.data == expected
    assert event.frame() == (
        b"event: version\nid: billing:42\ndata: " + expected.encode() + b"\n\n"
    )


def test_first_event_is_always_a_snapshot_with_null_prev() -> None:
    event = plan([FileChange("a", Op.ADDED, b"")], prev_hash=None, prev_version=None)
    assert event.cause is SnapshotCause.FIRST_EVENT
    assert event.data == (
        '{"protocol":"v2","namespace":"billing","version":42,"prev_version":null,'
        '"prev_closure_hash":null,"closure_hash":"sha256:new","delivery":"snapshot",'
        '"snapshot_url":"' + URL + '","snapshot_size_bytes":18432}'
    )


def test_first_event_even_when_nothing_changed() -> None:
    event = plan([], prev_hash=None, prev_version=None, new_hash="sha256:same")
    assert event.cause is SnapshotCause.FIRST_EVENT


def test_no_event_when_the_closure_is_byte_identical() -> None:
    same = "sha256:same"
    assert plan_or_none([], prev_hash=same, new_hash=same, snapshot=no_snapshot) is None
    assert plan_or_none(None, prev_hash=same, new_hash=same, snapshot=no_snapshot) is None


def test_snapshot_when_the_prior_closure_is_gone() -> None:
    event = plan(None)
    assert event.cause is SnapshotCause.PRIOR_UNAVAILABLE
    data = event.payload()
    assert (data["prev_version"], data["prev_closure_hash"]) == (41, "sha256:old")


def many(n: int) -> list[FileChange]:
    return [FileChange(f"flags/f{i:03}.toml", Op.ADDED, b"a = 1\n") for i in range(n)]


def test_churn_threshold_more_than_32_entries() -> None:
    assert plan(many(32), snapshot=no_snapshot).delivery == "inline"
    event = plan(many(33))
    assert event.cause is SnapshotCause.CHURN
    tuned = plan(many(3), policy=DeliveryPolicy(churn_max_entries=2))
    assert tuned.cause is SnapshotCause.CHURN


def test_size_threshold_64_kib_of_serialized_data() -> None:
    big = [FileChange("flags/big.toml", Op.MODIFIED, b"x" * 48 * 1024)]  # base64: 64 KiB
    event = plan(big)
    assert event.cause is SnapshotCause.TOO_LARGE
    small = [FileChange("flags/big.toml", Op.MODIFIED, b"x" * 40 * 1024)]
    size = len(plan(small, snapshot=no_snapshot).data)
    assert size <= 64 * 1024
    exact = plan(small, policy=DeliveryPolicy(inline_max_bytes=size), snapshot=no_snapshot)
    assert exact.delivery == "inline"
    over = plan(small, policy=DeliveryPolicy(inline_max_bytes=size - 1))
    assert over.cause is SnapshotCause.TOO_LARGE


def test_guards_against_misuse() -> None:
    with pytest.raises(ValueError):
        plan([], prev_hash="sha256:x", prev_version=None)
    with pytest.raises(ValueError):
        plan([], prev_hash=None)
    with pytest.raises(ValueError):
        plan([])  # hashes differ but no changes
    with pytest.raises(ValueError):
        plan_version_event(
            label="b", version=41, prev_version=41, prev_closure_hash="a", closure_hash="b",
            changes=[], snapshot=a_snapshot,
        )  # fmt: skip


# -- resync ---------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", list(ResyncReason))
def test_resync_payload_for_each_reason(reason: ResyncReason) -> None:
    event = resync_event(label="billing", current_version=42, reason=reason, snapshot_url=URL)
    assert event.frame() == (
        b"event: resync\nid: billing:42\ndata: "
        b'{"protocol":"v2","namespace":"billing","current_version":42,"reason":"'
        + reason.value.encode()
        + b'","snapshot_url":"'
        + URL.encode()
        + b'"}\n\n'
    )


def test_four_reasons_exactly() -> None:
    assert {r.value for r in ResyncReason} == {
        "version_too_old",
        "unknown_since",
        "pre_git_era",
        "protocol_downgrade",
    }


def test_resync_reason_for_a_resume_hint() -> None:
    def reason(hint: int) -> ResyncReason | None:
        return resync_reason(hint, current_version=200, retained_from=100, history_from=10)

    assert reason(201) is ResyncReason.UNKNOWN_SINCE
    assert reason(9) is ResyncReason.PRE_GIT_ERA
    assert reason(99) is ResyncReason.VERSION_TOO_OLD
    assert reason(100) is None and reason(200) is None


def test_superadmin_label_in_ids() -> None:
    event = resync_event(
        label="acme/billing", current_version=7, reason=ResyncReason.UNKNOWN_SINCE, snapshot_url=URL
    )
    assert event.id == "acme/billing:7" and event.payload()["namespace"] == "acme/billing"


# -- apply (client) -------------------------------------------------------------------------


def inline_data(old_tree: dict[str, bytes], new_tree: dict[str, bytes]) -> dict[str, object]:
    old, new = closure(old_tree, CHECKOUT), closure(new_tree, CHECKOUT)
    event = plan(
        step(old_tree, new_tree, CHECKOUT),
        prev_hash=closure_hash(old),
        new_hash=closure_hash(new),
        snapshot=no_snapshot,
    )
    data: dict[str, object] = json.loads(event.data)
    return data


def test_apply_gain_and_loss_reaches_the_servers_closure() -> None:
    old = closure(V41, CHECKOUT)
    tree, digest = apply_inline(old, closure_hash(old), inline_data(V41, V42))
    assert tree == closure(V42, CHECKOUT) and digest == closure_hash(tree)


def test_pre_apply_mismatch() -> None:
    old = closure(V41, CHECKOUT)
    with pytest.raises(ApplyMismatch) as info:
        apply_inline(old, "sha256:other", inline_data(V41, V42))
    assert info.value.point == "pre_apply"
    with pytest.raises(ApplyMismatch):
        apply_inline(old, None, inline_data(V41, V42))


def test_per_file_mismatch() -> None:
    old = closure(V41, CHECKOUT)
    data = inline_data(V41, V42)
    files = data["files"]
    assert isinstance(files, list)
    files[0]["content_b64"] = b64(b"tampered")
    with pytest.raises(ApplyMismatch) as info:
        apply_inline(old, closure_hash(old), data)
    assert info.value.point == "per_file"
    files[0]["content_b64"] = "not base64!"
    with pytest.raises(ApplyMismatch, match="content_b64"):
        apply_inline(old, closure_hash(old), data)


def test_post_apply_mismatch_leaves_the_tree_untouched() -> None:
    old = closure(V41, CHECKOUT)
    before = dict(old)
    data = {**inline_data(V41, V42), "closure_hash": "sha256:" + "0" * 64}
    with pytest.raises(ApplyMismatch) as info:
        apply_inline(old, closure_hash(old), data)
    assert info.value.point == "post_apply" and old == before


def test_unknown_protocol_is_rejected() -> None:
    old = closure(V41, CHECKOUT)
    with pytest.raises(ApplyMismatch) as info:
        apply_inline(old, closure_hash(old), {**inline_data(V41, V42), "protocol": "v1"})
    assert info.value.point == "protocol"


def test_snapshot_check() -> None:
    files = closure(V42, CHECKOUT)
    assert verify_snapshot(files, closure_hash(files)) == closure_hash(files)
    with pytest.raises(ApplyMismatch) as info:
        verify_snapshot(files, closure_hash({}))
    assert info.value.point == "snapshot"


PATH = st.sampled_from(
    ["namespace.toml", "flags/a.toml", "flags/b.toml", "segments/s.toml", "segments/t.toml"]
)
CLOSURE = st.dictionaries(PATH, st.binary(max_size=16), max_size=5)


@given(old=CLOSURE, new=CLOSURE, extra_old=st.sets(PATH), extra_new=st.sets(PATH))
def test_apply_of_diff_gives_the_new_closure(
    old: dict[str, bytes], new: dict[str, bytes], extra_old: set[str], extra_new: set[str]
) -> None:
    old_tree_paths, new_tree_paths = set(old) | extra_old, set(new) | extra_new
    changes = diff(digests(old), new, old_tree_paths=old_tree_paths, new_tree_paths=new_tree_paths)
    for change in changes:
        assert (change.content is None) == (change.op in (Op.REMOVED, Op.LEAVE))
        if change.op is Op.ENTER:
            assert change.path in old_tree_paths and change.path not in old
        if change.op is Op.ADDED:
            assert change.path not in old_tree_paths
        if change.op is Op.LEAVE:
            assert change.path in new_tree_paths
        if change.op is Op.REMOVED:
            assert change.path not in new_tree_paths
    if closure_hash(old) == closure_hash(new):
        assert changes == []
        return
    event = plan_version_event(
        label="billing",
        version=2,
        prev_version=1,
        prev_closure_hash=closure_hash(old),
        closure_hash=closure_hash(new),
        changes=changes,
        snapshot=no_snapshot,
    )
    assert event is not None
    tree, digest = apply_inline(old, closure_hash(old), event.payload())
    assert tree == new and digest == closure_hash(new)
