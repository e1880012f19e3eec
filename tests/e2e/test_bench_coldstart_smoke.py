"""bench/bench_coldstart.py end to end with --quick (one fresh interpreter per function and
floor, no importtime pass): every function template.yaml declares is measured, its import
touched no network and raised nothing, and the result file holds what the report relies on
(floor, import, ratio against the 1.3x target, est. INIT and its price, artifact sizes, the
layer's largest and test/emulator-only contents). Structural facts only; no timing
comparisons: the machine is shared and the numbers are noisy."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from bench import bench_coldstart

pytestmark = [pytest.mark.serial, pytest.mark.e2e, pytest.mark.timeout(90)]

REPO = Path(__file__).resolve().parents[2]


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def _template_functions() -> dict[str, dict[str, Any]]:
    from cfnlint.decode import decode

    tpl, errors = decode(str(REPO / "template.yaml"))
    assert not errors and tpl is not None
    memory = int(tpl["Globals"]["Function"].get("MemorySize", 128))
    return {
        name: {"memory_mb": int(res["Properties"].get("MemorySize", memory)), **res["Properties"]}
        for name, res in tpl["Resources"].items()
        if res["Type"] == "AWS::Serverless::Function"
    }


def test_bench_coldstart_quick_run_measures_every_template_function(tmp_path: Path) -> None:
    out = tmp_path / "coldstart.json"
    # GIVEN the template's functions WHEN the quick benchmark runs
    returned = bench_coldstart.main(["--quick", f"--out={out}"])
    # THEN the result file is what main returned
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["benchmark"] == "coldstart" and result == json.loads(json.dumps(returned))
    assert result["params"]["runs"] == 1 and result["params"]["quick"] is True
    assert result["errors"] == 0
    assert result["init_billing"]["source_url"].startswith("https://aws.amazon.com/")
    assert _positive(result["interpreter_start"]["median_ms"])

    # every function of the template, in its order, with its CodeUri, Handler and memory
    functions = _template_functions()
    rows = {r["function"]: r for r in result["functions"]}
    assert list(rows) == list(functions)
    for name, row in rows.items():
        props = functions[name]
        assert (row["code_uri"], row["handler"]) == (props["CodeUri"], props["Handler"])
        assert row["memory_mb"] == props["memory_mb"], name
        assert row["floor"]["code"].startswith("import "), name
        assert len(row["floor"]["runs_ms"]) == len(row["import"]["runs_ms"]) == 1, name
        assert _positive(row["floor"]["median_ms"]) and _positive(row["import"]["median_ms"])
        assert row["ratio"] == pytest.approx(
            row["import"]["median_ms"] / row["floor"]["median_ms"], abs=0.01
        )
        assert row["target"]["max_ratio"] == 1.3
        assert row["target"]["met"] is (row["ratio"] <= 1.3), name
        assert row["est_init_ms"] > row["import"]["median_ms"], name
        assert _positive(row["usd_per_million_cold_starts"]), name
        # the same import with no bytecode to read: what a layer of sources only would cost
        nobc = row["without_bytecode"]
        assert len(nobc["runs_ms"]) == 1 and _positive(nobc["median_ms"]), name
        assert nobc["est_init_ms"] > nobc["median_ms"], name
        # importing a handler makes no network call and raises nothing
        assert row["network_attempts"] == [] and row["errors"] == [], name
        assert row["importtime"] is None, name  # --quick: no importtime pass
        art = row["artifact"]
        assert _positive(art["code_bytes"]) and _positive(art["layer_bytes"])
        assert art["total_bytes"] == art["code_bytes"] + art["layer_bytes"]
    assert result["targets_missed"] == [n for n, r in rows.items() if not r["target"]["met"]]
    # the stream function runs uvicorn's factory (the one run.sh names) under the Web Adapter
    stream = [r for r in rows.values() if r["handler"].endswith(".sh")]
    run_sh = (REPO / "functions" / "stream" / "run.sh").read_text()
    factory = re.search(r"--factory\s+([\w.]+):(\w+)", run_sh)
    assert factory is not None and stream
    assert all(
        r["kind"] == "http-uvicorn" and f"{factory.group(2)}()" in r["entry"] for r in stream
    )

    # the layer: its largest distributions, and its test/emulator-only contents flagged
    layer = result["artifacts"]
    largest = [d["bytes"] for d in layer["largest"]]
    assert len(largest) == 10 and largest == sorted(largest, reverse=True)
    assert layer["total_bytes"] > sum(largest) > 0
    assert _positive(layer["packages"]["headwater"])
    flagged = [f["what"] for f in layer["test_or_emulator_only"]]
    # headwater/dev (emulator, dev server) is left out of the built layer, not shipped
    assert layer["left_out_by_build"] == ["headwater/dev"]
    assert not any(f.startswith("headwater/dev/") for f in flagged)
