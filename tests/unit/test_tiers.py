"""Tier markers come from the folder (tests/tiers.py, applied by tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path, PurePath

import pytest

from tests import tiers

T = PurePath("/repo/tests")


@pytest.mark.parametrize("tier", tiers.TIERS)
def test_a_test_in_a_tier_folder_gets_that_tier(tier: str) -> None:
    path = T / tier / "test_x.py"
    assert tiers.tier_of(path, T) == tier
    assert tiers.problem("n", path, T, ["parametrize", tier, "serial"]) is None
    assert tiers.tier_of(T / tier / "deeper" / "test_x.py", T) == tier


@pytest.mark.parametrize(
    "path", [T / "test_top.py", T / "faults" / "test_x.py", PurePath("/elsewhere/test_x.py")]
)
def test_a_test_outside_the_tier_folders_is_refused(path: PurePath) -> None:
    assert tiers.tier_of(path, T) is None
    why = tiers.problem("n", path, T, ["unit"])
    assert why is not None and "not under a tier folder" in why


def test_a_test_marked_with_another_folders_tier_is_refused() -> None:
    why = tiers.problem("n", T / "api" / "test_x.py", T, ["api", "e2e"])
    assert why is not None and "marked e2e" in why


def test_collection_fails_for_a_test_outside_the_tiers(tmp_path: Path) -> None:
    """Through pytest itself: a stray test file directly under tests/ stops collection."""
    repo = Path(__file__).resolve().parents[2]
    stray = repo / "tests" / f"test_stray_{tmp_path.name}.py"
    stray.write_text("def test_nothing():\n    assert True\n")
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", str(stray)],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        stray.unlink()
    assert out.returncode != 0
    assert "not under a tier folder" in out.stdout + out.stderr


def test_every_collected_test_has_exactly_its_folders_tier() -> None:
    """`-m unit` collects exactly tests/unit (nothing unmarked is left out)."""
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "unit", "tests/unit"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "deselected" not in out.stdout.splitlines()[-1], out.stdout.splitlines()[-1]
