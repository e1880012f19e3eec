"""The ``filter=`` predicate language of filtered reads (protocol §4.1, §8.5).

A filter is evaluated against the decoded JSON value of each entry, using only the fields
declared in the stream's schema ``search.fields`` (§4.1, §12; field shape as in the reference
``schemas.md``: ``kind``, per-schema-version ``bindings`` of ``jsonPointer``, capability bits).

Grammar (keywords ``AND``/``OR``/``NOT`` are case-insensitive; field names are case-sensitive)::

    expr    := and ( OR and )*
    and     := unary ( [AND] unary )*          -- juxtaposition is an implicit AND
    unary   := ( NOT | "-" ) unary | primary   -- "-x" is shorthand for "NOT x"
    primary := "(" expr ")" | "has:" FIELD | FIELD ":" [ ">=" | ">" | "<=" | "<" | "=" ] VALUE
    VALUE   := bare | '"' chars '"'            -- inside quotes only \\" and \\\\ are escapes

Precedence is ``NOT`` > ``AND`` > ``OR``. A bare value runs to the next whitespace or
parenthesis, so ``ts:>=2024-01-01T00:00:00Z`` and ``n:-5`` need no quotes; values containing
whitespace, parentheses or a double quote, or starting with ``>``, ``<`` or ``=``, must be quoted.
``field:=v`` is accepted as an explicit spelling of ``field:v`` (reference parity).

Typing follows the reference server (``src/read_filter.ts``, ``src/search/schema.ts``):

* ``keyword``: equality only, string values only, ``lowercase_v1`` normalizer applied to both
  sides. ``bool``: equality with ``true``/``false``. ``integer``, ``float``, ``date``: equality and
  range comparisons. ``date`` values are RFC 3339 timestamps with a zone, ``YYYY-MM-DD`` (UTC
  midnight) or integer epoch milliseconds, compared as epoch milliseconds.
* ``text`` fields only support ``has:`` (full-text matching belongs to ``_search``).
* Capability bits gate clauses: ``has:`` needs ``exists``, ``exact`` or ``column``; equality needs
  ``exact`` or ``column``; range comparisons need ``column``.
* A JSON array value is flattened (recursively); a clause matches if any element matches. Values
  of the wrong JSON type are ignored, so ``has:f`` is true only if at least one usable value is
  present. A missing field never satisfies a clause (so ``-f:x`` matches documents without ``f``).

Caps: ``MAX_FILTER_LENGTH`` (4096) characters, ``MAX_FILTER_CLAUSES`` (64) field clauses and
``MAX_FILTER_DEPTH`` (32) nested parentheses / negations. Positions in ``FilterError`` messages
are 0-based character indexes. ``has:`` is always the existence test, so a field literally
named ``has`` can only appear as ``has:has``.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from enum import Enum
from typing import Final, Literal, TypeAlias, cast, get_args

__all__ = [
    "MAX_FIELD_NAME_LENGTH",
    "MAX_FILTER_CLAUSES",
    "MAX_FILTER_DEPTH",
    "MAX_FILTER_LENGTH",
    "MISSING",
    "And",
    "Compare",
    "CompareOp",
    "FieldBinding",
    "FieldKind",
    "FieldSpec",
    "FilterError",
    "Has",
    "JsonPointerError",
    "Not",
    "Or",
    "Predicate",
    "Prefix",
    "Text",
    "TextTarget",
    "analyze",
    "fields_from_config",
    "json_pointer_get",
    "parse_filter",
    "parse_json_pointer",
    "parse_query",
]

MAX_FILTER_LENGTH: Final = 4096
MAX_FILTER_CLAUSES: Final = 64
MAX_FILTER_DEPTH: Final = 32
MAX_FIELD_NAME_LENGTH: Final = 64

FieldKind: TypeAlias = Literal["keyword", "text", "integer", "float", "date", "bool"]
CompareOp: TypeAlias = Literal["eq", "gt", "gte", "lt", "lte"]
Normalizer: TypeAlias = Literal["identity_v1", "lowercase_v1"]
Analyzer: TypeAlias = Literal["unicode_word_v1"]
Scalar: TypeAlias = int | float | bool | str

_KINDS: Final[frozenset[str]] = frozenset(get_args(FieldKind))
_TYPED_KINDS: Final = frozenset({"integer", "float", "date", "bool"})
_RANGE_KINDS: Final = frozenset({"integer", "float", "date"})
_OP_SYMBOL: Final[dict[CompareOp, str]] = {"eq": "", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_OPS: Final[dict[CompareOp, Callable[[Scalar, Scalar], bool]]] = {
    "eq": operator.eq,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}
_SYMBOL_OP: Final[dict[str, CompareOp]] = {
    ">": "gt",
    ">=": "gte",
    "<": "lt",
    "<=": "lte",
    "=": "eq",
}

_FIELD_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_INT_RE: Final = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT_RE: Final = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DATE_RE: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2})))?"
)
_ARRAY_INDEX_RE: Final = re.compile(r"0|[1-9][0-9]*")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class FilterError(ValueError):
    """Invalid filter text or ``search`` config; ``str(err)`` is a client-facing message."""


class JsonPointerError(ValueError):
    """A string is not a valid RFC 6901 JSON pointer."""


# --------------------------------------------------------------------------- JSON pointer


class _Missing(Enum):
    MISSING = "MISSING"

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing.MISSING
"""Returned by ``json_pointer_get`` when the pointer does not resolve (distinct from JSON null)."""


@functools.lru_cache(maxsize=1024)
def parse_json_pointer(pointer: str) -> tuple[str, ...]:
    """Split an RFC 6901 pointer into unescaped reference tokens (``""`` is the whole doc)."""
    if not isinstance(pointer, str):
        raise JsonPointerError(f"JSON pointer must be a string, got {type(pointer).__name__}")
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise JsonPointerError(f"JSON pointer {pointer!r} must be empty or start with '/'")
    if re.search(r"~(?![01])", pointer):
        raise JsonPointerError(f"JSON pointer {pointer!r} has '~' not followed by 0 or 1")
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/"))


def json_pointer_get(doc: object, pointer: str) -> object:
    """The value at ``pointer`` in ``doc`` or ``MISSING``; a bad pointer raises JsonPointerError.

    Array tokens must be canonical indexes (``0`` or no leading zero); ``-`` never resolves.
    """
    current = doc
    for token in parse_json_pointer(pointer):
        if type(current) is dict or isinstance(current, Mapping):  # dict first: the ABC is slow
            if token not in current:
                return MISSING
            current = current[token]
        elif isinstance(current, list | tuple):
            if not _ARRAY_INDEX_RE.fullmatch(token) or int(token) >= len(current):
                return MISSING
            current = current[int(token)]
        else:
            return MISSING
    return current


# --------------------------------------------------------------------------- field config


@dataclass(frozen=True, slots=True)
class FieldBinding:
    """Where a field lives in documents written under schema ``version`` and later."""

    version: int
    pointer: str


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One ``search.fields`` entry; construction enforces the reference's per-kind rules."""

    name: str
    kind: FieldKind
    bindings: tuple[FieldBinding, ...]
    normalizer: Normalizer | None = None
    analyzer: Analyzer | None = None
    exact: bool = False
    prefix: bool = False
    column: bool = False
    exists: bool = False
    sortable: bool = False
    aggregatable: bool = False
    contains: bool = False
    positions: bool = False

    def __post_init__(self) -> None:
        where = f"search.fields.{self.name}"
        _check_field_name(self.name, "search.fields")
        if self.kind not in _KINDS:
            raise FilterError(f"{where}.kind must be one of {_kinds_text()}, got {self.kind!r}")
        if not self.bindings:
            raise FilterError(f"{where}.bindings must be a non-empty array")
        seen: set[int] = set()
        for i, b in enumerate(self.bindings):
            if isinstance(b.version, bool) or not isinstance(b.version, int) or b.version < 1:
                raise FilterError(f"{where}.bindings[{i}].version must be a positive integer")
            if b.version in seen:
                raise FilterError(f"{where}.bindings[{i}].version duplicates {b.version}")
            seen.add(b.version)
            try:
                parse_json_pointer(b.pointer)
            except JsonPointerError as exc:
                raise FilterError(f"{where}.bindings[{i}].jsonPointer: {exc}") from None
        for attr, allowed in (("normalizer", Normalizer), ("analyzer", Analyzer)):
            value = getattr(self, attr)
            if value is not None and value not in get_args(allowed):
                options = " or ".join(get_args(allowed))
                raise FilterError(f"{where}.{attr} must be {options}, got {value!r}")
        self._check_kind_rules(where)

    def _check_kind_rules(self, where: str) -> None:
        def forbid(attr: str, what: str) -> None:
            if getattr(self, attr):
                raise FilterError(f"{where}.{attr} is not supported for {what}")

        if self.kind == "text":
            if self.analyzer is None:
                raise FilterError(f"{where}.analyzer is required for text fields")
            for attr in ("column", "sortable", "aggregatable"):
                forbid(attr, "text fields")
        else:
            forbid("positions", f"{self.kind} fields (text only)")
        if self.kind == "keyword":
            forbid("analyzer", "keyword fields")
        if self.kind in _TYPED_KINDS:
            for attr in ("prefix", "contains", "normalizer", "analyzer"):
                forbid(attr, "typed fields")

    @property
    def pointer(self) -> str:
        """The JSON pointer of the newest binding (documents are read promoted to it, §12)."""
        return max(self.bindings, key=lambda b: b.version).pointer

    def pointer_for(self, version: int | None) -> str | None:
        """Pointer for documents of schema ``version`` (newest binding if ``None``)."""
        if len(self.bindings) == 1:  # the common case, on every value read
            only = self.bindings[0]
            return only.pointer if version is None or only.version <= version else None
        if version is None:
            return self.pointer
        usable = [b for b in self.bindings if b.version <= version]
        return max(usable, key=lambda b: b.version).pointer if usable else None

    def values(self, doc: object, version: int | None = None) -> list[Scalar]:
        """The field's usable values in ``doc``: arrays flattened, wrong-typed values dropped."""
        pointer = self.pointer_for(version)
        if pointer is None:
            return []
        raw = json_pointer_get(doc, pointer)
        if raw is MISSING:
            return []
        if type(raw) is not list and type(raw) is not tuple:  # a scalar: the common case
            one = _doc_value(self, raw)
            return [] if one is None else [one]
        out: list[Scalar] = []
        for item in _flatten(raw):
            value = _doc_value(self, item)
            if value is not None:
                out.append(value)
        return out


