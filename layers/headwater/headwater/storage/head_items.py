"""The DynamoDB item forms the heads and log-tail adapters share (heads.py, log_tail.py): a
head as an item and back, an idempotent producer's claim, the conditions on a head's ext,
eviction runs, and the keys of segment items. No client calls but `read_head`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from headwater.engine.ports import (
    Head,
    ProducerClaim,
)
from headwater.storage.ddb import (
    CID_ATTR,
)
from headwater.storage.ddb import call as _call
from headwater.storage.ddb import int_of as _i
from headwater.storage.ddb import num as _n
from headwater.storage.ddb import opt_int_of as _opt_i
from headwater.storage.ddb import text as _s

LIVE_GSI_KEY = "topic"
BATCH_GET_MAX = 100

INTERNAL_PREFIX = "~"  # the surfaces' internal logs: ~ds/, ~flags/, ~aviso/


def head_from_item(item: dict[str, Any]) -> Head:
    tp = item.get("tp", {}).get("M", {})
    return Head(
        topic=item["pk"]["S"],
        epoch=_i(item, "ep", 1),
        head_seq=_i(item, "hs"),
        earliest_seq=_i(item, "es", 1),
        evict_floor=_i(item, "ef", 1),
        count=_i(item, "cnt"),
        bytes=_i(item, "byt"),
        config=json.loads(item["cfg"]["S"]) if "cfg" in item else {},
        created_ms=_i(item, "cr"),
        last_write_ts=_opt_i(item, "lw"),
        last_read_ts=_opt_i(item, "lr"),
        del_ver=_i(item, "dv"),
        tag_pending={int(k): int(v["N"]) for k, v in tp.items()},
        deleted="dl" in item,
        sealed_through=_i(item, "st"),
        trimmed_through=_i(item, "tt"),
        unsealed_bytes=max(0, _i(item, "ub")),
        evictions=decode_evictions(item.get("ev", {}).get("S", "")),
        prev_head_seq=_i(item, "ph"),
        ext=item["x"]["S"] if "x" in item else "",
        appended=_i(item, "ac"),
        appended_bytes=_i(item, "ab"),
        partitions=_i(item, "lp", 1),
    )


HOLE_ATTR = "hl"  # a hole: seqs reserved that no append committed (no records)


PRODUCER_TTL_S = 30 * 86_400  # an idempotent producer idle this long starts over


def producer_pk(topic: str, epoch: int) -> str:
    return f"p#{topic}#{epoch}"


def claim_op(
    table: str,
    topic: str,
    epoch: int,
    claim: ProducerClaim,
    at: int,
    cid: str,
    now_ms: int,
    *,
    ordered: bool = True,
) -> dict[str, Any]:
    """A producer's claim as a transaction item (docs/storage.md "Producers"): its state
    moves to (epoch, seq) and its last frame key to `at`, iff it takes that write next (and,
    `ordered`, its last frame is before `at`); a refusal returns the stored state."""
    values: dict[str, Any] = {
        ":e": _n(claim.epoch),
        ":q": _n(claim.seq),
        ":s": _n(at),
        ":ttl": _n(now_ms // 1000 + PRODUCER_TTL_S),
        ":cid": _s(cid),
    }
    if claim.seq == 0:
        cond = "(attribute_not_exists(pk) OR e < :e)"
    else:
        cond = "e = :e AND q = :qp"
        values[":qp"] = _n(claim.seq - 1)
    if ordered:
        cond += " AND (attribute_not_exists(s) OR s < :s)"
    return {
        "Update": {
            "TableName": table,
            "Key": {"pk": _s(producer_pk(topic, epoch)), "sk": _s(claim.producer)},
            "UpdateExpression": f"SET e = :e, q = :q, s = :s, #ttl = :ttl, {CID_ATTR} = :cid",
            "ConditionExpression": cond,
            "ExpressionAttributeNames": {"#ttl": "ttl"},
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    }


def claim_hit(reason: dict[str, Any]) -> tuple[int, int, int] | None:
    """The stored (epoch, seq, last frame key) a refused claim returned (None: no state)."""
    old = reason.get("Item")
    if not old or "e" not in old:
        return None
    return _i(old, "e"), _i(old, "q"), _i(old, "s")


def ext_condition(expected: str) -> tuple[str, dict[str, Any]]:
    """The condition that a head's ext attribute still holds `expected` ("" = absent)."""
    if not expected:
        return "attribute_not_exists(x)", {}
    return "x = :x1", {":x1": _s(expected)}


def encode_evictions(runs: Sequence[tuple[int, str]]) -> str:
    return ",".join(f"{upto}:{reason}" for upto, reason in runs)


def decode_evictions(raw: str) -> tuple[tuple[int, str], ...]:
    out: list[tuple[int, str]] = []
    for part in raw.split(","):
        if part:
            upto, _, reason = part.partition(":")
            out.append((int(upto), reason))
    return tuple(out)


def head_to_item(h: Head) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": _s(h.topic),
        "ep": _n(h.epoch),
        "hs": _n(h.head_seq),
        "es": _n(h.earliest_seq),
        "ef": _n(h.evict_floor),
        "cnt": _n(h.count),
        "byt": _n(h.bytes),
        "cfg": _s(json.dumps(h.config, sort_keys=True)),
        "cr": _n(h.created_ms),
        "dv": _n(h.del_ver),
        "tp": {"M": {str(k): _n(v) for k, v in h.tag_pending.items()}},
        "st": _n(h.sealed_through),
        "tt": _n(h.trimmed_through),
        "ub": _n(h.unsealed_bytes),
        "ph": _n(h.prev_head_seq),
        "ac": _n(h.appended),
        "ab": _n(h.appended_bytes),
        "lp": _n(h.partitions),
    }
    if h.evictions:
        item["ev"] = _s(encode_evictions(h.evictions))
    if h.ext:
        item["x"] = _s(h.ext)
    if h.last_write_ts is not None:
        item["lw"] = _n(h.last_write_ts)
    if h.last_read_ts is not None:
        item["lr"] = _n(h.last_read_ts)
    if h.deleted:
        item["dl"] = {"BOOL": True}
    else:
        item["gk"] = _s(LIVE_GSI_KEY)
    return item


# Throttling answers that mean nothing was applied: a key (here a topic's head) past its
# write rate. A reservation that must not wait for them answers 429 instead (fail_fast).


def read_head(client: Any, heads_table: str, topic: str, consistent: bool) -> Head | None:
    """The topic's head item, or None if there is none."""
    item = _call(
        client.get_item, TableName=heads_table, Key={"pk": _s(topic)}, ConsistentRead=consistent
    ).get("Item")
    return head_from_item(item) if item is not None else None


def segment_pk(topic: str, epoch: int) -> str:
    return f"g#{topic}#{epoch}"


def segment_sk(last_seq: int) -> str:
    return f"{last_seq:020d}"
