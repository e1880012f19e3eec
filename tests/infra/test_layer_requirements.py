"""The layer installs the same pins as /requirements.txt (minus dev-only tools), and the
function code directories add nothing of their own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
LAYER_SRC = REPO / "layers" / "headwater"

DEV_ONLY = {"localstack-client"}


def _pins(text: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)==([^\s;]+)", line)
        assert m, f"unpinned requirement: {line!r}"
        pins[m.group(1).lower()] = m.group(2)
    return pins


def test_layer_pins_match_runtime_requirements() -> None:
    runtime = _pins((REPO / "requirements.txt").read_text())
    layer = _pins((LAYER_SRC / "requirements.txt").read_text())
    assert layer == {k: v for k, v in runtime.items() if k not in DEV_ONLY}


@pytest.mark.parametrize("function", ["api", "stream"])
def test_functions_take_dependencies_from_the_layer(function: str) -> None:
    text = (REPO / "functions" / function / "requirements.txt").read_text()
    assert _pins(text) == {}


def test_stream_entry_is_executable() -> None:
    run_sh = REPO / "functions" / "stream" / "run.sh"
    assert run_sh.stat().st_mode & 0o111, "run.sh must be executable (Lambda execs it)"
