"""What a run reports: verdicts on the part-2 target, ceilings, the printed tables, and the
rows as they go into the results JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.harness import format_table
from bench.scale_model.aws import Platform
from bench.scale_model.validate import writers_table

TARGET_MB_S = 10.0  # part 2: one topic >= 10 MB/s of 1 KB records,
TARGET_USD_M = 0.30  # at <= $0.30 per million records,
TARGET_P99_MS = 100.0  # with p99 append latency <= 100 ms

# Issue 41: standard Lambda, one topic, 1 to 100 concurrent single-record writers
LAMBDA_MAX_WRITERS = 100
LAMBDA_MIN_REC_S = 900.0  # at 100 writers
LAMBDA_P99_MS = 100.0  # at every concurrency
LAMBDA_USD_M = 2.50  # at every concurrency
MANY_TOPICS_MIN_X = 0.9  # 100 topics of 10 writers: per-topic rate vs one topic
MANY_TOPICS = 100


def target_check(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Whether any client count meets all three part-2 targets; else the best attempt."""
    met = [
        r
        for r in rows
        if r["mb_per_s"] >= TARGET_MB_S
        and r["usd_per_million"]["usd_total"] <= TARGET_USD_M
        and r["p99_ms"] <= TARGET_P99_MS
    ]
    if met:
        best = max(met, key=lambda r: r["records_per_s"])
        return {"met": True, "clients": best["clients"], "why": "all three met"}
    # the nearest miss: the fastest tail among the rows fast enough, else the fastest row
    fast = [r for r in rows if r["mb_per_s"] >= TARGET_MB_S]
    best = (
        min(fast, key=lambda r: (r["p99_ms"], r["usd_per_million"]["usd_total"]))
        if fast
        else max(rows, key=lambda r: r["records_per_s"])
    )
    missing = []
    if best["mb_per_s"] < TARGET_MB_S:
        missing.append(f"{best['mb_per_s']:.2f} MB/s < {TARGET_MB_S:g}")
    if best["usd_per_million"]["usd_total"] > TARGET_USD_M:
        missing.append(f"${best['usd_per_million']['usd_total']:.3f}/M > {TARGET_USD_M:.2f}")
    if best["p99_ms"] > TARGET_P99_MS:
        missing.append(f"p99 {_ms(best['p99_ms'])} ms > {TARGET_P99_MS:g}")
    return {
        "met": False,
        "clients": best["clients"],
        "why": f"nearest at {best['clients']:,} clients: " + ", ".join(missing),
    }


