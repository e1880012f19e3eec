"""The ``agg`` family: a segment's rollups pre-aggregated per window, written by
``build_rollup`` (called by writer.build_companion) and read back by ``read_windows``
(``Companion.rollup_windows``), for ``_aggregate`` requests without ``q``.

Rollup semantics are durable/aggregate.py's own (``Rollup.contribution``, ``_Summary``):
the builder computes exactly what a scan would (``_rollup_columns`` is the columnar fast path
of ``contribution`` for the rollups ``_columnar`` accepts, ``_rollup_by_doc`` the general
one). That module pulls in durable.schema (jsonschema), so it is imported lazily, only when a
plan has rollups or rollup windows are read: importing this module stays pure (the Glue
job)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from headwater.durable.fields import FieldSpec
from headwater.index.columns import PerDoc
from headwater.index.plan import IndexPlan, canonical_json

if TYPE_CHECKING:
    from headwater.durable.aggregate import Group, Rollup, _Summary

# --------------------------------------------------------------------------- building


def _rollup_evaluator(registry: Mapping[str, Any], name: str, interval: str) -> Rollup:
    """``aggregate.Rollup`` for every timestamp (its contribution() is the semantics)."""
    from headwater.durable.aggregate import Rollup, interval_ms

    step = interval_ms(interval)
    r = Rollup({"rollup": name, "from": 0, "to": step, "interval": interval}, registry)
    r.from_ms, r.to_ms = -(2**63), 2**63
    return r


def _summary_state(s: _Summary) -> list[Any]:
    return [s.count, s.sum, s.min, s.max, s.hist]


def build_rollup(
    plan: IndexPlan,
    name: str,
    values: list[object],
    versions: list[int | None],
    per_doc: PerDoc,
    overflow: list[bool],
) -> dict[str, Any]:
    """One rollup's windows; appends to `overflow` when a sum is not finite (the values are,
    but a sum of huge ones can overflow)."""
    cfg = plan.registry["search"]["rollups"][name]
    intervals: dict[str, Any] = {}
    dims: list[str] = []
    kinds: dict[str, str] = {}
    for interval in sorted(cfg["intervals"]):
        r = _rollup_evaluator(plan.registry, name, interval)
        dims = r.dims
        kinds = {m: spec["kind"] for m, spec in r.measures.items()}
        windows: dict[int, dict[bytes, tuple[list[Any], dict[str, Any]]]] = {}
        # each field the rollup reads, per doc, as the other families read it (once)
        specs = [r.ts, *(r.fields[d] for d in dims)]
        specs += [r.fields[m["field"]] for m in r.measures.values() if m["kind"] == "summary"]
        columns = {id(spec): per_doc.of(spec) for spec in specs}
        canonical: dict[Any, bytes] = {}
        order = sorted(kinds)
        at = [0]  # the doc `read` answers for

        def read(
            spec: FieldSpec, at: list[int] = at, cols: dict[int, list[Sequence[Any]]] = columns
        ) -> Sequence[Any]:
            return cols[id(spec)][at[0]]

        if _columnar(r):
            _rollup_columns(r, dims, columns, canonical, windows)
        else:
            _rollup_by_doc(r, dims, values, versions, read, at, canonical, windows, kinds, order)
        intervals[interval] = {
            "step": r.step,
            "windows": [
                [
                    start,
                    [
                        [key_list, {m: _state_out(s, overflow) for m, s in states.items()}]
                        for _, (key_list, states) in sorted(windows[start].items())
                    ],
                ]
                for start in sorted(windows)
            ],
        }
    return {"dimensions": dims, "measures": kinds, "intervals": intervals}


_Windows = dict[int, dict[bytes, tuple[list[Any], dict[str, Any]]]]


def _group_key(canonical: dict[Any, bytes], key_list: list[Any]) -> bytes:
    """A window group's key: the canonical JSON of its dimension values (memoised)."""
    try:
        ck = canonical.get(memo := tuple(key_list))
        if ck is None:
            ck = canonical[memo] = canonical_json(key_list)
    except TypeError:  # an unhashable dimension value (an array)
        ck = canonical_json(key_list)
    return ck


