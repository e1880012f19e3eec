"""The `metrics` profile: the schema, routing key and `search` (with the `metrics` rollup)
it installs, and the normalization of each appended metric (the canonical envelope, series
key, histogram summaries)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from headwater.durable.jsonvalue import json_type_name
from headwater.durable.profiles.common import (
    _COLUMN_FLAGS,
    _KEYWORD_FLAGS,
    METRICS_API_VERSION,
    ProfileError,
    _field,
    _is_number,
    _nullable,
    _number,
    _text,
    _truncated,
)

METRICS_ENVELOPE_FIELDS: Final = (
    "apiVersion",
    "kind",
    "metric",
    "unit",
    "metricKind",
    "temporality",
    "windowStart",
    "windowEnd",
    "intervalMs",
    "instance",
    "stream",
    "tags",
    "attributes",
    "dimensionPairs",
    "dimensionKey",
    "seriesKey",
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "p50",
    "p95",
    "p99",
    "buckets",
    "summary",
)
_STRING_MAP: Final[Mapping[str, Any]] = {
    "type": "object",
    "additionalProperties": {"type": "string"},
}
_NUMBER_MAP: Final[Mapping[str, Any]] = {
    "type": "object",
    "additionalProperties": {"type": "number"},
}

SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"type": "string", "const": METRICS_API_VERSION},
        "kind": {"type": "string", "const": "interval"},
        "metric": {"type": "string"},
        "unit": {"type": "string"},
        "metricKind": {"type": "string"},
        "temporality": {"type": "string"},
        "windowStart": {"type": "integer"},
        "windowEnd": {"type": "integer"},
        "intervalMs": {"type": "integer"},
        "instance": _nullable("string"),
        "stream": _nullable("string"),
        "tags": _STRING_MAP,
        "attributes": _STRING_MAP,
        "dimensionPairs": {"type": "array", "items": {"type": "string"}},
        "dimensionKey": _nullable("string"),
        "seriesKey": {"type": "string"},
        "count": {"type": "number"},
        "sum": {"type": "number"},
        "min": _nullable("number"),
        "max": _nullable("number"),
        "avg": {"type": "number"},
        "p50": {"type": "number"},
        "p95": {"type": "number"},
        "p99": {"type": "number"},
        "buckets": _NUMBER_MAP,
        "summary": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "count": {"type": "number"},
                "sum": {"type": "number"},
                "min": _nullable("number"),
                "max": _nullable("number"),
                "histogram": _NUMBER_MAP,
            },
            "required": ["count", "sum", "min", "max", "histogram"],
        },
    },
    "required": list(METRICS_ENVELOPE_FIELDS),
}

_AGG_COLUMN: Final[Mapping[str, Any]] = {**_COLUMN_FLAGS, "aggregatable": True}
_AGG_KEYWORD: Final[Mapping[str, Any]] = {
    "normalizer": "lowercase_v1",
    "exact": True,
    "prefix": True,
    "exists": True,
    "aggregatable": True,
}

SEARCH: Final[Mapping[str, Any]] = {
    "profile": "metrics",
    "primaryTimestampField": "windowStart",
    "aliases": {
        "ts": "windowStart",
        "time": "windowStart",
        "name": "metric",
        "dims": "dimensionKey",
        "series": "seriesKey",
    },
    "defaultFields": [
        {"field": "metric", "boost": 2},
        {"field": "stream", "boost": 1.25},
        {"field": "dimensionPairs", "boost": 1},
    ],
    "fields": {
        "windowStart": _field("date", "/windowStart", **_AGG_COLUMN),
        "windowEnd": _field("date", "/windowEnd", **_COLUMN_FLAGS),
        "intervalMs": _field("integer", "/intervalMs", **_AGG_COLUMN),
        "metric": _field("keyword", "/metric", **_AGG_KEYWORD, sortable=True),
        "unit": _field("keyword", "/unit", **_AGG_KEYWORD),
        "metricKind": _field("keyword", "/metricKind", **_AGG_KEYWORD),
        "temporality": _field("keyword", "/temporality", **_AGG_KEYWORD),
        "stream": _field("keyword", "/stream", **_AGG_KEYWORD, sortable=True),
        "instance": _field("keyword", "/instance", **_KEYWORD_FLAGS, aggregatable=True),
        "seriesKey": _field("keyword", "/seriesKey", exact=True, exists=True, sortable=True),
        "dimensionKey": _field("keyword", "/dimensionKey", **_KEYWORD_FLAGS, aggregatable=True),
        "dimensionPairs": _field(
            "keyword", "/dimensionPairs", exact=True, prefix=True, exists=True
        ),
        "count": _field("integer", "/count", **_AGG_COLUMN),
        "sum": _field("float", "/sum", **_AGG_COLUMN),
        "min": _field("float", "/min", **_COLUMN_FLAGS),
        "max": _field("float", "/max", **_COLUMN_FLAGS),
        "avg": _field("float", "/avg", **_COLUMN_FLAGS),
        "p95": _field("float", "/p95", **_COLUMN_FLAGS),
        "p99": _field("float", "/p99", **_COLUMN_FLAGS),
    },
    "rollups": {
        "metrics": {
            "timestampField": "windowStart",
            "dimensions": [
                "metric",
                "unit",
                "stream",
                "instance",
                "dimensionKey",
                "metricKind",
                "temporality",
            ],
            "intervals": ["10s", "1m", "5m", "1h"],
            "measures": {
                "value": {
                    "kind": "summary_parts",
                    "countJsonPointer": "/count",
                    "sumJsonPointer": "/sum",
                    "minJsonPointer": "/min",
                    "maxJsonPointer": "/max",
                    "histogramJsonPointer": "/buckets",
                }
            },
        }
    },
}


# --------------------------------------------------------------------------- metrics


def _js_number_text(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _attributes(raw: object) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, str] = {}
    for key in sorted(raw):
        item = raw[key]
        if isinstance(item, bool):
            out[key] = "true" if item else "false"
        elif isinstance(item, str):
            out[key] = item
        elif _is_number(item):
            out[key] = _js_number_text(item)
    return out


def _histogram(raw: object) -> dict[str, int | float] | None:
    if not isinstance(raw, Mapping):
        return None
    out: dict[str, int | float] = {}
    for bucket, count in raw.items():
        num = _number(count)
        if num is None or num <= 0:
            continue
        out[str(bucket)] = out.get(str(bucket), 0) + num
    return out or None


def _percentile(histogram: Mapping[str, int | float] | None, fraction: float) -> int | float | None:
    if not histogram:
        return None
    entries: list[tuple[int | float, int | float]] = []
    for bucket, count in histogram.items():
        position = _number(bucket)
        if position is not None and count > 0:
            entries.append((position, count))
    if not entries:
        return None
    entries.sort(key=lambda entry: entry[0])
    threshold = sum(count for _, count in entries) * fraction
    seen: int | float = 0
    for position, count in entries:
        seen += count
        if seen >= threshold:
            return position
    return entries[-1][0]  # pragma: no cover - float rounding only


def _first_number(*values: object) -> int | float | None:
    for item in values:
        num = _number(item)
        if num is not None:
            return num
    return None


def normalize(value: object) -> dict[str, Any]:
    """The canonical interval envelope (keys ``METRICS_ENVELOPE_FIELDS``).

    Required: ``metric`` and ``unit`` (non-empty strings), integer ``windowStart`` <=
    ``windowEnd`` (epoch ms; numeric strings accepted, fractions truncated), ``count`` >= 0 and
    ``sum`` (top level or under ``summary``). Defaults: ``kind`` ``interval`` (any other string is
    rejected), ``intervalMs`` ``windowEnd - windowStart``, ``metricKind`` ``summary``,
    ``temporality`` ``delta``, ``stream``/``instance`` ``null``; ``attributes`` (else ``tags``)
    keep string/number/boolean values as strings and are copied to ``tags``; ``buckets`` (else
    ``summary.histogram``) keep positive counts; ``min``/``max`` are ``null`` when ``count`` is 0,
    else default 0; ``avg`` ``sum/count`` (0 if no count); ``p50``/``p95``/``p99`` from the
    histogram (first bucket whose cumulative count reaches the fraction), else 0.
    """
    if not isinstance(value, Mapping):
        raise ProfileError(f"metrics record must be an object, got {json_type_name(value)}")
    kind = _text(value.get("kind")) or "interval"
    if kind != "interval":
        raise ProfileError("metrics record.kind must be interval")
    metric = _text(value.get("metric"))
    if not metric:
        raise ProfileError("metrics record.metric must be a non-empty string")
    unit = _text(value.get("unit"))
    if not unit:
        raise ProfileError("metrics record.unit must be a non-empty string")
    start, end = _truncated(value.get("windowStart")), _truncated(value.get("windowEnd"))
    if start is None or end is None:
        raise ProfileError("metrics record.windowStart and windowEnd must be integers")
    if end < start:
        raise ProfileError("metrics record.windowEnd must be >= windowStart")
    interval = _truncated(value.get("intervalMs"))
    interval = end - start if interval is None else interval
    if interval < 0:
        raise ProfileError("metrics record.intervalMs must be >= 0")
    metric_kind = _text(value.get("metricKind")) or "summary"
    temporality = _text(value.get("temporality")) or "delta"
    stream, instance = _text(value.get("stream")), _text(value.get("instance"))
    raw_attributes = value.get("attributes")
    attributes = _attributes(value.get("tags") if raw_attributes is None else raw_attributes)
    pairs = sorted(f"{key}={item}" for key, item in attributes.items())
    dimension_key = "\x00".join(pairs) if pairs else None
    series_key = "|".join(
        (metric_kind, temporality, metric, unit, stream or "", instance or "", dimension_key or "")
    )

    summary_raw = value.get("summary")
    summary: Mapping[str, Any] = summary_raw if isinstance(summary_raw, Mapping) else {}
    histogram = _histogram(value.get("buckets")) or _histogram(summary.get("histogram"))
    count = _first_number(value.get("count"), summary.get("count"))
    total = _first_number(value.get("sum"), summary.get("sum"))
    if count is None or count < 0:
        raise ProfileError("metrics interval requires count")
    if total is None:
        raise ProfileError("metrics interval requires sum")
    low = _first_number(value.get("min"), summary.get("min"))
    high = _first_number(value.get("max"), summary.get("max"))
    low = None if count == 0 else (0 if low is None else low)
    high = None if count == 0 else (0 if high is None else high)
    avg = _number(value.get("avg"))
    if avg is None:
        avg = total / count if count > 0 else 0
    percentiles = {}
    for name, fraction in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        given = _number(value.get(name))
        computed = _percentile(histogram, fraction)
        if given is None:
            given = 0 if computed is None else computed
        percentiles[name] = given
    buckets = histogram or {}
    return {
        "apiVersion": METRICS_API_VERSION,
        "kind": "interval",
        "metric": metric,
        "unit": unit,
        "metricKind": metric_kind,
        "temporality": temporality,
        "windowStart": start,
        "windowEnd": end,
        "intervalMs": interval,
        "instance": instance,
        "stream": stream,
        "tags": dict(attributes),
        "attributes": dict(attributes),
        "dimensionPairs": pairs,
        "dimensionKey": dimension_key,
        "seriesKey": series_key,
        "count": count,
        "sum": total,
        "min": low,
        "max": high,
        "avg": avg,
        **percentiles,
        "buckets": dict(buckets),
        "summary": {
            "count": count,
            "sum": total,
            "min": low,
            "max": high,
            "histogram": dict(buckets),
        },
    }
