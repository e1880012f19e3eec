"""Benchmark conformance: the upstream Durable Streams conformance suite's slow tests, Headwater
vs @durable-streams/server, where the time goes, and what idle streams cost.

    python -m bench.bench_conformance [--modes suite,phases,idle] [--targets ref-file,headwater]
                                      [--prefill N] [--idle-streams 10,300] [--idle-window-s S]
                                      [--quick] [--out PATH]

Three parts, each against a fresh server per target (bench/ds_reference_server.mjs for the
reference, bench/server.py on a fresh moto for Headwater, as bench/bench_durable.py starts them):

- suite: the suite's "Property-Based Tests (fast-check)" group (`-t` pattern, --pattern), run
  by tests/conformance/run.sh with tests/conformance/vitest.defaults.config.mjs (vitest's
  default 5 s test timeout: a test slower than that fails here as it does for a user running
  the package as it ships). Prints each test's duration on both targets and the ratio
  Headwater / reference (the issue's goal: <= 2x on each), and the AWS calls the Headwater
  server made over the whole run. --prefill N first creates N streams with one append each
  (the full suite leaves hundreds behind before it reaches this group).
- phases: the requests those tests are made of, timed one at a time on one connection:
  create (PUT), first append, append, read (GET), HEAD, delete. For Headwater, the AWS calls
  per request by API and the emulator's wall time for them (each call's wall time as the
  server saw it, summed): the storage floor of that request on moto. Headwater minus that
  floor is our own time; the reference runs in memory / on local files and has no such floor.
- idle: N empty /v1 streams and no traffic for --idle-window-s seconds: the AWS calls the
  server's background sweeps make, the read units they bill (strongly consistent reads: 1 RRU
  per 4 KB item, Query summed over the page), the emulator's and the server's CPU, and per
  stream per hour: calls, RRU and dollars at the list price in bench/harness.py PRICES. Run at
  several N to see whether the idle cost grows with the number of streams.

Results: bench/results/latest-conformance.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from bench.bench_durable import HeadwaterTarget, RefTarget, Session, TargetUnavailable
from bench.harness import (
    PRICES,
    format_table,
    machine_info,
    median,
    process_cpu_seconds,
    result_header,
    write_results,
)

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
RUN_SH = REPO / "tests" / "conformance" / "run.sh"
DEFAULTS_CONFIG = REPO / "tests" / "conformance" / "vitest.defaults.config.mjs"
TARGETS = ("ref-file", "ref-mem", "headwater")
MODES = ("suite", "phases", "idle")
PROPERTY_PATTERN = "Property-Based Tests"
OCTET = {"Content-Type": "application/octet-stream"}
GOAL_RATIO = 2.0
HOUR_S = 3600.0


def make_target(name: str) -> RefTarget | HeadwaterTarget:
    if name == "ref-file":
        return RefTarget(name, "file")
    if name == "ref-mem":
        return RefTarget(name, "memory")
    return HeadwaterTarget()


def _calls(s: Session) -> dict[str, Any]:
    assert s.counter is not None
    return s.counter.snapshot()


def _reset(s: Session) -> None:
    if s.counter is not None:
        s.counter.reset()


def prefill(base_url: str, n: int, tag: str) -> None:
    """n streams with one 10-byte append each, as the suite's earlier groups leave them."""
    with httpx.Client(base_url=base_url, timeout=30) as c:
        for i in range(n):
            path = f"/v1/stream/prefill-{tag}-{i}"
            r = c.put(path, headers=OCTET)
            if r.status_code not in (200, 201):
                raise RuntimeError(f"prefill create {r.status_code}: {r.text[:200]}")
            r = c.post(path, content=b"0123456789", headers=OCTET)
            if r.status_code not in (200, 204):
                raise RuntimeError(f"prefill append {r.status_code}: {r.text[:200]}")