_FLAG_KEYS: Final = (
    "exact",
    "prefix",
    "column",
    "exists",
    "sortable",
    "aggregatable",
    "contains",
    "positions",
)
_FIELD_KEYS: Final = frozenset({"kind", "bindings", "normalizer", "analyzer", *_FLAG_KEYS})
_SEARCH_KEYS: Final = frozenset(
    {"profile", "primaryTimestampField", "defaultFields", "containsDefaultFields"}
    | {"aliases", "fields", "rollups"}
)


def _kinds_text() -> str:
    return ", ".join(sorted(_KINDS))


def _check_field_name(name: object, where: str) -> str:
    if not isinstance(name, str) or not _FIELD_NAME_RE.fullmatch(name):
        raise FilterError(f"{where}: field name {name!r} must match ^[A-Za-z0-9][A-Za-z0-9._-]*$")
    if len(name) > MAX_FIELD_NAME_LENGTH:
        raise FilterError(f"{where}: field name {name!r} is longer than {MAX_FIELD_NAME_LENGTH}")
    return name


def _reject_unknown_keys(raw: Mapping[str, object], allowed: frozenset[str], where: str) -> None:
    for key in raw:
        if key not in allowed:
            raise FilterError(f"{where}.{key} is not supported")


def _field_from_config(name: str, raw: object) -> FieldSpec:
    where = f"search.fields.{name}"
    if not isinstance(raw, Mapping):
        raise FilterError(f"{where} must be an object")
    _reject_unknown_keys(raw, _FIELD_KEYS, where)
    kind = raw.get("kind")
    if kind not in _KINDS:
        raise FilterError(f"{where}.kind must be one of {_kinds_text()}, got {kind!r}")
    raw_bindings = raw.get("bindings")
    if not isinstance(raw_bindings, list) or not raw_bindings:
        raise FilterError(f"{where}.bindings must be a non-empty array")
    bindings: list[FieldBinding] = []
    for i, rb in enumerate(raw_bindings):
        if not isinstance(rb, Mapping):
            raise FilterError(f"{where}.bindings[{i}] must be an object")
        _reject_unknown_keys(rb, frozenset({"version", "jsonPointer"}), f"{where}.bindings[{i}]")
        version, pointer = rb.get("version"), rb.get("jsonPointer")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise FilterError(f"{where}.bindings[{i}].version must be a positive integer")
        if not isinstance(pointer, str):
            raise FilterError(f"{where}.bindings[{i}].jsonPointer must be a string")
        bindings.append(FieldBinding(version, pointer))
    flags: dict[str, bool] = {}
    for key in _FLAG_KEYS:
        value = raw.get(key, False)
        if not isinstance(value, bool):
            raise FilterError(f"{where}.{key} must be a boolean")
        flags[key] = value
    for key in ("normalizer", "analyzer"):
        if key in raw and not isinstance(raw[key], str):
            raise FilterError(f"{where}.{key} must be a string")
    return FieldSpec(
        name=name,
        kind=cast(FieldKind, kind),
        bindings=tuple(bindings),
        normalizer=cast(Normalizer | None, raw.get("normalizer")),
        analyzer=cast(Analyzer | None, raw.get("analyzer")),
        **flags,
    )


