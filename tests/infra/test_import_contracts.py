"""The layering (http -> ws -> surfaces and v0 -> access -> engine -> engine.ports <- storage)
holds: `lint-imports` (import-linter, .importlinter) keeps every contract, and breaks one
when a module reaches past its layer or into a façade's parts, when the Python client
(headwater_client) reaches into headwater past the pure flags modules, when one of those
reaches a server part or a package the client extra lacks, or when headwater imports the
client."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"
# the two root packages of .importlinter
PACKAGES = {
    "headwater": REPO / "layers" / "headwater" / "headwater",
    "headwater_client": REPO / "clients" / "python" / "headwater_client",
}


def _lint(*roots: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(r) for r in roots)}
    return subprocess.run(
        [str(LINT), "--no-cache", "--config", str(REPO / ".importlinter")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_import_contract_is_kept() -> None:
    out = _lint(*(path.parent for path in PACKAGES.values()))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def _copy_with(tmp_path: Path, module: str, line: str, package: str = "headwater") -> Path:
    """A copy of both packages with `line` appended to `module` (a path under `package`/)."""
    for name, path in PACKAGES.items():
        shutil.copytree(path, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / package / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    return tmp_path


def test_a_storage_adapter_importing_the_engine_breaks_a_contract(tmp_path: Path) -> None:
    out = _lint(_copy_with(tmp_path, "storage/blobs.py", "from headwater.engine import log"))
    assert out.returncode != 0
    assert "headwater.storage.blobs -> headwater.engine.log" in out.stdout, out.stdout[-3000:]


def test_a_sibling_engine_importing_a_part_of_the_log_engine_breaks_a_contract(
    tmp_path: Path,
) -> None:
    out = _lint(_copy_with(tmp_path, "engine/queue.py", "from headwater.engine import append"))
    assert out.returncode != 0
    assert "headwater.engine.queue -> headwater.engine.append" in out.stdout, out.stdout[-3000:]


def test_the_sealers_upkeep_importing_the_log_engine_breaks_a_contract(tmp_path: Path) -> None:
    # (what keeps the sealer's cold start to the engine's core: engines.Core)
    out = _lint(_copy_with(tmp_path, "engine/tiering.py", "from headwater.engine import log"))
    assert out.returncode != 0
    assert "headwater.engine.tiering -> headwater.engine.log" in out.stdout, out.stdout[-3000:]


def test_a_durable_query_module_reaching_a_part_breaks_a_contract(tmp_path: Path) -> None:
    # search, aggregate, inspect and touch use DurableStreams' public methods only
    out = _lint(_copy_with(tmp_path, "durable/search.py", "from headwater.durable import reads"))
    assert out.returncode != 0
    assert "headwater.durable.search -> headwater.durable.reads" in out.stdout, out.stdout[-3000:]


def test_the_composition_root_importing_http_breaks_a_contract(tmp_path: Path) -> None:
    out = _lint(_copy_with(tmp_path, "services.py", "from headwater.http import limits"))
    assert out.returncode != 0
    assert "headwater.services -> headwater.http.limits" in out.stdout, out.stdout[-3000:]


def test_the_websocket_wing_importing_http_breaks_a_contract(tmp_path: Path) -> None:
    out = _lint(_copy_with(tmp_path, "ws/gateway.py", "from headwater.http import sse"))
    assert out.returncode != 0
    assert "headwater.ws.gateway -> headwater.http.sse" in out.stdout, out.stdout[-3000:]


def test_a_surface_importing_an_engine_module_breaks_a_contract(tmp_path: Path) -> None:
    # surfaces use headwater.engine's API (engine/__init__.py) and engine.ports only
    out = _lint(_copy_with(tmp_path, "notify/store.py", "from headwater.engine import log"))
    assert out.returncode != 0
    assert "headwater.notify.store -> headwater.engine.log" in out.stdout, out.stdout[-3000:]


def test_the_client_importing_more_of_headwater_breaks_a_contract(tmp_path: Path) -> None:
    root = _copy_with(tmp_path, "cli.py", "from headwater.flags import store", "headwater_client")
    out = _lint(root)
    assert out.returncode != 0
    assert "headwater_client.cli -> headwater.flags.store" in out.stdout, out.stdout[-3000:]


def test_a_shared_flags_module_reaching_orjson_breaks_a_contract(tmp_path: Path) -> None:
    # (the client extra installs no orjson: jsondepth, not jsoncodec, is what manifest uses)
    out = _lint(_copy_with(tmp_path, "flags/manifest.py", "from headwater import jsoncodec"))
    assert out.returncode != 0
    assert "headwater.flags.manifest -> headwater.jsoncodec" in out.stdout, out.stdout[-3000:]
    assert "headwater.jsoncodec -> orjson" in out.stdout, out.stdout[-3000:]


def test_the_layer_importing_the_client_breaks_a_contract(tmp_path: Path) -> None:
    out = _lint(_copy_with(tmp_path, "flags/live.py", "import headwater_client"))
    assert out.returncode != 0
    assert "headwater.flags.live -> headwater_client" in out.stdout, out.stdout[-3000:]


def test_durable_importing_the_search_index_breaks_a_contract(tmp_path: Path) -> None:
    # the index sits on durable (filter, fields, aggregate); durable.inspect types the lexicon
    # runs it reads as a Protocol instead of importing index.runs
    out = _lint(_copy_with(tmp_path, "durable/inspect.py", "from headwater.index import runs"))
    assert out.returncode != 0
    assert "headwater.durable.inspect -> headwater.index.runs" in out.stdout, out.stdout[-3000:]
