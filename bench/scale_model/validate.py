"""Validation: the local measurements against the model run with the same inputs.

validate(): the in-process measurement (measure.py) of the engine as built, design (i) since
c25145a. Calls and WRU per append must agree with the model as on AWS; latency and
throughput are compared with the model run on the emulator's service times, one process,
no network.

validate_writers(): bench/bench_writers.py's run of N one-request server processes against
DynamoDB Local (the situation of N standard-Lambda environments), N by N, against the model
of N environments fed that run's per-API DynamoDB wall times as call latencies and its server
CPU per request.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.harness import format_table
from bench.scale_model.aws import Platform
from bench.scale_model.designs import DESIGNS, Design, Inputs, commit_units
from bench.scale_model.measure import RESULTS
from bench.scale_model.model import Model, simulate

BUILT = "i"  # the design the engine implements (c25145a): what measure_local measures
WRITERS_RESULTS = RESULTS / "latest-writers.json"
UNLIMITED = 1e12  # an emulator throttles nothing


def _design(key: str) -> Design:
    return next(d for d in DESIGNS if d.key == key)


def _sigma(p50: float, p99: float) -> float:
    """The lognormal shape that gives this p99/p50 ratio."""
    if not (p50 > 0 and p99 == p99):  # no calls (NaN) or nothing to fit
        return 0.4
    return max(0.05, math.log(max(p99, p50) / p50) / 2.326)


def _api(times: Mapping[str, Any], name: str) -> dict[str, float] | None:
    """One API's p50 and p99 (ms) from a per-API map keyed "UpdateItem" or
    "DynamoDB.UpdateItem", whose entries say "p50"/"p99" or "p50_ms"/"p99_ms"."""
    got = times.get(name) or times.get(f"DynamoDB.{name}")
    if not isinstance(got, Mapping):
        return None
    p50, p99 = (got.get(q, got.get(f"{q}_ms")) for q in ("p50", "p99"))
    if p50 is None or p50 != p50:  # no wall samples (NaN)
        return None
    return {"p50": float(p50), "p99": float(p99) if p99 is not None else math.nan}


def emulator_platform(platform: Platform, api_ms: Mapping[str, Any]) -> Platform:
    """`platform` with the emulator's service times (per-API p50s, one lognormal shape fitted
    to the write calls' p99/p50), no network, no cold start and this machine's CPU."""

    def p50(api: str, default: float) -> float:
        t = _api(api_ms, api)
        return float(t["p50"]) if t is not None else default

    writes = [
        t
        for api in ("PutItem", "UpdateItem", "TransactWriteItems")
        if (t := _api(api_ms, api)) is not None
    ]
    sigmas = [_sigma(float(t["p50"]), float(t.get("p99", math.nan))) for t in writes]
    return replace(
        platform,
        write_ms=p50("PutItem", platform.write_ms),
        update_ms=p50("UpdateItem", platform.update_ms),
        txn_ms=p50("TransactWriteItems", platform.txn_ms),
        read_ms=p50("GetItem", p50("Query", platform.read_ms)),
        latency_sigma=sum(sigmas) / len(sigmas) if sigmas else platform.latency_sigma,
        invoke_ms=0.0,
        cold_start_ms=0.0,
        lambda_cpu_scale=1.0,
        lmi_cpu_scale=1.0,
    )


def validate(
    measured: dict[str, Any], inputs: Inputs, platform: Platform, seed: int
) -> list[dict[str, Any]]:
    """Rows of (what, measured here, modelled). The model is run (1) as on AWS for the built
    design (i) with one client: calls and WRU per append must equal the measurement; (2) with
    the emulator's service times in place of AWS's, one process, no network: the latency and
    throughput of the same engine mechanics, one client at a time and `concurrency` clients
    on one process (group commit)."""
    single, group = measured["single"], measured["group"]
    built = _design(BUILT)
    aws = simulate(built, 1, inputs=inputs, platform=platform, seed=seed)
    one = commit_units(built, inputs, 1)  # one record, one commit
    by_table = single["wru_per_append_by_table"]
    rows: list[tuple[str, float, float]] = [
        (f"DynamoDB write calls / append ({BUILT})", single["write_calls_per_append"],
         one["calls"]),
        (f"WRU / append ({BUILT})", single["wru_per_append"], one["head"] + one["log"]),
        (f"WRU / append on the head key ({BUILT})", by_table["heads"], one["head"]),
        (f"WRU / append on the log keys ({BUILT})", by_table["log"], one["log"]),
    ]  # fmt: skip
    # the emulator's service times, this box's CPU, no network, one process; what an append
    # spends outside DynamoDB calls is its CPU (in-process: app, client and emulator share it)
    local = emulator_platform(platform, single["api_ms"])
    seq_inputs = replace(
        inputs,
        cpu_ms_request=max(0.0, single["append_ms_mean"] - single["ddb_ms_per_append"]),
        cpu_ms_commit=0.0,
        cpu_ms_record=0.0,
    )
    seq = Model(built, 1, inputs=seq_inputs, platform=local, seed=seed).run(
        warmup_s=0.5, min_window_s=2.0, max_window_s=2.0
    )
    k = group["clients"]
    grp_design = replace(built, key=f"{BUILT}-1proc", compute="managed", per_env_concurrency=k)
    # in-process, client, app and emulator share one interpreter (one CPU, one GIL): the
    # emulator's work for a commit's calls is CPU of that process, not latency that overlaps
    # the next requests' CPU. So a commit's calls take the process's CPU (their share of its
    # CPU per append, at most the calls' wall time), and the rest is each request's.
    cpu = group["process_cpu_ms_per_append"]
    emulator = min(group["ddb_ms_per_append"], cpu)
    grp_local = replace(
        emulator_platform(platform, group["api_ms"]),
        write_ms=0.001,
        update_ms=0.001,
        txn_ms=0.001,
        read_ms=0.001,
    )
    grp_inputs = replace(
        inputs,
        cpu_ms_request=cpu - emulator,
        cpu_ms_commit=emulator * group["appends_per_commit"],
        cpu_ms_record=0.0,
    )
    # the measured clients start together (asyncio.gather), so the model's do too
    grp = Model(
        grp_design,
        k,
        inputs=grp_inputs,
        platform=grp_local,
        seed=seed,
        managed_envs=1,
        start_spread_s=0.0,
    )
    g = grp.run(warmup_s=0.5, min_window_s=2.0, max_window_s=2.0)
    api = single["api_ms"]
    emulator_ms = sum(float(t["p50"]) for n in ("UpdateItem", "PutItem") if (t := _api(api, n)))
    rows += [
        ("append p50 ms, 1 client (emulator service times)", single["append_ms_p50"],
         seq["p50_ms"]),
        ("appends/s, 1 client (emulator service times)", single["appends_per_s"],
         seq["records_per_s"]),
        (f"appends per commit, {k} clients on one process", group["appends_per_commit"],
         g["records_per_commit"]),
        (f"WRU / append, {k} clients on one process", group["wru_per_append"],
         g["wru_per_record"]),
        (f"append p50 ms, {k} clients on one process (emulator)", group["append_ms_p50"],
         g["p50_ms"]),
        (f"appends/s, {k} clients on one process (emulator)", group["appends_per_s"],
         g["records_per_s"]),
        # below 1 measured: the machine's other load took the rest of the core
        (f"share of one core the process used, {k} clients", cpu * group["appends_per_s"] / 1000,
         g["cpu_util_mean"]),
        ("UpdateItem + PutItem p50 ms: emulator here vs AWS assumed", emulator_ms,
         platform.update_ms + platform.write_ms),
        ("append p50 ms, 1 client: emulator here vs AWS modelled", single["append_ms_p50"],
         aws["p50_ms"]),
    ]  # fmt: skip
    return [{"what": w, "measured": m, "modelled": v} for w, m, v in rows]


# -- bench_writers: N one-request server processes against DynamoDB Local
#
# bench/bench_writers.py writes latest-writers.json: under "results" one row per (code,
# backend, N) with "writers" (N), "records_per_s" (acknowledged), "p50_ms", "p99_ms",
# "per_record": {"write_calls", "wru" (refused conditional writes billed), "lost_races"
# (refused writes), ...}, "by_api": {"DynamoDB.UpdateItem": {"p50_ms", "p99_ms",
# "calls_per_record", ...}, ...} (each call's wall time as the servers saw it) and
# "cpu_ms_per_record": {"servers": ...}; "code" is the label of the revision it ran.


def _get(row: Mapping[str, Any], path: str) -> Any:
    v: Any = row
    for k in path.split("."):
        if not isinstance(v, Mapping) or v.get(k) is None:
            return None
        v = v[k]
    return v


def _num(row: Mapping[str, Any], path: str) -> float:
    v = _get(row, path)
    return float(v) if v is not None else math.nan


def writers_design(row: Mapping[str, Any]) -> str:
    """The append path a bench_writers row ran: its "design" if it says, else from its calls:
    a reservation (UpdateItem) per record is the sequencer (i, since c25145a), a transaction
    per record today's design before 2026-11-26 (a), else the conditional frame put (b)."""
    if row.get("design"):
        return str(row["design"])

    apis = row.get("by_api") or {}

    def per_record(api: str) -> float:
        f = apis.get(f"DynamoDB.{api}") or apis.get(api) or {}
        return float(f.get("calls_per_record") or 0.0)

    if per_record("UpdateItem") >= 0.5:
        return BUILT
    return "a" if per_record("TransactWriteItems") >= 0.5 else "b"


