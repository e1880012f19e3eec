"""Test tiers come from the folder (GUIDE §3): a test under tests/<tier>/ gets the <tier>
marker, so `-m unit`, `-m "unit or api"` (make test-fast) and the rest select exactly the
folders. A test outside a tier folder, or one marked with another folder's tier, fails
collection: nothing is silently left out of a tier run."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePath

TIERS = ("unit", "adapters", "api", "e2e", "glue", "infra")


def tier_of(path: PurePath, tests_dir: PurePath) -> str | None:
    """The tier of a test file: the first folder under tests/ (None: not a tier folder)."""
    try:
        parts = path.relative_to(tests_dir).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def problem(nodeid: str, path: PurePath, tests_dir: PurePath, markers: Iterable[str]) -> str | None:
    """Why this test cannot be collected (None: it can; its tier is tier_of(path))."""
    tier = tier_of(path, tests_dir)
    if tier is None:
        return f"{nodeid}: not under a tier folder (tests/{{{','.join(TIERS)}}}/)"
    other = sorted(set(markers) & set(TIERS) - {tier})
    if other:
        return f"{nodeid}: lives in tests/{tier}/ but is marked {', '.join(other)}; move it"
    return None
