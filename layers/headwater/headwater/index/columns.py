"""A segment's field values as the index families see them: ``PerDoc`` reads each field's
values of every document once (``FieldSpec.values``, a column at a time in the common case)
however many families index the field; ``spec_key`` is what those values depend on and
``exact_key`` the key a value has in the ``exact`` family (shared by the writer and the
query side).

Pure: durable.fields and durable.jsonvalue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from headwater.durable.fields import FieldSpec, doc_value
from headwater.durable.jsonvalue import MISSING, parse_date_ms, parse_json_pointer


def exact_key(v: Any) -> Any:
    """Equal numbers get one key (3 and 3.0); Python compares int and float exactly, so a
    float is replaced by its int only when it is integer-valued."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def spec_key(spec: FieldSpec) -> tuple[Any, ...]:
    """What a field's indexed values depend on (not its name alone: a stale plan may bind
    the same name elsewhere)."""
    return (spec.name, spec.kind, spec.normalizer, spec.bindings)


class PerDoc:
    """Each field's values per document, read once however many families index the field
    (a field's values depend on its kind, normalizer and bindings, not on its name)."""

    def __init__(self, values: list[object], versions: list[int | None]) -> None:
        self.values, self.versions = values, versions
        self._memo: dict[Any, list[Sequence[Any]]] = {}
        self._versions = set(versions)
        self._raws: dict[str, list[object]] = {}  # top-level key -> each doc's value there

    def of(self, spec: FieldSpec) -> list[Sequence[Any]]:
        key = spec_key(spec)[1:]
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._read(spec)
        return got

    def _read(self, spec: FieldSpec) -> list[Sequence[Any]]:
        """`spec.values(doc, version)` of every doc (a list, or () for none), a column at a
        time in the common case: one schema version and a pointer of one token."""
        if len(self._versions) == 1:
            (v,) = self._versions
            top = _top_token(spec, v)
            if top is not None:
                return self._column(spec, top, v)
        return self._by_doc(spec)

    def _column(self, spec: FieldSpec, top: str, v: int | None) -> list[Sequence[Any]]:
        raws = self._raws.get(top)
        if raws is None:
            raws = self._raws[top] = [
                d.get(top, MISSING) if type(d) is dict else _NOT_AN_OBJECT for d in self.values
            ]
        kind = spec.kind
        out: list[Sequence[Any] | None]
        # the common types as comprehensions; None marks a doc left to the general path
        if kind in ("keyword", "text"):
            if spec.normalizer == "lowercase_v1":
                out = [[x.lower()] if type(x) is str else None for x in raws]
            else:
                out = [[x] if type(x) is str else None for x in raws]
        elif kind == "integer":
            out = [[x] if type(x) is int else None for x in raws]
        elif kind == "float":
            out = [
                [x] if type(x) is int or (type(x) is float and x - x == 0.0) else None for x in raws
            ]
        elif kind == "date":
            days = _DateCache()
            out = [
                [x]
                if type(x) is int
                else [ms]
                if type(x) is str and (ms := days.ms(x)) is not None
                else None
                for x in raws
            ]
        else:
            out = [None] * len(raws)
        slow = spec.values
        for i, got in enumerate(out):
            if got is None:
                x = raws[i]
                if x is MISSING:
                    out[i] = ()
                elif x is _NOT_AN_OBJECT or type(x) is list or type(x) is tuple:
                    out[i] = slow(self.values[i], v)
                else:
                    one = doc_value(spec, x)
                    out[i] = () if one is None else [one]
        return out  # type: ignore[return-value]

    def _by_doc(self, spec: FieldSpec) -> list[Sequence[Any]]:
        """Docs of several schema versions: each doc's pointer by its version."""
        tops: dict[int | None, str | None] = {}
        out: list[Sequence[Any]] = []
        slow = spec.values
        for doc, v in zip(self.values, self.versions, strict=True):
            if v not in tops:
                tops[v] = _top_token(spec, v)
            top = tops[v]
            if top is None or type(doc) is not dict:
                out.append(slow(doc, v))
                continue
            raw = doc.get(top, MISSING)
            if raw is MISSING:
                out.append(())
            elif type(raw) is list or type(raw) is tuple:
                out.append(slow(doc, v))
            else:
                one = doc_value(spec, raw)
                out.append(() if one is None else [one])
        return out


_NOT_AN_OBJECT: Final = object()


def _top_token(spec: FieldSpec, version: int | None) -> str | None:
    """The one token of the field's pointer for `version`, when it has exactly one."""
    pointer = spec.pointer_for(version)
    tokens = parse_json_pointer(pointer) if pointer is not None else None
    return tokens[0] if tokens is not None and len(tokens) == 1 else None


class _DateCache:
    """`_doc_value` of a date string, with the common `YYYY-MM-DDTHH:MM:SS.mmmZ` shape parsed
    from the minute it starts (validated once per minute by the general parser); None for
    anything else, which the caller leaves to the general parser."""

    __slots__ = ("minutes",)

    def __init__(self) -> None:
        self.minutes: dict[str, int | None] = {}

    def ms(self, text: str) -> int | None:
        if len(text) == 24 and text[19] == "." and text[23] == "Z" and text[16] == ":":
            digits = text[17:19] + text[20:23]
            if digits.isascii() and digits.isdigit() and text[17] < "6":
                minute = text[:17]
                if minute in self.minutes:
                    base = self.minutes[minute]
                else:
                    base = self.minutes[minute] = parse_date_ms(minute + "00Z")
                if base is not None:
                    return base + int(digits[:2]) * 1000 + int(digits[2:])
        return None  # another shape: the general parser's
