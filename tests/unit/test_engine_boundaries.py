"""Sibling engines (queue, routers, tiering, watch) and the surfaces use only the log engine's
public methods: no `log._x` / `engine._x` reach into its privates (import-linter checks the
module layering; this checks attribute access, which it cannot see)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "layers" / "headwater" / "headwater"
HOLDERS = {"log", "engine", "_log", "_engine"}  # how other modules hold the LogEngine
# LogEngine's parts (engine/core.py, topics.py, append.py, ...): public attributes of the
# façade, but only log.py itself reaches through them.
PARTS = {"core", "topics", "scan", "upkeep_trigger", "appender", "reader", "ranges", "deletes"}


def _private_reaches(text: str, where: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(text, where)):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr not in PARTS and (not node.attr.startswith("_") or node.attr.startswith("__")):
            continue
        holder = node.value
        name = (
            holder.attr
            if isinstance(holder, ast.Attribute)
            else holder.id
            if isinstance(holder, ast.Name)
            else None
        )
        if name in HOLDERS:
            out.append(f"{where}:{node.lineno}: {name}.{node.attr}")
    return out


MODULES = sorted(p for p in PKG.rglob("*.py") if p.name != "log.py" or p.parent.name != "engine")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_module_reaches_into_the_log_engines_privates(path: Path) -> None:
    assert _private_reaches(path.read_text(), str(path.relative_to(PKG))) == []


def test_the_check_sees_a_private_reach() -> None:
    text = (PKG / "engine" / "queue.py").read_text()
    assert _private_reaches(text, "queue.py") == []
    probe = (
        text
        + "\n\ndef _x(self, engine):\n"
        + "    return self.log._io, engine._pool, self.log.run_io, self.log.core.heads\n"
    )
    found = _private_reaches(probe, "queue.py")
    assert [f.rsplit(" ", 1)[1] for f in found] == ["log._io", "engine._pool", "log.core"]
