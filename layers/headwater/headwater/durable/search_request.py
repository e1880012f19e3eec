"""A ``_search`` request (protocol §8.6): its body or query string parsed and checked against
the stream's search configuration (``q``, ``size``, ``sort``, ``search_after``,
``timeout_ms``), and the resume tokens that continue a ranked walk where a page ended."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

from headwater.durable import schema
from headwater.durable.fields import FieldSpec
from headwater.durable.filter import FilterError, Predicate, parse_query
from headwater.durable.offsets import (
    Offset,
    OffsetError,
    decode_offset,
    encode_offset,
)
from headwater.durable.scan import (
    TIMEOUT_CAP_MS,
    SearchError,
)
from headwater.engine.ports import Head

DEFAULT_SIZE: Final = 50  # the reference's default page size
MAX_SIZE: Final = 500  # ...and its cap
BODY_KEYS: Final = frozenset({"q", "size", "sort", "search_after", "timeout_ms"})


@dataclass(frozen=True, slots=True)
class SortSpec:
    kind: Literal["offset", "score", "field"]
    desc: bool
    field: FieldSpec | None = None

    @property
    def label(self) -> str:
        name = {"offset": "offset", "score": "_score"}.get(self.kind) or self.field.name  # type: ignore[union-attr]
        return f"{name}:{'desc' if self.desc else 'asc'}"


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a ranked pass cut by the deadline stands (the continuation of its 408 page):
    the walk's cursor it ranks after, the seqs (lo, hi] it has examined, how many matches
    it found there, and the best `size + 1` of them (by seq: the next request reads them
    again and merges them with what it finds in the rest of the stream)."""

    epoch: int
    after: tuple[Any, ...] | None
    lo: int
    hi: int
    matched: int
    seqs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SearchRequest:
    query: Predicate
    size: int
    sorts: tuple[SortSpec, ...]
    search_after: tuple[Any, ...] | None
    timeout_ms: int
    requested_timeout_ms: int | None
    resume: Resume | None = None
    fingerprint: str = ""  # of q, sort and size: a continuation belongs to one query


def search_config(reg: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, FieldSpec]]:
    search = reg.get("search")
    if not search:
        raise SearchError("search is not configured for this stream (POST /_schema a search)")
    return search, schema.search_fields(reg)


def compile_q(q: object, reg: Mapping[str, Any]) -> Predicate:
    search, fields = search_config(reg)
    if not isinstance(q, str):
        raise SearchError("q must be a string")
    try:
        return parse_query(q, fields, search)
    except FilterError as exc:
        raise SearchError(f"q: {exc}") from None


def _int_param(raw: object, name: str, lo: int, hi: int | None) -> int:
    if isinstance(raw, str):
        text = raw.strip()
        if not (text.isascii() and text.isdigit()) or len(text) > 9:
            raise SearchError(f"{name} must be an integer")
        raw = int(text)
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise SearchError(f"{name} must be an integer")
    if raw < lo or (hi is not None and raw > hi):
        limit = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise SearchError(f"{name} must be an integer {limit}")
    return raw


def _sorts(
    raw: list[str], search: Mapping[str, Any], fields: Mapping[str, FieldSpec]
) -> tuple[SortSpec, ...]:
    out: list[SortSpec] = []
    for item in raw:
        if not isinstance(item, str) or not item.strip():
            raise SearchError("sort entries must be non-empty strings like offset:desc")
        name, _, direction = item.strip().partition(":")
        direction = direction or "desc"
        if direction not in ("asc", "desc"):
            raise SearchError(f"sort {item!r}: direction must be asc or desc")
        desc = direction == "desc"
        if name == "offset":
            spec = SortSpec("offset", desc)
        elif name == "_score":
            spec = SortSpec("score", desc)
        else:
            f = fields.get(name)
            if f is None:
                raise SearchError(f"sort {item!r}: unknown search field {name!r}")
            if not f.sortable and f.name != search.get("primaryTimestampField"):
                raise SearchError(f"sort {item!r}: field {name!r} is not sortable")
            spec = SortSpec("field", desc, f)
        if any(s.label.split(":")[0] == spec.label.split(":")[0] for s in out):
            raise SearchError(f"sort {item!r}: {name} is given twice")
        out.append(spec)
        if spec.kind == "offset":
            break  # offsets are unique: nothing after them could order anything
    if not any(s.kind == "offset" for s in out):
        out.append(SortSpec("offset", True))  # the tie-break (reference behaviour)
    return tuple(out)


