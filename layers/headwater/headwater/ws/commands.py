"""/v0/ws commands (spec "/v0/ws"): parse one JSON command, authorize it, run it, and build
the reply frames. Transport-agnostic: it knows nothing of sockets. A transport hands it raw
messages, a `send` coroutine for frames, and a `Subscriptions` port for this connection's
topics: the uvicorn WebSocket endpoint (http/ws.py) backs that port with an in-process
TopicFeed; an API Gateway WebSocket handler can back it with stored subscriptions and
deliver frames with post_to_connection.

Validation is the HTTP surface's: publish is `parse_append` (POST /v0/topics/:topic) and
the append goes through `commit_append`; subscribe is `parse_watch` (POST /v0/watch) with
its initial positions resolved by `resolve_starts`, so errors carry the same codes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from headwater import jsoncodec
from headwater.access.keys import Principal
from headwater.engine import AppendRequest, WatchSpec, resolve_starts
from headwater.errors import HeadwaterError, InvalidRequest, PayloadTooLarge
from headwater.names import validate_topic_name
from headwater.services import Services
from headwater.v0.parse import boolean, parse_append, require_object
from headwater.v0.requests import (
    append_body,
    commit_append,
    parse_watch,
    require_config_names,
)
from headwater.ws.frames import error_frame, reply_frame

log = logging.getLogger(__name__)

Send = Callable[[bytes], Coroutine[Any, Any, None]]

# subscribe options passed through to the POST /v0/watch validation
SUBSCRIBE_OPTIONS = (
    "node",
    "limit",
    "max_batch_bytes",
    "include_data",
    "include_tags",
    "include_meta",
)


class Subscriptions(Protocol):
    """This connection's topic subscriptions (TopicFeed implements it)."""

    def subscribe(self, topic: str, from_seq: int, epoch: int, opts: WatchSpec) -> None: ...

    def unsubscribe(self, topic: str) -> bool: ...

    def active_topics(self) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class Step:
    """A command, validated and authorized, ready to run. `pipelined` marks a publish: a
    transport may start the next publishes before its ack (their appends still commit in
    command order); every other command should wait for the publishes before it."""

    run: Callable[[], Coroutine[Any, Any, None]]
    pipelined: bool


def _request_id(cmd: dict[str, Any]) -> str | int | None:
    rid = cmd.get("request_id")
    if rid is None or isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
        return rid
    raise InvalidRequest(
        "request_id must be a string or an integer", detail={"field": "request_id"}
    )


def _topic(cmd: dict[str, Any]) -> str:
    topic = cmd.get("topic")
    if not isinstance(topic, str):
        raise InvalidRequest("topic must be a string", detail={"field": "topic"})
    return topic


@dataclass(frozen=True, slots=True)
class _Publish:
    """A parsed publish command: the topic, the append, and whether to answer with seqs."""

    topic: str
    req: AppendRequest
    return_seqs: bool