def fields_from_config(config: Mapping[str, object]) -> dict[str, FieldSpec]:
    """Validate a schema registry's ``search`` object; map field and alias names to specs.

    ``fields`` and ``aliases`` are validated fully (an alias maps to its target's spec, whose
    ``name`` stays canonical); ``primaryTimestampField`` is checked when present. The other
    reference keys (``profile``, ``defaultFields``, ``containsDefaultFields``, ``rollups``) are
    accepted but not inspected here; any other key is rejected. Raises ``FilterError``.
    """
    if not isinstance(config, Mapping):
        raise FilterError("search must be an object")
    _reject_unknown_keys(config, _SEARCH_KEYS, "search")
    raw_fields = config.get("fields")
    if not isinstance(raw_fields, Mapping) or not raw_fields:
        raise FilterError("search.fields must be a non-empty object")
    specs: dict[str, FieldSpec] = {}
    for name, raw in raw_fields.items():
        specs[_check_field_name(name, "search.fields")] = _field_from_config(name, raw)
    primary = config.get("primaryTimestampField")
    if primary is not None:
        if not isinstance(primary, str) or primary not in specs:
            raise FilterError("search.primaryTimestampField must reference a declared field")
        if specs[primary].kind != "date":
            raise FilterError("search.primaryTimestampField must reference a date field")
    raw_aliases = config.get("aliases", {})
    if not isinstance(raw_aliases, Mapping):
        raise FilterError("search.aliases must be an object")
    resolved = dict(specs)
    for alias, target in raw_aliases.items():
        _check_field_name(alias, "search.aliases")
        if alias in specs:
            raise FilterError(f"search.aliases.{alias} collides with a declared field")
        if not isinstance(target, str) or target not in specs:
            raise FilterError(f"search.aliases.{alias} must reference a declared field")
        resolved[alias] = specs[target]
    return resolved


