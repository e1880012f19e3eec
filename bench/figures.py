"""The figures README.md and docs/*.md quote, rendered from the benchmarks' results files.

A figure on a page is not typed by hand. It sits in a *figures region*: a template, inside an
HTML comment (invisible on the rendered page), names the results file and the value; the
lines after it, up to the closing marker, are what the template renders to:

    <!-- figures v0
    | append, batch 100 | {{ v0.workloads['append-b100'].records_per_s |,.0f }} rec/s |
    Measured {{ v0 |stamp }}.
    -->
    | append, batch 100 | 9,183 rec/s |
    Measured 2026-11-21 on e0ebd37, 2-core AMD EPYC, Python 3.11.7 (`bench/results/...`).
    <!-- /figures -->

    python -m bench.figures            # re-render every region of README.md and docs/*.md
    python -m bench.figures --check    # report every region that differs, and broken rules
    python -m bench.figures --sources  # the results files each page quotes; runs not kept
    python -m bench.figures --archive  # from git: the archive copies and stamps pages need

`tests/unit/test_bench_figures.py` runs the check: a body edited by hand, or a results file
that changed since the page was rendered, fails it.

Sources. The rest of the opening line declares the names a template uses, separated by
spaces: `v0` is `bench/results/latest-v0.json` (`scale_model`: `latest-scale-model.json`), a
name a template uses without declaring it resolves the same way; `old=latest-v0.json@d6fe7ba`
is that file as committed at d6fe7ba (the run a page still quotes after a newer one replaced
the file), read from its byte-for-byte copy `bench/results/archive/latest-v0@d6fe7ba.json`, so
the check needs no git history; `--archive` makes the copies the pages quote with
`git cat-file blob d6fe7ba:bench/results/latest-v0.json` (needs the history), and removes
those no page quotes; `--check` reports a copy missing or not quoted;
`idle=latest-conformance.json#idle_run` takes the date, commit and
machine from that part of the file (a run merged into another's file);
`e72=unrecorded:e72eee1:2026-11-26` is a run whose results file was not kept, so its figures
are written as `{{ e72(1.61) |.2f }}`: the page says so, and `--sources` lists every such
figure to re-measure. `price` is always there: the AWS list prices in bench/harness.py
(`PRICES`) and bench/bench_costs.py (`OTHER_PRICES`), which every cost figure is priced with.
`let` binds a name for the lines after it: `{{ let j1 = scale_model.results.find(...) }}`
alone on a line. `goal(0.30)` writes a target an issue sets, which is not a measurement.

Expressions are Python over those names. A results file reads as nested attributes and
items (`v0.workloads['append-b1'].records_per_s`); a list item is picked by its `name`,
`workload.name`, `design`, `function` or `label` (`['append-b1']`), by position, or with
`.find(design='j', clients=100)`. After `|` comes a format: a Python format spec (`,.0f`,
`.2f`, `.1%`), or `when` (the run's date and commit), `stamp` (date, commit, machine and the
file), `date`, `commit`, `file`. Numbers need a format, so a page shows the precision chosen.

Rules `--check` enforces, besides "every body is what its template renders":
- each source a region uses has `|when` or `|stamp` in the same section (between two
  headings), so every figure carries the date and commit it was measured on;
- a dollar figure (`$` then a digit) appears only in a region's body, and a template writes it
  from a value (`${{ ... }}`), never literally: no cost figure without its source.

Results files written before every benchmark recorded `finished_at` and `git` (bench_coldstart
and bench_costs, until 27912a5) get the date and commit of the commit that wrote them as they
are (`git log -1 -- <file>`; for a file `@rev`, the commit rev's), and say so. The check reads
them from `bench/results/stamps.json` (`{"latest-costs.json": {"date", "commit", "source":
"git log", "blob"}}`, `blob` being git's hash of the bytes stamped), which `--archive` writes
from git: a file with no stamp, or whose bytes are not the ones stamped, fails the check, and
so does a stamp no page uses (its file records its run now).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
# results files as committed at a revision the pages quote (`name=file.json@rev`), byte for
# byte: `<RESULTS>/archive/<stem>@<rev>.json`
ARCHIVE = "archive"
# the date and commit of each results file the pages quote that records no run of its own
STAMPS = "stamps.json"


def pages(repo: Path = REPO) -> list[Path]:
    """The pages whose figures are checked: README.md and docs/*.md."""
    return [repo / "README.md", *sorted((repo / "docs").glob("*.md"))]


class FigureError(Exception):
    """A template that cannot be rendered (an unknown source or value, a bad format)."""


# --- sources ------------------------------------------------------------------------------
@dataclass
class Source:
    """One declared name: a results file (maybe as of a commit), a run not kept, or prices."""

    name: str
    kind: str  # "results" | "unrecorded" | "price"
    file: str = ""
    rev: str | None = None
    data: Any = None
    commit: str = ""
    date: str = ""
    machine: str = ""
    run: str = ""  # the part of the file that records this run (`#reruns.0`), "" the file
    recorded: bool = True  # False: date and commit are git log's, from stamps.json
    values: list[float] = field(default_factory=list)  # unrecorded: figures quoted

    @property
    def key(self) -> tuple[str, str, str | None, str, str]:
        return (self.kind, self.file, self.rev, self.run, self.commit)

    def path(self) -> str:
        return f"bench/results/{self.file}"

    def when(self) -> str:
        if self.kind == "price":
            return f"list prices as of {self.date}"
        if self.kind == "results" and not self.recorded:
            return f"{self.date}, committed in {self.commit}"
        return f"{self.date} on {self.commit}"

    def stamp(self) -> str:
        if self.kind == "price":
            return (
                f"AWS on-demand list prices, {self.data['region']}, as transcribed in "
                f"`bench/harness.py` (as of {self.date}) and `bench/bench_costs.py`"
            )
        if self.kind == "unrecorded":
            return f"{self.date} on {self.commit} (that run's results file was not kept)"
        where = f"`{self.path()}`" + (f", `{self.run}`" if self.run else "")
        if not self.recorded:
            on = f", {self.machine}" if self.machine else ""
            return (
                f"{where}, committed {self.date} in {self.commit}{on} (the file records no "
                f"run date or commit; these are git log's, recorded in `bench/results/{STAMPS}`)"
            )
        if self.rev:
            where += f" as committed in {self.rev}"
        return f"{self.date} on {self.commit}, {self.machine} ({where})"


def _machine(m: Any) -> str:
    if not isinstance(m, dict):
        return "machine not recorded"
    cpu = str(m.get("cpu_model") or "unknown CPU")
    cores = m.get("cores")
    py = m.get("python")
    return f"{cores}-core {cpu}" + (f", Python {py}" if py else "")


class Loader:
    """Reads results files, cached: from `results`, or, for a file as committed at a revision,
    from its copy in `results/archive/`; the date and commit of a file that records no run
    from `results/stamps.json` (no git). With `from_git`, a missing copy or stamp is made from
    git (`--archive`); `made` lists what was made, `archived` every copy read, `stamped`
    every stamp."""

    def __init__(
        self, results: Path = RESULTS, repo: Path = REPO, *, from_git: bool = False
    ) -> None:
        self.results = results
        self.repo = repo
        self.from_git = from_git
        self.made: list[str] = []
        self.archived: set[str] = set()
        self.stamped: set[str] = set()
        path = results / STAMPS
        self.stamps: dict[str, dict[str, str]] = (
            json.loads(path.read_text()) if path.is_file() else {}
        )
        self._cache: dict[tuple[str, str | None], Any] = {}

    def archive_path(self, file: str, rev: str) -> Path:
        """Where `file` as committed in `rev` is kept: `archive/<stem>@<rev>.json`."""
        name = Path(file)
        return self.results / ARCHIVE / f"{name.stem}@{rev}{name.suffix}"

    def git(self, *args: str) -> bytes:
        """The output of a git command in the repository (`--archive` only)."""
        try:
            r = subprocess.run(["git", *args], cwd=self.repo, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            raise FigureError(f"git {' '.join(args)} (needs git and the history): {exc}") from None
        if r.returncode != 0:
            raise FigureError(
                f"git {' '.join(args)} (needs the repository's history): "
                + r.stderr.decode(errors="replace").strip()
            )
        return r.stdout

    def load(self, file: str, rev: str | None) -> Any:
        key = (file, rev)
        if key not in self._cache:
            if rev is None:
                path = self.results / file
                if not path.is_file():
                    raise FigureError(f"no results file {path}")
            else:
                path = self.archive_path(file, rev)
                self.archived.add(path.name)
                if not path.is_file():
                    if not self.from_git:
                        raise FigureError(
                            f"no copy of bench/results/{file} as committed in {rev}: "
                            f"bench/results/{ARCHIVE}/{path.name} is missing "
                            "(`python -m bench.figures --archive` copies it from git)"
                        )
                    blob = self.git("cat-file", "blob", f"{rev}:bench/results/{file}")
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(blob)
                    self.made.append(f"bench/results/{ARCHIVE}/{path.name}")
            self._cache[key] = json.loads(path.read_bytes())
        return self._cache[key]

    def stamp(self, file: str, rev: str | None) -> tuple[str, str]:
        """The commit and date of a results file that records no run (for `file@rev`, of the
        commit `rev`): git log's, as `stamps.json` keeps them with the hash of the bytes they
        date. With `from_git`, a missing or stale stamp is taken from git log."""
        key = file + (f"@{rev}" if rev else "")
        path = self.results / file if rev is None else self.archive_path(file, rev)
        blob = git_blob(path.read_bytes())
        self.stamped.add(key)
        entry = self.stamps.get(key)
        if entry is not None and entry.get("blob") == blob:
            return entry["commit"], entry["date"]
        if not self.from_git:
            why = "has no stamp for it" if entry is None else "dates other bytes of it"
            raise FigureError(
                f"bench/results/{key} records no run date or commit (finished_at, git) and "
                f"bench/results/{STAMPS} {why} (`python -m bench.figures --archive` takes "
                "git log's)"
            )
        if rev is None:
            log = ["log", "-1", "--format=%h %cs", "--", f"bench/results/{file}"]
        else:
            log = ["log", "-1", "--format=%h %cs", rev]
        parts = self.git(*log).decode().split()
        if len(parts) != 2:
            raise FigureError(f"git {' '.join(log)}: no commit (needs the repository's history)")
        commit, date = parts
        if rev is None:  # the file as it is must be what that commit wrote
            committed = self.git("rev-parse", f"{commit}:bench/results/{file}").decode().strip()
            if committed != blob:
                raise FigureError(f"bench/results/{file} is not as committed: commit it first")
        self.stamps[key] = {"date": date, "commit": commit, "source": "git log", "blob": blob}
        self.made.append(f"bench/results/{STAMPS}: {key} {date} {commit}")
        return commit, date

    def source(self, name: str, spec: str | None) -> Source:
        if name == "price":
            return _price_source()
        if spec is None:
            spec = f"latest-{name.replace('_', '-')}.json"
        if spec.startswith("unrecorded:"):
            parts = spec.split(":")
            if (
                len(parts) != 3
                or not re.fullmatch(r"[0-9a-f]{7,40}", parts[1])
                or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", parts[2])
            ):
                raise FigureError(f"{name}={spec}: expected unrecorded:<commit>:<YYYY-MM-DD>")
            return Source(name, "unrecorded", commit=parts[1], date=parts[2])
        spec, _, run_key = spec.partition("#")
        file, _, at = spec.partition("@")
        rev = at or None
        if rev is not None and not re.fullmatch(r"[0-9a-f]{7,40}", rev):
            raise FigureError(f"{spec}: a revision is a commit's hash (7 to 40 hex digits)")
        data = self.load(file, rev)
        src = Source(name, "results", file=file, rev=rev, data=data, run=run_key)
        run: Any = data
        for part in run_key.split(".") if run_key else ():
            try:
                run = run[int(part)] if isinstance(run, list) else run[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise FigureError(f"{spec}: no run {run_key!r} in it") from None
        git = run.get("git") if isinstance(run, dict) else None
        finished = run.get("finished_at") if isinstance(run, dict) else None
        if git and finished:
            src.commit = str(git.get("commit") or "?")
            src.date = str(finished)[:10]
            src.machine = _machine(run.get("machine") or data.get("machine"))
        elif run_key:
            raise FigureError(f"{spec}: {run_key!r} records no finished_at and git")
        else:
            src.commit, src.date = self.stamp(file, rev)
            src.recorded = False
        if not src.recorded and isinstance(data.get("machine"), dict):
            src.machine = _machine(data["machine"])
        return src


def git_blob(data: bytes) -> str:
    """Git's hash of a file's bytes (`git hash-object`), computed without git."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _price_source() -> Source:
    from bench.bench_costs import OTHER_PRICES
    from bench.harness import PRICES

    data = {**OTHER_PRICES, **PRICES}
    return Source("price", "price", data=data, date=str(PRICES["as_of"]))


# --- values -------------------------------------------------------------------------------
_PICK_KEYS = ("name", "design", "function", "label")


def _pick(items: list[Any], key: str) -> Any:
    found = [
        e
        for e in items
        if isinstance(e, dict)
        and (
            any(e.get(k) == key for k in _PICK_KEYS)
            or (isinstance(e.get("workload"), dict) and e["workload"].get("name") == key)
        )
    ]
    if len(found) != 1:
        raise FigureError(f"{len(found)} list items named {key!r}")
    return found[0]


def wrap(v: Any) -> Any:
    return J(v) if isinstance(v, (dict, list)) else v


class J:
    """A read-only view of a results file: attributes and items, list items by name."""

    __slots__ = ("_v",)

    def __init__(self, v: Any) -> None:
        self._v = v

    def __getattr__(self, k: str) -> Any:
        if k.startswith("__"):
            raise AttributeError(k)
        return self[k]

    def __getitem__(self, k: Any) -> Any:
        v = self._v
        try:
            if isinstance(v, list) and isinstance(k, str):
                return wrap(_pick(v, k))
            return wrap(v[k])
        except (KeyError, IndexError, TypeError):
            raise FigureError(f"no {k!r} in {_preview(v)}") from None

    def find(self, **kw: Any) -> Any:
        items = self._v if isinstance(self._v, list) else []
        found = [
            e for e in items if isinstance(e, dict) and all(e.get(k) == w for k, w in kw.items())
        ]
        if len(found) != 1:
            raise FigureError(f"{len(found)} list items with {kw}")
        return wrap(found[0])

    def get(self, k: str, default: Any = None) -> Any:
        return wrap(self._v.get(k, default)) if isinstance(self._v, dict) else default

    def keys(self) -> list[str]:
        return list(self._v) if isinstance(self._v, dict) else []

    def items(self) -> list[tuple[str, Any]]:
        return [(k, wrap(v)) for k, v in self._v.items()] if isinstance(self._v, dict) else []

    def __iter__(self) -> Iterator[Any]:
        return (wrap(x) for x in (self._v.values() if isinstance(self._v, dict) else self._v))

    def __len__(self) -> int:
        return len(self._v)

    def __repr__(self) -> str:
        return _preview(self._v)


def _preview(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(list(v)[:12]) + (", …}" if len(v) > 12 else "}")
    if isinstance(v, list):
        return f"a list of {len(v)}"
    return repr(v)


class SourceValue(J):
    """The value a declared name stands for: the results file, with its provenance."""

    __slots__ = ("_src",)

    def __init__(self, src: Source) -> None:
        super().__init__(src.data)
        self._src = src

    def __call__(self, value: float) -> float:
        if self._src.kind != "unrecorded":
            raise FigureError(f"{self._src.name}(…) is for unrecorded runs only")
        self._src.values.append(value)
        return value


def p99(row: Any, spec: str = ",.0f") -> str:
    """A scale-model row's p99, marked `≥` when appends were still open at the end of the
    window (`censored`: the figure is a lower bound)."""
    return ("≥ " if row.censored else "") + format(row.p99_ms, spec)


def goal(value: float) -> float:
    """A target an issue sets, written as a figure (`${{ goal(0.30) |.2f }}`): not a
    measurement, so it needs no source."""
    return value


_STAMPS = ("when", "stamp")
_HELPERS = (abs, all, any, dict, enumerate, float, format, int, len, list, max, min, range)
_BUILTINS: dict[str, Any] = {
    f.__name__: f for f in (*_HELPERS, round, sorted, str, sum, tuple, zip, p99, goal, J)
}


def _format(value: Any, spec: str) -> tuple[str, Source | None]:
    if isinstance(value, SourceValue):
        src = value._src
        out = {
            "when": src.when,
            "stamp": src.stamp,
            "date": lambda: src.date,
            "commit": lambda: src.commit,
            "file": lambda: f"`{src.path()}`",
        }.get(spec)
        if out is None:
            raise FigureError(
                f"{src.name} |{spec}: a source formats as when, stamp, date, commit or file"
            )
        return out(), (src if spec in _STAMPS else None)
    if isinstance(value, J):
        raise FigureError(f"{value!r} is not a figure (pick a value in it)")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if spec:
            raise FigureError(f"format {spec!r} for {value!r}")
        return str(value), None
    if not spec:
        raise FigureError(f"the number {value!r} needs a format (e.g. |,.0f)")
    try:
        return format(value, spec), None
    except ValueError as exc:
        raise FigureError(f"format {spec!r}: {exc}") from None


# --- pages --------------------------------------------------------------------------------
OPEN = re.compile(r"^<!-- figures(?:\s+(?P<decl>[^>]*?))?\s*$")
CLOSE_TEMPLATE = "-->"
CLOSE = "<!-- /figures -->"
PLACEHOLDER = re.compile(r"\{\{(.+?)\}\}")
DOLLAR = re.compile(r"\$\s?\d")
FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass
class Region:
    page: Path
    line: int  # 1-based line of the opening marker
    decl: str
    template: list[str]
    body: list[str]
    body_start: int  # index of the first body line
    body_end: int  # index of the closing marker
    rendered: list[str] | None = None
    used: list[Source] = field(default_factory=list)
    stamped: list[Source] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line}"


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    regions: list[Region] = field(default_factory=list)
    made: list[str] = field(default_factory=list)  # --archive: files made from git, removed


def parse(page: Path, lines: Sequence[str], report: Report) -> list[Region]:
    regions: list[Region] = []
    i = 0
    while i < len(lines):
        m = OPEN.match(lines[i])
        if not m:
            if lines[i].strip().startswith(CLOSE):
                why = "without an opening marker" if lines[i].strip() == CLOSE else "not alone"
                report.problems.append(f"{page.name}:{i + 1}: a closing marker {why}")
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j].strip() != CLOSE_TEMPLATE:
            j += 1
        k = j + 1
        while k < len(lines) and lines[k].strip() != CLOSE:
            if OPEN.match(lines[k]) or lines[k].strip().startswith(CLOSE):
                break
            k += 1
        if j >= len(lines) or k >= len(lines) or lines[k].strip() != CLOSE:
            report.problems.append(
                f"{page.name}:{start + 1}: figures region not closed (`-->`, then `{CLOSE}`, "
                "each alone on its line)"
            )
            return regions
        regions.append(
            Region(
                page=page,
                line=start + 1,
                decl=m.group("decl") or "",
                template=list(lines[start + 1 : j]),
                body=list(lines[j + 1 : k]),
                body_start=j + 1,
                body_end=k,
            )
        )
        i = k + 1
    return regions


def _declarations(decl: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for tok in decl.split():
        name, eq, spec = tok.partition("=")
        if not name.isidentifier():
            raise FigureError(f"{tok!r}: a source name is an identifier")
        out[name] = spec if eq else None
    return out


LET = re.compile(r"^\s*\{\{\s*let\s+(?P<name>[A-Za-z_]\w*)\s*=(?P<expr>.+?)\}\}\s*$")


def render(region: Region, loader: Loader) -> list[str]:
    """The body a region's template renders to; records the sources used and stamped."""
    declared = _declarations(region.decl)
    sources: dict[str, Source] = {}
    local: dict[str, Any] = {}

    def source(name: str) -> Source:
        if name not in sources:
            sources[name] = loader.source(name, declared.get(name))
        return sources[name]

    def evaluate(expr: str) -> Any:
        try:
            tree = ast.parse(expr.strip(), mode="eval")
        except SyntaxError as exc:
            raise FigureError(f"{{{{ {expr.strip()} }}}}: {exc.msg}") from None
        # names the expression binds itself (comprehension targets, lambda parameters)
        bound = {
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        } | {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
        free = {
            n.id
            for n in ast.walk(tree)
            if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)
            and n.id not in bound
            and n.id not in _BUILTINS
            and n.id not in local
        }
        names = {n: SourceValue(source(n)) for n in sorted(free)}
        for n in names:
            if sources[n] not in region.used:
                region.used.append(sources[n])
        try:
            scope = {"__builtins__": _BUILTINS, **local, **names}
            # a template of this repository's docs, not outside input
            return eval(compile(tree, "<figure>", "eval"), scope)
        except FigureError:
            raise
        except Exception as exc:
            raise FigureError(f"{{{{ {expr.strip()} }}}}: {type(exc).__name__}: {exc}") from None

    def one(m: re.Match[str]) -> str:
        expr, _, spec = m.group(1).partition("|")
        text, stamped = _format(evaluate(expr), spec.strip())
        if stamped is not None and stamped not in region.stamped:
            region.stamped.append(stamped)
        return text

    out: list[str] = []
    for line in region.template:
        if "```" in line:
            raise FigureError("a template holds no code fence")
        if DOLLAR.search(PLACEHOLDER.sub("", line)):
            raise FigureError(f"a literal dollar figure in a template: {line.strip()[:80]}")
        let = LET.match(line)
        if let:
            local[let.group("name")] = evaluate(let.group("expr"))
            continue
        # a placeholder may render several lines (a table's rows from one comprehension)
        out.extend(PLACEHOLDER.sub(one, line).split("\n"))
    return out


def _sections(lines: Sequence[str]) -> list[int]:
    """The section of each line: the index of the heading above it (-1 before any)."""
    out: list[int] = []
    current, fenced, comment = -1, False, False
    for n, line in enumerate(lines):
        if comment:
            comment = CLOSE_TEMPLATE not in line
        elif line.lstrip().startswith("<!--") and "-->" not in line:
            comment = True
        elif FENCE.match(line):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            current = n
        out.append(current)
    return out


def check_page(page: Path, loader: Loader, report: Report, *, write: bool = False) -> None:
    text = page.read_text()
    lines = text.split("\n")
    regions = parse(page, lines, report)
    report.regions.extend(regions)
    for r in regions:
        try:
            r.rendered = render(r, loader)
        except FigureError as exc:
            report.problems.append(f"{r.where}: {exc}")
            continue
        if r.rendered != r.body and not write:
            report.problems.append(
                f"{r.where}: the body is not what its template renders{_diff(r)}"
            )
    # every source used in a section is stamped in it
    sections = _sections(lines)
    used: dict[int, list[tuple[Region, Source]]] = {}
    stamped: dict[int, set[tuple[str, str, str | None, str, str]]] = {}
    for r in regions:
        sec = sections[r.line - 1]
        used.setdefault(sec, []).extend((r, s) for s in r.used)
        stamped.setdefault(sec, set()).update(s.key for s in r.stamped)
    for sec, pairs in used.items():
        seen: set[tuple[str, str, str | None, str, str]] = set()
        for r, s in pairs:
            if s.key not in stamped.get(sec, set()) and s.key not in seen:
                seen.add(s.key)
                report.problems.append(
                    f"{r.where}: {s.name} ({s.file or s.kind}) is quoted without its date and "
                    "commit in this section (add {{ " + s.name + " |when }} or |stamp)"
                )
    # dollar figures only in region bodies
    inside = set()
    for r in regions:
        inside.update(range(r.line - 1, r.body_end + 1))
    fenced = False
    for n, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or n in inside:
            continue
        if DOLLAR.search(line):
            report.problems.append(
                f"{page.name}:{n + 1}: a dollar figure outside a figures region: "
                f"{line.strip()[:90]}"
            )
    if write:
        new = list(lines)
        for r in reversed(regions):
            if r.rendered is not None and r.rendered != r.body:
                new[r.body_start : r.body_end] = r.rendered
        if new != lines:
            page.write_text("\n".join(new))


def _diff(r: Region) -> str:
    assert r.rendered is not None
    for n, (a, b) in enumerate(zip(r.body, r.rendered, strict=False)):
        if a != b:
            return (
                f" (line {r.body_start + n + 1}: shows {a.strip()[:70]!r}, "
                f"renders {b.strip()[:70]!r})"
            )
    return f" ({len(r.body)} lines shown, {len(r.rendered)} rendered)"


def check(
    paths: Sequence[Path] | None = None,
    *,
    results: Path = RESULTS,
    repo: Path = REPO,
    write: bool = False,
    from_git: bool = False,
) -> Report:
    """Render every region of `paths` (README.md and docs/*.md) against `results`; with
    `write`, put the rendered bodies in place. The report lists what does not hold.

    Reads no git history: a file as committed at a revision is read from its copy in
    `results/archive/`, the date and commit of a file that records no run from
    `results/stamps.json`. With `from_git` (`--archive`), a missing copy or stamp is made from
    git, and, over every page, a copy or stamp no page quotes is removed (otherwise
    reported)."""
    loader = Loader(results, repo, from_git=from_git)
    report = Report(made=loader.made)
    for page in paths if paths is not None else pages(repo):
        check_page(page, loader, report, write=write)
    if paths is None and all(r.rendered is not None for r in report.regions):
        archive = results / ARCHIVE
        for extra in sorted(archive.glob("*.json") if archive.is_dir() else []):
            if extra.name in loader.archived:
                continue
            if from_git:
                extra.unlink()
                loader.made.append(f"removed bench/results/{ARCHIVE}/{extra.name}")
            else:
                report.problems.append(
                    f"bench/results/{ARCHIVE}/{extra.name}: no page quotes it "
                    "(`python -m bench.figures --archive` removes it)"
                )
        for key in sorted(set(loader.stamps) - loader.stamped):
            if from_git:
                del loader.stamps[key]
                loader.made.append(f"bench/results/{STAMPS}: removed {key}")
            else:
                report.problems.append(
                    f"bench/results/{STAMPS}: {key}: no page quotes it, or it records its run "
                    "now (`python -m bench.figures --archive` removes the stamp)"
                )
    stamps = results / STAMPS
    if from_git and any(m.startswith(f"bench/results/{STAMPS}") for m in loader.made):
        stamps.write_text(json.dumps(loader.stamps, indent=2, sort_keys=True) + "\n")
    return report


def _sources_listing(report: Report) -> Iterator[str]:
    by_page: dict[str, set[str]] = {}
    unrecorded: list[tuple[Region, Source]] = []
    for r in report.regions:
        for s in r.used:
            label = {"results": f"bench/results/{s.file}" + (f"@{s.rev}" if s.rev else "")}.get(
                s.kind, s.kind
            )
            if s.kind == "unrecorded":
                label = f"unrecorded run {s.commit} ({s.date})"
                unrecorded.append((r, s))
            by_page.setdefault(r.page.name, set()).add(label)
    for page, labels in by_page.items():
        yield f"{page}:"
        for label in sorted(labels):
            yield f"  {label}"
    if unrecorded:
        yield "figures from runs whose results file was not kept (re-measure to replace):"
        for r, s in unrecorded:
            shown = ", ".join(f"{v:g}" for v in s.values)
            yield f"  {r.where}: {s.commit} {s.date}: {shown}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--check", action="store_true", help="report, do not write")
    ap.add_argument("--sources", action="store_true", help="list the sources each page quotes")
    ap.add_argument(
        "--archive",
        action="store_true",
        help="make the archive copies and stamps the pages need from git (needs the "
        "history), drop those they do not, then check",
    )
    ap.add_argument("pages", nargs="*", type=Path, help="default: README.md and docs/*.md")
    args = ap.parse_args(argv)
    paths = [p.resolve() for p in args.pages] or None
    report_only = args.check or args.sources or args.archive
    report = check(paths, write=not report_only, from_git=args.archive)
    if args.sources:
        for line in _sources_listing(report):
            print(line)
    for line in report.made:
        print(line)
    for p in report.problems:
        print(p, file=sys.stderr)
    changed = "" if report_only else " (bodies rewritten where they differed)"
    print(f"{len(report.regions)} figures regions, {len(report.problems)} problems{changed}")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
