"""The engine's API (headwater.engine): every name it declares resolves to the object its
module defines, lazily (importing the package loads no engine module), and nothing else is
reachable through it."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import headwater.engine as engine

pytestmark = pytest.mark.unit


def test_every_declared_name_resolves_to_its_module_object() -> None:
    assert sorted(engine.__all__) == sorted(engine._WHERE)
    for name in engine.__all__:
        module = importlib.import_module(f"headwater.engine.{engine._WHERE[name]}")
        assert getattr(engine, name) is getattr(module, name), name


def test_an_undeclared_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        engine.Appender  # noqa: B018 (a part of LogEngine, not the API)


def test_importing_the_package_loads_no_engine_module() -> None:
    code = (
        "import sys, headwater.engine as e; "
        "print(sorted(m for m in sys.modules if m.startswith('headwater.engine.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    code = (
        "import sys; from headwater.engine import Quotas; "
        "print('headwater.engine.watch' in sys.modules, 'headwater.engine.quotas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False True"
