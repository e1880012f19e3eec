"""The run: designs x client counts, many topics, sensitivity and (unless --quick or
--no-measure) the local measurement with its validation; prints the report and writes
bench/results/latest-scale-model.json."""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import bench.scale_model
from bench.harness import PRICES, machine_info, result_header, write_results
from bench.scale_model.aws import ASSUMPTIONS, Platform
from bench.scale_model.designs import DESIGNS
from bench.scale_model.measure import RESULTS, cpu_from_bench_v0, inputs_from, measure_local
from bench.scale_model.model import simulate
from bench.scale_model.report import (
    TARGET_MB_S,
    TARGET_P99_MS,
    TARGET_USD_M,
    brief,
    ceiling,
    lambda_target_check,
    p99_text,
    report,
    slim,
    target_check,
)
from bench.scale_model.validate import WRITERS_RESULTS, validate, validate_writers

CLIENTS = (1, 10, 100, 300, 1000, 10_000)
QUICK_CLIENTS = (1, 10, 100)
TOPICS = (1, 10, 100)  # many topics: T topics x CLIENTS_PER_TOPIC clients, distinct keys
QUICK_TOPICS = (1, 10)
CLIENTS_PER_TOPIC = 10
MANY_TOPIC_DESIGNS = ("a", "e", "i", "j")

SENSITIVITY: tuple[tuple[str, Callable[[Platform], Platform]], ...] = (
    ("lost races bill nothing", lambda p: replace(p, conflict_wru=0.0)),
    (
        "DynamoDB and S3 2x slower",
        lambda p: replace(
            p,
            write_ms=2 * p.write_ms,
            update_ms=2 * p.update_ms,
            txn_ms=2 * p.txn_ms,
            read_ms=2 * p.read_ms,
            s3_put_ms=2 * p.s3_put_ms,
        ),
    ),
)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(bench.scale_model.__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="no local measurement, short runs")
    ap.add_argument("--clients", default="", help="comma-separated client counts")
    ap.add_argument("--designs", default="", help="comma-separated design keys (default all)")
    ap.add_argument("--topics", default="", help="comma-separated topic counts (many topics)")
    ap.add_argument("--no-measure", action="store_true", help="skip the local measurement")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None, help="results JSON (default bench/results/...)")
    ap.add_argument(
        "--validate-writers",
        nargs="?",
        const=str(WRITERS_RESULTS),
        default=None,
        metavar="PATH",
        help="compare bench_writers' results (N one-request processes on DynamoDB Local) "
        "with the model (default path: bench/results/latest-writers.json; a full run "
        "does this whenever that file exists)",
    )
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    clients = [int(x) for x in args.clients.split(",") if x] or list(
        QUICK_CLIENTS if args.quick else CLIENTS
    )
    topics = [int(x) for x in args.topics.split(",") if x] or list(
        QUICK_TOPICS if args.quick else TOPICS
    )
    keys = [x for x in args.designs.split(",") if x]
    designs = [d for d in DESIGNS if not keys or d.key in keys]
    out_path = Path(args.out or RESULTS / "latest-scale-model.json")
    machine = machine_info()
    platform = Platform()
    measured = None
    cpu = None
    if not (args.quick or args.no_measure):
        print("measuring the engine locally (in-process moto, callcount) ...", flush=True)
        measured = measure_local()
        cpu = cpu_from_bench_v0()
    inputs = inputs_from(measured, cpu)
    results: list[dict[str, Any]] = []
    for d in designs:
        for n in clients:
            r = simulate(d, n, inputs=inputs, platform=platform, seed=args.seed, quick=args.quick)
            results.append(r)
            print(
                f"  ({d.key}) x{n:,}: {r['records_per_s']:,.0f} rec/s, p99 {p99_text(r)} ms, "
                f"${r['usd_per_million']['usd_total']:.3f}/M",
                flush=True,
            )
    many: list[dict[str, Any]] = []
    for many_design in (d for d in designs if d.key in MANY_TOPIC_DESIGNS):
        base = None
        for t in topics:
            r = simulate(
                many_design,
                t * CLIENTS_PER_TOPIC,
                t,
                inputs=inputs,
                platform=platform,
                seed=args.seed,
                quick=args.quick,
            )
            r = slim(r)
            r["table_units_per_s"] = {
                k: v for k, v in r["key_units_per_s"].items() if k.startswith("table:")
            }
            per_topic = r["records_per_s"] / t
            base = base if base is not None else per_topic
            r["scaling_vs_1"] = per_topic / base if base else math.nan
            many.append(r)
    validation = validate(measured, inputs, platform, args.seed) if measured else None
    writers_path = args.validate_writers or (None if args.quick else str(WRITERS_RESULTS))
    validation_writers = None
    if writers_path:
        validation_writers = validate_writers(
            Path(writers_path), inputs=inputs, platform=platform, seed=args.seed
        )
        if validation_writers is None and args.validate_writers:
            print(f"(no {writers_path}: the bench_writers validation is skipped)", flush=True)
    by = {d.key: [r for r in results if r["design"] == d.key] for d in designs}
    sensitivity = []
    for d in designs:
        # at the ceiling's client count (at most 1,000: the 10,000-client runs are the slow ones)
        n = min(ceiling(by[d.key])["clients"], 1000)
        base = next(r for r in by[d.key] if r["clients"] == n)
        sensitivity.append({"design": d.key, "clients": n, "variant": "baseline", **brief(base)})
        for label, variant in SENSITIVITY:
            r = simulate(
                d, n, inputs=inputs, platform=variant(platform), seed=args.seed, quick=args.quick
            )
            sensitivity.append({"design": d.key, "clients": n, "variant": label, **brief(r)})
    result: dict[str, Any] = {
        **result_header("scale_model", argv, machine),
        "settings": {
            "quick": args.quick,
            "seed": args.seed,
            "clients": clients,
            "topics": topics,
            "clients_per_topic": CLIENTS_PER_TOPIC,
            "target": {
                "mb_per_s": TARGET_MB_S,
                "usd_per_million": TARGET_USD_M,
                "p99_ms": TARGET_P99_MS,
            },
        },
        "inputs": asdict(inputs),
        "cpu_from_bench_v0": cpu,
        "measured": measured,
        "platform": asdict(platform),
        "assumptions": ASSUMPTIONS,
        "prices": PRICES,
        "designs": [asdict(d) for d in designs],
        "results": [slim(r) for r in results],
        "ceilings": {k: ceiling(v) for k, v in by.items() if v},
        "targets": {k: target_check(v) for k, v in by.items() if v},
        # issue 41, for the designs of single-record requests on standard Lambda
        "lambda_targets": {
            d.key: lambda_target_check(by[d.key], [r for r in many if r["design"] == d.key])
            for d in designs
            if d.compute == "lambda" and d.records_per_request == 1 and by[d.key]
        },
        "many_topics": many,
        "sensitivity": sensitivity,
        "validation": validation,
        "validation_writers": validation_writers,
        "model_seconds": round(time.perf_counter() - t_start, 1),
    }
    print("\n" + report(result))
    print(f"\nmodel run: {result['model_seconds']} s")
    write_results(out_path, result)
    return result
