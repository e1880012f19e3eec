"""Count AWS calls by API with botocore event hooks (benchmarks and cost model only).

`install(session_or_client)` registers before/after-call hooks on a boto3/botocore session
(clients created from it afterwards inherit them) or on one client. Per process, counters
are kept by API name ("DynamoDB.TransactWriteItems", "S3.PutObject", ...): calls, errors,
request/response body bytes, and DynamoDB capacity units estimated from item sizes, the
way DynamoDB bills them (sizes per the developer guide's item-size rules):

- writes: 1 WRU per started KB of each written item, x2 inside TransactWriteItems. An Update
  is billed on the larger of the item before and after it, a Delete on the item it removes;
  neither request shows that item, so each process keeps the size of every item it has
  written or read whole (`Sizes`, by table and key) and bills an Update on the larger of
  that and its key + values, a Delete on that. An item this process never saw is billed
  on its key + values (an Update) or 1 KB (a Delete), and counted in `unsized` so a
  benchmark shows how much of its figure is such a lower bound.
- reads: 1 RRU per started 4 KB (GetItem, BatchGetItem per item; Query/Scan on the sum of
  the items returned, at least one unit), x0.5 eventually consistent, x2 transactional.

Base (un-multiplied) write KB units are also kept per table, so a caller can add the writes
a table's global secondary indexes cost. Nothing here changes a request."""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Mapping
from typing import Any

_KB = 1024
_lock = threading.Lock()
_calls: dict[str, dict[str, float]] = {}
_tables: dict[str, dict[str, float]] = {}
_CTX_PARAMS = "headwater_callcount_params"
_CTX_API = "headwater_callcount_api"
_CTX_T0 = "headwater_callcount_t0"
_wall: dict[str, list[float]] = {}  # API -> wall ms of answered calls, retries included
_wall_seen: dict[str, int] = {}  # API -> answered calls offered to its sample
MAX_WALL_SAMPLES = 20_000  # per API: a uniform sample of all calls (reservoir) past this
_rng = random.Random(0x5EED)
_FIELDS = ("calls", "errors", "req_bytes", "resp_bytes", "wru", "rru", "items", "unsized")
_KEY_ATTRS = ("pk", "sk")  # every Headwater table's key attributes (storage/schema.py)
MAX_SIZES = 1_000_000  # items whose sizes a process remembers (oldest forgotten first)


class Sizes:
    """The last known size of each item by (table, key): set by whole-item writes (Put) and
    reads (GetItem, Query, Scan and BatchGetItem without a projection), raised by Updates,
    dropped by Deletes. Bounded: past MAX_SIZES the oldest entries go."""

    def __init__(self, limit: int = MAX_SIZES) -> None:
        self._sizes: dict[tuple[str, tuple[Any, ...]], int] = {}
        self._limit = limit

    @staticmethod
    def key(table: str, item: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]] | None:
        if "pk" not in item:
            return None
        return table, tuple(next(iter(item[a].items())) if a in item else None for a in _KEY_ATTRS)

    def get(self, table: str, key: Mapping[str, Any]) -> int | None:
        k = self.key(table, key)
        return None if k is None else self._sizes.get(k)

    def put(self, table: str, item: Mapping[str, Any], size: int) -> None:
        k = self.key(table, item)
        if k is None:
            return
        self._sizes.pop(k, None)
        self._sizes[k] = size
        if len(self._sizes) > self._limit:
            del self._sizes[next(iter(self._sizes))]

    def drop(self, table: str, key: Mapping[str, Any]) -> None:
        k = self.key(table, key)
        if k is not None:
            self._sizes.pop(k, None)

    def clear(self) -> None:
        self._sizes.clear()

    def limit(self, n: int) -> None:
        self._limit = max(1, n)
        while len(self._sizes) > self._limit:
            del self._sizes[next(iter(self._sizes))]


_sizes = Sizes()


def _num_size(text: str) -> int:
    digits = text.lstrip("-").replace(".", "").split("e")[0].split("E")[0].strip("0")
    return (len(digits) + 1) // 2 + 1


def value_size(v: Mapping[str, Any]) -> int:
    """Bytes of one DynamoDB attribute value in wire form ({"S": ...}, {"N": ...}, ...)."""
    ((kind, x),) = v.items()
    if kind == "S":
        return len(x.encode())
    if kind == "N":
        return _num_size(x)
    if kind == "B":
        return len(x)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in x)
    if kind == "NS":
        return sum(_num_size(s) for s in x)
    if kind == "BS":
        return sum(len(b) for b in x)
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(e) + 1 for k, e in x.items())
    if kind == "L":
        return 3 + sum(value_size(e) + 1 for e in x)
    return 0


def item_size(item: Mapping[str, Any] | None) -> int:
    if not item:
        return 0
    return sum(len(k.encode()) + value_size(v) for k, v in item.items())