# --- suite ----------------------------------------------------------------------------------
def run_suite(base_url: str, pattern: str, tmp: str) -> dict[str, Any]:
    """Run the suite's tests matching `pattern` with vitest's default timeouts; per test its
    status and duration."""
    report = Path(tmp) / f"report-{time.monotonic_ns()}.json"
    env = {**os.environ, "CI": "1", "DS_CONFORMANCE_CONFIG": str(DEFAULTS_CONFIG)}
    env.pop("DS_SUBSCRIPTIONS", None)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(RUN_SH), base_url, str(report), "-t", pattern],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    wall = time.perf_counter() - t0
    if not report.exists():
        tail = (proc.stdout + proc.stderr)[-1500:]
        raise RuntimeError(f"vitest wrote no report (exit {proc.returncode}): {tail}")
    data = json.loads(report.read_text())
    tests: dict[str, dict[str, Any]] = {}
    for fr in data.get("testResults", []):
        for a in fr.get("assertionResults", []):
            if a.get("status") in ("skipped", "pending", "todo"):
                continue
            msgs = a.get("failureMessages") or []
            tests[a.get("title", "")] = {
                "status": a.get("status"),
                "duration_s": round((a.get("duration") or 0) / 1000, 3),
                "message": (msgs[0].strip().splitlines()[0][:200] if msgs else ""),
            }
    return {"wall_s": round(wall, 2), "exit": proc.returncode, "tests": tests}


# --- phases ---------------------------------------------------------------------------------
PHASES = ("create", "first_append", "append", "read", "head", "delete")


def run_phases(s: Session, streams: int, appends: int) -> dict[str, Any]:
    """Each request kind timed alone (one connection, one request at a time)."""
    times: dict[str, list[float]] = {p: [] for p in PHASES}
    calls: dict[str, dict[str, Any]] = {}
    floor_ms: dict[str, float] = {}
    with httpx.Client(base_url=s.base_url, timeout=30) as c:

        def timed(phase: str, fn: Callable[[], httpx.Response], ok: Sequence[int]) -> None:
            t0 = time.perf_counter()
            r = fn()
            times[phase].append((time.perf_counter() - t0) * 1000)
            if r.status_code not in ok:
                raise RuntimeError(f"{phase}: {r.status_code} {r.text[:200]}")

        tag = f"{time.time_ns():x}"
        paths = [f"/v1/stream/phase-{tag}-{i}" for i in range(streams)]
        for phase in PHASES:
            _reset(s)
            for i, path in enumerate(paths):
                body = bytes([i % 256]) * 50
                if phase == "create":
                    timed(phase, lambda p=path: c.put(p, headers=OCTET), (200, 201))
                elif phase == "first_append":
                    timed(phase, lambda p=path, b=body: c.post(p, content=b, headers=OCTET), (204,))
                elif phase == "append":
                    for _ in range(appends):
                        timed(
                            phase,
                            lambda p=path, b=body: c.post(p, content=b, headers=OCTET),
                            (204,),
                        )
                elif phase == "read":
                    timed(phase, lambda p=path: c.get(p), (200,))
                elif phase == "head":
                    timed(phase, lambda p=path: c.head(p), (200,))
                else:
                    timed(phase, lambda p=path: c.delete(p), (200, 204))
            if s.counter is not None:
                snap = _calls(s)
                n = len(times[phase])
                calls[phase] = {
                    api: round(v["calls"] / n, 2) for api, v in snap["calls"].items() if v["calls"]
                }
                walls = [w for ws in snap.get("wall_ms", {}).values() for w in ws]
                floor_ms[phase] = round(sum(walls) / n, 2)
    out: dict[str, Any] = {}
    for phase in PHASES:
        out[phase] = {"p50_ms": round(median(times[phase]), 2), "n": len(times[phase])}
        if phase in calls:
            out[phase]["aws_calls"] = calls[phase]
            out[phase]["aws_calls_total"] = round(sum(calls[phase].values()), 2)
            out[phase]["emulator_ms"] = floor_ms[phase]
    return out


