"""Count AWS calls by API with botocore event hooks (benchmarks and cost model only).

`install(session_or_client)` registers before/after-call hooks on a boto3/botocore session
(clients created from it afterwards inherit them) or on one client. Per process, counters
are kept by API name ("DynamoDB.TransactWriteItems", "S3.PutObject", ...): calls, errors,
request/response body bytes, and DynamoDB capacity units estimated from item sizes, the
way DynamoDB bills them (sizes per the developer guide's item-size rules):

- writes: 1 WRU per started KB of each written item, x2 inside TransactWriteItems. An Update
  is billed on the larger of the old and new item, which the request does not show: we size
  it from its key and values (a lower bound; at least 1 KB). Deletes count 1 KB.
- reads: 1 RRU per started 4 KB (GetItem, BatchGetItem per item; Query/Scan on the sum of
  the items returned, at least one unit), x0.5 eventually consistent, x2 transactional.

Base (un-multiplied) write KB units are also kept per table, so a caller can add the writes
a table's global secondary indexes cost. Nothing here changes a request."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import Any

_KB = 1024
_lock = threading.Lock()
_calls: dict[str, dict[str, float]] = {}
_tables: dict[str, dict[str, float]] = {}
_CTX_PARAMS = "headwater_callcount_params"
_CTX_API = "headwater_callcount_api"
_FIELDS = ("calls", "errors", "req_bytes", "resp_bytes", "wru", "rru", "items")


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


def _write_units(name: str, params: Mapping[str, Any]) -> list[tuple[str, int, int]]:
    """(table, base KB units, multiplier) per item written."""
    out: list[tuple[str, int, int]] = []
    if name == "TransactWriteItems":
        for ti in params.get("TransactItems", []):
            for kind, op in ti.items():
                table = op.get("TableName", "?")
                if kind == "Put":
                    out.append((table, _kb(item_size(op.get("Item"))), 2))
                elif kind == "Update":
                    out.append((table, _kb(_update_size(op)), 2))
                else:  # Delete, ConditionCheck
                    out.append((table, 1, 2))
    elif name == "PutItem":
        out.append((params.get("TableName", "?"), _kb(item_size(params.get("Item"))), 1))
    elif name == "UpdateItem":
        out.append((params.get("TableName", "?"), _kb(_update_size(params)), 1))
    elif name == "DeleteItem":
        out.append((params.get("TableName", "?"), 1, 1))
    elif name == "BatchWriteItem":
        for table, reqs in (params.get("RequestItems") or {}).items():
            for r in reqs:
                put = r.get("PutRequest")
                out.append((table, _kb(item_size(put["Item"])) if put else 1, 1))
    return out


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
    size = _body_size(params or {})
    with _lock:
        e = _entry(api)
        e["calls"] += 1
        e["req_bytes"] += size


def _on_after_call(
    model: Any, http_response: Any = None, parsed: Any = None, context: Any = None, **_: Any
) -> None:
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
    writes: list[tuple[str, int, int]] = []
    rru = 0.0
    if model.service_model.service_id == "DynamoDB" and status < 300:
        writes = _write_units(model.name, params)
        rru = _read_units(model.name, params, parsed or {})
    with _lock:
        e = _entry(_api(model))
        e["resp_bytes"] += size
        if status >= 300:
            e["errors"] += 1
        e["rru"] += rru
        e["wru"] += sum(kb * mult for _, kb, mult in writes)
        e["items"] += len(writes)
        for table, kb, _mult in writes:
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
        }


def reset() -> None:
    with _lock:
        _calls.clear()
        _tables.clear()
