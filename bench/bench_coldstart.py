"""Cold start of every Lambda function in template.yaml, against the bare-import floor.

python -m bench.bench_coldstart [--runs N] [--quick] [--out PATH] [--built [BUILD_DIR]]

For each AWS::Serverless::Function (its CodeUri and Handler), N fresh interpreters import
the handler module the way the Lambda runtime would: cwd and PYTHONPATH = the CodeUri
directory then the layer (/var/task:/opt/python), the env a Lambda would have (reserved
AWS_* variables, fake credentials, the function's Environment from the template with
parameter defaults). StreamFunction runs `python -m uvicorn --factory` under the Lambda Web
Adapter (run.sh): its entry is uvicorn's CLI module, the --http protocol class and the
factory call. Each child times the import with perf_counter and its CPU with getrusage, and
replaces socket.connect/getaddrinfo with a guard that records and refuses any attempt
(importing must not touch the network: an attempt counts as an error).

--built measures what ships instead: python3.13 (the Lambda runtime) with -S over a `sam
build` directory (made now in a temporary directory unless one is given): each function's
built code and the built layer, bytecode included, and nothing else importable. Its results
go to latest-coldstart-built.json.

In the same run, interleaved, a fresh interpreter does the imports the function inherently
needs (the floor, FLOORS: per function kind, printed) and one runs `python -c pass` (the
interpreter start). ratio = import median / floor median; target <= 1.3x.

INIT billing: since 2025-08-01 Lambda bills the INIT phase of on-demand ZIP functions on
managed runtimes like INVOKE (INIT_BILLING). Estimated INIT ms = interpreter start + import
(median; this machine, Python of .venv; the Lambda runtime's own bootstrap, the extensions
and the Web Adapter's readiness probe are not in it) priced at the function's MemorySize
and PRICES["lambda_gb_second"] per million cold starts.

One extra `python -X importtime` run per function (not with --quick) lists the top modules
by cumulative import time and the top packages by self time: what to make lazy.

Artifact sizes: from .aws-sam/build when it exists; otherwise the layer is computed from its
requirements file (the dists the sam build would install, with their dependencies, sized
from the files importlib.metadata lists in .venv, without *.pyc) plus the headwater package
as sam build copies it (without __pycache__ / *.egg-info), and each function's CodeUri.
Test-only and emulator-only contents of the layer are flagged with their size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from bench.harness import PRICES, machine_info, median, percentile, result_header, write_results

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "template.yaml"
OUT = REPO / "bench" / "results" / "latest-coldstart.json"
OUT_BUILT = REPO / "bench" / "results" / "latest-coldstart-built.json"
TARGET_RATIO = 1.3
NO_BYTECODE_RUNS = 3  # runs of the import without bytecode (it only shows what .pyc saves)
STACK = "headwater-bench"
REGION = "us-east-1"
LAMBDA_RUNTIME_PY = "3.13"  # template.yaml's Runtime (python3.13)

INIT_BILLING = {
    "source_url": "https://aws.amazon.com/blogs/compute/aws-lambda-standardizes-billing-for-init-phase/",
    "effective": "2025-08-01",
    "summary": "From 2025-08-01 the INIT phase of on-demand invocations of ZIP-packaged "
    "functions on managed runtimes is billed like INVOKE (duration x memory at the GB-s "
    "price); before, only custom runtimes, container images, provisioned concurrency and "
    "SnapStart billed it.",
}

# The imports a function inherently needs, by kind; the cold-start floor.
FLOORS: dict[str, tuple[str, str]] = {
    "http-mangum": (
        "import fastapi, mangum, boto3",
        "an HTTP function: the web framework, its Lambda adapter and the AWS SDK",
    ),
    "http-uvicorn": (
        "import fastapi, uvicorn.main, boto3",
        "an HTTP function served by `python -m uvicorn` (the Lambda Web Adapter): the web "
        "framework, uvicorn's CLI and the AWS SDK",
    ),
    "background": (
        "import boto3, aws_lambda_powertools",
        "a non-HTTP function: the AWS SDK and Powertools",
    ),
    "batch-consumer": (
        "import boto3, aws_lambda_powertools\n"
        "from aws_lambda_powertools.utilities.batch import BatchProcessor",
        "a function fed by an event source mapping (DynamoDB stream): the AWS SDK, Powertools "
        "and its batch processor (partial batch failures)",
    ),
}

# Top-level packages a Lambda handler should not import at INIT (or at all).
WATCH_MODULES = ("numpy", "shapely", "pyspark", "moto", "pytest", "localstack", "werkzeug")
TEST_ONLY_DISTS = {
    "moto",
    "localstack",
    "localstack-client",
    "pytest",
    "hypothesis",
    "responses",
    "werkzeug",
    "docker",
    "coverage",
    "freezegun",
    "pyspark",
}
DEV_IMPORT = re.compile(
    r"^\s*(?:import|from)\s+(moto|pytest|localstack|localstack_client|hypothesis)\b", re.M
)

# Runs in each child: a network guard, then the timed entry statement.
CHILD = r"""
import json, resource, socket, sys, time
_attempts = []
def _refuse(what):
    def guard(*args, **kwargs):
        _attempts.append(what + " " + repr(args[1:] if what == "connect" else args[:2]))
        raise OSError(101, "bench_coldstart: network blocked during import")
    return guard
