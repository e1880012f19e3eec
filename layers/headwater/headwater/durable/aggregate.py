"""``_aggregate`` (protocol §4.3, §8.7): time-window rollups declared under
``search.rollups``, answered exactly by scanning the stream (``.agg`` companions are a later
increment: ``coverage.used_rollups`` is false). Shapes follow the reference
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
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from headwater.durable import schema
from headwater.durable.filter import MISSING, FieldSpec, Predicate, _parse_date_ms, json_pointer_get
from headwater.durable.search import (
    TIMEOUT_CAP_MS,
    Coverage,
    Deadline,
    SearchError,
    compile_q,
    scan,
    search_config,
)
from headwater.durable.service import DurableStreams
from headwater.storage.ports import Head, SegmentItem

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
        ms = _parse_date_ms(raw.strip())
        if ms is not None:
            return ms
    raise SearchError(f"{name} must be an RFC 3339 timestamp or unix milliseconds")


def iso(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
    )


def _histogram_bucket(v: float) -> str:
    return str(2 ** math.floor(math.log2(max(1.0, abs(v)))))


@functools.lru_cache(maxsize=4096)
def _bucket_value(key: str) -> float:
    return float(key)


def _percentiles(
    entries: Sequence[tuple[float, str, int]], ps: Sequence[float]
) -> list[float | None]:
    """The bucket (a power of two) holding each quantile in `ps` (ascending), one pass over
    the histogram's (bucket value, key, count) entries in bucket order."""
    total = sum(n for _, _, n in entries if n > 0)
    if not total:
        return [None] * len(ps)
    out: list[float | None] = []
    seen = 0
    i = 0
    last = 0.0
    for bucket, _, n in entries:
        if n <= 0:
            continue
        last = bucket
        seen += n
        while i < len(ps) and seen >= total * ps[i]:
            out.append(int(bucket) if bucket.is_integer() else bucket)
            i += 1
    out.extend([int(last) if last.is_integer() else last] * (len(ps) - i))
    return out


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
            self.hist = self.hist or {}
            for k, n in hist.items():
                self.hist[k] = self.hist.get(k, 0) + n

    def body(self) -> dict[str, Any]:
        entries = (
            sorted((_bucket_value(k), k, n) for k, n in self.hist.items()) if self.hist else []
        )
        p50, p95, p99 = _percentiles(entries, (0.5, 0.95, 0.99)) if entries else (None,) * 3
        return {
            "count": self.count,
            "sum": self.sum,
            "min": self.min,
            "max": self.max,
            "avg": self.sum / self.count if self.count else None,
            "p50": p50,
            "p95": p95,
            "p99": p99,
            "histogram": {k: n for _, k, n in entries} if entries else None,
        }


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
        self, doc: object, version: int | None
    ) -> (
        tuple[
            int, dict[str, Any], dict[str, tuple[float, float, float, float, dict[str, int] | None]]
        ]
        | None
    ):
        """(window start, dimension key, per measure (count, sum, min, max, histogram)), or
        None when the record does not contribute."""
        if self.include is not None and not self.include.matches(doc, version=version):
            return None
        ts = self.ts.values(doc, version)
        if len(ts) != 1 or not isinstance(ts[0], int):
            return None
        t = ts[0]
        if not self.from_ms <= t < self.to_ms:
            return None
        key: dict[str, Any] = {}
        for d in self.dims:
            values = self.fields[d].values(doc, version)
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
                values = self.fields[spec["field"]].values(doc, version)
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
    up-to-date one): window start -> group key JSON -> (group key, measure -> state)."""

    async def windows_of(
        self, seg: SegmentItem, r: Rollup
    ) -> dict[int, dict[str, tuple[dict[str, Any], dict[str, int | _Summary]]]] | None: ...


class _RollupsFromIndex:
    """A scan pruner that adds a segment's full windows (those inside [from, to)) from its
    companion. With `from` and `to` on window boundaries every window is full and the segment
    is not read; otherwise it is read for the partial edge windows only (`answered`)."""

    families: frozenset[str] = frozenset({"agg"})

    def __init__(self, index: RollupIndex, r: Rollup, buckets: _Buckets, cov: Coverage) -> None:
        self.index, self.r, self.buckets, self.cov = index, r, buckets, cov
        self.answered: list[tuple[int, int]] = []
        self.aligned = r.from_ms % r.step == 0 and r.to_ms % r.step == 0

    async def __call__(self, seg: SegmentItem) -> frozenset[int] | None:
        got = await self.index.windows_of(seg, self.r)
        if got is None:
            return None
        for start, groups in got.items():
            out = self.buckets.setdefault(start, {})
            for gk, (key, states) in groups.items():
                _, acc = out.setdefault(gk, (key, {}))
                for m, v in states.items():
                    if isinstance(v, int):
                        acc[m] = acc.get(m, 0) + v
                    elif v.count:
                        mine = acc.get(m)
                        if mine is None:
                            acc[m] = v  # windows_of built it for this request: adopt it
                        else:
                            mine.add(v.count, v.sum, v.min, v.max, v.hist)
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


_Buckets = dict[int, dict[str, tuple[dict[str, Any], dict[str, Any]]]]


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
        _, states = groups.setdefault(gk, (key, {}))
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
                "groups": [
                    {
                        "key": key,
                        "measures": {
                            m: {"count": v} if isinstance(v, int) else v.body()
                            for m, v in sorted(states.items())
                        },
                    }
                    for _, (key, states) in sorted(buckets[start].items())
                ],
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