def lambda_target_check(
    rows: Sequence[dict[str, Any]], many: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """Issue 41's targets for one topic on standard Lambda, over the rows with 1 to 100
    single-record writers: >= 900 rec/s at 100, p99 <= 100 ms and <= $2.50/M at every
    concurrency, no lost races; and, from the many-topic runs, >= 0.9x per topic at the
    most topics run. Each check names the rows that miss it."""
    rows = sorted((r for r in rows if r["clients"] <= LAMBDA_MAX_WRITERS), key=_clients)
    at_max = next((r for r in rows if r["clients"] == LAMBDA_MAX_WRITERS), None)
    checks: dict[str, dict[str, Any]] = {}
    if at_max is not None:
        checks["rec/s at 100"] = {
            "met": at_max["records_per_s"] >= LAMBDA_MIN_REC_S,
            "value": f"{at_max['records_per_s']:,.0f}",
        }
    slow = [r for r in rows if r["p99_ms"] > LAMBDA_P99_MS]
    checks["p99"] = {
        "met": not slow,
        "value": ", ".join(f"x{r['clients']:,}: {p99_text(r)}" for r in rows),
    }
    dear = [r for r in rows if r["usd_per_million"]["usd_total"] > LAMBDA_USD_M]
    checks["$/M"] = {
        "met": not dear,
        "value": ", ".join(
            f"x{r['clients']:,}: {r['usd_per_million']['usd_total']:.2f}" for r in rows
        ),
    }
    lost = sum(r.get("conflicts_per_record", r["conflict_frac"]) for r in rows)
    checks["lost races"] = {
        "met": lost == 0,
        "value": ", ".join(
            f"x{r['clients']:,}: {r.get('conflicts_per_record', r['conflict_frac']):.2f}"
            for r in rows
        ),
    }
    if many:
        top = max(many, key=lambda r: r["topics"])
        run = top["topics"] >= MANY_TOPICS
        checks["many topics"] = {
            "met": top["scaling_vs_1"] >= MANY_TOPICS_MIN_X if run else None,
            "value": f"T={top['topics']}: {top['scaling_vs_1']:.2f}x"
            + ("" if run else f" (T={MANY_TOPICS} not run)"),
        }
    return {"met": all(c["met"] is not False for c in checks.values()), "checks": checks}


def _clients(r: dict[str, Any]) -> int:
    return int(r["clients"])


def _ms(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def p99_text(r: dict[str, Any]) -> str:
    """p99 ms, prefixed '>=' when appends open across the whole window make it a bound."""
    return (">=" if r["censored"] else "") + _ms(r["p99_ms"])


def design_table(rows: Sequence[dict[str, Any]]) -> str:
    out = []
    for r in rows:
        u = r["usd_per_million"]
        out.append(
            [
                f"{r['design']} x{r['clients']:,}",
                f"{r['records_per_s']:,.0f}",
                f"{r['mb_per_s']:.2f}",
                _ms(r["p50_ms"]),
                p99_text(r),
                f"{100 * r['throttled_frac']:.0f}",
                f"{100 * r['conflict_frac']:.0f}",
                f"{100 * r['failed_frac']:.0f}",
                f"{r['write_calls_per_record']:.2f}",
                f"{r['wru_per_record']:.2f}",
                f"{r['records_per_commit']:.1f}",
                f"{r['envs']:,}",
                f"{u['usd_dynamodb']:.3f}",
                f"{u['usd_s3']:.3f}",
                f"{u['usd_lambda']:.3f}",
                f"{u['usd_total']:.3f}",
            ]
        )
    return format_table(
        [
            "design x clients",
            "rec/s",
            "MB/s",
            "p50 ms",
            "p99 ms",
            "thr%",
            "confl%",
            "fail%",
            "wr calls/rec",
            "WRU/rec",
            "rec/commit",
            "envs",
            "$/M DDB",
            "S3",
            "Lambda",
            "total",
        ],
        out,
    )


def report(result: dict[str, Any]) -> str:
    """The printed report of a run, from its results JSON."""
    lines = [
        f"scale model | seed {result['settings']['seed']} | inputs: {result['inputs']['source']}",
        "rec/s, MB/s: sustained over the window, one topic (1 KB records, MB = 10^6 B); p99 "
        "'>=': appends open across the whole window count as lower bounds;",
        "thr%: DynamoDB write attempts throttled; confl%: write attempts that lost a race; "
        "fail%: client requests answered 429/503 (retried by the client);",
        "$/M: per million records at list prices (PRICES in bench/harness.py).",
        "",
    ]
    for d in result["designs"]:
        lines.append(f"== ({d['key']}) {d['name']}: {d['description']}")
        rows = [r for r in result["results"] if r["design"] == d["key"]]
        lines.append(design_table(rows))
        lines.append("")
    ceil_rows = []
    for d in result["designs"]:
        c = result["ceilings"][d["key"]]
        t = result["targets"][d["key"]]
        ceil_rows.append(
            [
                f"({d['key']}) {d['name']}",
                f"{c['records_per_s']:,.0f}",
                f"{c['mb_per_s']:.2f}",
                f"{c['clients']:,}",
                c["binding"],
                ("MET at " + f"{t['clients']:,} clients") if t["met"] else "no: " + t["why"],
            ]
        )
    lines.append(
        f"Single-topic ceiling and the part-2 target (>= {TARGET_MB_S:g} MB/s, <= "
        f"${TARGET_USD_M:.2f}/M, p99 <= {TARGET_P99_MS:g} ms):"
    )
    lines.append(
        format_table(
            ["design", "max rec/s", "MB/s", "at clients", "hottest key", "target"], ceil_rows
        )
    )
    lines.append("")
    lt = result.get("lambda_targets") or {}
    if lt:
        lines.append(
            f"Standard Lambda, one topic, 1-{LAMBDA_MAX_WRITERS} single-record writers (issue "
            f"41: >= {LAMBDA_MIN_REC_S:,.0f} rec/s at {LAMBDA_MAX_WRITERS}, p99 <= "
            f"{LAMBDA_P99_MS:g} ms and <= ${LAMBDA_USD_M:.2f}/M at each, no lost races; "
            f"{MANY_TOPICS_MIN_X:g}x per topic with many topics):"
        )
        trows = []
        for key, t in lt.items():
            for name, c in t["checks"].items():
                verdict = {True: "met", False: "NOT met", None: "not run"}[c["met"]]
                trows.append([f"({key})", name, verdict, c["value"]])
        lines.append(format_table(["design", "target", "verdict", "figures"], trows))
        lines.append("")
    per_topic = result["settings"]["clients_per_topic"]
    lines.append(
        f"Many topics ({per_topic} clients per topic, each topic on its own keys; "
        f"tables share one on-demand quota of {Platform().table_wru_per_s:,.0f} WRU/s each):"
    )
    mrows = []
    for r in result["many_topics"]:
        mrows.append(
            [
                f"({r['design']}) T={r['topics']}",
                f"{r['records_per_s']:,.0f}",
                f"{r['records_per_s'] / r['topics']:,.0f}",
                f"{r['scaling_vs_1']:.2f}",
                _ms(r["p50_ms"]),
                p99_text(r),
                f"{r['table_units_per_s'].get('table:log', 0):,.0f}",
                f"{r['table_units_per_s'].get('table:heads', 0):,.0f}",
                f"{100 * r['throttled_frac']:.0f}",
            ]
        )
    lines.append(
        format_table(
            [
                "design, topics",
                "rec/s",
                "rec/s/topic",
                "x per topic vs T=1",
                "p50 ms",
                "p99 ms",
                "log WRU/s",
                "heads WRU/s",
                "thr%",
            ],
            mrows,
        )
    )
    lines.append("")
    lines.append("Sensitivity (each design at its ceiling's client count, at most 1,000):")
    lines.append(
        format_table(
            ["design", "clients", "variant", "envs", "rec/s", "p99 ms", "$/M"],
            [
                [
                    f"({r['design']})",
                    f"{r['clients']:,}",
                    r["variant"],
                    f"{r['envs']:,}",
                    f"{r['records_per_s']:,.0f}",
                    p99_text(r),
                    f"{r['usd_total']:.3f}",
                ]
                for r in result["sensitivity"]
            ],
        )
    )
    val = result.get("validation")
    lines.append("")
    if val:
        lines.append(
            "Measured here (real engine, in-process moto, callcount) vs modelled. Emulator "
            "latency is not AWS latency: only calls and WRU transfer to AWS."
        )
        lines.append(
            format_table(
                ["quantity", "measured", "modelled"],
                [[v["what"], f"{v['measured']:.2f}", f"{v['modelled']:.2f}"] for v in val],
            )
        )
    else:
        lines.append("(--quick: no local measurement; inputs are the recorded DEFAULT_INPUTS)")
    writers = result.get("validation_writers")
    if writers:
        lines.append("")
        lines.append(
            f"N one-request server processes on DynamoDB Local ({writers['source']}), "
            "measured / modelled with that N's per-API DynamoDB times and server CPU:"
        )
        lines.append(writers_table(writers))
    return "\n".join(lines)


def brief(r: dict[str, Any]) -> dict[str, Any]:
    """A result row as the sensitivity table keeps it."""
    return {
        "envs": r["envs"],
        "records_per_s": r["records_per_s"],
        "p99_ms": r["p99_ms"],
        "censored": r["censored"],
        "usd_total": r["usd_per_million"]["usd_total"],
    }


def ceiling(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    best = max(rows, key=lambda r: r["records_per_s"])
    return {
        "records_per_s": best["records_per_s"],
        "mb_per_s": best["mb_per_s"],
        "clients": best["clients"],
        "binding": f"{best['hottest_key']} {best['hottest_key_units_per_s']:,.0f}/s",
    }


def slim(r: dict[str, Any]) -> dict[str, Any]:
    """A result row for the JSON file (per-key rates only for keys above 1% of a key)."""
    out = {k: v for k, v in r.items() if k != "key_units_per_s"}
    out["key_units_per_s"] = {k: v for k, v in r["key_units_per_s"].items() if v >= 10}
    return out