socket.socket.connect = _refuse("connect")
socket.socket.connect_ex = _refuse("connect")
socket.getaddrinfo = _refuse("getaddrinfo")
socket.create_connection = _refuse("create_connection")
_ru = resource.getrusage(resource.RUSAGE_SELF)
_t = time.perf_counter()
_error = None
try:
    exec(compile(sys.argv[1], "<entry>", "exec"), {"__name__": "__entry__"})
except BaseException as exc:
    _error = f"{type(exc).__name__}: {exc}"
_wall = time.perf_counter() - _t
_ru1 = resource.getrusage(resource.RUSAGE_SELF)
_tops = {m.split(".")[0] for m in list(sys.modules)}
_dev = sorted(m for m in list(sys.modules) if (m + ".").startswith("headwater.dev."))
print("\n@@COLDSTART@@" + json.dumps({
    "import_ms": _wall * 1000,
    "cpu_ms": (_ru1.ru_utime + _ru1.ru_stime - _ru.ru_utime - _ru.ru_stime) * 1000,
    "process_cpu_ms": (_ru1.ru_utime + _ru1.ru_stime) * 1000,
    "maxrss_mb": _ru1.ru_maxrss / 1024,
    "modules": len(sys.modules),
    "watched": sorted(_tops & set(sys.argv[2].split(","))) + _dev,
    "network_attempts": _attempts,
    "error": _error,
}), flush=True)
"""


# --- template -----------------------------------------------------------------------------
class _Tag:
    def __init__(self, tag: str, value: Any) -> None:
        self.tag, self.value = tag, value


class _CfnLoader(yaml.SafeLoader):
    pass


def _construct(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> _Tag:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return _Tag(suffix, value)


_CfnLoader.add_multi_constructor("!", _construct)


def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    return yaml.load(path.read_text(), Loader=_CfnLoader)  # a SafeLoader subclass


def _resolve(value: Any, tpl: dict[str, Any]) -> str:
    """A template value as a string, intrinsics resolved with parameter defaults and
    placeholder names for resources (good enough for env vars read at import)."""
    params = tpl.get("Parameters", {})
    pseudo = {"AWS::StackName": STACK, "AWS::Region": REGION, "AWS::AccountId": "123456789012"}

    def ref(name: str) -> str:
        if name in pseudo:
            return pseudo[name]
        if name in params:
            return str(params[name].get("Default", ""))
        return f"{STACK}-{name.lower()}"

    if isinstance(value, _Tag):
        if value.tag == "Ref":
            return ref(str(value.value))
        if value.tag == "If":
            cond, yes, no = value.value
            return _resolve(yes if _condition(tpl["Conditions"][cond], tpl) else no, tpl)
        if value.tag == "Sub":
            text = value.value if isinstance(value.value, str) else value.value[0]
            return re.sub(r"\$\{([^}.]+)(\.[^}]+)?\}", lambda m: ref(m.group(1)), text)
        return f"{STACK}-{value.tag.lower()}"
    return str(value)


def _condition(value: Any, tpl: dict[str, Any]) -> bool:
    """A template condition at the parameters' defaults (Equals, Not, Or, And, Condition)."""
    if isinstance(value, _Tag):
        if value.tag == "Equals":
            a, b = value.value
            return _resolve(a, tpl) == _resolve(b, tpl)
        if value.tag == "Not":
            return not _condition(value.value[0], tpl)
        if value.tag == "Or":
            return any(_condition(v, tpl) for v in value.value)
        if value.tag == "And":
            return all(_condition(v, tpl) for v in value.value)
        if value.tag == "Condition":
            return _condition(tpl["Conditions"][value.value], tpl)
    raise ValueError(f"a condition this benchmark cannot evaluate: {value!r}")


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    code_uri: str
    handler: str
    kind: str
    entry: str  # the statement the child times
    memory_mb: int
    env: dict[str, str]