def validate_writers(
    path: Path = WRITERS_RESULTS,
    *,
    inputs: Inputs,
    platform: Platform,
    seed: int = 1,
) -> dict[str, Any] | None:
    """Measured vs modelled for each (code, backend, N) row of a bench_writers run (None when
    the file is absent). Each N is modelled as N standard-Lambda environments with N clients
    (one request per environment, as each one-request server process is), fed that row's
    per-API DynamoDB wall times as call latencies (which include the emulator's queueing and
    this machine's CPU contention at that N), its servers' CPU per record as the handler's
    time outside those calls (at this machine's speed, one core per environment), no network
    between client and server, no cold start, and no throttling (an emulator has no
    partition limits)."""
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    rows = []
    skipped = []
    results = data.get("results") or []
    order = ("code", "backend", "writers")
    for r in sorted(results, key=lambda r: tuple(str(r.get(k)).zfill(6) for k in order)):
        n = int(r.get("writers") or 0)
        label = "/".join(str(r[k]) for k in ("code", "backend") if r.get(k))
        api = r.get("by_api")
        cpu = _get(r, "cpu_ms_per_record.servers")
        if n < 1 or not isinstance(api, Mapping) or cpu is None:
            skipped.append({"label": label, "n": n, "why": "no writers, per-API times or CPU"})
            continue
        key = writers_design(r)
        local = replace(
            emulator_platform(platform, api),
            key_wru_per_s=UNLIMITED,
            key_rru_per_s=UNLIMITED,
            table_wru_per_s=UNLIMITED,
            concurrency_limit=max(platform.concurrency_limit, n),
            scale_envs_per_s=UNLIMITED,
        )
        local_inputs = replace(
            inputs, cpu_ms_request=float(cpu), cpu_ms_commit=0.0, cpu_ms_record=0.0
        )
        m = Model(_design(key), n, inputs=local_inputs, platform=local, seed=seed).run(
            warmup_s=1.0, min_window_s=2.0, max_window_s=10.0, target_records=5000
        )
        measured = {
            "records_per_s": _num(r, "records_per_s"),
            "p50_ms": _num(r, "p50_ms"),
            "p99_ms": _num(r, "p99_ms"),
            "write_calls_per_record": _num(r, "per_record.write_calls"),
            "wru_per_record": _num(r, "per_record.wru"),
            "lost_races_per_record": _num(r, "per_record.lost_races"),
        }
        modelled = {
            "records_per_s": m["records_per_s"],
            "p50_ms": m["p50_ms"],
            "p99_ms": m["p99_ms"],
            "write_calls_per_record": m["write_calls_per_record"],
            "wru_per_record": m["wru_per_record"],
            "lost_races_per_record": m["conflicts_per_record"],
        }
        times = {a: _api(api, a) for a in ("UpdateItem", "PutItem", "TransactWriteItems")}
        rows.append(
            {
                "label": label,
                "n": n,
                "design": key,
                "inputs": {
                    "p50_ms": {a: t["p50"] for a, t in times.items() if t is not None},
                    "sigma": local.latency_sigma,
                    "server_cpu_ms_per_record": float(cpu),
                },
                "measured": measured,
                "modelled": modelled,
            }
        )
    return {
        "source": str(path),
        "git": data.get("git"),
        "finished_at": data.get("finished_at"),
        "loadavg": data.get("loadavg"),
        "rows": rows,
        "skipped": skipped,
    }


WRITER_QUANTITIES = (
    ("records_per_s", "rec/s", "{:,.0f}"),
    ("p50_ms", "p50 ms", "{:.1f}"),
    ("p99_ms", "p99 ms", "{:.1f}"),
    ("write_calls_per_record", "write calls/rec", "{:.2f}"),
    ("wru_per_record", "WRU/rec", "{:.2f}"),
    ("lost_races_per_record", "lost races/rec", "{:.2f}"),
)


def writers_table(v: Mapping[str, Any]) -> str:
    """Measured vs modelled, one row per N: each quantity as "measured / modelled"."""
    out = []
    for r in v["rows"]:
        cells = [f"({r['design']}) {r['label']} N={r['n']}".replace("  ", " ")]
        for key, _, fmt in WRITER_QUANTITIES:
            cells.append(f"{fmt.format(r['measured'][key])} / {fmt.format(r['modelled'][key])}")
        out.append(cells)
    head = ["design, code/backend, processes", *(label for _, label, _ in WRITER_QUANTITIES)]
    lines = [format_table(head, out)]
    for s in v["skipped"]:
        lines.append(f"({s['label']} N={s['n']} skipped: {s['why']})")
    return "\n".join(lines)
