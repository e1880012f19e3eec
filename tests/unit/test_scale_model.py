"""bench/scale_model: the discrete-event model of appends on AWS. Properties that
can fail: a partition key caps a design at its bucket rate, spreading frames over P keys
lifts that cap until another key binds, costs are WRU x price + requests, the same seed gives
the same run, throttled writes are retried (and fail after the attempts and the re-send
budget), throttling costs latency; slot-hop's lost race is one more billed write and no read,
hops one frame at a time, never happens with one environment, and never repeats the S3 PUT;
the built counter design (i) never loses a race, writes 2 calls and 3 WRU per record at any
number of clients, spreads frames over its P keys by the engine's hash, and loses a slot to a
reader's hole only when its put comes later than the hole timeout; bench_writers' results are
compared N by N with the model (and skipped when absent); and a quick run of the entry point
prints and writes its tables."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from bench import bench_scale_model
from bench.harness import PRICES
from bench.scale_model.aws import Platform
from bench.scale_model.cli import MANY_TOPIC_DESIGNS, QUICK_CLIENTS, QUICK_TOPICS
from bench.scale_model.designs import DEFAULT_INPUTS, DESIGNS, Design, commit_units
from bench.scale_model.measure import cpu_from_bench_v0, fit_frames, inputs_from
from bench.scale_model.model import FAIL, OK, TXN, WRITE, Model, _Env, frame_partition, simulate
from bench.scale_model.sim import Bucket, Proc
from bench.scale_model.validate import validate, validate_writers, writers_table

from headwater.engine.ports import frame_partition as engine_frame_partition

# List prices, us-east-1, restated here so that a change to PRICES has to change this too.
WRU = 0.625 / 1e6
RRU = 0.125 / 1e6
LAMBDA_REQUEST = 0.20 / 1e6
LAMBDA_GB_S = 0.0000166667
S3_PUT = 0.005 / 1e3
LMI_INSTANCE_S = 0.0816 * 1.15 / 3600  # m7g.large + 15% management fee, per second


def _design(key: str) -> Design:
    return next(d for d in DESIGNS if d.key == key)


def _run(design: Design, clients: int, **kw: Any) -> dict[str, Any]:
    model = Model(design, clients, **kw)
    return model.run(warmup_s=1.0, min_window_s=2.0, max_window_s=2.0, target_records=0)


def test_one_partition_key_caps_design_a_at_its_bucket_rate() -> None:
    # GIVEN today's design (6 WRU per append: 4 on the log key, 2 on the head) and 1,000
    # clients on standard Lambda
    r = _run(_design("a"), 1000)
    p = Platform()
    # THEN no key consumes more than its rate (plus at most one bucket depth in the window)
    cap = p.key_wru_per_s * (1 + p.key_burst_s / r["window_s"])
    assert r["hottest_key_units_per_s"] <= cap * 1.001
    assert r["hottest_key"] == "t0:log#0"
    # AND appends cannot exceed what the log key admits at 4 WRU each
    assert r["records_per_s"] <= cap / 4
    assert r["throttled_frac"] > 0.5  # the key is saturated: most attempts are throttled


def test_frames_over_p_keys_lift_the_ceiling_until_the_head_binds() -> None:
    # GIVEN one process whose commits never race (a counter reserves seqs), 16-record frames
    # (~13 WRU each), 16 commits in flight and 600 clients: only DynamoDB limits throughput
    base = Design(
        "p",
        "spread",
        "test",
        compute="managed",
        per_env_concurrency=1000,
        transaction=False,
        sequencer="counter",
        max_group=16,
        writer_inflight=16,
    )
    # CPU is not the limit here, and a throttled write comes back at once (botocore's 1 s
    # back-off would leave a saturated key idle between retries: this is about capacity)
    platform = replace(Platform(), lmi_cpu_scale=0.001, sdk_throttle_base_s=0.002)
    rate = {}
    hottest = {}
    for p in (1, 4, 32):
        r = _run(replace(base, frame_keys=p), 600, platform=platform, managed_envs=1)
        rate[p], hottest[p] = r["records_per_s"], r["hottest_key"]
    # THEN 4 log keys carry ~4x the records of one (the log key binds in both)
    assert hottest[1] == "t0:log#0" and hottest[4].startswith("t0:log#")
    assert 3.6 <= rate[4] / rate[1] <= 4.4
    # AND past that the head (1 WRU per commit, <= 1,000 commits/s) binds: not 8x more
    assert hottest[32] == "t0:head"
    assert rate[32] / rate[4] < 8 * 0.75


def test_cost_per_append_is_wru_times_price_plus_requests() -> None:
    assert PRICES["dynamodb_wru_per_million"] == 0.625
    assert PRICES["lambda_gb_second"] == LAMBDA_GB_S
    assert PRICES["lmi_instance_hour"] == 0.0816 and PRICES["lmi_management_fee"] == 0.15
    # standard Lambda: DynamoDB units + one request + GB-seconds per invocation
    r = _run(_design("b"), 3)
    expected = (
        r["wru_per_record"] * WRU
        + r["rru_per_record"] * RRU
        + r["invocations_per_record"] * LAMBDA_REQUEST
        + r["lambda_gb_s_per_record"] * LAMBDA_GB_S
    ) * 1e6
    assert r["usd_per_million"]["usd_total"] == pytest.approx(expected, rel=1e-9)
    assert r["usd_per_million"]["usd_dynamodb"] == pytest.approx(
        (r["wru_per_record"] * WRU + r["rru_per_record"] * RRU) * 1e6, rel=1e-9
    )
    # Managed Instances: requests + instance time (two 1-vCPU environments per instance)
    r = _run(_design("e"), 50)
    expected = (
        r["wru_per_record"] * WRU
        + r["rru_per_record"] * RRU
        + r["s3_puts_per_record"] * S3_PUT
        + r["invocations_per_record"] * LAMBDA_REQUEST
        + r["managed_env_s_per_record"] * LMI_INSTANCE_S / 2
    ) * 1e6
    assert r["s3_puts_per_record"] > 0
    assert r["usd_per_million"]["usd_total"] == pytest.approx(expected, rel=1e-9)


def test_a_lone_client_writes_what_one_commit_writes() -> None:
    # GIVEN one client (no races, no throttling) THEN the simulated WRU and calls per append
    # are those of one commit: (a) 2 WRU on the head + 4 on the log key in one transaction
    one = commit_units(_design("a"), DEFAULT_INPUTS, 1)
    assert one == {"head": 2.0, "log": 4.0, "calls": 1.0, "s3": 0.0}
    r = Model(_design("a"), 1).run(warmup_s=1.0, min_window_s=10.0, max_window_s=10.0)
    assert r["wru_per_record"] == pytest.approx(6.0, rel=0.01)
    assert r["write_calls_per_record"] == pytest.approx(1.0, rel=0.01)
    assert r["conflict_frac"] == 0.0 and r["throttled_frac"] == 0.0
    # (b): a 2 KB frame PutItem, and the head once per 16 frames
    b = commit_units(_design("b"), DEFAULT_INPUTS, 1)
    assert b == {"head": 1 / 16, "log": 2.0, "calls": 1 + 1 / 16, "s3": 0.0}
    # (e): every frame to S3 behind a 1 KB pointer, seqs from the head counter
    e = commit_units(_design("e"), DEFAULT_INPUTS, 64)
    assert e == {"head": 1.0, "log": 1.0, "calls": 2.0, "s3": 1.0}


def test_the_same_seed_gives_the_same_run() -> None:
    a = simulate(_design("c"), 30, seed=7, quick=True)
    b = simulate(_design("c"), 30, seed=7, quick=True)
    c = simulate(_design("c"), 30, seed=8, quick=True)
    assert a == b
    assert (a["records_per_s"], a["p99_ms"]) != (c["records_per_s"], c["p99_ms"])


def _call_outcome(model: Model, kind: int, bucket: Bucket) -> dict[str, Any]:
    got: dict[str, Any] = {}

    def proc() -> Proc:
        got["outcome"], _ = yield from model._call(kind, ((bucket, 1.0),))
        got["at"] = model.sim.now

    model.sim.spawn(proc())
    model.sim.run(120.0)
    return got


def test_a_throttled_write_is_retried_until_it_succeeds() -> None:
    # GIVEN an empty key bucket that refills 1 unit every 2 s
    model = Model(_design("b"), 1)
    bucket = Bucket("k", 0.5, 2.0)
    bucket.tokens = 0.0
    # WHEN one PutItem is sent
    got = _call_outcome(model, WRITE, bucket)
    # THEN botocore's back-off (rand x 1 s x 2^i) retries it until the bucket has a unit
    st = model.stats
    assert got["outcome"] == OK and got["at"] >= 2.0
    assert st.throttled >= 1 and st.write_calls == st.throttled + 1 and st.wru == 1.0


def test_a_write_throttled_past_its_attempts_and_budget_fails() -> None:
    # GIVEN a bucket that never refills, 3 SDK attempts and a 0.2 s re-send budget
    platform = replace(Platform(), sdk_max_attempts=3, resend_budget_s=0.2)
    model = Model(_design("b"), 1, platform=platform)
    bucket = Bucket("k", 1e-6, 1e6)  # one unit deep, refills in 11 days
    bucket.tokens = 0.0
    got = _call_outcome(model, WRITE, bucket)
    # THEN it is given up (the engine's 503) after the SDK's attempts and the re-sends that
    # fit the budget, and nothing was consumed
    st = model.stats
    assert got["outcome"] == FAIL
    assert st.write_calls == st.throttled and st.write_calls % 3 == 0 and st.write_calls >= 3
    assert st.wru == 0.0
    # AND a throttled transaction is not retried by the SDK: one attempt per engine re-send
    model = Model(_design("a"), 1, platform=replace(platform, resend_budget_s=0.0))
    got = _call_outcome(model, TXN, bucket)
    assert got["outcome"] == FAIL and model.stats.write_calls == 1


def test_throttling_raises_latency_and_failed_requests_are_counted() -> None:
    # GIVEN design (b) with 3 clients, on normal keys and on keys 50x too small
    normal = _run(_design("b"), 3)
    slow = replace(Platform(), key_wru_per_s=20.0, resend_budget_s=0.5, sdk_max_attempts=2)
    throttled = _run(_design("b"), 3, platform=slow)
    # THEN the throttled run is slower at the median and in the tail, and retries show
    assert normal["throttled_frac"] == 0.0 and throttled["throttled_frac"] > 0.3
    assert throttled["p50_ms"] > 3 * normal["p50_ms"]
    assert throttled["p99_ms"] > normal["p99_ms"]
    assert throttled["failed_frac"] > 0  # some gave up (503) and were retried by the client
    assert throttled["records_per_s"] > 0


def test_frame_sizes_and_cpu_inputs_are_derived_from_measurements(tmp_path: Path) -> None:
    # frame bytes = overhead + records x per-record, fitted over two frame lengths
    fit = fit_frames([(1, 1126.0), (32, 25178.0), (32, 25178.0)])
    assert fit is not None
    assert fit["bytes_per_record"] == pytest.approx(775.87, abs=0.01)
    assert fit["overhead_bytes"] == pytest.approx(350.1, abs=0.1)
    assert fit_frames([(1, 1126.0)]) is None
    # CPU per request, per commit and per record from bench_v0's three append workloads
    path = tmp_path / "latest-v0.json"

    def wl(name: str, cpu: float, commits: float) -> dict[str, Any]:
        return {
            "workload": {"name": name},
            "cpu_ms_per_op": {"server": cpu},
            "aws_calls_per_op": {"DynamoDB.TransactWriteItems": {"calls": commits}},
        }

    path.write_text(
        json.dumps(
            {
                "workloads": [
                    wl("append-b1", 3.3, 1.0),
                    wl("append-1x32", 0.6, 0.0625),
                    wl("append-b100", 6.6, 1.0),
                ]
            }
        )
    )
    cpu = cpu_from_bench_v0(path)
    assert cpu is not None
    assert cpu["cpu_ms_record"] == pytest.approx(3.3 / 99)
    assert cpu["cpu_ms_commit"] == pytest.approx(2.7 / (1 - 0.0625))
    assert cpu["cpu_ms_request"] + cpu["cpu_ms_commit"] + cpu["cpu_ms_record"] == pytest.approx(3.3)
    assert cpu_from_bench_v0(tmp_path / "missing.json") is None


def test_quick_run_prints_the_tables_and_writes_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "scale.json"
    returned = bench_scale_model.main(["--quick", f"--out={out}"])
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["benchmark"] == "scale_model"
    assert result == json.loads(json.dumps(returned, default=float))
    for text in ("== (a) today", "Single-topic ceiling", "Many topics", "Sensitivity", "--quick"):
        assert text in printed
    keys = [d["key"] for d in result["designs"]]
    assert keys == [d.key for d in DESIGNS]
    assert result["settings"]["clients"] == list(QUICK_CLIENTS)
    assert len(result["results"]) == len(keys) * len(QUICK_CLIENTS)
    row = result["results"][0]
    for field in (
        "records_per_s",
        "mb_per_s",
        "p50_ms",
        "p99_ms",
        "throttled_frac",
        "write_calls_per_record",
        "wru_per_record",
        "usd_per_million",
    ):
        assert field in row, field
    assert set(row["usd_per_million"]) == {"usd_dynamodb", "usd_s3", "usd_lambda", "usd_total"}
    assert set(result["ceilings"]) == set(keys) == set(result["targets"])
    assert all(isinstance(t["met"], bool) and t["why"] for t in result["targets"].values())
    assert [(r["design"], r["topics"]) for r in result["many_topics"]] == [
        (d, t) for d in MANY_TOPIC_DESIGNS for t in QUICK_TOPICS
    ]
    assert result["validation"] is None and result["measured"] is None
    assert result["assumptions"] and result["prices"]["lmi_instance"] == "m7g.large"


# -- slot-hop ("slot" sequencer: (f), (g), (h))


def _commit_once(model: Model, records: int, *, known: int | None) -> bool:
    """One commit of `records` records by the model's first environment, which knows the
    tail as `known` frames (None: it has no tail yet and reads the head first)."""
    env = model.envs[0]  # a Managed Instances design (managed_envs=1)
    if known is not None:
        env.head[0] = known
    got: dict[str, bool] = {}

    def proc() -> Proc:
        got["ok"] = yield from model._commit(env, 0, records)

    model.sim.spawn(proc())
    model.sim.run(5.0)
    return got["ok"]


def test_a_lost_race_hops_with_one_extra_billed_write_and_no_read() -> None:
    f = _design("f")
    frame_kb = DEFAULT_INPUTS.frame_kb(1)  # 1,126 B: 2 KB units
    assert frame_kb == 2
    # GIVEN a process that knows 0 frames while another process has committed frame 1
    model = Model(f, 1, managed_envs=1)
    model.version[0] = 1
    # WHEN it commits one record
    assert _commit_once(model, 1, known=0)
    st = model.stats
    # THEN it lost once, learned the next key from the failure and won there: two billed
    # writes of the frame, no read, and no S3
    assert (st.conflicts, st.write_calls, st.read_calls) == (1, 2, 0)
    assert st.wru == 2 * frame_kb and st.rru == 0.0 and st.s3_puts == 0
    assert model.version[0] == 2 and model.envs[0].head[0] == 2
    # AND the failed write's billing is the Platform's assumption: free when it says so
    model = Model(f, 1, managed_envs=1, platform=replace(Platform(), conflict_wru=0.0))
    model.version[0] = 1
    assert _commit_once(model, 1, known=0)
    assert model.stats.write_calls == 2 and model.stats.wru == frame_kb
    # AND (c), which learns only that its frame exists, reads before it retries
    model = Model(_design("c"), 1, managed_envs=1)
    model.version[0] = 1
    assert _commit_once(model, 1, known=0)
    assert model.stats.read_calls == 1 and model.stats.write_calls == 2


def test_a_hop_moves_one_frame_so_a_stale_process_hops_once_per_frame_it_missed() -> None:
    # GIVEN a process 5 frames behind
    model = Model(_design("f"), 1, managed_envs=1)
    model.version[0] = 5
    assert _commit_once(model, 1, known=0)
    # THEN the failure returns the winner at the key tried (not the tail): 5 hops, 6 writes
    assert (model.stats.conflicts, model.stats.write_calls, model.stats.read_calls) == (5, 6, 0)
    assert model.version[0] == 6
    # AND the idealised variant (a loss learns the tail) hops once
    model = Model(replace(_design("f"), hop_learns_newest=True), 1, managed_envs=1)
    model.version[0] = 5
    assert _commit_once(model, 1, known=0)
    assert (model.stats.conflicts, model.stats.write_calls) == (1, 2)


def test_a_new_process_reads_the_lazily_folded_head_and_hops_from_there() -> None:
    # GIVEN 70 frames committed and a head last folded at 64
    model = Model(_design("f"), 1, managed_envs=1)
    model.version[0], model.folded[0] = 70, 64
    # WHEN a process with no tail commits: one head read, then 6 hops to frame 71
    assert _commit_once(model, 1, known=None)
    assert (model.stats.read_calls, model.stats.conflicts, model.stats.write_calls) == (1, 6, 7)
    # AND the head is written once per 64 frames, off the commit's path
    assert commit_units(_design("f"), DEFAULT_INPUTS, 1) == {
        "head": 1 / 64,
        "log": 2.0,
        "calls": 1 + 1 / 64,
        "s3": 0.0,
    }


def test_with_one_environment_slot_hop_never_loses_a_race() -> None:
    # GIVEN (f) with 60 clients on one environment (one writer: nobody to race) and on three
    for key in ("f", "g"):
        one = _run(_design(key), 60, managed_envs=1)
        three = _run(_design(key), 60, managed_envs=3)
        # THEN one environment never loses, and writes one frame (or pointer) per commit
        assert one["conflict_frac"] == 0.0 and one["records_per_s"] > 0
        assert one["write_calls_per_record"] == pytest.approx(
            (1 + 1 / 64) / one["records_per_commit"], rel=0.05
        )
        # AND three environments do (each hops over what the other two committed)
        assert three["conflict_frac"] > 0.3
    # AND (h), standard Lambda, with one client is one environment: no races either
    h = _run(_design("h"), 1)
    assert h["envs"] == 1 and h["conflict_frac"] == 0.0


def test_slot_hop_in_s3_retries_only_the_pointer_not_the_s3_put() -> None:
    g = _design("g")
    # GIVEN a process 3 frames behind committing a 64-record group (spilled: every frame)
    model = Model(g, 1, managed_envs=1)
    model.version[0] = 3
    assert _commit_once(model, 64, known=0)
    st = model.stats
    # THEN one S3 PUT, and the 1 KB pointer item written 4 times (3 lost, 1 won)
    assert st.s3_puts == 1
    assert (st.conflicts, st.write_calls, st.read_calls) == (3, 4, 0)
    assert st.wru == 4 * DEFAULT_INPUTS.pointer_kb
    # AND over a contended run, one PUT per commit however many races were lost (give or
    # take a commit in flight per environment at either edge of the window)
    model = Model(g, 300, managed_envs=3)
    model.run(warmup_s=0.5, min_window_s=1.0, max_window_s=1.0, target_records=0)
    st = model.stats
    assert st.conflicts > st.commits > 20
    assert abs(st.s3_puts - st.commits) <= 3


# -- the built design (i): seqs from the head's counter, frames over P keys, standard Lambda


def test_the_counter_on_lambda_never_loses_a_race_and_writes_the_same_per_record() -> None:
    i = _design("i")
    assert commit_units(i, DEFAULT_INPUTS, 1) == {"head": 1.0, "log": 2.0, "calls": 2.0, "s3": 0.0}
    runs = {n: _run(i, n) for n in (1, 10, 100)}
    for n, r in runs.items():
        # THEN no write ever loses a race, and each record is one reservation (1 WRU on the
        # head) and one 2 KB frame put: 2 calls and 3 WRU, whatever the number of clients
        assert r["conflict_frac"] == 0.0 and r["conflicts_per_record"] == 0.0, n
        assert r["holes_per_record"] == 0.0 and r["failed_frac"] == 0.0, n
        # (give or take a commit across either edge of the window)
        assert r["wru_per_record"] == pytest.approx(3.0, rel=0.02), n
        assert r["usd_per_million"]["usd_dynamodb"] == pytest.approx(3.0 * 0.625, rel=0.02), n
        # one request per environment: no group commit
        assert r["records_per_commit"] == pytest.approx(1.0, rel=0.02)
    assert runs[10]["write_calls_per_record"] == pytest.approx(2.0, rel=0.01)
    # AND under the head's rate the cost per record does not depend on the clients
    one, ten = (runs[n]["usd_per_million"]["usd_total"] for n in (1, 10))
    assert ten == pytest.approx(one, rel=0.03)
    assert runs[10]["records_per_s"] > 9 * runs[1]["records_per_s"]  # no races: ~linear
    # AND at 100 clients the head key (1 WRU per reservation) binds at its 1,000 WRU/s;
    # the throttled reservations wait in botocore's back-off, in the handler (billed)
    hundred = runs[100]
    assert hundred["hottest_key"] == "t0:head" and hundred["throttled_frac"] > 0
    assert 900 <= hundred["records_per_s"] <= 1000 * (1 + Platform().key_burst_s / 2.0)
    assert hundred["lambda_gb_s_per_record"] > 2 * runs[10]["lambda_gb_s_per_record"]


def test_the_counter_spreads_frames_over_its_keys_by_the_engines_hash() -> None:
    # the model's placement is the engine's (restated, not imported)
    for parts in (1, 2, 4, 8, 64):
        for seq in (*range(1, 200), 2**31, 2**40 + 7):
            assert frame_partition(seq, parts) == engine_frame_partition(seq, parts)
    # GIVEN (i) with 10 clients: each of its 4 frame keys carries about a quarter of the
    # frames (2 WRU each), the head 1 WRU per record
    r = _run(_design("i"), 10)
    per_key = [r["key_units_per_s"][f"t0:log#{k}"] for k in range(4)]
    assert sum(per_key) == pytest.approx(2 * r["records_per_s"], rel=0.02)
    for units in per_key:
        assert units == pytest.approx(sum(per_key) / 4, rel=0.15)
    assert r["key_units_per_s"]["t0:head"] == pytest.approx(r["records_per_s"], rel=0.02)


def _lambda_commit(model: Model, records: int = 1) -> bool:
    """One commit by a warm standard-Lambda environment that has the head cached."""
    env = _Env(1)
    model.envs.append(env)
    env.head[0], env.head_at[0] = 0, 0.0
    got: dict[str, bool] = {}

    def proc() -> Proc:
        got["ok"] = yield from model._commit(env, 0, records)

    model.sim.spawn(proc())
    model.sim.run(30.0)
    return got["ok"]


def test_a_put_later_than_the_hole_timeout_loses_its_slot_and_reserves_again() -> None:
    i = _design("i")
    assert (frame_partition(1, 4), frame_partition(2, 4)) == (2, 0)
    # GIVEN the key of seq 1's frame throttled for 1.5 s (over the 1 s hole timeout)
    model = Model(i, 1)
    model.frame_keys[0][2].tokens = -1500.0
    assert _lambda_commit(model)
    st = model.stats
    # THEN its put, retried by botocore, comes after a reader filled the slot: it fails
    # (billed), the hole is billed, and a second reservation puts the frame at seq 2
    assert (st.holes, st.conflicts, st.commits) == (1, 1, 1)
    assert model.seqs[0] == 2 and model.version[0] == 2
    assert st.wru == 1 + 2 + 1 + 1 + 2  # reserve, failed put, hole, reserve, put
    # AND a put that makes it within the timeout keeps its slot
    model = Model(i, 1)
    model.frame_keys[0][2].tokens = -100.0  # 0.1 s
    assert _lambda_commit(model)
    assert (model.stats.holes, model.stats.conflicts, model.seqs[0]) == (0, 0, 1)
    # AND without readers filling holes (the probe (e)) a late put still lands
    model = Model(replace(i, hole_timeout_s=None), 1)
    model.frame_keys[0][2].tokens = -1500.0
    assert _lambda_commit(model)
    assert (model.stats.holes, model.seqs[0]) == (0, 1)


def _writers_json(path: Path, rows: Any) -> Path:
    path.write_text(json.dumps({"benchmark": "writers", "results": rows}))
    return path


def _writer_row(n: int, code: str = "current") -> dict[str, Any]:
    """A row as bench/bench_writers.py writes it (the fields the validation reads)."""

    def api(p50: float, p99: float, per_record: float) -> dict[str, float]:
        return {"p50_ms": p50, "p99_ms": p99, "calls_per_record": per_record}

    return {
        "code": code,
        "backend": "ddblocal",
        "writers": n,
        "records_per_s": 70.0 * n,
        "p50_ms": 13.0,
        "p99_ms": 25.0,
        "per_record": {"write_calls": 2.0, "wru": 3.0, "lost_races": 0.0, "read_calls": 0.0},
        "by_api": {
            "DynamoDB.UpdateItem": api(4.0, 9.0, 1.0),
            "DynamoDB.PutItem": api(4.0, 9.0, 1.0),
            "DynamoDB.GetItem": {"p50_ms": float("nan"), "calls_per_record": 0.0},
        },
        "cpu_ms_per_record": {"servers": 5.0, "emulator": 9.0, "clients": 0.3},
    }


def test_bench_writers_results_are_compared_n_by_n(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN no results file THEN nothing is compared
    kw: dict[str, Any] = {"inputs": DEFAULT_INPUTS, "platform": Platform()}
    assert validate_writers(tmp_path / "absent.json", **kw) is None
    # GIVEN a run at N = 1, 2 and one N without per-API times
    broken = {k: v for k, v in _writer_row(4).items() if k != "by_api"}
    path = _writers_json(tmp_path / "w.json", [_writer_row(2), _writer_row(1), broken])
    v = validate_writers(path, **kw)
    assert v is not None
    assert [r["n"] for r in v["rows"]] == [1, 2] and v["skipped"][0]["n"] == 4
    for r in v["rows"]:
        # THEN N environments, one request each, on the measured service times and CPU:
        # the built design's 2 calls, 3 WRU, no races, and ~1 / (4 + 4 + 5 ms) per writer
        m = r["modelled"]
        assert r["design"] == "i" and r["label"] == "current/ddblocal"
        assert r["inputs"]["p50_ms"] == {"UpdateItem": 4.0, "PutItem": 4.0}
        assert m["write_calls_per_record"] == pytest.approx(2.0, rel=0.01)
        assert m["wru_per_record"] == pytest.approx(3.0, rel=0.01)
        assert m["lost_races_per_record"] == 0.0
        assert m["records_per_s"] == pytest.approx(r["n"] * 1000 / 13.0, rel=0.1)
        assert m["p50_ms"] == pytest.approx(13.0, rel=0.1)
        assert r["measured"]["records_per_s"] == 70.0 * r["n"]
        assert r["measured"]["wru_per_record"] == 3.0
    table = writers_table(v)
    assert "(i) current/ddblocal N=1" in table and "N=4 skipped" in table
    # AND a run of the old path (a conditional frame put per record, no reservation) is
    # modelled as (b), whose environments race for the next frame
    old = _writer_row(4, code="672fe77")
    old["by_api"] = {"DynamoDB.PutItem": {"p50_ms": 4.0, "p99_ms": 9.0, "calls_per_record": 2}}
    v = validate_writers(_writers_json(tmp_path / "w.json", [old]), **kw)
    assert v is not None and [(r["n"], r["design"]) for r in v["rows"]] == [(4, "b")]
    assert v["rows"][0]["modelled"]["lost_races_per_record"] > 0
    # AND the entry point prints the comparison when asked
    out = tmp_path / "scale.json"
    path = _writers_json(tmp_path / "w.json", [_writer_row(1)])
    result = bench_scale_model.main(
        ["--quick", "--designs=i", "--clients=1", f"--validate-writers={path}", f"--out={out}"]
    )
    assert "(i) current/ddblocal N=1" in capsys.readouterr().out
    assert result["validation_writers"]["rows"][0]["n"] == 1
    # (and issue 41's checks for standard Lambda: no lost races, 1 client under $2.50/M)
    checks = result["lambda_targets"]["i"]["checks"]
    assert checks["lost races"]["met"] is True and checks["$/M"]["met"] is True
    assert checks["many topics"]["met"] is None  # --quick runs 10 topics, not 100
    bench_scale_model.main(["--quick", "--designs=i", "--clients=1", f"--out={out}"])
    assert json.loads(out.read_text())["validation_writers"] is None


def test_the_in_process_measurement_of_the_built_path_validates_design_i() -> None:
    # GIVEN what measure_local() gives for the engine as built: an UpdateItem (1 WRU on the
    # head) and a PutItem (2 WRU on the log) per single append; 32 appends per commit
    api = {"UpdateItem": {"p50": 4.0, "p99": 8.0}, "PutItem": {"p50": 2.0, "p99": 5.0}}
    single = {
        "calls_per_append": {"DynamoDB.UpdateItem": 1.0, "DynamoDB.PutItem": 1.0},
        "write_calls_per_append": 2.0,
        "wru_per_append": 3.0,
        "wru_per_append_by_table": {"heads": 1.0, "log": 2.0, "index": 0.0},
        "api_ms": api,
        "append_ms_mean": 9.0,
        "append_ms_p50": 8.5,
        "ddb_ms_per_append": 6.0,
        "appends_per_s": 110.0,
    }
    group = {
        "clients": 32,
        "api_ms": api,
        "process_cpu_ms_per_append": 1.2,
        "ddb_ms_per_append": 0.6,
        "appends_per_commit": 32.0,
        "wru_per_append": 0.81,
        "append_ms_p50": 27.0,
        "appends_per_s": 805.0,
    }
    measured = {
        "single": single,
        "group": group,
        "frame_fit": {"overhead_bytes": 366.0, "bytes_per_record": 776.0},
        "settings": {"spill_threshold_bytes": 65536},
    }
    # THEN the inputs read a 1 KB head (one UpdateItem, not half a transaction)
    inputs = inputs_from(measured, None)
    assert inputs.head_kb == 1 and inputs.frame_kb(1) == 2
    heavier = {**measured, "single": {**single, "wru_per_append_by_table": {"heads": 2.0}}}
    assert inputs_from(heavier, None).head_kb == 2
    # AND the model of (i) writes what was measured, and its one-process run is CPU-bound on
    # the interpreter that client, app and emulator share: ~1 / 1.2 ms
    rows = {r["what"]: r for r in validate(measured, inputs, Platform(), 1)}
    for what in ("DynamoDB write calls / append (i)", "WRU / append (i)"):
        assert rows[what]["modelled"] == rows[what]["measured"]
    assert rows["appends per commit, 32 clients on one process"]["modelled"] == 32.0
    grp = rows["appends/s, 32 clients on one process (emulator)"]
    assert grp["modelled"] == pytest.approx(1000 / 1.2, rel=0.1)
    one = rows["appends/s, 1 client (emulator service times)"]
    assert one["modelled"] == pytest.approx(1000 / 9.0, rel=0.1)