# --------------------------------------------------------------------------- value typing


def _flatten(value: object) -> Iterator[object]:
    if isinstance(value, list | tuple):
        for item in value:
            yield from _flatten(item)
    else:
        yield value


def _parse_date_ms(text: str) -> int | None:
    """RFC 3339 (zone required) or ``YYYY-MM-DD`` as UTC, to epoch milliseconds (floored)."""
    m = _DATE_RE.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second, frac, zulu, sign, off_h, off_m = m.groups()
    try:
        if hour is None:
            moment = datetime(int(year), int(month), int(day), tzinfo=UTC)
        else:
            offset = timedelta(0)
            if zulu is None:
                offset = timedelta(hours=int(off_h), minutes=int(off_m))
                offset = -offset if sign == "-" else offset
            micros = int((frac or "").ljust(6, "0")[:6])
            moment = datetime(
                int(year),
                int(month),
                int(day),
                int(hour),
                int(minute),
                int(second),
                micros,
                tzinfo=timezone(offset),
            )
    except ValueError:
        return None
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _doc_value(spec: FieldSpec, value: object) -> Scalar | None:
    """Canonical form of one document value for ``spec``, or ``None`` if unusable."""
    kind = spec.kind
    if kind in ("keyword", "text"):
        if not isinstance(value, str):
            return None
        return value.lower() if spec.normalizer == "lowercase_v1" else value
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        return None
    if isinstance(value, bool):
        return None
    if kind == "integer":
        if isinstance(value, int):
            return value
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        if isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
            return int(value.strip())
        return None
    if kind == "float":
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        if isinstance(value, str) and _FLOAT_RE.fullmatch(value.strip()):
            parsed = float(value.strip())
            return parsed if math.isfinite(parsed) else None
        return None
    # date
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return math.trunc(value) if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        if _INT_RE.fullmatch(text):
            return int(text)
        return _parse_date_ms(text)
    return None


def _query_value(spec: FieldSpec, raw: str) -> Scalar:
    """Typed value of a clause's literal for ``spec``; raises ``FilterError``."""
    kind, where = spec.kind, f"field {spec.name!r}"
    if kind == "keyword":
        return raw.lower() if spec.normalizer == "lowercase_v1" else raw
    if kind == "bool":
        if raw.lower() not in ("true", "false"):
            raise FilterError(f"{where} is a bool field; expected true or false, got {raw!r}")
        return raw.lower() == "true"
    if kind == "integer":
        if not _INT_RE.fullmatch(raw):
            raise FilterError(f"{where} is an integer field; expected an integer, got {raw!r}")
        return int(raw)
    if kind == "float":
        parsed = float(raw) if _FLOAT_RE.fullmatch(raw) else math.nan
        if not math.isfinite(parsed):
            raise FilterError(f"{where} is a float field; expected a number, got {raw!r}")
        return parsed
    ms = int(raw) if _INT_RE.fullmatch(raw) else _parse_date_ms(raw)
    if ms is None:
        raise FilterError(
            f"{where} is a date field; expected an RFC 3339 timestamp with a zone "
            f"(2024-01-01T00:00:00Z), a date (2024-01-01) or epoch milliseconds, got {raw!r}"
        )
    return ms


# --------------------------------------------------------------------------- predicates