def _columnar(r: Rollup) -> bool:
    """Whether `_rollup_columns` computes exactly what `r.contribution` would: no filters
    (they read whole documents) and measures that read one field each."""
    return (
        r.include is None
        and not r.measure_include
        and all(spec["kind"] in ("count", "summary") for spec in r.measures.values())
    )


def _rollup_columns(
    r: Rollup,
    dims: list[str],
    columns: dict[int, list[Sequence[Any]]],
    canonical: dict[Any, bytes],
    windows: _Windows,
) -> None:
    """`Rollup.contribution` over the field columns, for the rollups `_columnar` accepts:
    the same documents contribute the same values, added in the same (seq) order, so the
    windows are identical (sums included); measured at ~4x the per-document path."""
    from headwater.durable.aggregate import _histogram_bucket, _number, _Summary

    ts_col = columns[id(r.ts)]
    dim_cols = [columns[id(r.fields[d])] for d in dims]
    # per measure in name order: (name, its field's column for a summary, histogram kept)
    plan: list[tuple[str, list[Sequence[Any]] | None, bool]] = []
    for m in sorted(r.measures):
        spec = r.measures[m]
        if spec["kind"] == "count":
            plan.append((m, None, False))
        else:
            hist = bool(spec.get("histogram", "log2_v1"))
            plan.append((m, columns[id(r.fields[spec["field"]])], hist))
    lo_ms, hi_ms, step = r.from_ms, r.to_ms, r.step
    values: list[float] = [0.0] * len(plan)
    for i, ts in enumerate(ts_col):
        if len(ts) != 1:
            continue
        t = ts[0]
        if not isinstance(t, int) or not lo_ms <= t < hi_ms:
            continue
        key_list: list[Any] = []
        for col in dim_cols:
            got = col[i]
            if len(got) > 1:
                break
            key_list.append(got[0] if got else None)
        else:
            for k, (_, field_col, _) in enumerate(plan):
                if field_col is None:
                    continue
                got = field_col[i]
                v = _number(got[0]) if len(got) == 1 else None
                if v is None:
                    break  # contribution(): a doc without every summary's value adds nothing
                values[k] = v
            else:
                ck = _group_key(canonical, key_list)
                _, states = windows.setdefault(t - t % step, {}).setdefault(ck, (key_list, {}))
                for k, (m, field_col, hist) in enumerate(plan):
                    if field_col is None:
                        states[m] = states.get(m, 0) + 1
                        continue
                    # _Summary.add(1.0, v, v, v, {bucket: 1}), inline: the same operations
                    v = values[k]
                    s = states.get(m)
                    if s is None:
                        s = states[m] = _Summary()
                    s.count += 1.0
                    s.sum += v
                    if s.min is None or v < s.min:
                        s.min = v
                    if s.max is None or v > s.max:
                        s.max = v
                    if hist:
                        bucket = _histogram_bucket(v)
                        if s.hist is None:
                            s.hist = {bucket: 1}
                        else:
                            s.hist[bucket] = s.hist.get(bucket, 0) + 1


def _rollup_by_doc(
    r: Rollup,
    dims: list[str],
    values: list[object],
    versions: list[int | None],
    read: Callable[[FieldSpec], Sequence[Any]],
    at: list[int],
    canonical: dict[Any, bytes],
    windows: _Windows,
    kinds: dict[str, str],
    order: list[str],
) -> None:
    """`Rollup.contribution` document by document (filters, summary_parts)."""
    from headwater.durable.aggregate import _Summary

    contribution = r.contribution
    for i, (doc, v) in enumerate(zip(values, versions, strict=True)):
        at[0] = i
        got = contribution(doc, v, read)
        if got is None:
            continue
        start, key, measures = got
        key_list = [key[d] for d in dims]
        ck = _group_key(canonical, key_list)
        _, states = windows.setdefault(start, {}).setdefault(ck, (key_list, {}))
        for m in order:  # contribution() answers every measure
            c, total, lo, hi, hist = measures[m]
            if kinds[m] == "count":
                states[m] = states.get(m, 0) + int(c)
            else:
                states.setdefault(m, _Summary()).add(c, total, lo, hi, hist)


