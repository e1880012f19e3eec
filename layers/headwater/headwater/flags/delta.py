"""Version and resync events (spec: Events, First event after subscribe, Ordering).

A change between the closure a connection last received and the new closure is one entry
per path, sorted by the path's UTF-8 bytes:

| op | path in old closure | path in new closure | path in the new namespace tree |
|---|---|---|---|
| `added` | no | yes | (was absent from the old tree) |
| `enter` | no | yes | (was present in the old tree) |
| `modified` | yes, other bytes | yes | |
| `removed` | yes | no | no |
| `leave` | yes | no | yes |

added/modified/enter carry `sha256` (lower-case hex) and `content_b64` (standard base64).

Delivery (`plan_version_event`), first rule that applies:
1. first event of the connection (no prior closure) -> snapshot, prev_version and
   prev_closure_hash null;
2. closure hash unchanged -> no event at all;
3. the prior closure cannot be reconstructed (pruned) -> snapshot;
4. more than `churn_max_entries` (32) entries -> snapshot;
5. inline data (compact JSON, UTF-8) longer than `inline_max_bytes` (64 KiB) -> snapshot;
6. otherwise inline.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

PROTOCOL = "v2"
KEEPALIVE_FRAME = b":keepalive\n\n"
KEEPALIVE_SECONDS = 30


class Op(StrEnum):
    ADDED = "added"
    MODIFIED = "modified"
    REMOVED = "removed"
    ENTER = "enter"
    LEAVE = "leave"


CONTENT_OPS = frozenset({Op.ADDED, Op.MODIFIED, Op.ENTER})


@dataclass(frozen=True, slots=True)
class FileChange:
    path: str
    op: Op
    content: bytes | None = None

    def as_json(self) -> dict[str, str]:
        entry = {"path": self.path, "op": self.op.value}
        if self.content is not None:
            entry["sha256"] = hashlib.sha256(self.content).hexdigest()
            entry["content_b64"] = base64.b64encode(self.content).decode("ascii")
        return entry


def digests(files: Mapping[str, bytes]) -> dict[str, bytes]:
    """path -> raw sha256 of the content (the per-version file index)."""
    return {path: hashlib.sha256(content).digest() for path, content in files.items()}


def diff(
    old: Mapping[str, bytes],
    new: Mapping[str, bytes],
    *,
    old_tree_paths: AbstractSet[str],
    new_tree_paths: AbstractSet[str],
) -> list[FileChange]:
    """The entries turning closure `old` (path -> raw sha256) into `new` (path -> bytes).
    `*_tree_paths` are every path of the whole namespace at each version (enter vs added,
    leave vs removed)."""
    changes: list[FileChange] = []
    for path in new.keys() - old.keys():
        op = Op.ENTER if path in old_tree_paths else Op.ADDED
        changes.append(FileChange(path, op, new[path]))
    for path in new.keys() & old.keys():
        if hashlib.sha256(new[path]).digest() != old[path]:
            changes.append(FileChange(path, Op.MODIFIED, new[path]))
    for path in old.keys() - new.keys():
        changes.append(FileChange(path, Op.LEAVE if path in new_tree_paths else Op.REMOVED))
    changes.sort(key=lambda c: c.path.encode("utf-8"))
    return changes


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """Both thresholds are tunable per deployment (spec: churn budget, inline budget)."""

    inline_max_bytes: int = 64 * 1024
    churn_max_entries: int = 32


DEFAULT_POLICY = DeliveryPolicy()


class SnapshotCause(StrEnum):
    FIRST_EVENT = "first_event"
    PRIOR_UNAVAILABLE = "prior_unavailable"
    CHURN = "churn"
    TOO_LARGE = "too_large"


class ResyncReason(StrEnum):
    VERSION_TOO_OLD = "version_too_old"
    UNKNOWN_SINCE = "unknown_since"
    PRE_GIT_ERA = "pre_git_era"
    PROTOCOL_DOWNGRADE = "protocol_downgrade"


@dataclass(frozen=True, slots=True)
class SnapshotRef:
    url: str
    size_bytes: int  # uncompressed tar size, advisory


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One SSE event; `data` is the JSON text exactly as sent (compact, ASCII)."""

    event: str
    id: str
    data: str
    delivery: str | None = None
    cause: SnapshotCause | None = None

    def payload(self) -> Any:
        return json.loads(self.data)

    def frame(self) -> bytes:
        return f"event: {self.event}\nid: {self.id}\ndata: {self.data}\n\n".encode()


