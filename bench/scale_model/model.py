"""The model of one scenario: a design's N clients over T topics, through execution
environments and the engine's commit loop to DynamoDB and S3 (the path is drawn in the
package's docstring), until the measurement window ends. simulate() runs a scenario with the
run lengths main() uses.
"""

from __future__ import annotations

import math
import random
import zlib
from collections import deque
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.harness import percentile
from bench.scale_model.aws import Platform, costs
from bench.scale_model.designs import DEFAULT_INPUTS, Design, Inputs
from bench.scale_model.sim import Bucket, Proc, Signal, Sim

MAX_GROUP_RECORDS = 10_000  # Settings.group_commit_max_records
HEAD_CACHE_MAX_AGE_S = 10.0  # engine/core.py: a process re-reads a head it has not moved since
TXN, WRITE, READ, S3PUT, UPDATE = 0, 1, 2, 3, 4  # UPDATE: UpdateItem (the head)
OK, CONFLICT, FAIL = "ok", "conflict", "fail"


def frame_partition(seq: int, partitions: int) -> int:
    """Which of `partitions` keys holds the frame keyed by `seq`: the engine's multiplicative
    hash (headwater.engine.ports.frame_partition, restated: the model imports no engine)."""
    if partitions <= 1:
        return 0
    return (((seq * 0x9E3779B1) & 0xFFFFFFFF) * partitions) >> 32


@dataclass
class Stats:
    requests: int = 0
    failed_requests: int = 0  # 503 (storage gave up) and 429 (Lambda over its limits)
    lambda_429: int = 0
    records: int = 0
    commits: int = 0
    write_calls: int = 0
    read_calls: int = 0
    throttled: int = 0
    conflicts: int = 0
    holes: int = 0  # "counter": frame puts that came after their slot was filled
    wru: float = 0.0
    rru: float = 0.0
    s3_puts: int = 0
    invocations: int = 0
    lambda_gb_s: float = 0.0
    latencies: list[float] = field(default_factory=list)


class _Env:
    __slots__ = ("busy", "cpu_at", "free", "head", "head_at", "writers")

    def __init__(self, free: int) -> None:
        self.free = free
        self.cpu_at = 0.0
        self.busy = 0.0  # CPU seconds used in the measurement window
        self.head: dict[int, int] = {}  # topic -> the head (frames committed) this env knows
        self.head_at: dict[int, float] = {}  # "counter": topic -> when it last learned it
        self.writers: dict[int, _Writer] = {}


class _Writer:
    __slots__ = ("inflight", "queue", "starting")

    def __init__(self) -> None:
        self.queue: deque[tuple[int, Signal]] = deque()
        self.inflight = 0  # commits started and not finished
        self.starting = 0  # of which still waiting for their turn on the CPU


