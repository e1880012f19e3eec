"""No module in the Lambda layer is over 600 lines unless its docstring says why it must be one
piece (issue 43): a module that size is a sign of two concerns in one file, and a newcomer
should find the reason written where the module starts."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "layers" / "headwater" / "headwater"
MAX_LINES = 600
# the phrase a module's docstring uses to say why it is one piece (and what follows it)
ONE_PIECE = "One piece on purpose"

pytestmark = pytest.mark.infra


def oversized(package: Path, max_lines: int = MAX_LINES) -> list[str]:
    """Modules of `package` over `max_lines` whose docstring does not say why they are one
    piece, as 'path (lines)'."""
    found = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines <= max_lines:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if ONE_PIECE not in doc:
            found.append(f"{path.relative_to(package.parent)} ({lines})")
    return found


def test_every_module_is_small_or_says_why_it_is_one_piece() -> None:
    assert oversized(PACKAGE) == []


def test_the_check_finds_a_long_module_without_a_reason(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "".join(f"x{i} = {i}\n" for i in range(MAX_LINES))
    (pkg / "long.py").write_text('"""A long module."""\n' + body)
    (pkg / "reasoned.py").write_text(f'"""A long module.\n\n{ONE_PIECE}: one table."""\n' + body)
    (pkg / "short.py").write_text('"""Short."""\nx = 1\n')
    assert oversized(pkg) == [f"pkg/long.py ({MAX_LINES + 1})"]