class Predicate(ABC):
    """A compiled filter. ``str(p)`` is a canonical, fully parenthesised filter text."""

    __slots__ = ()

    @abstractmethod
    def matches(self, doc: object, *, version: int | None = None) -> bool:
        """Whether a decoded JSON ``doc`` (of schema ``version``; newest if None) matches."""

    def evaluate(self, doc: object, *, version: int | None = None) -> tuple[bool, float]:
        """(matches, score): only text clauses score (``_search``); everything else is 0."""
        return self.matches(doc, version=version), 0.0


@dataclass(frozen=True, slots=True)
class And(Predicate):
    children: tuple[Predicate, ...]

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        return all(c.matches(doc, version=version) for c in self.children)

    def evaluate(self, doc: object, *, version: int | None = None) -> tuple[bool, float]:
        total = 0.0
        for c in self.children:
            ok, score = c.evaluate(doc, version=version)
            if not ok:
                return False, 0.0
            total += score
        return True, total

    def __str__(self) -> str:
        return "(" + " AND ".join(map(str, self.children)) + ")"


@dataclass(frozen=True, slots=True)
class Or(Predicate):
    children: tuple[Predicate, ...]

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        return any(c.matches(doc, version=version) for c in self.children)

    def evaluate(self, doc: object, *, version: int | None = None) -> tuple[bool, float]:
        results = [c.evaluate(doc, version=version) for c in self.children]
        return any(ok for ok, _ in results), sum(score for ok, score in results if ok)

    def __str__(self) -> str:
        return "(" + " OR ".join(map(str, self.children)) + ")"


@dataclass(frozen=True, slots=True)
class Not(Predicate):
    child: Predicate

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        return not self.child.matches(doc, version=version)

    def __str__(self) -> str:
        return f"NOT {self.child}"


@dataclass(frozen=True, slots=True)
class Has(Predicate):
    field: FieldSpec

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        return bool(self.field.values(doc, version))

    def __str__(self) -> str:
        return f"has:{self.field.name}"


@dataclass(frozen=True, slots=True)
class Compare(Predicate):
    field: FieldSpec
    op: CompareOp
    value: Scalar

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        test = _OPS[self.op]
        return any(test(v, self.value) for v in self.field.values(doc, version))

    def __str__(self) -> str:
        value = self.value
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float):
            text = repr(value)
        elif isinstance(value, int):
            text = str(value)
        else:
            text = _quote_if_needed(value)
        return f"{self.field.name}:{_OP_SYMBOL[self.op]}{text}"


_WORD_RE: Final = re.compile(r"[^\W_]+")


def analyze(text: str) -> list[str]:
    """The ``unicode_word_v1`` analyzer: lowercase, then the maximal runs of Unicode letters
    and digits (categories L* and N*; everything else, ``_`` included, separates tokens)."""
    return _WORD_RE.findall(text.lower())


@dataclass(frozen=True, slots=True)
class Prefix(Predicate):
    """``field:value*`` on a keyword field with ``prefix: true`` (normalized like equality)."""

    field: FieldSpec
    value: str

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        return any(
            isinstance(v, str) and v.startswith(self.value) for v in self.field.values(doc, version)
        )

    def __str__(self) -> str:
        return f"{self.field.name}:{_quote_if_needed(self.value)}*"


@dataclass(frozen=True, slots=True)
class TextTarget:
    """One field a text clause searches, with its query tokens and ``defaultFields`` boost.
    A keyword target has one token (the whole normalized value); a text target the
    analyzer's tokens of the clause."""

    field: FieldSpec
    tokens: tuple[str, ...]
    boost: float = 1.0


@dataclass(frozen=True, slots=True)
class Text(Predicate):
    """A full-text clause (``_search`` only): a bare term or phrase over
    ``search.defaultFields``, or ``field:words`` / ``field:"a phrase"`` on a text field.

    On a text target: a phrase matches consecutive tokens; otherwise every query token must
    occur. With a trailing ``*`` the last query token matches as a token prefix. On a keyword
    target the normalized value is compared whole (or as a prefix). The score follows the
    reference: per target (occurrences of the query tokens + 2 per token for a phrase) times
    the boost, the best target counting; AND and OR add the scores of matching children."""

    targets: tuple[TextTarget, ...]
    phrase: bool = False
    prefix: bool = False
    raw: str = ""

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        return self.evaluate(doc, version=version)[0]

    def evaluate(self, doc: object, *, version: int | None = None) -> tuple[bool, float]:
        matched, best = False, 0.0
        for t in self.targets:
            for value in t.field.values(doc, version):
                if not isinstance(value, str):
                    continue
                if t.field.kind == "keyword":
                    want = t.tokens[0]
                    if value.startswith(want) if self.prefix else value == want:
                        matched, best = True, max(best, t.boost)
                    continue
                score = _text_score(analyze(value), t.tokens, self.phrase, self.prefix)
                if score is not None:
                    matched, best = True, max(best, score * t.boost)
        return matched, best

    def __str__(self) -> str:
        body = '"' + self.raw.replace("\\", "\\\\").replace('"', '\\"') + '"'
        names = ",".join(t.field.name for t in self.targets)
        return f"text[{names}]:{body}{'*' if self.prefix else ''}"