class Model:
    """One scenario: a design, N clients over T topics, until the measurement ends."""

    def __init__(
        self,
        design: Design,
        clients: int,
        topics: int = 1,
        *,
        inputs: Inputs = DEFAULT_INPUTS,
        platform: Platform | None = None,
        seed: int = 1,
        think_s: float = 0.0,
        managed_envs: int | None = None,
        start_spread_s: float = 0.01,
    ) -> None:
        self.d = design
        self.inp = inputs
        self.p = p = platform or Platform()
        self.n = clients
        self.topics = topics
        self.think_s = think_s
        self.start_spread_s = start_spread_s
        label = f"{seed}/{design.key}/{clients}/{topics}/{managed_envs}"
        self.rng = random.Random(zlib.crc32(label.encode()))
        self.sim = Sim()
        self.stats = Stats()
        self.version = [0] * topics  # frames committed per topic
        self.seqs = [0] * topics  # "counter": seqs reserved per topic (the head's hs)
        self.folded = [0] * topics  # "slot": the frame count the head was last folded to
        self.heads_table = Bucket("table:heads", p.table_wru_per_s, p.key_burst_s)
        self.log_table = Bucket("table:log", p.table_wru_per_s, p.key_burst_s)
        self.head_keys = [
            Bucket(f"t{t}:head", p.key_wru_per_s, p.key_burst_s) for t in range(topics)
        ]
        self.head_reads = [
            Bucket(f"t{t}:head:r", p.key_rru_per_s, p.key_burst_s) for t in range(topics)
        ]
        self.frame_keys = [
            [
                Bucket(f"t{t}:log#{k}", p.key_wru_per_s, p.key_burst_s)
                for k in range(design.frame_keys)
            ]
            for t in range(topics)
        ]
        self.s3_prefix = [Bucket(f"t{t}:s3", p.s3_prefix_put_per_s, 1.0) for t in range(topics)]
        self.envs: list[_Env] = []
        self.idle: list[_Env] = []
        self.scale = Bucket("lambda:scale", p.scale_envs_per_s, 10.0)
        self._rr = 0
        if design.compute == "managed":
            k = design.per_env_concurrency
            m = managed_envs or max(p.lmi_min_envs, math.ceil(clients / k))
            self.envs = [_Env(k) for _ in range(m)]
        self.cpu_scale = p.lmi_cpu_scale if design.compute == "managed" else p.lambda_cpu_scale
        self._mu = {
            TXN: math.log(p.txn_ms / 1000),
            WRITE: math.log(p.write_ms / 1000),
            READ: math.log(p.read_ms / 1000),
            S3PUT: math.log(p.s3_put_ms / 1000),
            UPDATE: math.log(p.update_ms / 1000),
        }
        self.window_start = 0.0
        self.open: dict[int, float] = {}  # client -> when its current append was first sent

    # -- time helpers
    def _lat(self, kind: int) -> float:
        return self.rng.lognormvariate(self._mu[kind], self.p.latency_sigma)

    def _cpu(self, env: _Env, ms: float) -> float:
        now = self.sim.now
        start = env.cpu_at if env.cpu_at > now else now
        work = ms * self.cpu_scale / 1000
        env.cpu_at = start + work
        env.busy += work
        return env.cpu_at - now

    def _all_buckets(self) -> list[Bucket]:
        out = [self.heads_table, self.log_table, *self.head_keys, *self.head_reads]
        for keys in self.frame_keys:
            out.extend(keys)
        return out

    # -- one storage call: attempts, SDK back-off, the engine's re-sends
    def _take(self, needs: Sequence[tuple[Bucket, float]]) -> bool:
        now = self.sim.now
        for b, n in needs:
            if b.level(now) < min(n, b.cap):
                return False
        for b, n in needs:
            b.tokens -= n
        return True

    def _call(
        self,
        kind: int,
        needs: Sequence[tuple[Bucket, float]],
        cond: tuple[int, int] | None = None,
        bump: int = -1,
        resend: bool = True,
        observe: int = -1,
        reserve: int = 1,
        applied: list[float] | None = None,
        deadline: float = math.inf,
        attempts: int | None = None,
    ) -> Generator[Any, Any, tuple[str, int]]:
        """One retried request. `cond` (topic, expected frames): applies only if the topic's
        frame count is `expected`, which it then advances. `bump` >= 0: the topic whose
        counter to advance unconditionally, reserving `reserve` seqs; what it returns is then
        the first seq reserved (and `applied` gets when it applied). `observe` >= 0: a
        read of that topic's frame count. `deadline`: a write that would apply after it
        finds its key taken (a reader's hole) and fails as a lost race. `attempts`: SDK
        attempts instead of the default (1: a throttle fails the call). Returns (outcome,
        frame count seen, or first seq reserved)."""
        p = self.p
        start = self.sim.now
        sdk_attempts = 1 if kind == TXN else p.sdk_max_attempts
        if attempts is not None:
            sdk_attempts = attempts
        resends = 0
        while True:
            for attempt in range(1, sdk_attempts + 1):
                lat = self._lat(kind)
                yield lat / 2
                st = self.stats
                if kind == READ:
                    st.read_calls += 1
                elif kind != S3PUT:
                    st.write_calls += 1
                if self._take(needs):
                    units = 0.0
                    for b, n in needs:
                        if not b.name.startswith("table:"):
                            units += n
                    seen = -1
                    outcome = OK
                    if cond is not None:
                        topic, expected = cond
                        seen = self.version[topic]
                        if seen == expected:
                            seen = self.version[topic] = expected + 1
                        else:
                            outcome = CONFLICT
                            st.conflicts += 1
                    elif bump >= 0:
                        self.version[bump] += 1
                        seen = self.seqs[bump] + 1
                        self.seqs[bump] += reserve
                        if applied is not None:
                            applied.append(self.sim.now)
                    elif observe >= 0:
                        seen = self.version[observe]
                    elif self.sim.now > deadline:
                        outcome = CONFLICT  # a reader filled the slot: the put fails
                        st.conflicts += 1
                        st.holes += 1
                    share = p.conflict_wru if outcome == CONFLICT else 1.0
                    for b, n in needs:
                        b.used += n * share
                        b.tokens += n * (1.0 - share)  # what a lost race does not consume
                    if kind == READ:
                        st.rru += units
                    elif kind == S3PUT:
                        st.s3_puts += 1
                    else:
                        st.wru += units * share
                    yield lat / 2
                    return outcome, seen
                if kind != S3PUT:
                    st.throttled += 1
                yield lat / 2
                if attempt < sdk_attempts:
                    cap = min(p.sdk_throttle_base_s * 2 ** (attempt - 1), p.sdk_max_backoff_s)
                    yield self.rng.random() * cap
            if not resend:
                return FAIL, -1
            delay = min(p.resend_cap_s, p.resend_base_s * 2**resends)
            if self.sim.now + delay > start + p.resend_budget_s:
                return FAIL, -1
            yield delay
            resends += 1

    # -- a commit: spill, sequencing, conflicts
    def _commit(self, env: _Env, topic: int, records: int) -> Generator[Any, Any, bool]:
        d, inp, p = self.d, self.inp, self.p
        t0 = self.sim.now
        conflicts = 0
        frame_kb = inp.frame_kb(records, d.spill_bytes)
        spilled = frame_kb == 0
        if spilled:
            frame_kb = inp.pointer_kb
        mult = 2 if d.transaction else 1
        keys = self.frame_keys[topic]
        slot = d.sequencer == "slot"
        counter = d.sequencer == "counter"
        if (
            counter
            and d.counter_reads_head
            and self.sim.now - env.head_at.get(topic, -math.inf) > HEAD_CACHE_MAX_AGE_S
        ):
            env.head.pop(topic, None)  # the engine's head cache forgets it
        if (not counter or d.counter_reads_head) and topic not in env.head:
            got, seen = yield from self._call(
                READ, ((self.head_reads[topic], 1.0),), resend=False, observe=topic
            )
            if got != OK:
                return False
            # "slot" reads the head, folded lazily: it may lag the tail (then the writer hops)
            env.head[topic] = self.folded[topic] if slot else seen
        if slot and spilled:  # the object's key is not the slot's: PUT once, whatever the hops
            got, _ = yield from self._call(S3PUT, ((self.s3_prefix[topic], 1.0),), resend=False)
            if got != OK:
                return False
        while True:
            if spilled and not slot:
                got, _ = yield from self._call(S3PUT, ((self.s3_prefix[topic], 1.0),), resend=False)
                if got != OK:
                    return False
            if counter:
                applied: list[float] = []
                got, first = yield from self._call(
                    UPDATE,
                    ((self.head_keys[topic], inp.head_kb), (self.heads_table, inp.head_kb)),
                    bump=topic,
                    reserve=records,
                    applied=applied,
                    attempts=1 if d.reserve_fail_fast else None,
                    resend=not d.reserve_fail_fast,
                )
                if got != OK:
                    return False
                env.head[topic] = first + records - 1  # the head the reservation returned
                env.head_at[topic] = self.sim.now
                timeout = d.hole_timeout_s
                deadline = math.inf if timeout is None else applied[0] + timeout
                fkey = keys[frame_partition(first, len(keys))]
                got, _ = yield from self._call(
                    WRITE, ((fkey, frame_kb), (self.log_table, frame_kb)), deadline=deadline
                )
                if got == CONFLICT:  # the reader's hole: one small item on the frame's key
                    for b in (fkey, self.log_table):
                        b.tokens -= inp.pointer_kb
                        b.used += inp.pointer_kb
                    self.stats.wru += inp.pointer_kb
                    conflicts += 1
                    if (
                        conflicts >= p.conflicts_to_give_up
                        and self.sim.now - t0 > p.conflict_budget_s
                    ):
                        return False
                    continue  # the late writer reserves again
                if got == OK:
                    self.stats.commits += 1
                return got == OK
            expected = env.head[topic]
            fkey = keys[(expected + 1) % len(keys)]
            if d.sequencer == "head":
                hkb = inp.head_kb * mult
                needs: tuple[tuple[Bucket, float], ...] = (
                    (self.head_keys[topic], hkb),
                    (self.heads_table, hkb),
                    (fkey, frame_kb * mult),
                    (self.log_table, frame_kb * mult),
                )
                got, seen = yield from self._call(
                    TXN if d.transaction else WRITE, needs, (topic, expected)
                )
            else:
                needs = ((fkey, frame_kb * mult), (self.log_table, frame_kb * mult))
                got, seen = yield from self._call(WRITE, needs, (topic, expected))
            if got == OK:
                env.head[topic] = seen
                self.stats.commits += 1
                if d.sequencer == "frame" and d.head_every > 0 and seen % d.head_every == 0:
                    self.sim.spawn(self._head_write(topic))
                elif slot and d.head_every > 0 and seen % d.head_every == 0:
                    self.sim.spawn(self._head_write(topic, seen))  # not in the request's path
                return True
            if got == FAIL:
                env.head.pop(topic, None)
                return False
            # lost a race: "head" learns the winner's head from the failed condition (ALL_OLD);
            # "frame" learns only that its frame exists and reads the newest frame
            # "slot" hops: the failure returns the item at the key it tried, whose last seq is
            # the next key (one frame on; the tail only if that winner was the newest)
            if d.sequencer == "frame":
                got, seen = yield from self._call(
                    READ, ((self.head_reads[topic], 1.0),), resend=False, observe=topic
                )
                if got != OK:
                    env.head.pop(topic, None)
                    return False
            elif slot and not d.hop_learns_newest:
                seen = expected + 1
            env.head[topic] = seen
            conflicts += 1
            if conflicts >= p.conflicts_to_give_up and self.sim.now - t0 > p.conflict_budget_s:
                env.head.pop(topic, None)
                return False
            if conflicts > 2 and not slot:  # a hop retries at once: each loss is progress
                yield self.rng.uniform(0, min(0.05, 0.001 * 2**conflicts))

    def _head_write(self, topic: int, fold_to: int = -1) -> Proc:
        """The head's separate write ("frame", "slot"). "slot" folds it to `fold_to` frames
        (a conditional UpdateItem: only forward; billed like any write)."""
        kb = self.inp.head_kb
        got, _ = yield from self._call(
            UPDATE, ((self.head_keys[topic], kb), (self.heads_table, kb))
        )
        if got == OK and fold_to > self.folded[topic]:
            self.folded[topic] = fold_to

    # -- an environment serving one request; the group-commit writer of a topic
    def _handle(self, env: _Env, topic: int, records: int) -> Generator[Any, Any, bool]:
        yield self._cpu(env, self.inp.cpu_ms_request + records * self.inp.cpu_ms_record)
        w = env.writers.get(topic)
        if w is None:
            w = env.writers[topic] = _Writer()
        sig = Signal()
        w.queue.append((records, sig))
        self._kick(env, topic, w)
        ok = yield sig
        return bool(ok)

    def _kick(self, env: _Env, topic: int, w: _Writer) -> None:
        """Start a commit of what is queued, up to the design's commits in flight per topic
        (the engine: one). Like the engine's writer task, a commit takes its group when its
        turn on the process's CPU comes: everything queued by then goes out together."""
        if w.queue and w.starting == 0 and w.inflight < self.d.writer_inflight:
            w.inflight += 1
            w.starting += 1
            self.sim.spawn(self._commit_group(env, topic, w))

    def _commit_group(self, env: _Env, topic: int, w: _Writer) -> Proc:
        yield self._cpu(env, self.inp.cpu_ms_commit)
        w.starting -= 1
        limit = self.d.max_group
        group: list[Signal] = []
        total = 0
        while w.queue and len(group) < limit and total + w.queue[0][0] <= MAX_GROUP_RECORDS:
            records, sig = w.queue.popleft()
            group.append(sig)
            total += records
        self._kick(env, topic, w)  # more queued than one group holds: the next commit
        if group:
            ok = yield from self._commit(env, topic, total)
            for sig in group:
                self.sim.fire(sig, ok)
        w.inflight -= 1
        self._kick(env, topic, w)

    # -- the front door: a Lambda invoke (scale out, cold start, 429) or a managed instance
    def _invoke(self, topic: int) -> Generator[Any, Any, str]:
        p = self.p
        half = p.invoke_ms / 2000
        yield half
        if self.d.compute == "managed":
            env = self._pick_managed()
            if env is None:
                yield half
                return "429"
            env.free -= 1
            self.stats.invocations += 1
            ok = yield from self._handle(env, topic, self.d.records_per_request)
            env.free += 1
        else:
            if self.idle:
                env = self.idle.pop()
            else:
                if len(self.envs) >= p.concurrency_limit or self.scale.level(self.sim.now) < 1:
                    yield half
                    return "429"
                self.scale.tokens -= 1
                env = _Env(1)
                self.envs.append(env)
                yield p.cold_start_ms / 1000
            t_in = self.sim.now
            self.stats.invocations += 1
            ok = yield from self._handle(env, topic, self.d.records_per_request)
            self.stats.lambda_gb_s += (self.sim.now - t_in) * p.lambda_memory_gb
            self.idle.append(env)
        yield half
        return "ok" if ok else "503"

    def _pick_managed(self) -> _Env | None:
        envs = self.envs
        for _ in range(len(envs)):
            self._rr = (self._rr + 1) % len(envs)
            if envs[self._rr].free > 0:
                return envs[self._rr]
        return None

    def _client(self, cid: int) -> Proc:
        topic = cid % self.topics
        records = self.d.records_per_request
        p = self.p
        yield self.rng.random() * self.start_spread_s  # clients do not start in lockstep
        while True:
            t0 = self.sim.now
            self.open[cid] = t0
            tries = 0
            while True:
                got = yield from self._invoke(topic)
                st = self.stats
                st.requests += 1
                if got == "ok":
                    break
                st.failed_requests += 1
                if got == "429":
                    st.lambda_429 += 1
                tries += 1
                cap = min(p.client_retry_cap_s, p.client_retry_base_s * 2**tries)
                yield self.rng.random() * cap
            del self.open[cid]
            st = self.stats
            st.records += records
            st.latencies.append(self.sim.now - t0)
            if self.think_s:
                yield self.think_s

    # -- running
    def run(
        self,
        warmup_s: float = 2.0,
        min_window_s: float = 2.0,
        max_window_s: float = 10.0,
        target_records: int = 20_000,
        step_s: float = 0.5,
    ) -> dict[str, Any]:
        sim = self.sim
        for c in range(self.n):
            sim.spawn(self._client(c))
        sim.run(warmup_s)
        self.stats = Stats()
        for b in self._all_buckets():
            b.used = 0.0
        for env in self.envs:
            env.busy = 0.0
        self.window_start = warmup_s
        end = warmup_s
        while True:
            end += step_s
            sim.run(end)
            elapsed = end - warmup_s
            if elapsed >= max_window_s or (
                elapsed >= min_window_s and self.stats.records >= target_records
            ):
                break
        return self.summary(end - warmup_s)

    def summary(self, window_s: float) -> dict[str, Any]:
        st, d = self.stats, self.d
        lat = [x * 1000 for x in st.latencies]
        # appends still open that were sent before the window began spanned all of it: their
        # latency is at least their age (a lower bound, counted in the tail)
        stuck = [(self.sim.now - t0) * 1000 for t0 in self.open.values() if t0 < self.window_start]
        lat.extend(stuck)
        records = st.records
        per = max(records, 1)
        rec_s = records / window_s
        usd = costs(
            wru=st.wru,
            rru=st.rru,
            s3_puts=st.s3_puts,
            invocations=st.invocations,
            lambda_gb_s=st.lambda_gb_s,
            managed_env_s=len(self.envs) * window_s if d.compute == "managed" else 0.0,
            envs_per_instance=self.p.lmi_envs_per_instance,
        )
        keys = [b for b in self._all_buckets() if not b.name.startswith("table:")]
        hottest = max(keys, key=lambda b: b.used)
        writes = max(st.write_calls, 1)
        return {
            "design": d.key,
            "clients": self.n,
            "topics": self.topics,
            "window_s": round(window_s, 3),
            "envs": len(self.envs),
            "records_per_s": rec_s,
            "mb_per_s": rec_s * self.inp.record_bytes / 1e6,
            "p50_ms": percentile(lat, 50),
            "p99_ms": percentile(lat, 99),
            "censored": len(stuck),
            "throttled_frac": st.throttled / writes,
            "conflict_frac": st.conflicts / writes,
            "conflicts_per_record": st.conflicts / per,
            "holes_per_record": st.holes / per,
            "failed_frac": st.failed_requests / max(st.requests, 1),
            "lambda_429": st.lambda_429,
            "commits_per_s": st.commits / window_s,
            "records_per_commit": records / max(st.commits, 1),
            "write_calls_per_record": st.write_calls / per,
            "read_calls_per_record": st.read_calls / per,
            "wru_per_record": st.wru / per,
            "rru_per_record": st.rru / per,
            "s3_puts_per_record": st.s3_puts / per,
            "invocations_per_record": st.invocations / per,
            "lambda_gb_s_per_record": st.lambda_gb_s / per,
            "managed_env_s_per_record": usd["managed_env_s"] / per,
            "cpu_util_mean": sum(e.busy for e in self.envs) / max(len(self.envs), 1) / window_s,
            "hottest_key": hottest.name,
            "hottest_key_units_per_s": hottest.used / window_s,
            "key_units_per_s": {
                b.name: b.used / window_s for b in self._all_buckets() if b.used > 0
            },
            "usd_per_million": {k: v / per * 1e6 for k, v in usd.items() if k.startswith("usd")},
            "events": self.sim.events,
        }


