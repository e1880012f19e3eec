"""The /v0 requests, built once for the sync and the async client: each builder returns a
`Call` (method, path, body, and how to parse the answer); the clients only send it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from headwater_client.models import (
    AppendResult,
    ClaimResult,
    DeleteRecordsResult,
    DeleteTopicResult,
    DiffResult,
    ExtendResult,
    LeaseResult,
    PutTopicResult,
    TopicPage,
    TopicState,
    WatchSession,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record to append with its own tag, meta or node (a plain value appended is its
    `data`, with the batch's tag and meta)."""

    data: Any
    tag: str | None = None
    meta: Mapping[str, Any] | None = None
    node: str | None = None


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    params: Mapping[str, str] | None = None
    headers: Mapping[str, str] | None = None
    extra_timeout_s: float = 0.0  # a long-poll's wait on top of the client's timeout
    answers: frozenset[int] = field(default_factory=frozenset)  # error statuses that answer


def topic_path(topic: str, suffix: str = "") -> str:
    return f"/v0/topics/{quote(topic, safe=':')}{suffix}"


def _json(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    if not isinstance(body, dict):
        raise ValueError(f"expected a JSON object from {response.request.url}, got {body!r}")
    return body


def _bool(value: bool) -> str:
    return "true" if value else "false"


# --- topics (§1) ------------------------------------------------------------------------------
def put_topic(topic: str, config: Mapping[str, Any] | None = None) -> Call[PutTopicResult]:
    return Call(
        "PUT",
        topic_path(topic),
        lambda r: PutTopicResult.from_json(_json(r)),
        json=dict(config or {}),
    )


def queue_config(
    *,
    lease_ms: int | None = None,
    max_deliveries: int | None = None,
    dead_letter: str | None = None,
    claim_jitter_ms: int | None = None,
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {**(config or {}), "type": "queue"}
    for name, value in (
        ("lease_ms", lease_ms),
        ("max_deliveries", max_deliveries),
        ("dead_letter", dead_letter),
        ("claim_jitter_ms", claim_jitter_ms),
    ):
        if value is not None:
            body[name] = value
    return body


def get_topic(topic: str, touch: bool = True) -> Call[TopicState]:
    return Call(
        "GET",
        topic_path(topic),
        lambda r: TopicState.from_json(_json(r)),
        params=None if touch else {"touch": "false"},
    )


def list_topics(
    prefix: str = "", page_size: int = 100, cursor: str | None = None
) -> Call[TopicPage]:
    params = {"page_size": str(page_size)}
    if prefix:
        params["prefix"] = prefix
    if cursor:
        params["cursor"] = cursor
    return Call("GET", "/v0/topics", lambda r: TopicPage.from_json(_json(r)), params=params)


def delete_topic(topic: str, if_empty: bool = False) -> Call[DeleteTopicResult]:
    return Call(
        "DELETE",
        topic_path(topic),
        lambda r: DeleteTopicResult.from_json(_json(r)),
        params={"if_empty": "true"} if if_empty else None,
    )


# --- append (§2) ------------------------------------------------------------------------------
def append(
    topic: str,
    records: Sequence[Any],
    *,
    tag: str | None = None,
    meta: Mapping[str, Any] | None = None,
    node: str | None = None,
    idempotency_key: str | None = None,
    create: bool | None = None,
    config: Mapping[str, Any] | None = None,
) -> Call[AppendResult]:
    if isinstance(records, str | bytes) or not records:
        raise ValueError("records must be a non-empty sequence of values or NewRecord")
    wire: list[dict[str, Any]] = []
    for rec in records:
        if isinstance(rec, NewRecord):
            item: dict[str, Any] = {"data": rec.data}
            rec_tag, rec_meta, rec_node = rec.tag, rec.meta, rec.node
        else:
            item = {"data": rec}
            rec_tag, rec_meta, rec_node = None, None, None
        if (rec_tag or tag) is not None:
            item["tag"] = rec_tag if rec_tag is not None else tag
        if (rec_meta or meta) is not None:
            item["meta"] = dict(rec_meta if rec_meta is not None else meta or {})
        if rec_node is not None:
            item["node"] = rec_node
        wire.append(item)
    body: dict[str, Any] = {"records": wire}
    if node is not None:
        body["node"] = node
    if idempotency_key is not None:
        body["idempotency_key"] = idempotency_key
    if create is not None:
        body["create"] = create
    if config is not None:
        body["config"] = dict(config)
    return Call("POST", topic_path(topic), lambda r: AppendResult.from_json(_json(r)), json=body)


# --- diff and long-poll (§3–§4) ---------------------------------------------------------------
def diff(
    topic: str,
    from_seq: int = 0,
    *,
    limit: int | None = None,
    node: str | Sequence[str] | None = None,
    include_tags: bool = False,
    include_meta: bool = True,
    wait_ms: int | None = None,
) -> Call[DiffResult]:
    body: dict[str, Any] = {
        "from_seq": from_seq,
        "include_tags": include_tags,
        "include_meta": include_meta,
    }
    if limit is not None:
        body["limit"] = limit
    if node is not None:
        body["node"] = node if isinstance(node, str) else list(node)
    if wait_ms:
        body["wait_ms"] = wait_ms
    return Call(
        "POST",
        topic_path(topic, "/diff"),
        lambda r: DiffResult.from_json(_json(r)),
        json=body,
        extra_timeout_s=(wait_ms or 0) / 1000,
    )


def delete_records(
    topic: str, before_seq: int | None = None, match: str | Sequence[str] | None = None
) -> Call[DeleteRecordsResult]:
    body: dict[str, Any] = {}
    if before_seq is not None:
        body["before_seq"] = before_seq
    if match is not None:
        body["match"] = match if isinstance(match, str) else list(match)
    if not body:
        raise ValueError("give before_seq and/or match")
    return Call(
        "POST",
        topic_path(topic, "/delete"),
        lambda r: DeleteRecordsResult.from_json(_json(r)),
        json=body,
    )


# --- watch (§7) -------------------------------------------------------------------------------
def watch_body(
    topics: Mapping[str, int] | Sequence[str],
    *,
    tail: bool = False,
    node: str | None = None,
    limit: int | None = None,
    max_batch_bytes: int | None = None,
    heartbeat_ms: int | None = None,
    include_meta: bool = True,
    include_tags: bool = False,
    include_data: bool = True,
) -> dict[str, Any]:
    if isinstance(topics, str):
        raise ValueError("topics must be a list of names or a mapping of name -> from_seq")
    wanted: dict[str, dict[str, Any]] = {}
    if isinstance(topics, Mapping):
        for name, seq in topics.items():
            wanted[name] = {"from_seq": int(seq)}
    else:
        for name in topics:
            wanted[name] = {"tail": True} if tail else {"from_seq": 0}
    if not wanted:
        raise ValueError("watch at least one topic")
    body: dict[str, Any] = {
        "topics": wanted,
        "include_meta": include_meta,
        "include_tags": include_tags,
        "include_data": include_data,
    }
    for name, value in (
        ("node", node),
        ("limit", limit),
        ("max_batch_bytes", max_batch_bytes),
        ("heartbeat_ms", heartbeat_ms),
    ):
        if value is not None:
            body[name] = value
    return body


def create_watch(body: Mapping[str, Any], lenient: bool = False) -> Call[WatchSession]:
    return Call(
        "POST",
        "/v0/watch",
        lambda r: WatchSession.from_json(_json(r)),
        json=dict(body),
        params={"lenient": "true"} if lenient else None,
    )


# --- queues (§10) -----------------------------------------------------------------------------
def claim(
    queue: str, node: str, max_jobs: int = 1, lease_ms: int | None = None
) -> Call[ClaimResult]:
    body: dict[str, Any] = {"node": node, "max": max_jobs}
    if lease_ms is not None:
        body["lease_ms"] = lease_ms
    return Call(
        "POST", topic_path(queue, "/claim"), lambda r: ClaimResult.from_json(_json(r)), json=body
    )


def _lease_body(node: str, seqs: Sequence[int], lease_ids: Sequence[str] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"node": node, "seqs": [int(s) for s in seqs]}
    if lease_ids is not None:
        body["lease_ids"] = list(lease_ids)
    return body


def ack(
    queue: str, node: str, seqs: Sequence[int], lease_ids: Sequence[str] | None = None
) -> Call[LeaseResult]:
    return Call(
        "POST",
        topic_path(queue, "/ack"),
        lambda r: LeaseResult.from_json(_json(r), "acked"),
        json=_lease_body(node, seqs, lease_ids),
    )


def nack(
    queue: str,
    node: str,
    seqs: Sequence[int],
    lease_ids: Sequence[str] | None = None,
    delay_ms: int = 0,
) -> Call[LeaseResult]:
    body = _lease_body(node, seqs, lease_ids)
    if delay_ms:
        body["delay_ms"] = delay_ms
    return Call(
        "POST",
        topic_path(queue, "/nack"),
        lambda r: LeaseResult.from_json(_json(r), "nacked"),
        json=body,
    )


def extend(
    queue: str,
    node: str,
    seqs: Sequence[int],
    lease_ms: int,
    lease_ids: Sequence[str] | None = None,
) -> Call[ExtendResult]:
    body = _lease_body(node, seqs, lease_ids)
    body["lease_ms"] = lease_ms
    return Call(
        "POST",
        topic_path(queue, "/extend"),
        lambda r: ExtendResult.from_json(_json(r)),
        json=body,
    )


# --- probes (§8) ------------------------------------------------------------------------------
def health() -> Call[dict[str, Any]]:
    return Call("GET", "/v0/health", _json)


def auth_headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def bool_param(value: bool) -> str:
    return _bool(value)