def parse_request(
    raw: Mapping[str, Any], reg: Mapping[str, Any], *, from_query: bool
) -> SearchRequest:
    """A search request from a POST body (strict) or from GET parameters (already mapped:
    `sort` a list, `search_after` the decoded JSON)."""
    unknown = sorted(set(raw) - BODY_KEYS)
    if unknown:
        raise SearchError(f"unknown search request field(s): {', '.join(unknown)}")
    if "q" not in raw:
        raise SearchError("q is required")
    search, fields = search_config(reg)
    query = compile_q(raw["q"], reg)
    size = DEFAULT_SIZE if raw.get("size") is None else _int_param(raw["size"], "size", 1, MAX_SIZE)
    requested = None
    if raw.get("timeout_ms") is not None:
        requested = _int_param(raw["timeout_ms"], "timeout_ms", 0, None)
    timeout = TIMEOUT_CAP_MS if requested is None else min(requested, TIMEOUT_CAP_MS)
    sort_raw = raw.get("sort")
    if sort_raw is None:
        sort_raw = []
    elif isinstance(sort_raw, str) and not from_query:
        raise SearchError("sort must be an array of strings")
    if not isinstance(sort_raw, list):
        raise SearchError("sort must be an array of strings")
    if sort_raw:
        sorts = _sorts(sort_raw, search, fields)
    elif _scores(query):  # the reference: text queries rank by score, then time, then offset
        primary = fields.get(str(search.get("primaryTimestampField")))
        sorts = (
            SortSpec("score", True),
            SortSpec("field", True, primary),
            SortSpec("offset", True),
        )
    else:
        sorts = (SortSpec("offset", True),)
    fingerprint = _fingerprint(raw["q"], sorts, size)
    after = raw.get("search_after")
    resume = None
    if after is not None:
        if not isinstance(after, list):
            raise SearchError("search_after must be an array (a hit's sort)")
        if _is_resume(sorts, after):
            resume = _decode_resume(after[0], sorts, fingerprint)
            after = resume.after
        elif len(after) != len(sorts):
            raise SearchError(f"search_after must have {len(sorts)} values, one per sort")
        else:
            after = tuple(_after_value(s, v) for s, v in zip(sorts, after, strict=True))
    return SearchRequest(query, size, sorts, after, timeout, requested, resume, fingerprint)


# A ranked pass's continuation (next_search_after of a ranked 408 page): a one-element array
# holding an opaque string. A hit's sort array always has at least two values under a
# ranked sort (the offset tie-break), so the two shapes cannot be confused, and a client
# that pages by a hit's sort, as documented, is unaffected.
RESUME_PREFIX: Final = "~rank1."


def _fingerprint(q: object, sorts: tuple[SortSpec, ...], size: int) -> str:
    text = json.dumps([q, [s.label for s in sorts], size], separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _is_resume(sorts: tuple[SortSpec, ...], after: list[Any]) -> bool:
    return (
        len(sorts) > 1
        and len(after) == 1
        and isinstance(after[0], str)
        and after[0].startswith(RESUME_PREFIX)
    )


def _encode_resume(head: Head, sorts: tuple[SortSpec, ...], fingerprint: str, r: Resume) -> str:
    deltas, prev = [], 0
    for q in sorted(r.seqs):
        deltas.append(q - prev)
        prev = q
    doc = {
        "f": fingerprint,
        "e": r.epoch,
        "a": None if r.after is None else _sort_body(head, sorts, r.after),
        "c": [r.lo, r.hi],
        "m": r.matched,
        "s": deltas,
    }
    raw = zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)
    return RESUME_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_resume(token: str, sorts: tuple[SortSpec, ...], fingerprint: str) -> Resume:
    bad = SearchError("search_after: not a continuation this server gave")
    try:
        text = token[len(RESUME_PREFIX) :]
        raw = zlib.decompress(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        doc = json.loads(raw)
    except (ValueError, zlib.error):
        raise bad from None
    if not isinstance(doc, dict):
        raise bad
    if doc.get("f") != fingerprint:
        raise SearchError(
            "search_after: this continuation belongs to another query, sort or size "
            "(page with the q, sort and size that gave it)"
        )
    a, c, m, deltas, epoch = doc.get("a"), doc.get("c"), doc.get("m"), doc.get("s"), doc.get("e")

    def nat(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    if not (
        nat(epoch)
        and nat(m)
        and isinstance(c, list)
        and len(c) == 2
        and all(nat(x) for x in c)
        and c[0] <= c[1]
        and isinstance(deltas, list)
        and len(deltas) <= MAX_SIZE + 1
        and all(nat(x) and x > 0 for x in deltas)
        and (a is None or (isinstance(a, list) and len(a) == len(sorts)))
    ):
        raise bad
    seqs = tuple(itertools.accumulate(deltas))
    if seqs and not c[0] < seqs[0] <= seqs[-1] <= c[1]:
        raise bad
    after = None if a is None else tuple(_after_value(s, v) for s, v in zip(sorts, a, strict=True))
    return Resume(cast(int, epoch), after, c[0], c[1], cast(int, m), seqs)


def _scores(p: Predicate) -> bool:
    from headwater.durable.filter import And, Not, Or, Text

    if isinstance(p, Text):
        return True
    if isinstance(p, And | Or):
        return any(_scores(c) for c in p.children)
    return isinstance(p, Not) and _scores(p.child)


def _after_value(s: SortSpec, v: object) -> Any:
    """A search_after element as the comparable internal value (offsets as seqs)."""
    if s.kind == "offset":
        if not isinstance(v, str):
            raise SearchError("search_after: the offset value must be an offset string")
        try:
            off = decode_offset(v)
        except OffsetError as exc:
            raise SearchError(f"search_after: {exc}") from None
        return off.seq if isinstance(off, Offset) else 0
    if v is None:
        return None
    if s.kind == "score":
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise SearchError("search_after: a _score value must be a number")
        return float(v)
    kind = s.field.kind  # type: ignore[union-attr]
    ok = {
        "keyword": isinstance(v, str),
        "bool": isinstance(v, bool),
        "integer": isinstance(v, int) and not isinstance(v, bool),
        "date": isinstance(v, int) and not isinstance(v, bool),
        "float": isinstance(v, int | float) and not isinstance(v, bool),
    }.get(kind, False)
    if not ok or (isinstance(v, float) and not math.isfinite(v)):
        raise SearchError(f"search_after: a value of the wrong type for {s.label}")
    return v


def _sort_body(head: Head, sorts: tuple[SortSpec, ...], key: tuple[Any, ...]) -> list[Any]:
    return [
        encode_offset(head.epoch, v) if s.kind == "offset" else v
        for s, v in zip(sorts, key, strict=True)
    ]