def _token_hit(doc_token: str, want: str, prefix: bool) -> bool:
    return doc_token.startswith(want) if prefix else doc_token == want


def _text_score(doc: list[str], query: tuple[str, ...], phrase: bool, prefix: bool) -> float | None:
    """Score of one analyzed value against the query tokens, None when it does not match."""
    last = len(query) - 1
    if phrase:
        ok = any(
            all(_token_hit(doc[start + i], q, prefix and i == last) for i, q in enumerate(query))
            for start in range(len(doc) - len(query) + 1)
        )
    else:
        ok = all(
            any(_token_hit(d, q, prefix and i == last) for d in doc) for i, q in enumerate(query)
        )
    if not ok:
        return None
    hits = sum(
        sum(1 for d in doc if _token_hit(d, q, prefix and i == last)) for i, q in enumerate(query)
    )
    return float(hits + (2 * len(query) if phrase else 0))


def _quote_if_needed(value: str) -> str:
    if value and not re.search(r'[\s()"]', value) and value[0] not in "<>=":
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --------------------------------------------------------------------------- lexer


@dataclass(frozen=True, slots=True)
class _Token:
    kind: Literal["(", ")", "NOT", "AND", "OR", "has", "clause", "term"]
    pos: int
    field: str = ""
    op: CompareOp = "eq"
    value: str = ""
    quoted: bool = False


_WORD_STOP: Final = frozenset('():"')
_VALUE_STOP: Final = frozenset("()")


def _run(text: str, start: int, stop: frozenset[str]) -> int:
    end = start
    while end < len(text) and not text[end].isspace() and text[end] not in stop:
        end += 1
    return end


def _quoted(text: str, start: int) -> tuple[str, int]:
    """Parse a quoted value starting at ``text[start] == '"'``; return (value, end)."""
    out: list[str] = []
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = i + 1
            if end < len(text) and not text[end].isspace() and text[end] not in "()":
                raise FilterError(
                    f"expected whitespace or ')' after closing quote at position {end}"
                )
            return "".join(out), end
        if ch == "\\":
            nxt = text[i + 1] if i + 1 < len(text) else ""
            if nxt not in ('"', "\\"):
                raise FilterError(
                    f'invalid escape at position {i}; only \\" and \\\\ are allowed in quotes'
                )
            out.append(nxt)
            i += 2
            continue
        out.append(ch)
        i += 1
    raise FilterError(f"unterminated quoted value starting at position {start}")


def _tokenize(text: str, search: bool = False) -> list[_Token]:
    """Tokens of ``text``; ``search`` admits bare terms and quoted phrases (``q=``)."""
    tokens: list[_Token] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "()":
            tokens.append(_Token(cast(Literal["(", ")"], ch), i))
            i += 1
        elif ch == "-":
            tokens.append(_Token("NOT", i))
            i += 1
        elif ch == '"':
            if not search:
                raise FilterError(
                    f"unexpected quoted text at position {i}; filter clauses are field:value "
                    "(bare terms are not supported)"
                )
            _count_clause(tokens)
            value, end = _quoted(text, i)
            tokens.append(_Token("term", i, value=value, quoted=True))
            i = end
        else:
            end = _run(text, i, _WORD_STOP)
            word = text[i:end]
            if end < len(text) and text[end] == ":":
                _count_clause(tokens)
                token, end = _clause(text, i, word, end + 1)
                tokens.append(token)
            elif word.upper() in ("AND", "OR", "NOT"):
                tokens.append(_Token(cast(Literal["AND", "OR", "NOT"], word.upper()), i))
            elif word and search:
                _count_clause(tokens)
                tokens.append(_Token("term", i, value=word))
            elif word:
                raise FilterError(
                    f"expected field:value, has:field, AND, OR, NOT or '(' at position {i}, "
                    f"got {word!r} (bare terms are not supported)"
                )
            else:
                raise FilterError(f"missing field name before ':' at position {i}")
            i = end
    return tokens


def _count_clause(tokens: list[_Token]) -> None:
    if sum(t.kind in ("clause", "has", "term") for t in tokens) >= MAX_FILTER_CLAUSES:
        raise FilterError(f"filter has more than {MAX_FILTER_CLAUSES} clauses")


