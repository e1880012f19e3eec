"""Validation of /v0 request bodies and query strings into engine values. Every rejection is
a 400 in the spec's envelope naming the offending field."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from headwater import jsoncodec
from headwater.engine import (
    AppendRequest,
    DiffRequest,
    NewRecord,
    TagMatch,
    encoded_size,
    validate_config_patch,
)
from headwater.errors import BatchTooLarge, InvalidRequest, RecordTooLarge
from headwater.settings import Limits

_U64_MAX = (1 << 64) - 1


def is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def u64(body: dict[str, Any], name: str, default: int) -> int:
    v = body.get(name, default)
    if v is None:
        return default
    if not is_int(v) or not 0 <= v <= _U64_MAX:
        raise InvalidRequest(f"{name} must be a non-negative integer", detail={"field": name})
    return int(v)


def boolean(body: dict[str, Any], name: str, default: bool) -> bool:
    v = body.get(name, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise InvalidRequest(f"{name} must be a boolean", detail={"field": name})
    return v


def query_bool(params: Any, name: str, default: bool) -> bool:
    raw = params.get(name)
    if raw is None:
        return default
    low = raw.strip().lower()
    if low in ("true", "1", "yes", ""):
        return True
    if low in ("false", "0", "no"):
        return False
    raise InvalidRequest(f"query parameter {name} must be true or false", detail={"field": name})


def query_int(params: Any, name: str, default: int, lo: int, hi: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise InvalidRequest(
            f"query parameter {name} must be an integer", detail={"field": name}
        ) from exc
    if value < lo:
        raise InvalidRequest(f"query parameter {name} must be >= {lo}", detail={"field": name})
    return min(value, hi)


def require_object(body: Any, what: str = "request body") -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidRequest(f"{what} must be a JSON object")
    return body


def require_text(v: str, name: str, where: str = "") -> str:
    """Names, tags, nodes and keys end up as DynamoDB strings: Unicode scalar values only (a
    JSON `\\ud800` escape decodes to a lone surrogate, which no UTF-8 store accepts)."""
    if not jsoncodec.is_scalar_text(v):
        raise InvalidRequest(
            f"{where}{name} must be valid Unicode text (no lone surrogates)",
            detail={"field": name},
        )
    return v


def _opt_str(obj: dict[str, Any], name: str, max_bytes: int, where: str) -> str | None:
    v = obj.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise InvalidRequest(f"{where}{name} must be a string", detail={"field": name})
    if len(require_text(v, name, where).encode()) > max_bytes:
        raise InvalidRequest(
            f"{where}{name} exceeds {max_bytes} bytes", detail={"field": name, "max": max_bytes}
        )
    return v


def parse_append(
    body: Any, limits: Limits, header_idempotency_key: str | None, topic: str
) -> AppendRequest:
    body = require_object(body)
    records = body.get("records")
    if not isinstance(records, list) or not records:
        raise InvalidRequest("records must be a non-empty array", detail={"field": "records"})
    if len(records) > limits.max_batch_records:
        raise BatchTooLarge(
            f"{len(records)} records exceed the batch limit of {limits.max_batch_records}",
            detail={"max": limits.max_batch_records, "got": len(records)},
        )
    batch_node = _opt_str(body, "node", limits.max_node_bytes, "")
    key = body.get("idempotency_key")
    if key is None:  # the body field wins only when present
        key = header_idempotency_key
    if key is not None and (
        not isinstance(key, str) or not key or len(key) > limits.max_idempotency_key_chars
    ):
        raise InvalidRequest(
            "idempotency_key must be a string of 1..256 characters",
            detail={"field": "idempotency_key"},
        )
    if key is not None:
        require_text(key, "idempotency_key")
    create = body.get("create")
    if create is not None and not isinstance(create, bool):
        raise InvalidRequest("create must be a boolean", detail={"field": "create"})
    backpressure = not boolean(body, "disable_backpressure", False)
    config = body.get("config")
    patch = validate_config_patch(config, topic) if config is not None else None
    out: list[NewRecord] = []
    for i, rec in enumerate(records):
        where = f"records[{i}]."
        if not isinstance(rec, dict):
            raise InvalidRequest(f"records[{i}] must be an object", detail={"index": i})
        if "data" not in rec:
            raise InvalidRequest(f"{where}data is required", detail={"index": i})
        for k in rec:
            if k.startswith("$"):
                raise InvalidRequest(
                    f"{where}{k}: $-prefixed fields are server-assigned", detail={"index": i}
                )
        tag = _opt_str(rec, "tag", limits.max_tag_bytes, where)
        node = _opt_str(rec, "node", limits.max_node_bytes, where)
        if node is None:
            node = batch_node
        meta = rec.get("meta")
        meta_raw: bytes | None = None
        if meta is not None:
            if not isinstance(meta, dict):
                raise InvalidRequest(f"{where}meta must be an object", detail={"index": i})
            if len(meta) > limits.max_meta_keys:
                raise InvalidRequest(
                    f"{where}meta has more than {limits.max_meta_keys} keys", detail={"index": i}
                )
            meta_raw = jsoncodec.dumps(meta)
            if len(meta_raw) > limits.max_meta_bytes:
                raise InvalidRequest(
                    f"{where}meta exceeds {limits.max_meta_bytes} bytes", detail={"index": i}
                )
        data_raw = jsoncodec.dumps(rec["data"])
        payload = len(data_raw) + (len(meta_raw) if meta_raw else 0)
        if payload > limits.max_record_bytes:
            raise RecordTooLarge(
                f"records[{i}] data+meta is {payload} bytes; the limit is "
                f"{limits.max_record_bytes}",
                detail={"index": i, "max_bytes": limits.max_record_bytes},
            )
        size = encoded_size(data_raw, meta_raw, tag, node)
        out.append(NewRecord(None, node, tag, meta, size, data_raw, meta_raw))
    return AppendRequest(out, key, create, patch, backpressure=backpressure)


def parse_diff(body: Any, limits: Limits) -> DiffRequest:
    body = require_object(body)
    limit = u64(body, "limit", 0)
    limit = limits.default_limit if limit == 0 else min(limit, limits.max_limit)
    node = body.get("node")
    nodes: frozenset[str]
    if node is None:
        nodes = frozenset()
    elif isinstance(node, str):
        nodes = frozenset({require_text(node, "node")})
    elif isinstance(node, list) and all(isinstance(n, str) for n in node):
        nodes = frozenset(require_text(n, "node") for n in node)
    else:
        raise InvalidRequest(
            "node must be a string or an array of strings", detail={"field": "node"}
        )
    return DiffRequest(
        from_seq=u64(body, "from_seq", 0),
        limit=limit,
        nodes=nodes,
        include_tags=boolean(body, "include_tags", False),
        include_meta=boolean(body, "include_meta", True),
        wait_ms=min(u64(body, "wait_ms", 0), limits.max_wait_ms),
    )


def parse_match(raw: Any) -> TagMatch | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        return TagMatch(require_text(raw, "match"), prefix=False)
    if not (isinstance(raw, list) and len(raw) == 3 and all(isinstance(x, str) for x in raw)):
        raise InvalidRequest(
            'match must be a tag string or ["tag", "Eq"|"Glob", "<value>"]',
            detail={"field": "match"},
        )
    field, op, value = raw
    require_text(value, "match")
    if field != "tag":
        raise InvalidRequest('match field must be "tag"', detail={"field": "match"})
    if op == "Eq":
        return TagMatch(value, prefix=False)
    if op == "Glob":
        if not value.endswith("*") or "*" in value[:-1]:
            raise InvalidRequest(
                "Glob supports only a literal prefix followed by a single trailing *",
                detail={"field": "match"},
            )
        return TagMatch(value[:-1], prefix=True)
    raise InvalidRequest('match op must be "Eq" or "Glob"', detail={"field": "match"})


def parse_delete(body: Any) -> tuple[int | None, TagMatch | None]:
    body = require_object(body)
    before = body.get("before_seq")
    if before is not None:
        before = u64(body, "before_seq", 0)
    match = parse_match(body.get("match"))
    if before is None and match is None:
        raise InvalidRequest("supply before_seq and/or match")
    return before, match


def encode_cursor(after: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": after}).encode()).decode()


def decode_cursor(raw: str | None) -> str | None:
    if raw is None or raw == "":
        return None
    try:
        padded = raw + "=" * (-len(raw) % 4)
        obj = jsoncodec.loads(base64.urlsafe_b64decode(padded.encode()))
        after = obj["after"]
        if not isinstance(after, str):
            raise ValueError("after must be a string")
        return after
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise InvalidRequest("malformed cursor", detail={"field": "cursor"}) from exc
