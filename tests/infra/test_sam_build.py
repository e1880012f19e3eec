"""`sam build` produces the Lambda artifacts, and the built layer works on the Lambda runtime's
Python (3.13): the app imports, builds, and answers /v0/health through the API handler."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from bench import bench_coldstart

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """python3.13 (the Lambda runtime) and a `sam build` of template.yaml made with it."""
    python = bench_coldstart.find_lambda_python()
    sam = REPO / ".venv-sam" / "bin" / "sam"
    assert sam.exists(), "run `make deps-sam`"
    build_dir = tmp_path_factory.mktemp("sam") / "build"
    env = {
        **os.environ,
        "PATH": f"{Path(python).parent}:{os.environ['PATH']}",
        "SAM_CLI_TELEMETRY": "0",
    }
    result = subprocess.run(
        [str(sam), "build", "--template", "template.yaml", "--build-dir", str(build_dir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return python, build_dir


def test_sam_build_layer_serves_on_the_lambda_python(built: tuple[str, Path]) -> None:
    python, build_dir = built
    layer = build_dir / "HeadwaterLayer" / "python"
    assert (layer / "headwater" / "http" / "app.py").exists()
    # only what runs on Lambda ships: no local emulator or dev server
    assert not (layer / "headwater" / "dev").exists()
    assert (layer / "fastapi").is_dir() and (layer / "shapely").is_dir()
    # ... compiled for the runtime's Python, every module, hash-based without a source check
    # (/opt is read-only: a module without bytecode is compiled on every cold start)
    sources = list(layer.rglob("*.py"))
    pycs = list(layer.rglob("*.pyc"))
    assert sources and {p.name.split(".")[-2] for p in pycs} == {"cpython-313"}
    uncompiled = [
        p for p in sources if not (p.parent / "__pycache__" / f"{p.stem}.cpython-313.pyc").exists()
    ]
    assert not uncompiled, uncompiled[:5]
    for pyc in (layer / "headwater" / "engine" / "__pycache__").glob("*.pyc"):
        flags = int.from_bytes(pyc.read_bytes()[4:8], "little")
        assert flags == 0b01, (pyc, flags)  # PEP 552: hash-based, check_source off
    api = build_dir / "ApiFunction" / "handler.py"
    assert api.exists()
    # Invoke the built API handler on python3.13 with only the built layer + function code
    # (-S: no site-packages, so nothing outside the artifacts can satisfy an import).
    event = json.loads((REPO / "tests" / "events" / "01_health_get.json").read_text())
    script = (
        "import json, sys, handler\n"
        "class Ctx:\n"
        "    function_name='f'; memory_limit_in_mb=1024; aws_request_id='r'\n"
        "    invoked_function_arn='arn:aws:lambda:us-east-1:123456789012:function:f'\n"
        f"resp = handler.handler(json.loads({json.dumps(json.dumps(event))}), Ctx())\n"
        "print(json.dumps(resp))\n"
        # every module of the layer the invocation loaded came from its bytecode
        "import importlib.util, os\n"
        "missing = sorted(n for n, m in list(sys.modules.items())\n"
        "    if (getattr(m, '__file__', '') or '').startswith(sys.argv[1])\n"
        "    and m.__file__.endswith('.py')\n"
        "    and not os.path.exists(importlib.util.cache_from_source(m.__file__)))\n"
        "print(json.dumps(missing))\n"
    )
    run = subprocess.run(
        [python, "-S", "-B", "-W", "error::DeprecationWarning", "-c", script, str(layer)],
        cwd=api.parent,
        env={
            "PYTHONPATH": f"{layer}:{api.parent}",
            "PATH": os.environ["PATH"],
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "POWERTOOLS_SERVICE_NAME": "headwater",
            "POWERTOOLS_METRICS_NAMESPACE": "Headwater",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    *_, last, missing = run.stdout.strip().splitlines()
    resp = json.loads(last)
    assert json.loads(missing) == []
    assert resp["statusCode"] == 200
    assert json.loads(resp["body"])["status"] == "ok"


def test_the_cold_start_bench_measures_the_built_artifacts_on_the_lambda_python(
    built: tuple[str, Path], tmp_path: Path
) -> None:
    """bench_coldstart --built: the functions and the layer as `sam build` made them, bytecode
    included, imported by the Lambda runtime's Python with nothing else importable (-S)."""
    _, build_dir = built
    out = tmp_path / "coldstart-built.json"
    result = bench_coldstart.main(["--quick", f"--built={build_dir}", f"--out={out}"])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    runtime = result["params"]["runtime"]
    assert runtime["python"].startswith("3.13.") and runtime["artifacts"].startswith("sam build")
    assert result["errors"] == 0
    assert result["artifacts"]["source"] == f"sam build ({build_dir})"
    for row in result["functions"]:
        # every handler imported from the build (no error, no network) and was timed
        assert row["errors"] == [] and row["network_attempts"] == [], row["function"]
        assert row["import"]["median_ms"] > 0 and row["floor"]["median_ms"] > 0
        assert row["without_bytecode"]["median_ms"] > 0
        # the built code of the function (its handler module, not the repo's source tree)
        assert row["artifact"]["code_bytes"] > 0
    # the bench is back to its default runtime after a --built run
    assert bench_coldstart.RUNTIME.build is None