def _update_size(op: Mapping[str, Any]) -> int:
    return item_size(op.get("Key")) + sum(
        value_size(v) for v in (op.get("ExpressionAttributeValues") or {}).values()
    )


def _kb(size: int) -> int:
    return max(1, math.ceil(size / _KB))


def _write_units(name: str, params: Mapping[str, Any]) -> list[tuple[str, int, int, bool]]:
    """(table, base KB units, multiplier, sized from a known item) per item written; notes
    what each write does to the item sizes this process knows."""
    out: list[tuple[str, int, int, bool]] = []

    def put(table: str, item: Mapping[str, Any], mult: int) -> None:
        size = item_size(item)
        _sizes.put(table, item, size)
        out.append((table, _kb(size), mult, True))

    def update(table: str, op: Mapping[str, Any], mult: int) -> None:
        key = op.get("Key") or {}
        before = _sizes.get(table, key)
        after = _update_size(op) if before is None else max(before, _update_size(op))
        _sizes.put(table, key, after)
        out.append((table, _kb(after), mult, before is not None))

    def delete(table: str, key: Mapping[str, Any], mult: int) -> None:
        size = _sizes.get(table, key)
        _sizes.drop(table, key)
        out.append((table, _kb(size or 0), mult, size is not None))

    if name == "TransactWriteItems":
        for ti in params.get("TransactItems", []):
            for kind, op in ti.items():
                table = op.get("TableName", "?")
                if kind == "Put":
                    put(table, op.get("Item") or {}, 2)
                elif kind == "Update":
                    update(table, op, 2)
                elif kind == "Delete":
                    delete(table, op.get("Key") or {}, 2)
                else:  # ConditionCheck: billed as a write of the item it checks
                    size = _sizes.get(table, op.get("Key") or {})
                    out.append((table, _kb(size or 0), 2, size is not None))
    elif name == "PutItem":
        put(params.get("TableName", "?"), params.get("Item") or {}, 1)
    elif name == "UpdateItem":
        update(params.get("TableName", "?"), params, 1)
    elif name == "DeleteItem":
        delete(params.get("TableName", "?"), params.get("Key") or {}, 1)
    elif name == "BatchWriteItem":
        for table, reqs in (params.get("RequestItems") or {}).items():
            for r in reqs:
                if "PutRequest" in r:
                    put(table, r["PutRequest"]["Item"], 1)
                else:
                    delete(table, r["DeleteRequest"]["Key"], 1)
    return out