def _uvicorn_entry(run_sh: Path) -> str:
    text = run_sh.read_text()
    factory = re.search(r"--factory\s+([\w.]+):(\w+)", text)
    http = re.search(r"--http\s+([\w.]+):(\w+)", text)
    if "uvicorn" not in text or factory is None:
        raise ValueError(f"{run_sh}: no `python -m uvicorn --factory module:attr` to measure")
    lines = ["import uvicorn.main"]  # what `python -m uvicorn` runs
    if http:
        lines.append(f"from {http.group(1)} import {http.group(2)}")
    lines.append(f"from {factory.group(1)} import {factory.group(2)}")
    lines.append(f"{factory.group(2)}()")  # --factory: uvicorn calls it before serving
    return "\n".join(lines)


def functions_from_template(tpl: dict[str, Any]) -> list[FunctionSpec]:
    glob = tpl.get("Globals", {}).get("Function", {})
    global_env = glob.get("Environment", {}).get("Variables", {})
    resources = tpl.get("Resources", {})
    mapped = {  # functions fed by an event source mapping (a stream or a queue)
        _resolve(res.get("Properties", {}).get("FunctionName"), tpl)
        for res in resources.values()
        if res.get("Type") == "AWS::Lambda::EventSourceMapping"
    }
    out: list[FunctionSpec] = []
    for name, res in resources.items():
        if res.get("Type") != "AWS::Serverless::Function":
            continue
        props = res.get("Properties", {})
        code_uri = str(props["CodeUri"])
        handler = str(props["Handler"])
        memory = int(props.get("MemorySize", glob.get("MemorySize", 128)))
        variables = {**global_env, **props.get("Environment", {}).get("Variables", {})}
        env = {k: _resolve(v, tpl) for k, v in variables.items()}
        if handler.endswith(".sh"):
            kind, entry = "http-uvicorn", _uvicorn_entry(REPO / code_uri / handler)
        else:
            module, _, attr = handler.rpartition(".")
            entry = f"import {module}\n{module}.{attr}"
            sam_batch = any(
                e.get("Type") in ("DynamoDB", "Kinesis", "SQS")
                for e in (props.get("Events") or {}).values()
            )
            if "FunctionUrlConfig" in props:
                kind = "http-mangum"
            elif sam_batch or _resolve(_Tag("Ref", name), tpl) in mapped:
                kind = "batch-consumer"
            else:
                kind = "background"
        out.append(FunctionSpec(name, code_uri, handler, kind, entry, memory, env))
    return out


