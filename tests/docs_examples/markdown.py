"""Examples in markdown, and what "the output the text shows" means.

A runnable example is a fenced ```sh (or ```bash) block. The fenced block right after it, if
it is ```json or ```text, is what the reader should see; its info string may say
`status=NNN`: the last request of the block answers NNN (every other request of a block must
answer below 400). A block whose first line is `# not run by the docs test: <reason>` (for
`make run` itself, `sam deploy`, anything that needs AWS or Docker) is reported as skipped
with that reason.

Output blocks may elide with `…`:
- ```json: a sequence of JSON values, one per response the block prints. A bare `…` as an
  array element ends the array ("at least these first elements"), as an object member it
  allows more members ("at least these"), as a value it matches anything; inside a string it
  matches any run of characters. Every response's `performance` object (server timings) is
  ignored.
- ```text: lines (a stream cut off by --max-time): the output starts with these lines, blank
  lines ignored, `…` inside a line matches any run of characters, a line that is only `…`
  matches any number of lines.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SKIP_MARK = "# not run by the docs test:"
RUNNABLE = ("sh", "bash", "shell")
OUTPUTS = ("json", "text")
ANY = "\x00…any"
REST = "\x00…rest"
IGNORED_KEYS = frozenset({"performance"})


@dataclass(frozen=True, slots=True)
class Example:
    path: str
    line: int  # of the opening fence
    code: str
    expect_kind: str | None  # "json" | "text" | None
    expect: str | None
    status: int | None
    skip: str | None

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


_FENCE = re.compile(r"^(```+)\s*([\w-]*)(.*)$")


def examples(path: Path, root: Path) -> list[Example]:
    """The runnable blocks of one markdown file, each with the output block after it."""
    lines = path.read_text().splitlines()
    blocks: list[tuple[int, str, str, str]] = []  # (line, lang, info, body)
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, info = m.group(1), m.group(2).lower(), m.group(3).strip()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        blocks.append((start + 1, lang, info, "\n".join(body)))
        i += 1
        # only a block that follows directly (blank lines allowed) is "the output after it"
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i < len(lines) and _FENCE.match(lines[i]):
            continue
        blocks.append((-1, "", "", ""))  # prose in between: breaks the pairing
    out: list[Example] = []
    rel = str(path.relative_to(root))
    for n, (line, lang, _info, body) in enumerate(blocks):
        if lang not in RUNNABLE:
            continue
        nxt = blocks[n + 1] if n + 1 < len(blocks) else None
        kind = expect = None
        status = None
        if nxt is not None and nxt[1] in OUTPUTS:
            kind, expect = nxt[1], nxt[3]
            if m2 := re.search(r"status=(\d{3})", nxt[2]):
                status = int(m2.group(1))
        first = body.lstrip().splitlines()[0] if body.strip() else ""
        skip = first[len(SKIP_MARK) :].strip() if first.startswith(SKIP_MARK) else None
        out.append(Example(rel, line, body, kind, expect, status, skip))
    return out


# --------------------------------------------------------------------------- json
def _mark_ellipses(text: str) -> str:
    """Bare `…` (outside strings) into marker strings, so the block parses as JSON."""
    out: list[str] = []
    stack: list[str] = []
    in_str = esc = False
    prev = ""  # the last non-space character outside strings
    for ch in text:
        if in_str:
            out.append(ch)
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
                prev = '"'
            continue
        if ch == '"':
            in_str = True
            out.append(ch)
            continue
        if ch in "[{":
            stack.append(ch)
        elif ch in "]}" and stack:
            stack.pop()
        if ch == "…":
            member = bool(stack) and stack[-1] == "{" and prev in "{,"
            out.append(json.dumps(REST) + ": 0" if member else json.dumps(ANY))
            prev = "…"
            continue
        out.append(ch)
        if not ch.isspace():
            prev = ch
    return "".join(out)


def json_values(text: str) -> list[Any]:
    """Every JSON value in `text`, in order (whitespace between them)."""
    dec = json.JSONDecoder()
    values: list[Any] = []
    i = 0
    text = text.strip()
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        value, i = dec.raw_decode(text, i)
        values.append(value)
    return values


def expected_json(text: str) -> list[Any]:
    return json_values(_mark_ellipses(text))


def _str_matches(want: str, got: str) -> bool:
    if "…" not in want:
        return want == got
    pattern = ".*".join(re.escape(part) for part in want.split("…"))
    return re.fullmatch(pattern, got, flags=re.DOTALL) is not None


def mismatch(want: Any, got: Any, where: str = "$") -> str | None:
    """Why `got` is not what `want` shows (None: it is)."""
    if want == ANY:
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return f"{where}: expected an object, got {json.dumps(got)[:200]}"
        rest = REST in want
        for k, v in want.items():
            if k == REST:
                continue
            if k not in got:
                return f"{where}: missing key {k!r} (got keys {sorted(got)})"
            if (why := mismatch(v, got[k], f"{where}.{k}")) is not None:
                return why
        extra = set(got) - set(want) - IGNORED_KEYS
        if extra and not rest:
            return f"{where}: unexpected keys {sorted(extra)} (end the object with … to allow more)"
        return None
    if isinstance(want, list):
        if not isinstance(got, list):
            return f"{where}: expected an array, got {json.dumps(got)[:200]}"
        open_end = bool(want) and want[-1] == ANY
        items = want[:-1] if open_end else want
        if (len(got) < len(items)) if open_end else (len(got) != len(items)):
            return f"{where}: expected {len(items)}{'+' if open_end else ''} items, got {len(got)}"
        for n, (w, g) in enumerate(zip(items, got, strict=False)):
            if (why := mismatch(w, g, f"{where}[{n}]")) is not None:
                return why
        return None
    if isinstance(want, str):
        if not isinstance(got, str) or not _str_matches(want, got):
            return f"{where}: expected {want!r}, got {json.dumps(got)[:200]}"
        return None
    if type(want) is not type(got) or want != got:
        return f"{where}: expected {json.dumps(want)}, got {json.dumps(got)[:200]}"
    return None


def json_mismatch(expect: str, printed: str) -> str | None:
    wants = expected_json(expect)
    try:
        gots = json_values(printed)
    except ValueError as exc:
        return f"the block printed something that is not JSON ({exc}): {printed[:500]!r}"
    if len(wants) != len(gots):
        return f"expected {len(wants)} JSON values, the block printed {len(gots)}: {printed[:800]}"
    for n, (w, g) in enumerate(zip(wants, gots, strict=True)):
        if (why := mismatch(w, g, f"response {n + 1}")) is not None:
            return why
    return None


# --------------------------------------------------------------------------- text
def text_mismatch(expect: str, printed: str) -> str | None:
    want = [ln.rstrip() for ln in expect.splitlines() if ln.strip()]
    got = [ln.rstrip() for ln in printed.splitlines() if ln.strip()]
    i = 0
    for n, w in enumerate(want):
        if w.strip() == "…":
            nxt = want[n + 1 : n + 2]
            if not nxt:
                return None  # anything after
            while i < len(got) and not _str_matches(nxt[0], got[i]):
                i += 1
            continue
        if i >= len(got):
            return f"line {n + 1}: expected {w!r}, the output ended: {printed[-800:]!r}"
        if not _str_matches(w, got[i]):
            return f"line {n + 1}: expected {w!r}, got {got[i]!r}"
        i += 1
    return None