def _note_read_sizes(name: str, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> None:
    """Remember the sizes of whole items a read returned (not projected ones)."""
    if name == "GetItem":
        item = parsed.get("Item")
        if item and not params.get("ProjectionExpression"):
            _sizes.put(params.get("TableName", "?"), item, item_size(item))
    elif name in ("Query", "Scan"):
        if not params.get("ProjectionExpression") and not params.get("Select"):
            table = params.get("TableName", "?")
            for item in parsed.get("Items", []):
                _sizes.put(table, item, item_size(item))
    elif name == "BatchGetItem":
        for table, items in (parsed.get("Responses") or {}).items():
            if not (params.get("RequestItems") or {}).get(table, {}).get("ProjectionExpression"):
                for item in items:
                    _sizes.put(table, item, item_size(item))


def _read_units(name: str, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> float:
    factor = 1.0 if params.get("ConsistentRead") else 0.5
    if name == "GetItem":
        return factor * max(1, math.ceil(item_size(parsed.get("Item")) / (4 * _KB)))
    if name in ("Query", "Scan"):
        total = sum(item_size(i) for i in parsed.get("Items", []))
        return factor * max(1, math.ceil(total / (4 * _KB)))
    if name == "BatchGetItem":
        units = 0.0
        for table, items in (parsed.get("Responses") or {}).items():
            req = (params.get("RequestItems") or {}).get(table, {})
            f = 1.0 if req.get("ConsistentRead") else 0.5
            units += sum(f * max(1, math.ceil(item_size(i) / (4 * _KB))) for i in items)
        return units
    if name == "TransactGetItems":
        return sum(
            2.0 * max(1, math.ceil(item_size(r.get("Item")) / (4 * _KB)))
            for r in parsed.get("Responses", [])
        )
    return 0.0


def _entry(api: str) -> dict[str, float]:
    e = _calls.get(api)
    if e is None:
        e = _calls[api] = dict.fromkeys(_FIELDS, 0.0)
    return e


def _api(model: Any) -> str:
    return f"{model.service_model.service_id}.{model.name}"


def _on_params(params: Any = None, context: Any = None, **_: Any) -> None:
    if context is not None:
        context[_CTX_PARAMS] = params


def _body_size(params: Mapping[str, Any]) -> int:
    body = params.get("body")
    if isinstance(body, bytes | bytearray | str):
        return len(body)
    if body is not None and hasattr(body, "seek") and hasattr(body, "tell"):
        try:  # S3 bodies arrive as seekable streams
            pos = body.tell()
            end = body.seek(0, 2)
            body.seek(pos)
            return int(end - pos)
        except (OSError, ValueError):
            pass
    return int(params.get("headers", {}).get("Content-Length", 0) or 0)


def _on_before_call(model: Any, params: Any = None, context: Any = None, **_: Any) -> None:
    api = _api(model)
    if context is not None:
        context[_CTX_API] = api
        context[_CTX_T0] = time.perf_counter()
    size = _body_size(params or {})
    with _lock:
        e = _entry(api)
        e["calls"] += 1
        e["req_bytes"] += size


def _on_after_call(
    model: Any, http_response: Any = None, parsed: Any = None, context: Any = None, **_: Any
) -> None:
    t0 = (context or {}).get(_CTX_T0)
    wall_ms = None if t0 is None else (time.perf_counter() - t0) * 1000
    size = 0
    status = 0
    if http_response is not None:
        status = int(http_response.status_code)
        raw = http_response.headers.get("content-length")
        if raw is not None and str(raw).isdigit():
            size = int(raw)
        elif not model.has_streaming_output:
            size = len(http_response.content or b"")
    params = (context or {}).get(_CTX_PARAMS) or {}
    writes: list[tuple[str, int, int, bool]] = []
    rru = 0.0
    with _lock:
        if model.service_model.service_id == "DynamoDB" and status < 300:
            writes = _write_units(model.name, params)
            rru = _read_units(model.name, params, parsed or {})
            _note_read_sizes(model.name, params, parsed or {})
        api = _api(model)
        if wall_ms is not None:
            _sample_wall(api, wall_ms)
        e = _entry(api)
        e["resp_bytes"] += size
        if status >= 300:
            e["errors"] += 1
        e["rru"] += rru
        e["wru"] += sum(kb * mult for _, kb, mult, _ in writes)
        e["items"] += len(writes)
        e["unsized"] += sum(1 for *_, known in writes if not known)
        for table, kb, _mult, _known in writes:
            t = _tables.setdefault(table, {"items": 0.0, "kb_units": 0.0})
            t["items"] += 1
            t["kb_units"] += kb


def _on_error(context: Any = None, **_: Any) -> None:
    api = (context or {}).get(_CTX_API)
    if api is not None:
        with _lock:
            _entry(api)["errors"] += 1


def _emitter(target: Any) -> Any:
    meta = getattr(target, "meta", None)
    if meta is not None and hasattr(meta, "events"):
        return meta.events  # a client
    events = getattr(target, "events", None)  # boto3.Session
    return events if events is not None else target.get_component("event_emitter")


def _sample_wall(api: str, ms: float) -> None:
    """Keep `ms` in the API's sample: every call up to MAX_WALL_SAMPLES, then each call
    replaces a random one with probability MAX/seen (Vitter's algorithm R), so the sample
    stays uniform over the whole run in bounded memory (a soak makes millions of calls)."""
    samples = _wall.setdefault(api, [])
    seen = _wall_seen[api] = _wall_seen.get(api, 0) + 1
    if len(samples) < MAX_WALL_SAMPLES:
        samples.append(ms)
        return
    j = _rng.randrange(seen)
    if j < MAX_WALL_SAMPLES:
        samples[j] = ms


def limit_sizes(n: int) -> None:
    """Remember the sizes of at most `n` items (the most recently written or read whole
    first). A long benchmark bounds it: every frame it appends is an item, and the soak
    measures the memory of the process that counts (bench_soak, HEADWATER_BENCH_ITEM_SIZES)."""
    with _lock:
        _sizes.limit(n)


def install(session_or_client: Any) -> None:
    """Hook a session (before its clients are created) or a client. Idempotent."""
    events = _emitter(session_or_client)
    for event, handler in (
        ("before-parameter-build.*.*", _on_params),
        ("before-call.*.*", _on_before_call),
        ("after-call.*.*", _on_after_call),
        ("after-call-error.*.*", _on_error),
    ):
        events.register(event, handler, unique_id=f"headwater-callcount-{event}")


def snapshot() -> dict[str, Any]:
    with _lock:
        return {
            "calls": {k: dict(v) for k, v in sorted(_calls.items())},
            "tables": {k: dict(v) for k, v in sorted(_tables.items())},
            # wall time of each answered call as this process saw it, botocore's retries
            # included (a bench compares it with the same call made alone)
            "wall_ms": {k: list(v) for k, v in sorted(_wall.items())},
        }


def reset() -> None:
    """Zero the counters (the item sizes this process knows are kept: they are facts about
    storage, not about a measurement)."""
    with _lock:
        _calls.clear()
        _tables.clear()
        _wall.clear()
        _wall_seen.clear()