# --- idle -----------------------------------------------------------------------------------
def run_idle(s: Session, streams: int, window_s: float) -> dict[str, Any]:
    """The background work of a server holding `streams` empty /v1 streams and no traffic."""
    with httpx.Client(base_url=s.base_url, timeout=30) as c:
        for i in range(streams):
            r = c.put(f"/v1/stream/idle-{i}", headers=OCTET)
            if r.status_code not in (200, 201):
                raise RuntimeError(f"create {r.status_code}: {r.text[:200]}")
    time.sleep(1.0)  # the creates' own work settles
    _reset(s)
    cpu0 = {k: process_cpu_seconds(pid) for k, pid in s.pids.items()}
    t0 = time.perf_counter()
    time.sleep(window_s)
    window = time.perf_counter() - t0
    cpu = {k: round(process_cpu_seconds(pid) - cpu0[k], 3) for k, pid in s.pids.items()}
    snap = _calls(s)
    per_api: dict[str, Any] = {}
    total_rru = 0.0
    scale = HOUR_S / window / max(streams, 1)
    for api, v in snap["calls"].items():
        if not v["calls"]:
            continue
        rru = float(v.get("rru", 0.0))
        total_rru += rru
        per_api[api] = {
            "calls": int(v["calls"]),
            "rru": round(rru, 1),
            "calls_per_stream_hour": round(v["calls"] * scale, 3),
            "rru_per_stream_hour": round(rru * scale, 3),
        }
    rru_h = total_rru * scale
    usd = rru_h * PRICES["dynamodb_rru_per_million"] / 1e6
    # the emulator's CPU per stream per hour, the cost a local server pays for nothing
    emu_cpu = sum(v for k, v in cpu.items() if k != "server")
    return {
        "streams": streams,
        "window_s": round(window, 1),
        "cpu_s": cpu,
        "emulator_cpu_share": round(emu_cpu / window, 4),
        "emulator_cpu_ms_per_stream_hour": round(emu_cpu * 1000 * scale, 2),
        "calls": per_api,
        "rru_per_stream_hour": round(rru_h, 3),
        "usd_per_stream_hour": usd,
        "usd_per_stream_month": round(usd * 730, 6),
    }


# --- the run --------------------------------------------------------------------------------
def _session(t: RefTarget | HeadwaterTarget) -> contextlib.AbstractContextManager[Session]:
    return t.session()


def run(args: argparse.Namespace, argv: Sequence[str] | None) -> dict[str, Any]:
    machine = machine_info()
    modes: list[str] = args.modes
    print(
        f"bench conformance | modes {','.join(modes)} | targets {','.join(args.targets)} | "
        f"{machine['cpu_model']} x{machine['cores']} | load {machine.get('loadavg_1m')}",
        flush=True,
    )
    targets = {n: make_target(n) for n in args.targets}
    dead: dict[str, str] = {}
    for n, t in targets.items():
        try:
            t.open()
        except TargetUnavailable as exc:
            dead[n] = str(exc)
    result: dict[str, Any] = {
        **result_header("conformance", argv, machine),
        "settings": {
            "modes": modes,
            "targets": list(args.targets),
            "pattern": args.pattern,
            "prefill": args.prefill,
            "phase_streams": args.phase_streams,
            "phase_appends": args.phase_appends,
            "idle_streams": args.idle_streams,
            "idle_window_s": args.idle_window_s,
            "full_sweep_ms": args.full_sweep_ms,
        },
        "prices": {"dynamodb_rru_per_million": PRICES["dynamodb_rru_per_million"]},
        "dead": dead,
    }
    t_start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-conformance-") as tmp:
            if "suite" in modes:
                suite: dict[str, Any] = {}
                for n, t in targets.items():
                    if n in dead:
                        continue
                    with _session(t) as s:
                        if args.prefill:
                            prefill(s.base_url, args.prefill, n)
                        _reset(s)
                        r = run_suite(s.base_url, args.pattern, tmp)
                        if s.counter is not None:
                            snap = _calls(s)
                            r["aws_calls"] = {
                                a: int(v["calls"]) for a, v in snap["calls"].items() if v["calls"]
                            }
                    suite[n] = r
                    print(f"  suite {n}: {len(r['tests'])} tests in {r['wall_s']} s", flush=True)
                result["suite"] = suite
                result["suite_ratios"] = suite_ratios(suite)
            if "phases" in modes:
                phases: dict[str, Any] = {}
                for n, t in targets.items():
                    if n in dead:
                        continue
                    with _session(t) as s:
                        phases[n] = run_phases(s, args.phase_streams, args.phase_appends)
                    print(f"  phases {n}: done", flush=True)
                result["phases"] = phases
            if "idle" in modes and "headwater" in targets and "headwater" not in dead:
                idle = []
                hw = targets["headwater"]
                assert isinstance(hw, HeadwaterTarget)
                for full_ms in args.full_sweep_ms:
                    # a window that holds at least one full sweep (0: every sweep is one)
                    window = max(args.idle_window_s, full_ms / 1000 + 10)
                    hw.env = {"HEADWATER_FULL_SWEEP_MS": str(full_ms)}
                    for n_streams in args.idle_streams:
                        with _session(hw) as s:
                            r = run_idle(s, n_streams, window)
                        r["full_sweep_ms"] = full_ms
                        idle.append(r)
                        print(f"  idle {n_streams} streams, full sweep {full_ms} ms: done")
                    hw.env = {}
                result["idle"] = idle
    finally:
        for t in targets.values():
            with contextlib.suppress(Exception):
                t.close()
    result["wall_s"] = round(time.perf_counter() - t_start, 1)
    print("\n" + render(result))
    write_results(Path(args.out), result)
    return result