def _clause(text: str, start: int, field: str, i: int) -> tuple[_Token, int]:
    """Lex the part after ``field:`` (``i`` points just past the colon)."""
    if not field:
        raise FilterError(f"missing field name before ':' at position {start}")
    if field == "has":
        end = _run(text, i, frozenset('()"'))
        if end == i:
            raise FilterError(f"has: at position {start} requires a field name")
        return _Token("has", start, field=text[i:end]), end
    op: CompareOp = "eq"
    for symbol in (">=", "<=", ">", "<", "="):
        if text.startswith(symbol, i):
            op, i = _SYMBOL_OP[symbol], i + len(symbol)
            break
    quoted = i < len(text) and text[i] == '"'
    if quoted:
        value, end = _quoted(text, i)
    else:
        end = _run(text, i, _VALUE_STOP)
        value = text[i:end]
        if not value:
            raise FilterError(f"missing value after '{text[start:i]}' at position {i}")
        if '"' in value:
            at = i + value.index('"')
            raise FilterError(f"unexpected '\"' at position {at}; quote the whole value")
    return _Token("clause", start, field=field, op=op, value=value, quoted=quoted), end


# --------------------------------------------------------------------------- parser


class _Parser:
    def __init__(
        self,
        tokens: list[_Token],
        fields: Mapping[str, FieldSpec],
        search: Mapping[str, object] | None = None,
    ) -> None:
        self.tokens = tokens
        self.fields = fields
        self.search = search  # None: the filter= language; else the search config (q=)
        self.pos = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def parse(self) -> Predicate:
        expr = self.parse_or(0)
        tok = self.peek()
        if tok is not None:
            raise FilterError(f"unexpected ')' at position {tok.pos} (no matching '(')")
        return expr

    def parse_or(self, depth: int) -> Predicate:
        children = [self.parse_and(depth)]
        while (tok := self.peek()) is not None and tok.kind == "OR":
            self.pos += 1
            children.append(self.parse_and(depth))
        return children[0] if len(children) == 1 else Or(tuple(children))

    def parse_and(self, depth: int) -> Predicate:
        children = [self.parse_unary(depth)]
        while (tok := self.peek()) is not None and tok.kind not in (")", "OR"):
            if tok.kind == "AND":
                self.pos += 1
            children.append(self.parse_unary(depth))
        return children[0] if len(children) == 1 else And(tuple(children))

    def parse_unary(self, depth: int) -> Predicate:
        tok = self.peek()
        if tok is not None and tok.kind == "NOT":
            self.pos += 1
            return Not(self.parse_unary(self.deeper(depth, tok)))
        return self.parse_primary(depth)

    def deeper(self, depth: int, tok: _Token) -> int:
        if depth >= MAX_FILTER_DEPTH:
            raise FilterError(
                f"filter nests parentheses/negations deeper than {MAX_FILTER_DEPTH} levels "
                f"(at position {tok.pos})"
            )
        return depth + 1

    def parse_primary(self, depth: int) -> Predicate:
        tok = self.peek()
        if tok is None:
            after = f" after {self.tokens[-1].kind}" if self.tokens else ""
            raise FilterError(f"expected a clause{after} at end of filter")
        self.pos += 1
        if tok.kind == "(":
            inner_depth = self.deeper(depth, tok)
            nxt = self.peek()
            if nxt is not None and nxt.kind == ")":
                raise FilterError(f"empty parentheses at position {tok.pos}")
            expr = self.parse_or(inner_depth)
            close = self.peek()
            if close is None or close.kind != ")":
                raise FilterError(f"missing ')' for '(' at position {tok.pos}")
            self.pos += 1
            return expr
        if tok.kind in ("has", "clause"):
            return self.compile(tok)
        if tok.kind == "term":
            return self.compile_term(tok)
        raise FilterError(f"unexpected {tok.kind} at position {tok.pos}; expected a clause")

    def lookup(self, name: str, pos: int) -> FieldSpec:
        spec = self.fields.get(name)
        if spec is None:
            known = ", ".join(sorted(self.fields)[:20]) or "(none)"
            raise FilterError(
                f"unknown filter field {name!r} at position {pos}; "
                f"filters may only use search.fields: {known}"
            )
        return spec

    def compile(self, tok: _Token) -> Predicate:
        spec = self.lookup(tok.field, tok.pos)
        name = tok.field
        if self.search is not None and tok.kind == "clause":
            found = self.compile_search(tok, spec)
            if found is not None:
                return found
        if tok.kind == "has":
            text_ok = self.search is not None and spec.kind == "text"
            if not (spec.exists or spec.exact or spec.column or text_ok):
                raise FilterError(
                    f"field {name!r} does not support has: (needs exists, exact or column)"
                )
            return Has(spec)
        if spec.kind == "text":
            raise FilterError(
                f"field {name!r} is a text field; filters support only has:{name} on text "
                "fields (use _search for full-text queries)"
            )
        if tok.op != "eq":
            if spec.kind not in _RANGE_KINDS:
                raise FilterError(
                    f"field {name!r} is a {spec.kind} field; comparisons (>, >=, <, <=) are only "
                    "supported on integer, float and date fields"
                )
            if not spec.column:
                raise FilterError(f"field {name!r} does not support comparisons (needs column)")
        elif not (spec.exact or spec.column):
            raise FilterError(f"field {name!r} does not support equality (needs exact or column)")
        return Compare(spec, tok.op, _query_value(spec, tok.value))

    def compile_search(self, tok: _Token, spec: FieldSpec) -> Predicate | None:
        """The ``q=`` forms beyond ``filter=``: keyword prefixes and text clauses (None: the
        clause is compiled as in a filter)."""
        name, value = tok.field, tok.value
        star = not tok.quoted and len(value) > 1 and value.endswith("*")
        if spec.kind == "keyword" and star and tok.op == "eq":
            if not spec.prefix:
                raise FilterError(f"field {name!r} does not support prefix queries (needs prefix)")
            return Prefix(spec, str(_query_value(spec, value[:-1])))
        if spec.kind != "text":
            return None
        if tok.op != "eq":
            raise FilterError(f"field {name!r} is a text field; comparisons are not supported")
        return self.text([(spec, 1.0)], value, tok.quoted, tok.pos)

    def compile_term(self, tok: _Token) -> Predicate:
        """A bare term or quoted phrase: a text clause over ``search.defaultFields`` (every
        text field when none are listed)."""
        assert self.search is not None  # the filter tokenizer never makes terms
        targets: list[tuple[FieldSpec, float]] = []
        defaults = self.search.get("defaultFields") or []
        if isinstance(defaults, list) and defaults:
            for item in defaults:
                if isinstance(item, Mapping) and item.get("field") in self.fields:
                    boost = item.get("boost", 1)
                    targets.append((self.fields[str(item["field"])], float(cast(float, boost))))
        else:
            targets = [(s, 1.0) for n, s in self.fields.items() if s.kind == "text" and s.name == n]
        targets = [(s, b) for s, b in targets if s.kind in ("text", "keyword")]
        if not targets:
            raise FilterError(
                f"bare term at position {tok.pos} needs search.defaultFields (or a text field) "
                "to search; use field:value"
            )
        return self.text(targets, tok.value, tok.quoted, tok.pos)

    def text(
        self, fields: list[tuple[FieldSpec, float]], value: str, quoted: bool, pos: int
    ) -> Predicate:
        prefix = len(value) > 1 and value.endswith("*")
        body = value[:-1] if prefix else value
        targets: list[TextTarget] = []
        for spec, boost in fields:
            tokens: tuple[str, ...]
            if spec.kind == "keyword":
                tokens = (str(_query_value(spec, body.strip())),) if body.strip() else ()
            else:
                tokens = tuple(analyze(body))
                if quoted and len(tokens) > 1 and not spec.positions:
                    raise FilterError(
                        f"phrase at position {pos} on field {spec.name!r}, which does not "
                        "support phrases (needs positions)"
                    )
            if tokens:
                targets.append(TextTarget(spec, tokens, boost))
        if not targets:
            raise FilterError(f"text at position {pos} has no searchable words")
        return Text(tuple(targets), phrase=quoted, prefix=prefix, raw=body)


