"""``_aggregate`` (protocol §4.3, §8.7): time-window rollups declared under
``search.rollups``, answered exactly: windows wholly inside the range from the sealed
segments' index companions (``agg`` family, ``used_rollups``), the edges and the rest by
scanning. Shapes follow the reference
(``src/search/aggregate.ts``): a record contributes only if it passes the rollup's
``include``, has exactly one timestamp value, at most one value per dimension and exactly one
numeric value per ``summary`` field; a ``count`` measure with its own ``include`` counts the
records passing it. Counts answer ``{"count": n}``; summaries ``count``, ``sum``, ``min``,
``max``, ``avg`` and ``p50``/``p95``/``p99`` read off the ``log2_v1`` histogram, whose buckets
are ``2**floor(log2(max(1, |v|)))`` (keys as decimal strings)."""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from headwater.durable import schema
from headwater.durable.fields import FieldSpec
from headwater.durable.filter import Predicate
from headwater.durable.jsonvalue import MISSING, json_pointer_get, parse_date_ms
from headwater.durable.scan import TIMEOUT_CAP_MS, Coverage, Deadline, SearchError, scan
from headwater.durable.search_request import compile_q, search_config
from headwater.durable.service import DurableStreams
from headwater.engine.ports import Head, SegmentItem

BODY_KEYS: Final = frozenset({"rollup", "from", "to", "interval", "q", "group_by", "measures"})
MAX_BUCKETS: Final = 10_000  # (to - from) / interval may not exceed this
_DURATION = re.compile(r"([1-9][0-9]*)(ms|s|m|h|d)")
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def interval_ms(text: str) -> int:
    m = _DURATION.fullmatch(text)
    if m is None:
        raise SearchError(f"interval {text!r} is not a supported duration")
    return int(m.group(1)) * _UNIT_MS[m.group(2)]


def _time(raw: object, name: str) -> int:
    if isinstance(raw, bool):
        raise SearchError(f"{name} must be an RFC 3339 timestamp or unix milliseconds")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float) and math.isfinite(raw):
        return math.trunc(raw)
    if isinstance(raw, str):
        ms = parse_date_ms(raw.strip())
        if ms is not None:
            return ms
    raise SearchError(f"{name} must be an RFC 3339 timestamp or unix milliseconds")


@functools.lru_cache(maxsize=16384)  # window bounds repeat across requests
def iso(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
    )


def _histogram_bucket(v: float) -> str:
    return str(2 ** math.floor(math.log2(max(1.0, abs(v)))))


@functools.lru_cache(maxsize=4096)
def _bucket_value(key: str) -> float:
    return float(key)


@functools.lru_cache(maxsize=4096)
def _bucket_number(key: str) -> float:
    """A histogram bucket key as the number a percentile reports (an int when integral)."""
    v = float(key)
    return int(v) if v.is_integer() else v


_PS: Final = (0.5, 0.95, 0.99)


def _percentiles(keys: Sequence[str], counts: Sequence[int]) -> tuple[Any, Any, Any]:
    """The bucket (a power of two) holding p50, p95 and p99: one pass over the histogram's
    keys and counts in bucket order."""
    total = 0
    for n in counts:
        if n > 0:
            total += n
    if not total:
        return None, None, None
    out: list[Any] = []
    targets = [total * p for p in _PS]
    seen = 0
    last = ""
    for k, n in zip(keys, counts, strict=True):
        if n <= 0:
            continue
        last = k
        seen += n
        while len(out) < 3 and seen >= targets[len(out)]:
            out.append(_bucket_number(k))
        if len(out) == 3:
            return out[0], out[1], out[2]
    out.extend([_bucket_number(last)] * (3 - len(out)))
    return out[0], out[1], out[2]


