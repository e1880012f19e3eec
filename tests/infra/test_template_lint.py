"""cfn-lint and `sam validate --lint` accept template.yaml (both run offline)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "template.yaml"

BIN = Path(sys.executable).parent


def _tool(name: str) -> Path:
    # The CLIs come from the project's venv (requirements-dev). Missing = setup bug: fail.
    path = BIN / name
    assert path.exists(), f"{path} not found: install requirements-dev.txt into this venv"
    return path


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0", "SAM_CLI_DISABLE_UPDATE_CHECK": "1"}
    return subprocess.run(
        args, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False
    )


def test_cfn_lint_passes() -> None:
    result = _run([str(_tool("cfn-lint")), "--", str(TEMPLATE)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_sam_validate_lint_passes() -> None:
    result = _run(
        [str(_tool("sam")), "validate", "--lint", "--region", "us-east-1", "-t", str(TEMPLATE)]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout + result.stderr
