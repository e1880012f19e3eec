"""What the engine writes per append (Inputs) and the designs the model compares.

A design is data: what one commit writes (head and frame items, under which keys, in a
transaction or not), how seqs are decided, and where requests run. Inputs are what design
(a) measures locally (measure.py); DEFAULT_INPUTS are the recorded figures --quick uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Inputs:
    """What the engine writes and spends per append, measured locally (or recorded)."""

    record_bytes: int = 1024
    head_kb: int = 1  # head write, KB units (an Update is billed >= 1 KB)
    frame_overhead_bytes: float = 350.0  # frame item bytes = overhead + n x per_record
    frame_bytes_per_record: float = 776.0  # random 1 KB JSON records compress ~25%
    pointer_kb: int = 1  # a spilled frame's item (S3 pointer)
    spill_bytes: int = 64 * 1024  # Settings.spill_threshold_bytes
    cpu_ms_request: float = 0.37  # server CPU per append request (HTTP, parse, reply)
    cpu_ms_commit: float = 2.9  # server CPU per commit (build + sign + parse the call)
    cpu_ms_record: float = 0.033  # server CPU per record of a request (parse, pack)
    source: str = "defaults"

    def frame_bytes(self, records: int) -> float:
        return self.frame_overhead_bytes + records * self.frame_bytes_per_record

    def frame_kb(self, records: int, spill_bytes: int | None = None) -> int:
        """KB units of one frame item holding `records` records (0: spilled to S3)."""
        size = self.frame_bytes(records)
        limit = self.spill_bytes if spill_bytes is None else spill_bytes
        return 0 if size > limit else max(1, math.ceil(size / 1024))


# What measure_local() and cpu_from_bench_v0() gave on this machine (2026-11-26, eb158ce and
# its working tree; frames: 1 record = 1,126 B, 32 records = 25,177 B), used when --quick or
# --no-measure skips the measurement.
DEFAULT_INPUTS = Inputs(source="recorded local measurement (--quick)")


@dataclass(frozen=True, slots=True)
class Design:
    """What one commit writes and where requests run.

    sequencer: how a commit gets its seqs.
      "head": conditional on the head's seq (today: TransactWriteItems of head + frame); a
              loser learns the winner's head from the failed condition.
      "frame": a conditional PutItem of the frame at the next frame number; a loser learns
              only that this frame exists, so it reads the newest frame (1 RRU) and retries.
      "counter": an unconditional UpdateItem ADD on the head reserves the seqs, then the
              frame is put (never conflicts; two calls per commit).
      "slot": frames keyed by their first seq; a conditional PutItem (attribute_not_exists)
              of the frame (or of its S3 pointer) at the key after the tail this process
              knows. A loser gets the winner's item back (ALL_OLD) and "hops": it retries at
              once at winner.last + 1, with no read and no back-off. The winner it learns is
              the one at the key it tried, not the newest frame: a process whose tail is n
              frames stale hops n times, each a billed failed write. The head is folded once
              per head_every frames, off the request's path; a process that has no tail yet
              reads the head (which lags by up to head_every frames) and hops from there.
              A spilled frame's S3 object is keyed independently of the slot: PUT once per
              commit, however many hops its pointer takes.

    hop_learns_newest (slot only): an idealisation, not what DynamoDB returns: a lost race
      learns the newest frame, as if the failure response carried the tail.

    counter_reads_head (counter only): a process reads the head (GetItem) before its first
      reservation to a topic, as the built engine does (it judges config and caps on it, and
      caches the head each reservation returns); the probe (e) skipped that read.
    reserve_fail_fast (counter only): a throttled reservation is not retried by the SDK or
      re-sent by the engine: the request answers 429 (Retry-After) and the client backs off
      (full jitter) and sends it again, as the engine does for /v0 (unless
      disable_backpressure) and /v1 appends.
    hole_timeout_s (counter only): a frame put that lands later than this after its
      reservation applied finds its slot filled by a reader (CORFU's hole fill,
      HEADWATER_HOLE_TIMEOUT_MS): the put fails (billed, a lost race), the reader's hole
      write is billed too, and the writer reserves again. It assumes a reader waits on every
      slot (the worst case for writers). None: no reader fills (the probe (e)).

    With frame_keys > 1, "counter" places a frame by a hash of its first seq, as the engine
    does (headwater.engine.ports.frame_partition); the other sequencers by frame number mod P."""

    key: str
    name: str
    description: str
    compute: str = "lambda"  # "lambda": 1 request per environment | "managed": LMI + LWA
    per_env_concurrency: int = 1  # K (managed)
    transaction: bool = True  # head + frame in one TransactWriteItems
    sequencer: str = "head"
    head_every: int = 1  # a separate head write once per this many frames (not "head")
    frame_keys: int = 1  # P: frame f goes under key topic#(f mod P)
    max_group: int = 64  # requests merged into one commit (engine/log.py)
    records_per_request: int = 1
    spill_bytes: int | None = None  # frames larger than this go to S3 (None: the engine's)
    writer_inflight: int = 1  # commits in flight per topic per process ("counter" only)
    hop_learns_newest: bool = False  # "slot": a loser learns the tail (idealised), not n+1
    counter_reads_head: bool = False  # "counter": a process reads the head before reserving
    hole_timeout_s: float | None = None  # "counter": a put this late finds its slot filled
    reserve_fail_fast: bool = False  # "counter": a throttled reservation answers 429 at once


DESIGNS: tuple[Design, ...] = (
    Design("a", "today", "TransactWriteItems head+frame per commit, standard Lambda"),
    Design(
        "b",
        "put-frame",
        "conditional PutItem of the frame, head every 16 frames, standard Lambda",
        transaction=False,
        sequencer="frame",
        head_every=16,
    ),
    Design(
        "c",
        "lmi-group",
        "(b) on Managed Instances + Web Adapter, K=64, group commit",
        compute="managed",
        per_env_concurrency=64,
        transaction=False,
        sequencer="frame",
        head_every=16,
    ),
    Design(
        "d",
        "lmi-group-p8",
        "(c) with frames spread over 8 partition keys",
        compute="managed",
        per_env_concurrency=64,
        transaction=False,
        sequencer="frame",
        head_every=16,
        frame_keys=8,
    ),
    Design(
        "a100",
        "today-b100",
        "(a) with clients sending batches of 100 records",
        records_per_request=100,
    ),
    # Not one of the designs and not a proposal: the nearest to the part-2 target the
    # model found (seqs from an atomic counter on the head: no races between environments;
    # every frame in S3 behind a small pointer item: ~0.02 WRU and 1/64 PUT per record).
    Design(
        "e",
        "probe-counter-s3",
        "probe: LMI K=128, head counter reserves seqs, every frame to S3, groups <= 256",
        compute="managed",
        per_env_concurrency=128,
        transaction=False,
        sequencer="counter",
        max_group=256,
        spill_bytes=0,
    ),
    # Slot-hop: tail frames keyed by their first seq; a lost race returns the winner's item,
    # whose last seq is the next key to try (no read); the head is folded once per 64 frames.
    Design(
        "f",
        "slot-hop-ddb",
        "slot-hop: conditional PutItem of the frame at the next key, a loser hops to "
        "winner.last+1 (no read), head folded per 64 frames; LMI K=64, group commit",
        compute="managed",
        per_env_concurrency=64,
        transaction=False,
        sequencer="slot",
        head_every=64,
    ),
    Design(
        "g",
        "slot-hop-s3",
        "slot-hop with every frame in S3 (one PUT per group) behind a pointer PutItem at "
        "the slot; a loser re-sends only the pointer; LMI K=128, groups <= 256",
        compute="managed",
        per_env_concurrency=128,
        transaction=False,
        sequencer="slot",
        head_every=64,
        max_group=256,
        spill_bytes=0,
    ),
    Design(
        "h",
        "slot-hop-lambda",
        "(f) on standard Lambda: one request per environment, no group commit",
        transaction=False,
        sequencer="slot",
        head_every=64,
    ),
    # What was built (c25145a, docs/storage.md "The sequencer"): standard Lambda, one request
    # per environment; an UpdateItem ADD on the head reserves the seqs (conditional only on
    # the epoch and config: never loses to another writer; 1 WRU for a head <= 1 KB), then a
    # PutItem of the frame, inline in DynamoDB, at its reserved key under one of 4 partition
    # keys chosen by a hash of its first seq. A put later than 1 s finds a reader's hole.
    Design(
        "i",
        "counter-lambda",
        "built (c25145a): head UpdateItem ADD reserves the seqs (never races), then PutItem "
        "of the frame at its reserved key, one of 4 partition keys; standard Lambda",
        transaction=False,
        sequencer="counter",
        frame_keys=4,
        counter_reads_head=True,
        hole_timeout_s=1.0,
    ),
    # (i) with backpressure: a reservation the head key throttles is not backed off inside
    # the function (billed Lambda time) but answered 429 with Retry-After at once.
    Design(
        "j",
        "counter-429",
        "built: (i), and a throttled reservation answers 429 at once (the client backs off) "
        "instead of botocore's back-off inside the function",
        transaction=False,
        sequencer="counter",
        frame_keys=4,
        counter_reads_head=True,
        hole_timeout_s=1.0,
        reserve_fail_fast=True,
    ),
)


def commit_units(design: Design, inputs: Inputs, records: int) -> dict[str, float]:
    """What one commit of `records` records writes when it wins at once: WRU on the head
    key and on the frame's key, write calls, and S3 PUTs (a spilled frame)."""
    kb = inputs.frame_kb(records, design.spill_bytes)
    s3 = 0.0 if kb else 1.0
    mult = 2 if design.transaction else 1
    head: float
    calls: float
    if design.sequencer == "head":
        head, calls = float(inputs.head_kb * mult), 1.0
    elif design.sequencer == "counter":
        head, calls = float(inputs.head_kb), 2.0
    else:  # "frame", "slot": the head is written once per head_every frames, separately
        every = 1 / design.head_every if design.head_every else 0.0
        head, calls = inputs.head_kb * every, 1.0 + every
    return {"head": head, "log": (kb or inputs.pointer_kb) * mult, "calls": calls, "s3": s3}