class _Summary:
    __slots__ = ("count", "hist", "max", "min", "sum")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.min: float | None = None
        self.max: float | None = None
        self.hist: dict[str, int] | None = None

    def add(
        self, count: float, total: float, lo: float, hi: float, hist: dict[str, int] | None
    ) -> None:
        self.count += count  # type: ignore[assignment]
        self.sum += total
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)
        if hist is not None:
            if self.hist is None:
                self.hist = dict(hist)
            else:
                mine = self.hist
                for k, n in hist.items():
                    mine[k] = mine.get(k, 0) + n

    def copy(self) -> _Summary:
        out = _Summary()
        out.count, out.sum, out.min, out.max = self.count, self.sum, self.min, self.max
        out.hist = dict(self.hist) if self.hist is not None else None
        return out

    def body(self) -> dict[str, Any]:
        hist = self.hist
        if hist:
            keys = sorted(hist, key=_bucket_value)
            counts = [hist[k] for k in keys]
            p50, p95, p99 = _percentiles(keys, counts)
            histogram: dict[str, int] | None = dict(zip(keys, counts, strict=True))
        else:
            p50 = p95 = p99 = histogram = None
        return {
            "count": self.count,
            "sum": self.sum,
            "min": self.min,
            "max": self.max,
            "avg": self.sum / self.count if self.count else None,
            "p50": p50,
            "p95": p95,
            "p99": p99,
            "histogram": histogram,
        }


class Group:
    """One group of one window: its key, its measures' states (int count | _Summary) and,
    once asked for, their rendered bodies. A group a companion holds is `shared` (cached
    with the companion and handed to every request): it is never changed; a request that
    adds to it works on its own copy (`owned`)."""

    __slots__ = ("body", "key", "shared", "states")

    def __init__(self, key: dict[str, Any], states: dict[str, Any], shared: bool = False) -> None:
        self.key = key
        self.states = states
        self.shared = shared
        self.body: dict[str, Any] | None = None

    def owned(self) -> Group:
        if not self.shared:
            return self
        return Group(
            self.key,
            {m: v if isinstance(v, int) else v.copy() for m, v in self.states.items()},
        )

    def merge(self, states: Mapping[str, Any]) -> None:
        """Add another part's states (this group must be owned)."""
        mine = self.states
        for m, v in states.items():
            if isinstance(v, int):
                mine[m] = mine.get(m, 0) + v
            elif v.count:
                acc = mine.get(m)
                if acc is None:
                    mine[m] = v.copy()
                else:
                    acc.add(v.count, v.sum, v.min, v.max, v.hist)
        self.body = None

    def rendered(self) -> dict[str, Any]:
        """The group as the answer lists it: {"key", "measures"} (kept until it changes)."""
        if self.body is None:
            self.body = {
                "key": self.key,
                "measures": {
                    m: {"count": v} if isinstance(v, int) else v.body()
                    for m, v in sorted(self.states.items())
                },
            }
        return self.body