def _state_out(s: int | _Summary, overflow: list[bool]) -> Any:
    if isinstance(s, int):
        return s
    if not math.isfinite(s.sum):
        overflow.append(True)
    return _summary_state(s)


# --------------------------------------------------------------------------- reading


def full_span(from_ms: int, to_ms: int, step: int) -> tuple[int, int] | None:
    """[lo, hi): the union of the `step` windows lying entirely inside [from_ms, to_ms), or
    None when there is none. Contributions with a timestamp outside it are the edges."""
    lo = -(-from_ms // step) * step
    hi = to_ms - to_ms % step
    return (lo, hi) if lo < hi else None


def read_windows(
    agg: Any,
    cache: dict[tuple[Any, ...], list[tuple[int, dict[str, Group]]]],
    rollup: str,
    interval: str,
    group_by: Sequence[str] = (),
    measures: Sequence[str] | None = None,
) -> list[tuple[int, dict[str, Group]]]:
    """``Companion.rollup_windows`` from the companion's parsed ``agg`` section (None: it has
    none), keeping each request shape's answer in `cache` (the companion's)."""
    from headwater.durable.aggregate import Group, _Summary

    if not agg or rollup not in agg["rollups"]:
        raise KeyError(f"companion has no rollup {rollup!r}")
    sec = agg["rollups"][rollup]
    if interval not in sec["intervals"]:
        raise KeyError(f"companion has no {interval} windows for rollup {rollup!r}")
    dims: list[str] = sec["dimensions"]
    for g in group_by:
        if g not in dims:
            raise KeyError(f"{g!r} is not a dimension of rollup {rollup!r}")
    kinds: Mapping[str, str] = sec["measures"]
    wanted = sorted(set(kinds if measures is None else measures))
    for m in wanted:
        if m not in kinds:
            raise KeyError(f"unknown measure {m!r} on rollup {rollup!r}")
    shape = (rollup, interval, tuple(group_by), tuple(wanted))
    cached = cache.get(shape)
    if cached is not None:
        return cached
    iv = sec["intervals"][interval]
    out: list[tuple[int, dict[str, Group]]] = []
    keys: dict[Any, tuple[dict[str, Any], str]] = {}  # a stored group -> its request group
    for start, groups in iv["windows"]:
        buckets: dict[str, Group] = {}
        for key_list, states in groups:
            memo: Any = tuple(key_list)
            try:
                known = keys.get(memo)
            except TypeError:  # an unhashable dimension value (an array)
                memo = json.dumps(key_list)
                known = keys.get(memo)
            if known is None:
                dims_map = dict(zip(dims, key_list, strict=True))
                key = {g: dims_map.get(g) for g in group_by}
                # as run_aggregate keys its groups
                known = keys[memo] = (key, json.dumps(key, sort_keys=True))
            key, gk = known
            grp = buckets.get(gk)
            if grp is None:
                grp = buckets[gk] = Group(key, {}, shared=True)
            acc = grp.states
            for m in wanted:
                state = states[m]
                if kinds[m] == "count":
                    acc[m] = acc.get(m, 0) + int(state)
                else:
                    count, total, lo, hi, hist = state
                    summary = acc.get(m)
                    if summary is None:
                        summary = acc[m] = _Summary()
                    summary.add(count, total, lo, hi, hist)
        out.append((start, buckets))
    cache[shape] = out
    return out
