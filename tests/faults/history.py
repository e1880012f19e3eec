"""History checks for fault-injection runs: what clients were told, against what storage
holds at the end. Pure functions over plain data, so the checker itself is unit-tested
(tests/unit/test_fault_history.py): each check must be able to fail.

An append op is one logical request of a client: a batch of records with unique ids, maybe
an idempotency key (then the client re-sends it with the same key until it gets an answer
other than 5xx), and the answer it finally got:
- "ok": acknowledged at first_seq..last_seq (deduped as the server said);
- "failed": a definite refusal (a 4xx, or a 5xx that does not say the outcome is unknown);
- "unknown": a 5xx whose body says the outcome is unknown (detail.outcome == "unknown").

Rules (never lose, never duplicate, never lie):
- an acknowledged batch is in the log exactly once, contiguous, at its acknowledged seqs;
- a refused batch is not in the log at all;
- an unknown batch is in the log whole and once, or not at all;
- nothing is in the log that no client sent;
- "deduped": true only when the client had sent that key before;
- every reader saw the log's records in order, with no gaps and nothing the log lacks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass
class AppendOp:
    client: str
    ids: list[str]
    key: str | None = None
    attempts: int = 0
    outcome: str = ""  # ok | failed | unknown
    first_seq: int = 0
    last_seq: int = 0
    deduped: bool = False
    statuses: list[int] = field(default_factory=list)


def check_appends(ops: Sequence[AppendOp], log: Sequence[tuple[int, str]]) -> list[str]:
    """`log`: (seq, record id) of every record in the topic, ascending."""
    problems: list[str] = []
    where: dict[str, list[int]] = defaultdict(list)
    for seq, rid in log:
        where[rid].append(seq)
    by_seq = dict(log)
    sent: set[str] = set()
    for op in ops:
        sent.update(op.ids)
        seqs = [s for rid in op.ids for s in where.get(rid, [])]
        dup = [rid for rid in op.ids if len(where.get(rid, [])) > 1]
        if dup:
            problems.append(f"{op.client}: records written more than once: {dup[:5]}")
        if op.outcome == "ok":
            want = list(range(op.first_seq, op.last_seq + 1))
            if len(want) != len(op.ids):
                problems.append(
                    f"{op.client}: acknowledged {op.first_seq}..{op.last_seq} for "
                    f"{len(op.ids)} records"
                )
            got = [by_seq.get(s) for s in want]
            if got != op.ids:
                problems.append(
                    f"{op.client}: acknowledged {op.first_seq}..{op.last_seq} but the log "
                    f"holds {got[:5]} there, not {op.ids[:5]}"
                )
            if op.deduped and op.attempts <= 1:
                problems.append(f"{op.client}: deduped on the first and only attempt ({op.key})")
        elif op.outcome == "failed":
            if seqs:
                problems.append(
                    f"{op.client}: told the append failed ({op.statuses}) but the log holds "
                    f"it at {sorted(seqs)[:5]}"
                )
        elif op.outcome == "unknown":
            if seqs and (
                len(seqs) != len(op.ids) or sorted(seqs) != list(range(min(seqs), max(seqs) + 1))
            ):
                problems.append(f"{op.client}: an unknown outcome left part of a batch: {seqs}")
        else:
            problems.append(f"{op.client}: op without an outcome: {op.ids[:3]}")
    phantom = [rid for _, rid in log if rid not in sent]
    if phantom:
        problems.append(f"records nobody sent: {phantom[:5]}")
    return problems


def check_reads(
    observed: dict[str, Sequence[tuple[int, str]]], log: Sequence[tuple[int, str]]
) -> list[str]:
    """Each reader followed the topic from its start: what it saw must be a prefix of the log,
    in order, with no gap and no record the log does not hold at that seq."""
    problems: list[str] = []
    for reader, seen in observed.items():
        prefix = list(log[: len(seen)])
        if list(seen) != prefix:
            first_bad = next(
                (i for i, (a, b) in enumerate(zip(seen, prefix, strict=False)) if a != b),
                len(prefix),
            )
            problems.append(
                f"{reader}: saw {list(seen)[first_bad : first_bad + 3]} at position "
                f"{first_bad}, the log holds {prefix[first_bad : first_bad + 3]}"
            )
    return problems


def check_producer_streams(
    produced: dict[str, int], stream: Iterable[tuple[str, int]]
) -> list[str]:
    """Idempotent producers (Durable Streams Producer-Id/Seq): producer p sent seqs
    0..produced[p]-1, re-sending each until acknowledged; the stream must hold each exactly
    once, in order per producer."""
    problems: list[str] = []
    per: dict[str, list[int]] = defaultdict(list)
    for producer, seq in stream:
        per[producer].append(seq)
    for producer, n in produced.items():
        got = per.pop(producer, [])
        if got != list(range(n)):
            dups = sorted({s for s in got if got.count(s) > 1})
            missing = sorted(set(range(n)) - set(got))
            problems.append(
                f"producer {producer}: duplicates {dups[:5]}, missing {missing[:5]}, "
                f"in order: {got == sorted(got)}"
            )
    if per:
        problems.append(f"entries from producers nobody ran: {sorted(per)}")
    return problems


def check_acks(jobs: Iterable[int], acked: Sequence[int]) -> list[str]:
    """Every job of a drained queue was reported acked exactly once (an ack reported as
    skipped although it deleted the job leaves it reported zero times)."""
    problems: list[str] = []
    counts: dict[int, int] = defaultdict(int)
    for seq in acked:
        counts[seq] += 1
    for seq in jobs:
        n = counts.pop(seq, 0)
        if n != 1:
            problems.append(f"job {seq} reported acked {n} times")
    if counts:
        problems.append(f"acks of jobs never produced: {sorted(counts)[:5]}")
    return problems


def tally(ops: Sequence[AppendOp], log: Sequence[tuple[int, str]]) -> dict[str, int]:
    """Counts for a report: records acknowledged but missing, records stored more than once,
    appends refused that applied, and "deduped" answers to first attempts."""
    where: dict[str, int] = defaultdict(int)
    for _, rid in log:
        where[rid] += 1
    ok = [op for op in ops if op.outcome == "ok"]
    return {
        "lost": sum(1 for op in ok for rid in op.ids if where.get(rid, 0) == 0),
        "duplicated": sum(n - 1 for n in where.values() if n > 1),
        "false_failures": sum(
            1 for op in ops if op.outcome == "failed" and any(where.get(r) for r in op.ids)
        ),
        "dedup_lies": sum(1 for op in ok if op.deduped and op.attempts <= 1),
    }
