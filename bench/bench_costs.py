"""What a deployed stack costs: idle per month, and per million events for each surface's
main operation, next to SQS, EventBridge and Kinesis at their list prices.

    .venv/bin/python -m bench.bench_costs   # prints; writes bench/results/latest-costs.json

Idle cost is computed from template.yaml itself (its Glue schedules and workers, the number of
alarms, the sealer's schedule) and the list prices below; what an idle sweep of the sealer
costs in time is an assumption (stated in the output). The per-event figures are not new
measurements: they are read from the latest results of the surface benchmarks (bench/results/
latest-*.json, each measured against the emulator with its AWS calls counted and priced by
bench/harness.py), so each row names the workload, the run's commit and when it ran."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from bench.harness import PRICES, machine_info, result_header, write_results

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
HOURS_PER_MONTH = 730.0

# List prices, us-east-1 (each as stated on the service's pricing page; check before relying).
OTHER_PRICES: dict[str, Any] = {
    "as_of": "2026-11 (transcribed; aws.amazon.com/<service>/pricing)",
    # Glue: $0.44 per DPU-hour, billed per second with a 1-minute minimum (Glue 2.0 and later);
    # a G.1X worker is 1 DPU.
    "glue_dpu_hour": 0.44,
    "glue_min_billed_s": 60.0,
    # CloudWatch: a standard-resolution metric alarm $0.10 per month; logs ingested $0.50/GB.
    "cloudwatch_alarm_month": 0.10,
    "cloudwatch_logs_ingest_gb": 0.50,
    # SQS standard: $0.40 per million requests (64 KB chunks); a message sent, received and
    # deleted is 3 requests.
    "sqs_request_per_million": 0.40,
    # EventBridge: custom events put, $1.00 per million (64 KB chunks).
    "eventbridge_event_per_million": 1.00,
    # Kinesis Data Streams on-demand: $0.04 per stream-hour, $0.08 per GB written, $0.04 per
    # GB read (each record rounded up to 1 KB).
    "kinesis_od_stream_hour": 0.04,
    "kinesis_od_gb_in": 0.08,
    "kinesis_od_gb_out": 0.04,
    # S3 Standard storage: $0.023 per GB-month (the first 50 TB a month).
    "s3_storage_gb_month": 0.023,
    # API Gateway WebSocket APIs: $1.00 per million messages (32 KB units), $0.25 per million
    # connection-minutes (the first billion messages a month; docs/storage.md's /v0/ws costs).
    "apigw_ws_message_per_million": 1.00,
    "apigw_ws_connection_minute_per_million": 0.25,
    # Kinesis provisioned: $0.015 per shard-hour, $0.014 per million PUT payload units (25 KB).
    "kinesis_shard_hour": 0.015,
    "kinesis_put_unit_per_million": 0.014,
}
# Assumed: an idle sweep (no topic to seal) lists the live heads and returns; 200 ms billed at
# the template's 1,024 MB, one Query of 0.5 RRU, one ~400-byte log line.
IDLE_SWEEP_S = 0.2
IDLE_SWEEP_RRU = 0.5
IDLE_SWEEP_LOG_BYTES = 400

# (surface, main operation, results file, workload name, what the events are)
SURFACE_ROWS = [
    ("/v0 topics", "append 1 × 1 KB, 4 writers, own topics", "v0", "append-b1", "records"),
    ("/v0 topics", "append 1 × 1 KB, 32 writers, one topic", "v0", "append-1x32", "records"),
    ("/v0 topics", "append 100 × 1 KB per request", "v0", "append-b100", "records"),
    ("/v0 queues", "claim 16 + ack, 8 workers", "queue", "queue-8w-m16", "jobs"),
    ("/v0 watch", "append delivered to 1 watch stream", "live", "live-1proc", "deliveries"),
    ("/api/v1 notifications", "POST /notification, 16 clients", "notify", "notify-c16", "events"),
    (
        "/api/v1 flags",
        "publish a version to 100 SSE clients",
        "flags",
        "delta-latency-c100",
        "delivery",
    ),
    ("/api/v2 dashboard", "ingest 100 items per POST", "dashboard", "ingest-b100", "items"),
]


def _template() -> dict[str, Any]:
    from cfnlint.decode import decode

    tpl, errors = decode(str(REPO / "template.yaml"))
    assert not errors and tpl is not None, errors
    return tpl


def _runs_per_month(cron: str) -> float:
    """Runs per month of a Glue cron whose minute field is `0/N`, `*/N`, a list or a number
    (the forms the template's defaults use) and whose other fields are `*`/`?`."""
    minute = cron.removeprefix("cron(").split()[0]
    if m := re.fullmatch(r"(?:0|\*)/(\d+)", minute):
        per_hour = 60 / int(m.group(1))
    else:
        per_hour = len(minute.split(","))
    return per_hour * HOURS_PER_MONTH


def idle_month(tpl: dict[str, Any]) -> dict[str, Any]:
    res, params = tpl["Resources"], tpl["Parameters"]
    rows: list[dict[str, Any]] = []
    for job, param in (("RollupJob", "RollupJobSchedule"), ("IndexJob", "IndexJobSchedule")):
        props = res[job]["Properties"]
        dpu = props["NumberOfWorkers"] * {"G.1X": 1, "G.2X": 2}[props["WorkerType"]]
        cron = params[param]["Default"]
        runs = _runs_per_month(cron)
        usd = runs * dpu * OTHER_PRICES["glue_min_billed_s"] / 3600 * OTHER_PRICES["glue_dpu_hour"]
        rows.append(
            {
                "item": f"Glue {job} ({cron}, {dpu} DPU, the 1-minute minimum per run)",
                "usd": usd,
                "note": f"{runs:,.0f} runs; GlueScheduleEnabled=false: 0",
            }
        )
    alarms = sum(1 for r in res.values() if r["Type"] == "AWS::CloudWatch::Alarm")
    rows.append(
        {
            "item": f"CloudWatch alarms ({alarms})",
            "usd": alarms * OTHER_PRICES["cloudwatch_alarm_month"],
            "note": "standard resolution",
        }
    )
    schedule = res["SealerFunction"]["Properties"]["Events"]["EveryMinute"]["Properties"]
    assert schedule["Schedule"] == "rate(1 minute)", schedule
    sweeps = 60 * HOURS_PER_MONTH
    memory_gb = tpl["Globals"]["Function"]["MemorySize"] / 1024
    lam = sweeps * (
        PRICES["lambda_request_per_million"] / 1e6
        + IDLE_SWEEP_S * memory_gb * PRICES["lambda_gb_second"]
    )
    ddb = sweeps * IDLE_SWEEP_RRU * PRICES["dynamodb_rru_per_million"] / 1e6
    logs = sweeps * IDLE_SWEEP_LOG_BYTES / 1e9 * OTHER_PRICES["cloudwatch_logs_ingest_gb"]
    rows.append(
        {
            "item": "SealerFunction, one sweep a minute",
            "usd": lam + ddb + logs,
            "note": f"assumed {IDLE_SWEEP_S * 1000:.0f} ms, {IDLE_SWEEP_RRU} RRU, "
            f"{IDLE_SWEEP_LOG_BYTES} B of log per idle sweep",
        }
    )
    rows.append(
        {
            "item": "tables, bucket, function URLs, WebSocket API, queue, topic",
            "usd": 0.0,
            "note": "on-demand / per request: nothing while idle (storage of what is kept aside)",
        }
    )
    return {"rows": rows, "usd_total": sum(r["usd"] for r in rows)}


def _workload(results: dict[str, Any], name: str) -> dict[str, Any] | None:
    for w in results.get("workloads") or []:
        if isinstance(w, dict) and (w.get("workload") or {}).get("name") == name:
            return w
    return None


def per_million() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for surface, op, file, name, unit in SURFACE_ROWS:
        path = RESULTS / f"latest-{file}.json"
        results = json.loads(path.read_text())
        w = _workload(results, name)
        if w is None:
            out.append({"surface": surface, "op": op, "missing": f"{name} not in {path.name}"})
            continue
        usd = w["usd_per_million_events"]
        git = results.get("git") or {}
        out.append(
            {
                "surface": surface,
                "op": op,
                "per": unit,
                "workload": name,
                "results": path.name,
                "commit": git.get("commit"),
                "finished_at": results.get("finished_at"),
                "usd_aws": round(usd["usd_storage"], 3),
                "usd_lambda": round(usd["usd_lambda"], 3),
                "usd_total": round(usd["usd_total"], 3),
            }
        )
    return out


def peers() -> list[dict[str, Any]]:
    p = OTHER_PRICES
    gb_per_million_1kb = 1e6 * 1024 / 1024**3  # Kinesis rounds each record up to 1 KB
    return [
        {
            "peer": "SQS standard (send + receive + delete)",
            "usd_per_million": 3 * p["sqs_request_per_million"],
            "idle_month": 0.0,
        },
        {
            "peer": "EventBridge custom events (put)",
            "usd_per_million": p["eventbridge_event_per_million"],
            "idle_month": 0.0,
        },
        {
            "peer": "Kinesis on-demand, 1 KB records (write + one read)",
            "usd_per_million": gb_per_million_1kb
            * (p["kinesis_od_gb_in"] + p["kinesis_od_gb_out"]),
            "idle_month": p["kinesis_od_stream_hour"] * HOURS_PER_MONTH,
        },
        {
            "peer": "Kinesis provisioned, 1 shard, 1 KB records (PUT payload units)",
            "usd_per_million": p["kinesis_put_unit_per_million"],
            "idle_month": p["kinesis_shard_hour"] * HOURS_PER_MONTH,
        },
    ]


def main() -> int:
    tpl = _template()
    idle = idle_month(tpl)
    surfaces = per_million()
    others = peers()
    print("Idle cost of a deployed stack, per month (template.yaml defaults):")
    for r in idle["rows"]:
        print(f"  {r['item']:<72} ${r['usd']:>8.2f}  ({r['note']})")
    print(f"  {'total':<72} ${idle['usd_total']:>8.2f}")
    print(
        "\n$ per million events, each surface's main operation (AWS + Lambda, from bench results):"
    )
    for s in surfaces:
        if "missing" in s:
            print(f"  {s['surface']:<22} {s['op']:<42} {s['missing']}")
            continue
        print(
            f"  {s['surface']:<22} {s['op']:<42} ${s['usd_total']:>7.3f} per M {s['per']}"
            f"  ({s['workload']}, {s['results']} @ {s['commit']})"
        )
    print("\nPeers at list prices:")
    for o in others:
        print(
            f"  {o['peer']:<64} ${o['usd_per_million']:>6.3f} per M,"
            f" idle ${o['idle_month']:.2f}/month"
        )
    doc = {
        # when and on which commit (the per-surface rows name their own runs' commits)
        **result_header("costs", sys.argv[1:], machine_info()),
        "prices": {**PRICES, **OTHER_PRICES},
        "assumptions": {
            "idle_sweep_s": IDLE_SWEEP_S,
            "idle_sweep_rru": IDLE_SWEEP_RRU,
            "idle_sweep_log_bytes": IDLE_SWEEP_LOG_BYTES,
            "hours_per_month": HOURS_PER_MONTH,
        },
        "idle_month": idle,
        "per_million": surfaces,
        "peers": others,
    }
    write_results(RESULTS / "latest-costs.json", doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
