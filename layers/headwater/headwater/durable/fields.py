"""A stream's searchable fields (schema ``search.fields``, protocol §4.1, §12; field shape as
in the reference ``schemas.md``): each field's kind, its per-schema-version ``bindings`` of
``jsonPointer``, its capability bits, and how a document value or a query value is typed
for it (``doc_value``, ``query_value``). The filter language (filter.py), ``_search`` and
the index families (index/companion.py) all type values here."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, cast, get_args

from headwater.durable.jsonvalue import (
    MISSING,
    JsonPointerError,
    flatten,
    json_pointer_get,
    parse_date_ms,
    parse_json_pointer,
)

MAX_FIELD_NAME_LENGTH: Final = 64

FieldKind: TypeAlias = Literal["keyword", "text", "integer", "float", "date", "bool"]
Normalizer: TypeAlias = Literal["identity_v1", "lowercase_v1"]
Analyzer: TypeAlias = Literal["unicode_word_v1"]
Scalar: TypeAlias = int | float | bool | str

_KINDS: Final[frozenset[str]] = frozenset(get_args(FieldKind))
_TYPED_KINDS: Final = frozenset({"integer", "float", "date", "bool"})
RANGE_KINDS: Final = frozenset({"integer", "float", "date"})
_FIELD_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_INT_RE: Final = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT_RE: Final = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class FilterError(ValueError):
    """Invalid filter text or ``search`` config; ``str(err)`` is a client-facing message."""


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
            one = doc_value(self, raw)
            return [] if one is None else [one]
        out: list[Scalar] = []
        for item in flatten(raw):
            value = doc_value(self, item)
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


def doc_value(spec: FieldSpec, value: object) -> Scalar | None:
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
        return parse_date_ms(text)
    return None


def query_value(spec: FieldSpec, raw: str) -> Scalar:
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
    ms = int(raw) if _INT_RE.fullmatch(raw) else parse_date_ms(raw)
    if ms is None:
        raise FilterError(
            f"{where} is a date field; expected an RFC 3339 timestamp with a zone "
            f"(2024-01-01T00:00:00Z), a date (2024-01-01) or epoch milliseconds, got {raw!r}"
        )
    return ms
