"""Validation: the local measurement against the model run with the same inputs.

Calls and WRU per append must agree with the model as on AWS; latency and throughput are
compared with the model run on the emulator's service times, one process, no network.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from bench.scale_model.aws import Platform
from bench.scale_model.designs import DESIGNS, Inputs, commit_units
from bench.scale_model.model import Model, simulate


def _sigma(p50: float, p99: float) -> float:
    """The lognormal shape that gives this p99/p50 ratio."""
    return max(0.05, math.log(max(p99, p50) / p50) / 2.326) if p50 > 0 else 0.4


def validate(
    measured: dict[str, Any], inputs: Inputs, platform: Platform, seed: int
) -> list[dict[str, Any]]:
    """Rows of (what, measured here, modelled). The model is run (1) as on AWS for design
    (a) with one client: calls and WRU per append must equal the measurement; (2) with the
    emulator's service times in place of AWS's, one process, no network: the latency and
    throughput of the same engine mechanics, one client at a time and `concurrency` clients
    on one process (group commit)."""
    single, group = measured["single"], measured["group"]
    today = DESIGNS[0]
    aws = simulate(today, 1, inputs=inputs, platform=platform, seed=seed)
    one = commit_units(today, inputs, 1)  # design (a): one record, one commit
    by_table = single["wru_per_append_by_table"]
    rows: list[tuple[str, float, float]] = [
        ("DynamoDB write calls / append (a)", single["write_calls_per_append"], one["calls"]),
        ("WRU / append (a)", single["wru_per_append"], one["head"] + one["log"]),
        ("WRU / append on the head key (a)", by_table["heads"], one["head"]),
        ("WRU / append on the log key (a)", by_table["log"], one["log"]),
    ]
    # the emulator's service times, this box's CPU, no network, one process
    local = replace(
        platform,
        txn_ms=single["txn_ms_p50"],
        latency_sigma=_sigma(single["txn_ms_p50"], single["txn_ms_p99"]),
        invoke_ms=0.0,
        cold_start_ms=0.0,
        lambda_cpu_scale=1.0,
        lmi_cpu_scale=1.0,
    )
    seq_inputs = replace(
        inputs,
        cpu_ms_request=max(0.0, single["append_ms_mean"] - single["txn_ms_mean"]),
        cpu_ms_commit=0.0,
        cpu_ms_record=0.0,
    )
    seq = Model(today, 1, inputs=seq_inputs, platform=local, seed=seed).run(
        warmup_s=0.5, min_window_s=2.0, max_window_s=2.0
    )
    k = group["clients"]
    grp_design = replace(today, key="a-1proc", compute="managed", per_env_concurrency=k)
    grp_local = replace(
        local,
        txn_ms=group["txn_ms_p50"],
        latency_sigma=_sigma(group["txn_ms_p50"], group["txn_ms_p99"]),
    )
    # in-process, client, app and emulator share one interpreter: its CPU per append,
    # less the time inside DynamoDB calls, is what each request costs the process
    grp_inputs = replace(
        inputs,
        cpu_ms_request=max(0.0, group["process_cpu_ms_per_append"] - group["ddb_ms_per_append"]),
        cpu_ms_commit=0.0,
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
        ("TransactWriteItems p50 ms: emulator here vs AWS assumed", single["txn_ms_p50"],
         platform.txn_ms),
        ("append p50 ms, 1 client: emulator here vs AWS modelled", single["append_ms_p50"],
         aws["p50_ms"]),
    ]  # fmt: skip
    return [{"what": w, "measured": m, "modelled": v} for w, m, v in rows]