def parse_query(
    text: str, fields: Mapping[str, FieldSpec], search: Mapping[str, object]
) -> Predicate:
    """Parse a ``_search`` / ``_aggregate`` ``q`` (docs/durable-streams.md, "Search"): the
    ``filter=`` language plus bare terms and quoted phrases over ``search.defaultFields``,
    ``field:words`` and ``field:"a phrase"`` on text fields (phrases need ``positions``),
    and ``field:value*`` prefixes on keyword fields with ``prefix``. Raises ``FilterError``."""
    if not isinstance(text, str):
        raise FilterError(f"q must be a string, got {type(text).__name__}")
    if len(text) > MAX_FILTER_LENGTH:
        raise FilterError(f"q is longer than {MAX_FILTER_LENGTH} characters")
    if not text.strip():
        raise FilterError("q must not be empty")
    return _Parser(_tokenize(text, search=True), fields, search).parse()


def parse_filter(text: str, fields: Mapping[str, FieldSpec]) -> Predicate:
    """Parse and type-check ``text`` against ``fields``; raises ``FilterError``."""
    if not isinstance(text, str):
        raise FilterError(f"filter must be a string, got {type(text).__name__}")
    if len(text) > MAX_FILTER_LENGTH:
        raise FilterError(f"filter is longer than {MAX_FILTER_LENGTH} characters")
    if not text.strip():
        raise FilterError("filter must not be empty")
    return _Parser(_tokenize(text), fields).parse()