def encode_data(fields: Mapping[str, Any]) -> str:
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def event_id(label: str, version: int) -> str:
    """`<slug>:<version>` (`<tenant>/<slug>:<version>` on superadmin connections)."""
    return f"{label}:{version}"


def plan_version_event(
    *,
    label: str,
    version: int,
    prev_version: int | None,
    prev_closure_hash: str | None,
    closure_hash: str,
    changes: Sequence[FileChange] | None,
    snapshot: Callable[[], SnapshotRef],
    policy: DeliveryPolicy = DEFAULT_POLICY,
) -> SseEvent | None:
    """The `version` event for one namespace, or None when nothing changed for this
    subscription. `prev_*` are what this connection last delivered (None before its first
    event); `changes` is `diff(...)` against that closure, or None when it cannot be
    reconstructed. `snapshot` is called only when the event is a snapshot."""
    head: dict[str, Any] = {
        "protocol": PROTOCOL,
        "namespace": label,
        "version": version,
        "prev_version": prev_version,
        "prev_closure_hash": prev_closure_hash,
        "closure_hash": closure_hash,
    }
    if prev_version is None:
        if prev_closure_hash is not None:
            raise ValueError("prev_closure_hash must be null when prev_version is")
        return _snapshot_event(label, version, head, snapshot, SnapshotCause.FIRST_EVENT)
    if prev_closure_hash is None:
        raise ValueError("prev_closure_hash is required after the first event")
    if version <= prev_version:
        raise ValueError(f"version {version} does not advance past {prev_version}")
    if closure_hash == prev_closure_hash:
        return None
    if changes is None:
        return _snapshot_event(label, version, head, snapshot, SnapshotCause.PRIOR_UNAVAILABLE)
    if not changes:
        raise ValueError("closure hash changed but the delta is empty")
    if len(changes) > policy.churn_max_entries:
        return _snapshot_event(label, version, head, snapshot, SnapshotCause.CHURN)
    data = encode_data({**head, "delivery": "inline", "files": [c.as_json() for c in changes]})
    if len(data.encode("utf-8")) > policy.inline_max_bytes:
        return _snapshot_event(label, version, head, snapshot, SnapshotCause.TOO_LARGE)
    return SseEvent("version", event_id(label, version), data, delivery="inline")


def _snapshot_event(
    label: str,
    version: int,
    head: dict[str, Any],
    snapshot: Callable[[], SnapshotRef],
    cause: SnapshotCause,
) -> SseEvent:
    ref = snapshot()
    fields = {
        **head,
        "delivery": "snapshot",
        "snapshot_url": ref.url,
        "snapshot_size_bytes": ref.size_bytes,
    }
    return SseEvent(
        "version", event_id(label, version), encode_data(fields), delivery="snapshot", cause=cause
    )


def resync_event(
    *, label: str, current_version: int, reason: ResyncReason, snapshot_url: str
) -> SseEvent:
    fields = {
        "protocol": PROTOCOL,
        "namespace": label,
        "current_version": current_version,
        "reason": reason.value,
        "snapshot_url": snapshot_url,
    }
    return SseEvent("resync", event_id(label, current_version), encode_data(fields))


def resync_reason(
    hint: int, *, current_version: int, retained_from: int, history_from: int = 1
) -> ResyncReason | None:
    """Why a resume at `hint` cannot be served as a delta, or None if it can. `retained_from`
    is the oldest version whose file index is kept; `history_from` the first version with
    history at all (anything older predates it: pre_git_era)."""
    if hint > current_version:
        return ResyncReason.UNKNOWN_SINCE
    if hint < history_from:
        return ResyncReason.PRE_GIT_ERA
    if hint < retained_from:
        return ResyncReason.VERSION_TOO_OLD
    return None