def _number(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


class Rollup:
    """A parsed request against one rollup."""

    def __init__(self, raw: Mapping[str, Any], reg: Mapping[str, Any]) -> None:
        unknown = sorted(set(raw) - BODY_KEYS)
        if unknown:
            raise SearchError(f"unknown aggregate request field(s): {', '.join(unknown)}")
        search, fields = search_config(reg)
        name = raw.get("rollup")
        rollups = search.get("rollups") or {}
        if not isinstance(name, str) or not name:
            raise SearchError("rollup must be a non-empty string")
        if name not in rollups:
            raise SearchError(f"unknown rollup {name!r}")
        self.name = name
        cfg = rollups[name]
        for key in ("from", "to", "interval"):
            if key not in raw:
                raise SearchError(f"{key} is required")
        self.from_ms = _time(raw["from"], "from")
        self.to_ms = _time(raw["to"], "to")
        if self.to_ms <= self.from_ms:
            raise SearchError("to must be greater than from")
        interval = raw["interval"]
        if not isinstance(interval, str) or interval not in cfg["intervals"]:
            raise SearchError(f"interval {interval!r} is not configured for rollup {name!r}")
        self.interval = interval
        self.step = interval_ms(interval)
        first = self.from_ms - self.from_ms % self.step
        if (self.to_ms - first) // self.step > MAX_BUCKETS:
            raise SearchError(f"from..to spans more than {MAX_BUCKETS} {interval} windows")
        self.fields: Mapping[str, FieldSpec] = fields
        self.ts = fields[cfg.get("timestampField") or search["primaryTimestampField"]]
        self.dims: list[str] = list(cfg.get("dimensions", []))
        group_by = raw.get("group_by", [])
        if not isinstance(group_by, list) or not all(isinstance(g, str) for g in group_by):
            raise SearchError("group_by must be an array of strings")
        for g in group_by:
            if g not in self.dims:
                raise SearchError(f"group_by field {g!r} is not a dimension of rollup {name!r}")
        if len(set(group_by)) != len(group_by):
            raise SearchError("group_by lists a field twice")
        self.group_by: list[str] = group_by
        self.measures: Mapping[str, Any] = cfg["measures"]
        wanted = raw.get("measures")
        if wanted is None:
            wanted = list(self.measures)
        if (
            not isinstance(wanted, list)
            or not wanted
            or not all(isinstance(m, str) for m in wanted)
        ):
            raise SearchError("measures must be a non-empty array of strings")
        for m in wanted:
            if m not in self.measures:
                raise SearchError(f"unknown measure {m!r} on rollup {name!r}")
        self.wanted = sorted(set(wanted))
        self.q: Predicate | None = compile_q(raw["q"], reg) if raw.get("q") is not None else None
        self.include = compile_q(cfg["include"], reg) if cfg.get("include") else None
        self.measure_include = {
            m: compile_q(spec["include"], reg)
            for m, spec in self.measures.items()
            if spec.get("kind") == "count" and spec.get("include")
        }

    def contribution(
        self,
        doc: object,
        version: int | None,
        read: Callable[[FieldSpec], Sequence[Any]] | None = None,
    ) -> (
        tuple[
            int, dict[str, Any], dict[str, tuple[float, float, float, float, dict[str, int] | None]]
        ]
        | None
    ):
        """(window start, dimension key, per measure (count, sum, min, max, histogram)), or
        None when the record does not contribute. `read`: the doc's values of a field when
        the caller already has them (an index build reads each field of a doc once)."""
        if self.include is not None and not self.include.matches(doc, version=version):
            return None
        if read is None:

            def read(spec: FieldSpec) -> list[Any]:
                return spec.values(doc, version)

        ts = read(self.ts)
        if len(ts) != 1 or not isinstance(ts[0], int):
            return None
        t = ts[0]
        if not self.from_ms <= t < self.to_ms:
            return None
        key: dict[str, Any] = {}
        for d in self.dims:
            values = read(self.fields[d])
            if len(values) > 1:
                return None
            key[d] = values[0] if values else None
        out: dict[str, tuple[float, float, float, float, dict[str, int] | None]] = {}
        for m, spec in self.measures.items():
            kind = spec["kind"]
            if kind == "count":
                inc = self.measure_include.get(m)
                n = 1.0 if inc is None or inc.matches(doc, version=version) else 0.0
                out[m] = (n, 0.0, 0.0, 0.0, None)
            elif kind == "summary":
                values = read(self.fields[spec["field"]])
                v = _number(values[0]) if len(values) == 1 else None
                if v is None:
                    return None
                hist = {_histogram_bucket(v): 1} if spec.get("histogram", "log2_v1") else None
                out[m] = (1.0, v, v, v, hist)
            else:  # summary_parts
                parts = [
                    _number(json_pointer_get(doc, spec[k]))
                    for k in (
                        "countJsonPointer",
                        "sumJsonPointer",
                        "minJsonPointer",
                        "maxJsonPointer",
                    )
                ]
                if any(p is None for p in parts):
                    return None
                hist = None
                if spec.get("histogramJsonPointer"):
                    raw = json_pointer_get(doc, spec["histogramJsonPointer"])
                    if raw is not MISSING and isinstance(raw, dict):
                        hist = {
                            str(k): int(n) for k, n in raw.items() if _number(n) is not None
                        } or None
                c, s_, lo, hi = (float(p) for p in parts)  # type: ignore[arg-type]
                out[m] = (c, s_, lo, hi, hist)
        return t - t % self.step, key, out


class RollupIndex(Protocol):
    """A sealed segment's pre-aggregated windows from its index companion (None: no usable,
    up-to-date one): (window start, group key JSON -> shared Group), in window order."""

    async def windows_of(
        self, seg: SegmentItem, r: Rollup
    ) -> Sequence[tuple[int, dict[str, Group]]] | None: ...


class _RollupsFromIndex:
    """A scan pruner that adds a segment's full windows (those inside [from, to)) from its
    companion. With `from` and `to` on window boundaries every window is full and the segment
    is not read; otherwise it is read for the partial edge windows only (`answered`). A
    window only one segment holds keeps the companion's shared groups (and their rendered
    bodies) as they are; one that spans segments is merged into the request's own copy."""

    families: frozenset[str] = frozenset({"agg"})

    def __init__(self, index: RollupIndex, r: Rollup, buckets: _Buckets, cov: Coverage) -> None:
        self.index, self.r, self.buckets, self.cov = index, r, buckets, cov
        self.answered: list[tuple[int, int]] = []
        self.aligned = r.from_ms % r.step == 0 and r.to_ms % r.step == 0
        self.warm = getattr(index, "warm", None)  # index/reader: companions ahead of the scan

    async def __call__(self, seg: SegmentItem) -> frozenset[int] | None:
        got = await self.index.windows_of(seg, self.r)
        if got is None:
            return None
        lo, hi, step = self.r.from_ms, self.r.to_ms, self.r.step
        buckets = self.buckets
        for start, groups in got:
            if start < lo or start + step > hi:
                continue
            out = buckets.get(start)
            if out is None:
                buckets[start] = dict(groups)  # shared groups, as they are
                continue
            for gk, g in groups.items():
                mine = out.get(gk)
                if mine is None:
                    out[gk] = g
                else:
                    mine = out[gk] = mine.owned()
                    mine.merge(g.states)
        if self.aligned:
            return frozenset()  # every window is full: nothing to read
        self.answered.append((seg.first_seq, seg.last_seq))
        self.cov.indexed_segments += 1
        self.cov.index_families_used.add("agg")
        return None

    def full_window_counted(self, seq: int, start: int) -> bool:
        """Whether a scanned entry's window was already added from its segment's companion."""
        if start < self.r.from_ms or start + self.r.step > self.r.to_ms:
            return False
        return any(lo <= seq <= hi for lo, hi in self.answered)


_Buckets = dict[int, dict[str, Group]]


async def run_aggregate(
    streams: DurableStreams,
    name: str,
    head: Head,
    reg: Mapping[str, Any],
    r: Rollup,
    index: RollupIndex | None = None,
) -> tuple[int, dict[str, Any]]:
    """`index`: the stream's companions; used for a request without `q` (a `q` is evaluated
    on each entry, so it scans)."""
    deadline = Deadline(TIMEOUT_CAP_MS)
    cov = Coverage(head, await streams.segments(head))
    buckets: _Buckets = {}
    from_index = (
        _RollupsFromIndex(index, r, buckets, cov) if index is not None and r.q is None else None
    )
    async for doc in scan(streams, cov, deadline, reg, 0, head.head_seq, "asc", from_index):
        if r.q is not None and not r.q.matches(doc.value, version=doc.version):
            continue
        got = r.contribution(doc.value, doc.version)
        if got is None:
            continue
        start, dims, measures = got
        if from_index is not None and from_index.full_window_counted(doc.rec.seq, start):
            continue
        key = {g: dims.get(g) for g in r.group_by}
        groups = buckets.setdefault(start, {})
        gk = json.dumps(key, sort_keys=True)
        grp = groups.get(gk)
        if grp is None:
            grp = groups[gk] = Group(key, {})
        elif grp.shared:
            grp = groups[gk] = grp.owned()
        grp.body = None
        states = grp.states
        for m in r.wanted:
            c, total, lo, hi, hist = measures[m]
            if r.measures[m]["kind"] == "count":
                states[m] = states.get(m, 0) + int(c)
            else:
                states.setdefault(m, _Summary()).add(c, total, lo, hi, hist)
    body = {
        "stream": name,
        "rollup": r.name,
        "from": iso(r.from_ms),
        "to": iso(r.to_ms),
        "interval": r.interval,
        "coverage": {
            **cov.common(),
            "used_rollups": cov.indexed_segments > 0,
            "indexed_segments": cov.indexed_segments,
            "scanned_segments": len(cov.scanned_segments),
            "scanned_tail_docs": cov.scanned_tail_docs,
            "index_families_used": sorted(cov.index_families_used),
        },
        "buckets": [
            {
                "start": iso(start),
                "end": iso(start + r.step),
                "groups": [g.rendered() for _, g in sorted(buckets[start].items())],
            }
            for start in sorted(buckets)
        ],
    }
    return (408 if cov.timed_out else 200), body


def parse(raw: object, reg: Mapping[str, Any]) -> Rollup:
    if not isinstance(raw, Mapping):
        raise SearchError("the aggregate request must be a JSON object")
    schema.search_fields(reg)
    return Rollup(raw, reg)