def suite_ratios(suite: Mapping[str, Any]) -> dict[str, Any]:
    """Per test: Headwater's duration / the file-backed reference's (else the in-memory)."""
    ours = suite.get("headwater")
    ref_name = "ref-file" if "ref-file" in suite else "ref-mem"
    ref = suite.get(ref_name)
    if not ours or not ref:
        return {}
    out: dict[str, Any] = {"reference": ref_name, "tests": {}}
    for title, r in ours["tests"].items():
        other = ref["tests"].get(title)
        if other is None or not other["duration_s"]:
            continue
        out["tests"][title] = round(r["duration_s"] / other["duration_s"], 2)
    ratios = list(out["tests"].values())
    out["max"] = max(ratios) if ratios else None
    out["within_goal"] = [t for t, x in out["tests"].items() if x <= GOAL_RATIO]
    return out


def render(result: Mapping[str, Any]) -> str:
    m = result["machine"]
    lines = [f"machine: {m.get('cpu_model')} x{m.get('cores')} | load {m.get('loadavg_1m')}"]
    suite = result.get("suite")
    if suite:
        names = list(suite)
        titles: list[str] = []
        for r in suite.values():
            titles.extend(t for t in r["tests"] if t not in titles)
        ratios = result.get("suite_ratios", {}).get("tests", {})
        rows = []
        for title in titles:
            row: list[Any] = [title[:60]]
            for n in names:
                got = suite[n]["tests"].get(title)
                row.append(
                    "-"
                    if got is None
                    else f"{got['duration_s']:.2f}{'' if got['status'] == 'passed' else ' FAIL'}"
                )
            x = ratios.get(title)
            row.append("-" if x is None else f"{x:.2f}x")
            rows.append(row)
        lines += [
            "",
            f"suite: '{result['settings']['pattern']}' with vitest's default timeouts, seconds"
            f" (prefill {result['settings']['prefill']} streams)",
            format_table(["test", *names, "ours/ref"], rows),
        ]
        for n in names:
            if "aws_calls" in suite[n]:
                lines.append(f"  {n} AWS calls over the run: {suite[n]['aws_calls']}")
    phases = result.get("phases")
    if phases:
        names = list(phases)
        rows = []
        for p in PHASES:
            row = [p]
            for n in names:
                row.append(f"{phases[n][p]['p50_ms']:.2f}")
            hw = phases.get("headwater", {}).get(p, {})
            row.append(f"{hw.get('aws_calls_total', '-')}")
            row.append(f"{hw.get('emulator_ms', '-')}")
            rows.append(row)
        lines += [
            "",
            "phases: p50 ms per request, one at a time; Headwater's AWS calls and the emulator's"
            " wall ms per request",
            format_table(["request", *names, "hw calls", "emu ms"], rows),
        ]
        hw = phases.get("headwater")
        if hw:
            for p in PHASES:
                lines.append(f"  {p}: {hw[p].get('aws_calls', {})}")
    idle = result.get("idle")
    if idle:
        rows = []
        for r in idle:
            for api, v in sorted(r["calls"].items()):
                rows.append(
                    [
                        r["streams"],
                        r.get("full_sweep_ms", ""),
                        api,
                        v["calls"],
                        v["rru"],
                        f"{v['calls_per_stream_hour']:.2f}",
                        f"{v['rru_per_stream_hour']:.2f}",
                    ]
                )
            rows.append(
                [
                    r["streams"],
                    r.get("full_sweep_ms", ""),
                    "(all)",
                    "",
                    "",
                    f"emu CPU {r['emulator_cpu_share'] * 100:.1f}%",
                    f"{r['rru_per_stream_hour']:.2f}",
                ]
            )
        lines += [
            "",
            "idle: empty streams, no traffic (window: see below); per stream per hour",
            format_table(
                ["streams", "full sweep ms", "API", "calls", "RRU", "calls/str/h", "RRU/str/h"],
                rows,
            ),
        ]
        for r in idle:
            lines.append(
                f"  {r['streams']} streams, full sweep {r.get('full_sweep_ms')} ms, "
                f"{r['window_s']} s: ${r['usd_per_stream_hour']:.3g} per stream-hour, "
                f"${r['usd_per_stream_month']:.3g} per stream-month (RRU at "
                f"${PRICES['dynamodb_rru_per_million']}/M); emulator CPU "
                f"{r['emulator_cpu_ms_per_stream_hour']:.0f} ms per stream-hour; cpu {r['cpu_s']}"
            )
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--modes", default=",".join(MODES), help=f"subset of {','.join(MODES)}")
    ap.add_argument(
        "--targets", default="ref-file,headwater", help=f"subset of {','.join(TARGETS)}"
    )
    ap.add_argument("--pattern", default=PROPERTY_PATTERN, help="vitest -t pattern (suite mode)")
    ap.add_argument("--prefill", type=int, default=0, help="streams created before the suite")
    ap.add_argument("--phase-streams", type=int, default=20)
    ap.add_argument("--phase-appends", type=int, default=5)
    ap.add_argument("--idle-streams", default="10,300", help="comma-separated stream counts")
    ap.add_argument(
        "--idle-window-s",
        type=float,
        default=60.0,
        help="at least this long, and one full sweep period + 10 s",
    )
    ap.add_argument(
        "--full-sweep-ms",
        default="0,300000",
        help="HEADWATER_FULL_SWEEP_MS values to compare (0: every sweep reads every topic, "
        "the behaviour before engine/sweeps.py; 300000: the default)",
    )
    ap.add_argument("--quick", action="store_true", help="a small, fast run (smoke tests)")
    ap.add_argument("--out", default=str(RESULTS / "latest-conformance.json"))
    args = ap.parse_args(argv)
    args.modes = [m for m in MODES if m in args.modes.split(",")]
    args.targets = [t for t in TARGETS if t in args.targets.split(",")]
    args.idle_streams = _ints(args.idle_streams)
    args.full_sweep_ms = _ints(args.full_sweep_ms)
    if args.quick:
        args.pattern = "offsets are always monotonically increasing"
        args.phase_streams, args.phase_appends = 3, 2
        args.idle_streams, args.idle_window_s = [2, 20], min(args.idle_window_s, 12.0)
        args.full_sweep_ms = [0, 4000]
    return run(args, argv)


if __name__ == "__main__":
    main()