def simulate(
    design: Design,
    clients: int,
    topics: int = 1,
    *,
    quick: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """One scenario with the run lengths main() uses. Managed Instances scale on CPU: short
    pilot runs raise the number of environments until their mean CPU utilization is at or
    under the capacity provider's target (as its target tracking would, given minutes)."""
    # Lambda's warm-up covers the cold starts (0.8 s); Managed Instances have none, and settle
    # within a few round trips. A window runs until 20,000 records (at least 0.5 s, at most
    # 4 s: past that the slow designs' tails are lower bounds anyway)
    managed = design.compute == "managed"
    lengths: dict[str, Any] = (
        {"warmup_s": 1.0, "min_window_s": 0.5, "max_window_s": 2.0, "target_records": 3000}
        if quick
        else {"warmup_s": 0.5 if managed else 1.5, "min_window_s": 0.5, "max_window_s": 4.0}
    )
    if managed and kwargs.get("managed_envs") is None:
        p = kwargs.get("platform") or Platform()
        envs = max(p.lmi_min_envs, math.ceil(clients / design.per_env_concurrency))
        for _ in range(3):
            pilot = Model(design, clients, topics, **{**kwargs, "managed_envs": envs}).run(
                warmup_s=0.3, min_window_s=0.3, max_window_s=0.3, target_records=0
            )
            if pilot["cpu_util_mean"] <= p.lmi_cpu_target * 1.05:
                break
            envs = math.ceil(envs * pilot["cpu_util_mean"] / p.lmi_cpu_target)
        kwargs = {**kwargs, "managed_envs": envs}
    return Model(design, clients, topics, **kwargs).run(**lengths)
