"""Writing one sealed segment's companion object: ``build_companion(plan, docs)`` builds the
families the plan asks for (``seq`` runs, ``rk`` routing keys, ``exact`` postings, ``col``
columns, ``fts`` postings with positions, ``agg`` rollup windows by index/agg.py) and frames
them (index/format.py). Pure and deterministic: the Glue job and the in-process indexer
(index/build.py's ``build_segment``) write byte-identical objects for the same plan and
records.

Import discipline: this module and everything it imports (index.plan, .format, .docs,
.columns, .agg; durable.filter, durable.fields, durable.offsets, engine.records, jsoncodec ->
orjson) are pure, so the Glue job can import it with orjson alone. Rollup semantics are
durable/aggregate.py's own; that module pulls in durable.schema (jsonschema), so index/agg.py
imports it lazily, only when a plan has rollups."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from headwater.durable.fields import FieldSpec
from headwater.durable.filter import analyze
from headwater.index.agg import build_rollup
from headwater.index.columns import PerDoc, exact_key
from headwater.index.docs import UNDECODABLE, SegmentDoc
from headwater.index.format import encode
from headwater.index.plan import IndexPlan, field_fingerprint


def build_companion(plan: IndexPlan, docs: Iterable[SegmentDoc]) -> bytes:
    """The companion object of one segment. Pure and deterministic: the same plan and docs
    (in any order; they are sorted by seq) give byte-identical output."""
    items = sorted(docs, key=lambda d: d.seq)
    if not items:
        raise ValueError("a segment companion needs at least one record")
    for a, b in itertools.pairwise(items):
        if a.seq == b.seq:
            raise ValueError(f"seq {a.seq} appears twice")
    values = [None if d.value is UNDECODABLE else d.value for d in items]
    versions = [d.version or None for d in items]
    per_doc = PerDoc(values, versions)
    sections: dict[str, Any] = {"seq": _seq_runs([d.seq for d in items])}
    if plan.routing_keys:
        keys: dict[str, list[int]] = {}
        for i, d in enumerate(items):
            if d.routing_key is not None:
                keys.setdefault(d.routing_key, []).append(i)
        order = sorted(keys)
        sections["rk"] = {"keys": order, "docs": [keys[k] for k in order]}
    if plan.exact:
        sections["exact"] = {"fields": {s.name: _build_exact(s, per_doc.of(s)) for s in plan.exact}}
    if plan.col:
        sections["col"] = {"fields": {s.name: _build_col(s, per_doc.of(s)) for s in plan.col}}
    if plan.fts:
        sections["fts"] = {"fields": {s.name: _build_fts(s, per_doc.of(s)) for s in plan.fts}}
    stdlib: set[str] = set()
    if plan.rollups:
        overflow: list[bool] = []
        sections["agg"] = {
            "rollups": {
                name: build_rollup(plan, name, values, versions, per_doc, overflow)
                for name in plan.rollups
            }
        }
        if overflow:
            stdlib.add("agg")  # a sum that overflowed: written as Infinity, as documented
    ts = [d.ts_ms for d in items]
    return encode(
        plan.generation_bytes,
        items[0].seq,
        items[-1].seq,
        len(items),
        min(ts),
        max(ts),
        sections,
        stdlib,
    )


def _seq_runs(seqs: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for s in seqs:
        if runs and runs[-1][0] + runs[-1][1] == s:
            runs[-1][1] += 1
        else:
            runs.append([s, 1])
    return runs


def _build_exact(spec: FieldSpec, per_doc: list[Sequence[Any]]) -> dict[str, Any]:
    postings: dict[Any, list[int]] = {}
    get = postings.get
    for i, got in enumerate(per_doc):
        if not got:
            continue
        if len(got) == 1:  # the common case: no dedup or sort
            x = got[0]
            if type(x) is float and x.is_integer():
                x = int(x)  # exact_key, inline
            docs = get(x)
            if docs is None:
                postings[x] = [i]
            else:
                docs.append(i)
            continue
        for key in sorted({exact_key(x) for x in got}):
            postings.setdefault(key, []).append(i)
    order = sorted(postings)
    return {
        "spec": field_fingerprint(spec, "exact"),
        "values": order,
        "docs": [postings[k] for k in order],
    }


def _build_col(spec: FieldSpec, per_doc: list[Sequence[Any]]) -> dict[str, Any]:
    column: list[Any] = []
    every: list[Any] = []
    for got in per_doc:
        every.extend(got)
        column.append(None if not got else got[0] if len(got) == 1 else got)
    return {
        "spec": field_fingerprint(spec, "col"),
        "values": column,
        "min": min(every) if every else None,
        "max": max(every) if every else None,
    }


def _build_fts(spec: FieldSpec, per_doc: list[Sequence[Any]]) -> dict[str, Any]:
    postings: dict[str, list[list[int]]] = {}
    get = postings.get
    present: list[int] = []
    positions = spec.positions
    for i, values in enumerate(per_doc):
        if not values:
            continue
        got = [x for x in values if isinstance(x, str)]
        if got:
            present.append(i)
        for vi, text in enumerate(got):
            # one entry per (doc, value) a term occurs in: [doc, value, *positions]; the
            # entries of a term are in (doc, value) order whatever order its tokens come in
            at: dict[str, list[int]] = {}
            for pos, tok in enumerate(analyze(text)):
                entry = at.get(tok)
                if entry is None:
                    at[tok] = [i, vi, pos] if positions else [i, vi]
                elif positions:
                    entry.append(pos)
            for tok, entry in at.items():
                docs = get(tok)
                if docs is None:
                    postings[tok] = [entry]
                else:
                    docs.append(entry)
    order = sorted(postings)
    return {
        "spec": field_fingerprint(spec, "fts"),
        "docs": present,
        "terms": order,
        "postings": [postings[t] for t in order],
    }