class Commands:
    """One connection's command handling: `prepare(raw).run()` per message."""

    def __init__(
        self, svc: Services, principal: Principal, subs: Subscriptions, send: Send
    ) -> None:
        self.svc = svc
        self.principal = principal
        self.subs = subs
        self.send = send

    def prepare(self, raw: str | bytes) -> Step:
        """Everything that needs no I/O: decode, authorize, validate. A bad command becomes a
        step that sends its error frame; it never ends the connection."""
        t0 = time.perf_counter()
        request_id: str | int | None = None
        op: object = None
        try:
            cmd = self._decode(raw)
            op = cmd.get("op")
            request_id = _request_id(cmd)
            rid = request_id
            if op == "publish":
                pub = self._prepare_publish(cmd)
                return Step(lambda: self._guard(self._publish(pub, rid, t0), rid), True)
            if op == "subscribe":
                requested, spec = self._prepare_subscribe(cmd)
                return Step(lambda: self._guard(self._subscribe(requested, spec, rid), rid), False)
            if op == "unsubscribe":
                names = self._unsubscribe_names(cmd)
                return Step(lambda: self._guard(self._unsubscribe(names, rid), rid), False)
            if op == "ping":
                return Step(lambda: self.send(reply_frame("pong", rid)), False)
            raise InvalidRequest(
                "op must be one of subscribe, unsubscribe, publish, ping", detail={"field": "op"}
            )
        except HeadwaterError as exc:
            frame = error_frame(request_id, exc)
            return Step(lambda: self.send(frame), op == "publish")
        except Exception:  # a bug: report it on this command, keep the connection
            log.exception("websocket command failed")
            frame = error_frame(request_id, HeadwaterError("internal error"))
            return Step(lambda: self.send(frame), op == "publish")

    def _decode(self, raw: str | bytes) -> dict[str, Any]:
        if not isinstance(raw, str):
            raise InvalidRequest("commands are JSON text messages, not binary")
        data = raw.encode()
        limit = self.svc.settings.limits.max_body_bytes
        if len(data) > limit:
            raise PayloadTooLarge(f"command exceeds {limit} bytes", detail={"max_bytes": limit})
        try:
            cmd = jsoncodec.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidRequest(f"malformed JSON: {exc}") from exc
        return require_object(cmd, "a command")

    async def _guard(self, run: Coroutine[Any, Any, None], request_id: object) -> None:
        try:
            await run
        except HeadwaterError as exc:
            await self.send(error_frame(request_id, exc))
        except Exception:  # a bug: report it on this command, keep the connection
            log.exception("websocket command failed")
            await self.send(error_frame(request_id, HeadwaterError("internal error")))

    # --- publish (spec §2 over the socket) -----------------------------------------------
    def _prepare_publish(self, cmd: dict[str, Any]) -> _Publish:
        scopes = ("write", "admin") if cmd.get("config") is not None else ("write",)
        self.principal.require(*scopes)
        topic = _topic(cmd)
        self.principal.require_name(topic)
        validate_topic_name(topic)
        limits = self.svc.settings.limits
        req = parse_append(cmd, limits, None, topic)
        require_config_names(self.principal, req.config)
        return _Publish(topic, req, boolean(cmd, "return_seqs", True))

    async def _publish(self, pub: _Publish, request_id: object, t0: float) -> None:
        result, perf = await commit_append(self.svc.engine, pub.topic, pub.req)
        body = append_body(pub.topic, result, pub.return_seqs)
        total = round((time.perf_counter() - t0) * 1000, 3)
        body["performance"] = {"server_total_ms": total, **perf}
        await self.send(reply_frame("ack", request_id, body))

    # --- subscribe / unsubscribe (spec §7 options over the socket) ----------------------
    def _prepare_subscribe(self, cmd: dict[str, Any]) -> tuple[dict[str, Any], WatchSpec]:
        self.principal.require("read")
        topic, topics = cmd.get("topic"), cmd.get("topics")
        if topic is not None:
            if topics is not None:
                raise InvalidRequest("give topic or topics, not both", detail={"field": "topic"})
            topics = {_topic(cmd): {"from_seq": cmd.get("from_seq"), "tail": cmd.get("tail")}}
        body = {"topics": topics, **{k: cmd[k] for k in SUBSCRIBE_OPTIONS if k in cmd}}
        max_topics = self.svc.settings.max_watch_topics
        requested, spec = parse_watch(body, self.svc.settings.limits, max_topics)
        for name in requested:
            self.principal.require_name(name)
        total = set(self.subs.active_topics()) | set(requested)
        if len(total) > max_topics:
            raise InvalidRequest(
                f"too many topics on this connection (max {max_topics})",
                detail={"field": "topics", "max": max_topics},
            )
        return requested, spec

    async def _subscribe(
        self, requested: dict[str, Any], spec: WatchSpec, request_id: object
    ) -> None:
        watches, heads = await resolve_starts(self.svc.engine, requested, lenient=False)
        topics = {
            t.topic: {
                "from_seq": t.from_seq,
                "head_seq": heads[t.topic].head_seq,
                "earliest_seq": heads[t.topic].first_live_seq,
            }
            for t in watches
        }
        # The reply goes out before the topics are added, so it precedes their records.
        await self.send(reply_frame("subscribed", request_id, {"topics": topics}))
        for t in watches:
            self.subs.subscribe(t.topic, t.from_seq, t.epoch, spec)

    @staticmethod
    def _unsubscribe_names(cmd: dict[str, Any]) -> list[str]:
        topic, topics = cmd.get("topic"), cmd.get("topics")
        if topic is not None:
            if topics is not None:
                raise InvalidRequest("give topic or topics, not both", detail={"field": "topic"})
            names = [_topic(cmd)]
        elif isinstance(topics, list) and topics and all(isinstance(t, str) for t in topics):
            names = list(topics)
        else:
            raise InvalidRequest(
                "give topic (a name) or topics (a non-empty array of names)",
                detail={"field": "topics"},
            )
        for name in names:
            validate_topic_name(name)
        return names

    async def _unsubscribe(self, names: list[str], request_id: object) -> None:
        removed = [n for n in dict.fromkeys(names) if self.subs.unsubscribe(n)]
        await self.send(reply_frame("unsubscribed", request_id, {"topics": removed}))
