"""The desired index families of a stream, derived from its schema registry.

``IndexPlan.from_registry(registry)`` reads ``routingKey`` and ``search`` and returns what a
segment companion (``index.companion``) holds for that stream, or ``None`` when there is
nothing to index:

* ``rk``: the distinct routing keys of the segment (when ``routingKey`` is configured);
* ``exact``: declared fields with ``exact: true`` (and keyword fields with ``prefix: true``):
  sorted normalized values -> doc ordinals; answers equality, ``has:``, keyword prefixes and
  keyword text targets;
* ``col``: declared non-text fields with ``column: true``: per-doc typed values; answers
  equality, ranges and ``has:``;
* ``fts``: declared ``text`` fields: analyzed terms -> postings (positions when
  ``positions: true``); answers text clauses, phrases and ``has:``;
* ``agg``: every ``search.rollups`` entry, for every configured interval.

``generation`` is the hex sha256 of the canonical JSON of exactly what determines the built
bytes (format version, which families, per indexed field its kind/bindings/normalizer/
analyzer/positions, per rollup its timestamp/dimension/measure fields, intervals and the
compiled ``include`` filters). Flags that only gate the query parser (``sortable``,
``aggregatable``, ``exists``), ``defaultFields`` boosts, the ``routingKey`` pointer (the key
is read from the stored record tag) and ``profile`` do not change it. The integrator stores
the generation in the stream's companion catalogue item; a companion whose header generation
differs from the current plan's is stale (rebuild it; until then scan that segment).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from headwater.durable.fields import FieldSpec, fields_from_config
from headwater.durable.filter import (
    And,
    Compare,
    Has,
    Not,
    Or,
    Predicate,
    Prefix,
    Text,
    parse_query,
)

FORMAT_VERSION: Final = 1
FAMILIES: Final = ("rk", "exact", "col", "fts", "agg")


def canonical_json(value: object) -> bytes:
    """Deterministic JSON: sorted keys, no whitespace, ASCII only (lone surrogates survive),
    floats by ``repr`` (shortest round-trip), non-finite floats as ``Infinity``/``NaN``."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode(
        "ascii"
    )


def field_fingerprint(spec: FieldSpec, family: str) -> dict[str, Any]:
    """What of a field determines the bytes of `family` (also stored in the companion, so a
    reader refuses to answer for a query field whose spec differs from the indexed one)."""
    out: dict[str, Any] = {
        "kind": spec.kind,
        "bindings": sorted([b.version, b.pointer] for b in spec.bindings),
    }
    if family in ("exact", "fts", "pred"):
        out["normalizer"] = spec.normalizer
    if family in ("fts", "pred"):
        out["analyzer"] = spec.analyzer
    if family == "fts":
        out["positions"] = spec.positions
    return out


def _predicate_fields(p: Predicate, out: dict[str, FieldSpec]) -> None:
    if isinstance(p, And | Or):
        for c in p.children:
            _predicate_fields(c, out)
    elif isinstance(p, Not):
        _predicate_fields(p.child, out)
    elif isinstance(p, Has | Compare | Prefix):
        out[p.field.name] = p.field
    elif isinstance(p, Text):
        for t in p.targets:
            out[t.field.name] = t.field


def predicate_fingerprint(p: Predicate) -> dict[str, Any]:
    """The compiled filter text plus the specs of the fields it reads."""
    used: dict[str, FieldSpec] = {}
    _predicate_fields(p, used)
    return {
        "q": str(p),
        "fields": {n: field_fingerprint(s, "pred") for n, s in sorted(used.items())},
    }


@dataclass(frozen=True, slots=True)
class IndexPlan:
    """What a companion built for this stream contains. ``registry`` is kept because rollup
    evaluation compiles the rollups' ``include`` filters against it."""

    registry: Mapping[str, Any] = field(compare=False, repr=False)
    routing_keys: bool
    exact: tuple[FieldSpec, ...]
    col: tuple[FieldSpec, ...]
    fts: tuple[FieldSpec, ...]
    rollups: tuple[str, ...]
    generation: str  # hex sha256 (64 chars)

    @property
    def generation_bytes(self) -> bytes:
        return bytes.fromhex(self.generation)

    @classmethod
    def from_registry(cls, registry: Mapping[str, Any]) -> IndexPlan | None:
        """The plan for a (validated) schema registry; None when no family applies."""
        search: Mapping[str, Any] = registry.get("search") or {}
        fields = fields_from_config(search) if search else {}
        declared = {n: s for n, s in sorted(fields.items()) if s.name == n}
        exact = tuple(s for s in declared.values() if s.exact or (s.kind == "keyword" and s.prefix))
        col = tuple(s for s in declared.values() if s.column and s.kind != "text")
        fts = tuple(s for s in declared.values() if s.kind == "text")
        rollups_cfg: Mapping[str, Any] = search.get("rollups") or {}
        rollups = tuple(sorted(rollups_cfg))
        rk = bool(registry.get("routingKey"))
        if not (rk or exact or col or fts or rollups):
            return None
        desc: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "rk": rk,
            "exact": {s.name: field_fingerprint(s, "exact") for s in exact},
            "col": {s.name: field_fingerprint(s, "col") for s in col},
            "fts": {s.name: field_fingerprint(s, "fts") for s in fts},
            "agg": {
                name: _rollup_fingerprint(rollups_cfg[name], search, fields) for name in rollups
            },
        }
        generation = hashlib.sha256(canonical_json(desc)).hexdigest()
        return cls(registry, rk, exact, col, fts, rollups, generation)


def _rollup_fingerprint(
    cfg: Mapping[str, Any], search: Mapping[str, Any], fields: Mapping[str, FieldSpec]
) -> dict[str, Any]:
    def q(text: str) -> dict[str, Any]:
        return predicate_fingerprint(parse_query(text, fields, search))

    ts = fields[cfg.get("timestampField") or search["primaryTimestampField"]]
    measures: dict[str, Any] = {}
    for m, spec in cfg["measures"].items():
        kind = spec["kind"]
        if kind == "count":
            measures[m] = {
                "kind": kind,
                "include": q(spec["include"]) if spec.get("include") else None,
            }
        elif kind == "summary":
            measures[m] = {
                "kind": kind,
                "field": field_fingerprint(fields[spec["field"]], "pred"),
                "histogram": spec.get("histogram", "log2_v1"),
            }
        else:
            measures[m] = {k: v for k, v in spec.items()}
    return {
        "ts": field_fingerprint(ts, "pred"),
        "include": q(cfg["include"]) if cfg.get("include") else None,
        # order matters: a group key lists the dimensions in this order
        "dimensions": [
            [d, field_fingerprint(fields[d], "pred")] for d in cfg.get("dimensions", [])
        ],
        "intervals": sorted(cfg["intervals"]),
        "measures": measures,
    }
