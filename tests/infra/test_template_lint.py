"""cfn-lint and `sam validate --lint` accept template.yaml (both run offline)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "template.yaml"

BIN = Path(sys.executable).parent


SAM_VENV_BIN = REPO / ".venv-sam" / "bin"


def _tool(name: str) -> Path:
    # SAM CLI and cfn-lint live in their own venv (.venv-sam, `make deps-sam`): aws-sam-cli
    # pins a boto3 the app does not use. Missing = setup bug: fail, never skip.
    for candidate in (SAM_VENV_BIN / name, BIN / name):
        if candidate.exists():
            return candidate
    found = shutil.which(name)
    assert found, f"{name} not found: run `make deps-sam`"
    return Path(found)


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