@dataclass(frozen=True)
class Runtime:
    """Where the children run: this interpreter over the repo's sources (the default), or
    the Lambda runtime's Python over what `sam build` made (--built: the function's built
    code and the built layer, bytecode included; -S, so nothing outside them imports)."""

    python: str
    flags: tuple[str, ...] = ()
    build: Path | None = None  # the sam build directory; None: the sources

    def task_root(self, spec: FunctionSpec) -> Path:
        return self.build / spec.name if self.build else REPO / spec.code_uri

    @property
    def layer(self) -> Path:
        return self.build / LAYER / "python" if self.build else REPO / "layers" / "headwater"

    def version(self) -> str:
        out = subprocess.run(
            [self.python, *self.flags, "-c", "import sys; print(sys.version.split()[0])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return out.stdout.strip()


RUNTIME = Runtime(sys.executable)
LAYER = "HeadwaterLayer"  # template.yaml's layer (its built directory under the build dir)


def find_lambda_python() -> str:
    """The Lambda runtime's Python here (LAMBDA_RUNTIME_PY): python3.13 on PATH, or pyenv's
    newest 3.13.x (a bare pyenv shim does not resolve under this project's 3.11 pin)."""
    env = dict(os.environ)
    if shutil.which("pyenv"):
        versions = subprocess.run(
            ["pyenv", "versions", "--bare"], capture_output=True, text=True, check=False
        ).stdout.split()
        # plain CPython 3.13.N only (not 3.13.0t, 3.13-dev, ...), the newest patch release
        pattern = re.compile(re.escape(LAMBDA_RUNTIME_PY) + r"\.(\d+)")
        patches = {int(m.group(1)): v for v in versions if (m := pattern.fullmatch(v))}
        if patches:
            env["PYENV_VERSION"] = patches[max(patches)]
    out = subprocess.run(
        [f"python{LAMBDA_RUNTIME_PY}", "-c", "import sys; print(sys.executable)"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"--built needs python{LAMBDA_RUNTIME_PY} (the Lambda runtime)")
    return out.stdout.strip()


def sam_build(python: str, into: Path) -> Path:
    """`sam build` of template.yaml into `into`, with the runtime's Python on PATH."""
    sam = REPO / ".venv-sam" / "bin" / "sam"
    if not sam.exists():
        raise SystemExit("--built needs the SAM CLI: run `make deps-sam`")
    env = {
        **os.environ,
        "PATH": f"{Path(python).parent}:{os.environ['PATH']}",
        "SAM_CLI_TELEMETRY": "0",
    }
    cmd = [str(sam), "build", "--template", str(TEMPLATE), "--build-dir", str(into)]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"sam build failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return into


def lambda_env(spec: FunctionSpec) -> dict[str, str]:
    task_root = str(RUNTIME.task_root(spec))
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "TZ": ":UTC",
        "LAMBDA_TASK_ROOT": task_root,
        "LAMBDA_RUNTIME_DIR": "/var/runtime",
        "PYTHONPATH": f"{task_root}:{RUNTIME.layer}",
        "AWS_EXECUTION_ENV": f"AWS_Lambda_python{LAMBDA_RUNTIME_PY}",
        "AWS_LAMBDA_FUNCTION_NAME": f"{STACK}-{spec.name}",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{STACK}-{spec.name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "2026/11/25/[$LATEST]bench",
        "AWS_LAMBDA_LOG_FORMAT": "JSON",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "ASIABENCHCOLDSTART00",
        "AWS_SECRET_ACCESS_KEY": "bench-coldstart-fake-secret",
        "AWS_SESSION_TOKEN": "bench-coldstart-fake-token",
        **spec.env,
    }


# --- children -----------------------------------------------------------------------------
def run_child(code: str, env: dict[str, str], cwd: str, *, importtime: bool = False) -> dict:
    argv = [RUNTIME.python, *RUNTIME.flags, *(["-X", "importtime"] if importtime else [])]
    argv += ["-c", CHILD]
    t = time.perf_counter()
    proc = subprocess.run(
        [*argv, code, ",".join(WATCH_MODULES)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    wall_ms = (time.perf_counter() - t) * 1000
    marker = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@COLDSTART@@")]
    if not marker:
        return {"error": f"exit {proc.returncode}: {proc.stderr[-800:]}", "process_ms": wall_ms}
    out: dict[str, Any] = json.loads(marker[-1][len("@@COLDSTART@@") :])
    out["process_ms"] = wall_ms
    if importtime:
        out["importtime"] = parse_importtime(proc.stderr)
    return out


def interpreter_start_ms(env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run([RUNTIME.python, *RUNTIME.flags, "-c", "pass"], env=env, check=True, timeout=60)
    return (time.perf_counter() - t) * 1000


def parse_importtime(stderr: str, top: int = 15) -> dict[str, Any]:
    rows: list[tuple[str, int, int, int]] = []  # module, self us, cumulative us, depth
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+(\d+)\s*\|\s*(\d+)\s*\|( *)(\S+)", line)
        if m:
            depth = (len(m.group(3)) - 1) // 2
            rows.append((m.group(4), int(m.group(1)), int(m.group(2)), depth))
    by_pkg: dict[str, int] = {}
    for mod, self_us, _, _ in rows:
        by_pkg[mod.split(".")[0]] = by_pkg.get(mod.split(".")[0], 0) + self_us
    cumulative = sorted(rows, key=lambda r: -r[2])[:top]
    return {
        "modules": len(rows),
        "top_cumulative": [
            {"module": r[0], "cumulative_ms": round(r[2] / 1000, 1), "depth": r[3]}
            for r in cumulative
        ],
        "top_packages_self": [
            {"package": p, "self_ms": round(us / 1000, 1)}
            for p, us in sorted(by_pkg.items(), key=lambda kv: -kv[1])[:top]
        ],
    }


def _stats(values: list[float]) -> dict[str, Any]:
    return {
        "median_ms": round(median(values), 1),
        "p90_ms": round(percentile(values, 90), 1),
        "runs_ms": [round(v, 1) for v in values],
    }


# --- artifact sizes -----------------------------------------------------------------------
# Subpackages layers/headwater/Makefile leaves out of the built layer (template.yaml's
# HeadwaterLayer builds with BuildMethod makefile; tests/infra/test_sam_build.py checks).
LAYER_BUILD_EXCLUDES = ("dev",)


def _is_shipped_bytecode(p: Path) -> bool:
    """This interpreter's .pyc of a source that exists (the layer's build compiles every
    module for the runtime's Python: about the same size), not an -O variant or a stale one."""
    name = p.name.split(".")
    return (
        p.suffix == ".pyc"
        and p.parent.name == "__pycache__"
        and len(name) == 3
        and name[1] == sys.implementation.cache_tag
        and (p.parent.parent / f"{name[0]}.py").is_file()
    )


def _tree_bytes(
    root: Path, *, shipped: bool = True, bytecode: bool = False, skip: tuple[Path, ...] = ()
) -> int:
    """What ships of a source tree: no egg-info, bytecode only when the build compiles it
    (the layer: layers/headwater/Makefile; a function's code is not compiled)."""
    total = 0
    for p in root.rglob("*"):
        if not p.is_file() or any(s in p.parents for s in skip):
            continue
        if shipped and (
            (
                ("__pycache__" in p.parts or p.suffix == ".pyc")
                and not (bytecode and _is_shipped_bytecode(p))
            )
            or any(part.endswith(".egg-info") for part in p.parts)
        ):
            continue
        total += p.stat().st_size
    return total


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_bytes(dist: metadata.Distribution) -> int:
    total = 0
    for f in dist.files or []:
        if f.parts and f.parts[0] == "..":
            continue  # console scripts outside site-packages
        p = Path(str(dist.locate_file(f)))
        if f.suffix == ".pyc" and not _is_shipped_bytecode(p):
            continue
        if p.is_file():
            total += p.stat().st_size
    return total


def layer_closure(requirements: Path) -> dict[str, dict[str, Any]]:
    """The dists `sam build` would install for the requirements file, resolved from the
    metadata of .venv (markers evaluated for the Lambda runtime's Python)."""
    from packaging.requirements import Requirement

    target = {"python_version": LAMBDA_RUNTIME_PY, "python_full_version": f"{LAMBDA_RUNTIME_PY}.0"}
    lines = [ln.split("#")[0].strip() for ln in requirements.read_text().splitlines()]
    todo = [(Requirement(ln), "requirements.txt") for ln in lines if ln]
    found: dict[str, dict[str, Any]] = {}
    while todo:
        req, parent = todo.pop()
        key = _norm(req.name)
        if key in found:
            found[key]["required_by"].add(parent)
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            found[key] = {"name": req.name, "version": None, "bytes": 0, "required_by": {parent}}
            continue
        found[key] = {
            "name": dist.metadata["Name"],
            "version": dist.version,
            "bytes": _dist_bytes(dist),
            "required_by": {parent},
        }
        for spec in dist.requires or []:
            sub = Requirement(spec)
            extras = ["", *sorted(req.extras)]
            if sub.marker is None or any(
                sub.marker.evaluate({**target, "extra": e}) for e in extras
            ):
                todo.append((sub, dist.metadata["Name"]))
    return found


def artifact_sizes(tpl: dict[str, Any], specs: list[FunctionSpec], build: Path) -> dict[str, Any]:
    layers = {
        name: res["Properties"]
        for name, res in tpl.get("Resources", {}).items()
        if res.get("Type") == "AWS::Serverless::LayerVersion"
    }
    layer_name, layer_props = next(iter(layers.items()))
    metadata = tpl["Resources"][layer_name].get("Metadata") or {}
    excludes = LAYER_BUILD_EXCLUDES if metadata.get("BuildMethod") == "makefile" else ()
    content = REPO / str(layer_props["ContentUri"])
    functions = {s.name: _tree_bytes(REPO / s.code_uri) for s in specs}
    out: dict[str, Any] = {"layer": layer_name, "content_uri": str(layer_props["ContentUri"])}
    if (build / layer_name).is_dir():
        out["source"] = f"sam build ({build})"
        out["total_bytes"] = _tree_bytes(build / layer_name, shipped=False)
        functions = {
            s.name: _tree_bytes(build / s.name, shipped=False) if (build / s.name).is_dir() else 0
            for s in specs
        }
    requirements = content / "requirements.txt"
    dists = layer_closure(requirements)
    package_dirs = [p for p in content.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    own = {
        p.name: _tree_bytes(p, bytecode=True, skip=tuple(p / x for x in excludes))
        for p in package_dirs
    }
    out["left_out_by_build"] = [
        f"{p.name}/{x}" for p in package_dirs for x in excludes if (p / x).is_dir()
    ]
    computed = sum(d["bytes"] for d in dists.values()) + sum(own.values())
    out.setdefault(
        "source",
        "computed: requirements closure in .venv + package source, with this interpreter's "
        "bytecode of both as the estimate of what the build compiles",
    )
    out.setdefault("total_bytes", computed)
    out["computed_bytes"] = computed
    out["requirements_file"] = str(requirements.relative_to(REPO))
    out["packages"] = own
    rows = sorted(dists.values(), key=lambda d: -d["bytes"])
    out["dists"] = [{**d, "required_by": sorted(d["required_by"])} for d in rows]
    out["largest"] = [
        {"name": d["name"], "version": d["version"], "bytes": d["bytes"]} for d in rows[:10]
    ]
    flagged: list[dict[str, Any]] = [
        {"what": f"dist {d['name']}", "bytes": d["bytes"], "required_by": sorted(d["required_by"])}
        for d in rows
        if _norm(d["name"]) in TEST_ONLY_DISTS
    ]
    for pkg in package_dirs:
        dev = pkg / "dev"
        if dev.is_dir() and "dev" not in excludes:
            for f in sorted(dev.glob("*.py")):
                flagged.append(
                    {
                        "what": str(f.relative_to(content)),
                        "bytes": f.stat().st_size,
                        "why": "emulator / dev-server code (headwater.dev)",
                    }
                )
        for f in sorted(pkg.rglob("*.py")):
            if dev in f.parents:
                continue
            hits = sorted(set(DEV_IMPORT.findall(f.read_text(errors="replace"))))
            if hits:
                flagged.append(
                    {
                        "what": str(f.relative_to(content)),
                        "bytes": f.stat().st_size,
                        "why": f"imports test/emulator packages: {', '.join(hits)}",
                    }
                )
    out["test_or_emulator_only"] = flagged
    out["test_or_emulator_only_bytes"] = sum(f["bytes"] for f in flagged)
    cache = REPO / ".aws-sam" / "deps"
    if cache.is_dir():
        out["sam_deps_cache_bytes"] = {
            str(d.relative_to(REPO)): _tree_bytes(d, shipped=False)
            for d in cache.iterdir()
            if d.is_dir()
        }
    out["functions_code_bytes"] = functions
    return out


# --- main ---------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="fresh interpreters per measurement")
    ap.add_argument("--quick", action="store_true", help="1 run each, no importtime pass")
    ap.add_argument(
        "--out", type=Path, default=None, help=f"default {OUT.name} (or {OUT_BUILT.name})"
    )
    ap.add_argument(
        "--built",
        nargs="?",
        const="auto",
        metavar="BUILD_DIR",
        help=f"measure what ships: python{LAMBDA_RUNTIME_PY} over a `sam build` directory "
        "(built now into a temporary directory when none is given)",
    )
    args = ap.parse_args(argv)
    runs = 1 if args.quick else max(1, args.runs)
    global RUNTIME
    with contextlib.ExitStack() as stack:
        if args.built:
            python = find_lambda_python()
            build = (
                sam_build(python, Path(stack.enter_context(tempfile.TemporaryDirectory())))
                if args.built == "auto"
                else Path(args.built).resolve()
            )
            RUNTIME = Runtime(python, ("-S",), build)
        else:
            RUNTIME = Runtime(sys.executable)
        try:
            return _main(args, runs, argv if argv is not None else sys.argv[1:])
        finally:
            RUNTIME = Runtime(sys.executable)


def _main(args: argparse.Namespace, runs: int, argv: list[str]) -> dict[str, Any]:
    out_path: Path = args.out or (OUT_BUILT if RUNTIME.build else OUT)

    tpl = load_template()
    specs = functions_from_template(tpl)
    floors = {s.name: FLOORS[s.kind] for s in specs}
    print(f"cold start: {len(specs)} functions from template.yaml, {runs} run(s) each")
    runtime = {
        "python": RUNTIME.version(),
        "artifacts": "sam build (functions and layer as built, -S)" if RUNTIME.build else "sources",
    }
    print(f"  python {runtime['python']} over {runtime['artifacts']} (Lambda: {LAMBDA_RUNTIME_PY})")
    for s in specs:
        print(f"  floor {s.name}: {floors[s.name][0].replace(chr(10), '; ')}  ({s.kind})")

    entry_runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in specs}
    floor_runs: dict[str, list[dict[str, Any]]] = {code: [] for code, _ in floors.values()}
    start_ms: list[float] = []
    base_env = lambda_env(specs[0])
    for i in range(runs):
        start_ms.append(interpreter_start_ms(base_env))
        done: set[str] = set()
        for s in specs:  # interleaved, so a noisy moment hits floor and import alike
            env = lambda_env(s)
            code = floors[s.name][0]
            if code not in done:
                floor_runs[code].append(run_child(code, env, str(RUNTIME.task_root(s))))
                done.add(code)
            entry_runs[s.name].append(run_child(s.entry, env, str(RUNTIME.task_root(s))))
        print(f"  run {i + 1}/{runs} done")

    # The same imports with no bytecode to read (an empty cache prefix) and none written: what
    # every cold start would pay if the layer shipped sources only (/opt is read-only).
    nobc_runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in specs}
    with tempfile.TemporaryDirectory(prefix="coldstart-nopyc-") as empty:
        for _ in range(min(runs, NO_BYTECODE_RUNS)):
            for s in specs:
                env = {**lambda_env(s), "PYTHONDONTWRITEBYTECODE": "1"}
                env["PYTHONPYCACHEPREFIX"] = empty
                nobc_runs[s.name].append(run_child(s.entry, env, str(RUNTIME.task_root(s))))

    importtimes: dict[str, Any] = {}
    if not args.quick:
        for s in specs:
            r = run_child(s.entry, lambda_env(s), str(RUNTIME.task_root(s)), importtime=True)
            importtimes[s.name] = r.get("importtime")

    sizes = artifact_sizes(tpl, specs, RUNTIME.build or REPO / ".aws-sam" / "build")
    layer_bytes = int(sizes["total_bytes"])
    start = _stats(start_ms)
    gbs = float(PRICES["lambda_gb_second"])
    rows: list[dict[str, Any]] = []
    errors = 0
    for s in specs:
        ok = [r for r in entry_runs[s.name] if not r.get("error")]
        errs = [r["error"] for r in entry_runs[s.name] if r.get("error")]
        attempts = sorted({a for r in entry_runs[s.name] for a in r.get("network_attempts", [])})
        code, why = floors[s.name]
        fl = [r["import_ms"] for r in floor_runs[code] if not r.get("error")]
        imp = [r["import_ms"] for r in ok]
        ratio = median(imp) / median(fl) if imp and fl else float("nan")
        nobc = [r["import_ms"] for r in nobc_runs[s.name] if not r.get("error")]
        init_ms = start["median_ms"] + median(imp) if imp else float("nan")
        errors += len(errs) + (1 if attempts else 0)
        code_bytes = int(sizes["functions_code_bytes"][s.name])
        rows.append(
            {
                "function": s.name,
                "code_uri": s.code_uri,
                "handler": s.handler,
                "kind": s.kind,
                "entry": s.entry,
                "memory_mb": s.memory_mb,
                "floor": {"code": code, "why": why, **_stats(fl)},
                "import": {
                    **_stats(imp),
                    "cpu_ms_median": round(median([r["cpu_ms"] for r in ok]), 1),
                    "process_ms_median": round(median([r["process_ms"] for r in ok]), 1),
                    "maxrss_mb_median": round(median([r["maxrss_mb"] for r in ok]), 1),
                    "modules": ok[0]["modules"] if ok else None,
                },
                "ratio": round(ratio, 2),
                "target": {"max_ratio": TARGET_RATIO, "met": bool(ratio <= TARGET_RATIO)},
                "est_init_ms": round(init_ms, 1),
                "without_bytecode": {
                    **_stats(nobc),
                    "est_init_ms": round(start["median_ms"] + median(nobc), 1) if nobc else None,
                    "why": "the same import with no .pyc to read and none written, as a layer "
                    "that ships sources only would run on Lambda's read-only /opt; the layer's "
                    "build compiles every module (layers/headwater/Makefile)",
                },
                "usd_per_million_cold_starts": round(
                    init_ms / 1000 * s.memory_mb / 1024 * gbs * 1e6, 2
                ),
                "watched_modules_loaded": ok[0]["watched"] if ok else [],
                "network_attempts": attempts,
                "errors": errs,
                "importtime": importtimes.get(s.name),
                "artifact": {
                    "code_bytes": code_bytes,
                    "layer_bytes": layer_bytes,
                    "total_bytes": code_bytes + layer_bytes,
                    "note": "plus the Lambda Web Adapter layer (AWS-published, not counted)"
                    if s.kind == "http-uvicorn"
                    else "",
                },
            }
        )

    result: dict[str, Any] = {
        # what ran, when, on which commit and machine (docs/benchmarks.md quotes them)
        **result_header("coldstart", argv, machine_info()),
        "params": {
            "runs": runs,
            "quick": args.quick,
            "lambda_runtime_python": LAMBDA_RUNTIME_PY,
            "runtime": runtime,
        },
        "method": (
            "median/p90 over fresh interpreters of the wall time of the import (perf_counter in "
            "the child), floor and import interleaved; est. INIT = `python -c pass` median + "
            "import median; $ = INIT s x MemorySize GB x GB-s price x 1e6"
        ),
        "init_billing": {**INIT_BILLING, "lambda_gb_second": gbs, "prices_as_of": PRICES["as_of"]},
        "interpreter_start": start,
        "functions": rows,
        "artifacts": sizes,
        "errors": errors,
        "targets_missed": [r["function"] for r in rows if not r["target"]["met"]],
    }
    print_report(result)
    write_results(out_path, result)
    return result


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f}"


def print_report(result: dict[str, Any]) -> None:
    m = result["machine"]
    print(f"\nmachine: {m['cpu_model']}, {m['cores']} cores, load {m.get('loadavg_1m')}")
    print(
        f"interpreter start (python -c pass): {result['interpreter_start']['median_ms']:.1f} ms "
        f"median; INIT billing: {result['init_billing']['source_url']}"
    )
    head = (
        f"{'function':<18} {'floor ms':>9} {'import ms med/p90':>18} {'ratio':>6} {'target':>12}"
        f" {'est. INIT ms':>12} {'$/M cold':>9} {'artifact MB':>11} {'INIT no .pyc':>12}"
    )
    print("\n" + head + "\n" + "-" * len(head))
    for r in result["functions"]:
        imp = r["import"]
        verdict = "met" if r["target"]["met"] else "MISSED"
        print(
            f"{r['function']:<18} {r['floor']['median_ms']:>9.0f} "
            f"{imp['median_ms']:>8.0f} / {imp['p90_ms']:<7.0f} {r['ratio']:>5.2f}x "
            f"{'<=1.3x ' + verdict:>12} {r['est_init_ms']:>12.0f} "
            f"{r['usd_per_million_cold_starts']:>9.2f} {_mb(r['artifact']['total_bytes']):>11} "
            f"{r['without_bytecode']['est_init_ms'] or float('nan'):>12.0f}"
        )
    print(
        "INIT no .pyc: the same import with no bytecode to read (a layer shipping sources only, "
        "on Lambda's read-only /opt); the built layer compiles every module"
    )
    print("\nfloors:")
    for r in result["functions"]:
        print(f"  {r['function']:<18} {r['floor']['code'].replace(chr(10), '; ')}")
    for r in result["functions"]:
        if r["watched_modules_loaded"] or r["network_attempts"] or r["errors"]:
            print(
                f"  {r['function']}: loads {', '.join(r['watched_modules_loaded']) or '-'}; "
                f"network attempts {r['network_attempts'] or 'none'}; errors {r['errors'] or 0}"
            )
    for r in result["functions"]:
        it = r.get("importtime")
        if not it:
            continue
        print(
            f"\n{r['function']}: top modules by cumulative import time ({it['modules']} imported)"
        )
        for row in it["top_cumulative"]:
            print(f"  {row['cumulative_ms']:>8.1f} ms  {'  ' * row['depth']}{row['module']}")
        pk = ", ".join(f"{p['package']} {p['self_ms']:.0f}" for p in it["top_packages_self"])
        print(f"  by package (self ms): {pk}")
    a = result["artifacts"]
    print(
        f"\nlayer {a['layer']} ({a['source']}): {_mb(a['total_bytes'])} MB unzipped; packages "
        + ", ".join(f"{k} {_mb(v)} MB" for k, v in a["packages"].items())
    )
    for d in a["largest"]:
        print(f"  {_mb(d['bytes']):>6} MB  {d['name']} {d['version']}")
    print(f"test/emulator-only in the layer: {a['test_or_emulator_only_bytes'] / 1e3:.1f} kB")
    for f in a["test_or_emulator_only"]:
        print(f"  {f['bytes'] / 1e3:>8.1f} kB  {f['what']}  {f.get('why', '')}")
    for where, n in a.get("sam_deps_cache_bytes", {}).items():
        print(f"  (sam build dependency cache {where}: {_mb(n)} MB)")
    print(
        f"\ntargets missed: {', '.join(result['targets_missed']) or 'none'}; "
        f"errors: {result['errors']}"
    )


if __name__ == "__main__":
    res = main()
    sys.exit(1 if res["errors"] else 0)
