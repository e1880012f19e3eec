"""Retention and tiering rules as pure functions of a head and its config (spec §0.10,
§3.3, §4.4): which topics are sealed to S3, how long records live, when upkeep is due,
and which reason a tombstone carries."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from headwater.engine.config import TopicConfig
from headwater.engine.ports import Head
from headwater.settings import Tiering

LOSSY_CLASSES = ("ephemeral", "memory")
MAX_EVICTION_RUNS = 32


def is_tiered(head: Head) -> bool:
    """Sealed into S3 segments: logs of the durable classes. Queues keep their jobs in the
    tail (acks delete them); ephemeral and memory topics never leave DynamoDB."""
    return head.cfg.type == "log" and head.cfg.durability not in LOSSY_CLASSES


def class_window_ms(cfg: TopicConfig, tiering: Tiering) -> int:
    """How long the lossy durability classes keep a record (0: no limit)."""
    durability = cfg.durability
    if durability == "ephemeral":
        return tiering.ephemeral_retention_ms
    if durability == "memory":
        return tiering.memory_retention_ms
    return 0


TTL_BACKSTOP_S = 7 * 86_400  # DynamoDB TTL of lossy-class frames, past their retention


def frame_expiry_s(cfg: TopicConfig, tiering: Tiering, now_ms: int) -> int | None:
    """The DynamoDB TTL of a frame (or hole) written now. Every frame of a sealed log carries
    the tail TTL, which reclaims it once sealed instead of a delete per frame; frames of the
    lossy classes carry one well past their retention (the sweep reclaims them first, keeping
    the counters exact; DynamoDB's TTL is the backstop for a deployment whose sweep never
    runs). Queue frames have none: upkeep deletes them once their jobs are acked."""
    window = class_window_ms(cfg, tiering)
    if window:
        return (now_ms + window) // 1000 + TTL_BACKSTOP_S
    if cfg.type == "log":
        return (now_ms + tiering.tail_ttl_ms) // 1000
    return None


def retention_ms(cfg: TopicConfig, tiering: Tiering) -> int:
    """The effective TTL: the topic's ttl_ms, bounded by its durability class (0: none)."""
    ttl = cfg.ttl_ms or 0
    window = class_window_ms(cfg, tiering)
    if ttl and window:
        return min(ttl, window)
    return ttl or window


def over_cap(head: Head) -> bool:
    return head.cfg.discard == "old" and head.cfg.over_cap(head.count, head.bytes)


def seal_due(head: Head, tiering: Tiering) -> bool:
    """Enough unsealed to seal on size alone (the age rule needs the oldest frame's ts)."""
    unsealed = head.head_seq - max(head.sealed_through, head.earliest_seq - 1)
    return (
        is_tiered(head)
        and unsealed > 0
        and (unsealed >= tiering.seal_records or head.unsealed_bytes >= tiering.seal_bytes)
    )


def upkeep_due(head: Head, tiering: Tiering) -> bool:
    return over_cap(head) or seal_due(head, tiering)


def merge_runs(
    runs: Sequence[tuple[int, str]], new: Iterable[tuple[int, str]]
) -> tuple[tuple[int, str], ...]:
    """Append eviction runs (last seq, reason), merging neighbours with the same reason;
    past MAX_EVICTION_RUNS the oldest two merge into "mixed"."""
    out = list(runs)
    for upto, reason in new:
        if out and out[-1][0] >= upto:
            continue
        if out and out[-1][1] == reason:
            out[-1] = (upto, reason)
        else:
            out.append((upto, reason))
    while len(out) > MAX_EVICTION_RUNS:
        out[0:2] = [(out[1][0], "mixed" if out[0][1] != out[1][1] else out[0][1])]
    return tuple(out)


def eviction_reason(runs: Sequence[tuple[int, str]], gap_from: int, gap_to: int) -> set[str]:
    """The reasons recorded for evicted seqs in [gap_from, gap_to]."""
    reasons: set[str] = set()
    prev = 0
    for upto, reason in runs:
        if upto >= gap_from and prev + 1 <= gap_to:
            reasons.add(reason)
        prev = upto
    return reasons


def tombstone_reason(reasons: set[str]) -> str:
    if not reasons:
        return "cap"
    if len(reasons) == 1:
        return next(iter(reasons))
    return "mixed"
