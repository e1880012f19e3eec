"""State-protocol live invalidation (``/touch/*``), after the reference server (``prisma/streams``:
``docs/live.md``, ``src/touch/live_keys.ts``, ``src/touch/processor_worker.ts``,
``src/touch/live_templates.ts``, ``src/profiles/stateProtocol/routes.ts``).

No process keeps anything the answer depends on. The reference derives touches into an in-memory
journal per process; here a wait derives them from the stream's own log, so any process (Lambda
instance) answers any wait:

* **Cursor** ``<epoch>:<seq>``: ``seq`` is a position in the stream's log, ``epoch`` 16 hex
  digits naming the stream's incarnation (a hash of its topic, epoch and creation time). Another
  epoch (deleted and created again, another stream) is ``stale``.
* **Wait** reads the entries after the cursor, derives the keys each State Protocol change
  touches (its table key; for the templates active at that entry, its watch, membership and
  projected-field keys from ``value``/``old_value``) and intersects them with the wait's keys;
  at the tail it parks on the stream's head (``DurableStreams.wait``) until more is appended.
  A wait examines at most ``SCAN_RECORDS`` entries / ``SCAN_BYTES`` payload bytes.
* **Templates** are one immutable S3 object per revision (``TemplateSet``), named by the
  stream's state (``StreamState.touch_key``) and made current by the conditional head
  write that also guards appends. A template activated by that write covers exactly the
  entries after the tail the write proves (``active_from``), so every process derives the
  same keys for every entry. Inactivity TTLs are evaluated when read (no collector);
  heartbeats write only when the stored ``last_seen`` is older than ``heartbeat_every``.

The package: ``keys.py`` (live keys, template arguments), ``changes.py`` (what a change
touches), ``templates.py`` (template sets, activation and heartbeat plans), ``requests.py``
(request parsing, wait plans); this module reads and writes them through the stream and
answers waits.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from headwater import jsoncodec
from headwater.durable import profiles
from headwater.durable.errors import StreamNotFound
from headwater.durable.offsets import encode_offset
from headwater.durable.service import DurableStreams
from headwater.durable.state import StreamState
from headwater.durable.touch.changes import (
    Change,
    Template,
    Touch,
    canonical_change,
    touched,
)
from headwater.durable.touch.keys import (
    ABSENT,
    _hash,
    encode_arg,
    iso_datetime,
    js_number,
    key_id,
    membership_key,
    projected_field_key,
    table_key,
    template_id,
    template_key,
    watch_key,
)
from headwater.durable.touch.requests import (
    DEFAULT_TIMEOUT_MS,
    MAX_EXACT_KEYS,
    MAX_TEMPLATE_FIELDS,
    MAX_TEMPLATES_PER_CALL,
    MAX_TIMEOUT_MS,
    MAX_WAIT_KEYS,
    WaitPlan,
    WaitRequest,
    _bad,
    parse_decls,
    parse_ttl,
    parse_wait,
    plan_wait,
)
from headwater.durable.touch.templates import (
    ENCODINGS,
    MIN_HEARTBEAT_MS,
    ZERO_ID,
    Activation,
    Decl,
    Limits,
    TemplateSet,
    heartbeat_every,
    plan_activation,
    plan_heartbeat,
)
from headwater.engine.ports import REGISTRY_PREFIX, Head
from headwater.errors import NotFound, StorageUnavailable
from headwater.names import object_key_component

__all__ = [
    "ABSENT",
    "COMMIT_ATTEMPTS",
    "DEFAULT_TIMEOUT_MS",
    "DOC_CACHE",
    "ENCODINGS",
    "MAX_EXACT_KEYS",
    "MAX_TEMPLATES_PER_CALL",
    "MAX_TEMPLATE_FIELDS",
    "MAX_TIMEOUT_MS",
    "MAX_WAIT_KEYS",
    "MIN_HEARTBEAT_MS",
    "PAGE_BYTES",
    "PAGE_RECORDS",
    "SCAN_BYTES",
    "SCAN_RECORDS",
    "SCAN_SECONDS",
    "STALE_MESSAGE",
    "ZERO_ID",
    "Activation",
    "Change",
    "Decl",
    "Limits",
    "Live",
    "Template",
    "TemplateSet",
    "Touch",
    "WaitPlan",
    "WaitRequest",
    "activate",
    "canonical_change",
    "encode_arg",
    "epoch_token",
    "heartbeat",
    "heartbeat_every",
    "iso_datetime",
    "js_number",
    "key_id",
    "log",
    "membership_key",
    "meta",
    "open_stream",
    "parse_cursor",
    "parse_decls",
    "parse_ttl",
    "parse_wait",
    "plan_activation",
    "plan_heartbeat",
    "plan_wait",
    "projected_field_key",
    "table_key",
    "template_id",
    "template_key",
    "touch_config",
    "touched",
    "wait",
    "watch_key",
]


SCAN_RECORDS: Final = 20_000  # entries one wait examines at most
SCAN_BYTES: Final = 32 << 20  # payload bytes one wait examines at most
SCAN_SECONDS: Final = 3.0  # and for at most this long
PAGE_RECORDS: Final = 2_000
PAGE_BYTES: Final = 4 << 20
COMMIT_ATTEMPTS: Final = 16
DOC_CACHE: Final = 256
STALE_MESSAGE: Final = "cursor epoch mismatch; rerun/re-subscribe and start from cursor"
_CURSOR = re.compile(r"([0-9a-fA-F]{16}):([0-9]+)")
_RETRY = {"Retry-After": "1"}
log = logging.getLogger(__name__)


_docs: OrderedDict[str, TemplateSet] = OrderedDict()  # immutable revisions, by S3 key


@dataclass(frozen=True, slots=True)
class Live:
    """A touch-enabled stream as read: its head, state, touch config and templates."""

    head: Head
    state: StreamState
    cfg: dict[str, Any]
    templates: TemplateSet

    @property
    def epoch(self) -> str:
        return epoch_token(self.head, self.state)

    def cursor(self, seq: int | None = None) -> str:
        return f"{self.epoch}:{self.head.head_seq if seq is None else seq}"


def epoch_token(head: Head, state: StreamState) -> str:
    """16 hex digits naming this incarnation of this stream."""
    return _hash(
        (
            head.topic.encode(),
            b"\0",
            str(head.epoch).encode(),
            b"\0",
            str(state.created_ms).encode(),
        )
    )


def parse_cursor(raw: str) -> tuple[str, int] | None:
    m = _CURSOR.fullmatch(raw.strip())
    return None if m is None else (m.group(1).lower(), int(m.group(2)))


def touch_config(state: StreamState) -> dict[str, Any] | None:
    return profiles.touch_config(state.profile) if state.profile else None


async def _load_doc(streams: DurableStreams, state: StreamState) -> TemplateSet:
    key = state.touch_key
    if not key:
        return TemplateSet()
    doc = _docs.get(key)
    if doc is None:
        doc = TemplateSet.load(await streams.engine.get_blob(key))
        _docs[key] = doc
        while len(_docs) > DOC_CACHE:
            _docs.popitem(last=False)
    else:
        _docs.move_to_end(key)
    return doc


async def _live(
    streams: DurableStreams, name: str, head: Head | None = None, state: StreamState | None = None
) -> Live:
    """The stream (as given, else read strongly) with its templates. 404 unless touch is on.
    A revision superseded (and deleted) meanwhile is read again from the current head."""
    for attempt in range(3):
        if head is None or state is None or attempt:
            head, state = await streams.lookup(name)
        cfg = touch_config(state)
        if cfg is None:
            raise NotFound("touch not enabled")
        try:
            return Live(head, state, cfg, await _load_doc(streams, state))
        except StorageUnavailable:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def open_stream(streams: DurableStreams, name: str) -> Live:
    return await _live(streams, name)


async def _commit(streams: DurableStreams, name: str, live: Live, doc: TemplateSet) -> bool:
    head, state = live.head, live.state
    key = (
        f"{REGISTRY_PREFIX}{object_key_component(head.topic)}/{head.epoch}/"
        f"touch-{uuid.uuid4().hex}.json"
    )
    old = state.touch_key
    if not await streams.commit_conf_blob(
        name, head, replace(state, touch_key=key), key, doc.dump()
    ):
        return False
    _docs[key] = doc
    if old:
        # Superseded: readers that still hold its key read the head again (_live).
        try:
            await streams.engine.delete_blobs([old])
        except StorageUnavailable:
            log.warning("superseded touch templates %s not deleted", old)
    return True


async def _backoff(attempt: int) -> None:
    await asyncio.sleep(random.uniform(0, min(0.1, 0.002 * 2**attempt)))


async def activate(
    streams: DurableStreams,
    name: str,
    decls: Sequence[Decl],
    ttl_ms: int,
    live: Live | None = None,
) -> dict[str, Any]:
    """``POST /touch/templates/activate``: the reference's response body. Each attempt plans
    on the stream as read and commits iff its head has not moved (so two activations racing in
    two processes both survive, and ``active_from`` is the tail the commit proves)."""
    for attempt in range(COMMIT_ATTEMPTS):
        live = live if live is not None and attempt == 0 else await open_stream(streams, name)
        limits = Limits.of(live.cfg)
        plan = plan_activation(
            live.templates,
            decls,
            ttl_ms=ttl_ms,
            now_ms=streams.clock(),
            tail=live.head.head_seq,
            limits=limits,
            cfg=live.cfg,
        )
        if plan.doc is None or await _commit(streams, name, live, plan.doc):
            return {
                "activated": [
                    {
                        "templateId": t.id,
                        "state": "active",
                        "activeFromTouchOffset": live.cursor(t.active_from),
                    }
                    for t in plan.activated
                ],
                "denied": plan.denied,
                "limits": {
                    "maxActiveTemplatesPerStream": limits.per_stream,
                    "maxActiveTemplatesPerEntity": limits.per_entity,
                },
            }
        await _backoff(attempt)
    raise StorageUnavailable("template activation kept conflicting; retry", headers=_RETRY)


async def heartbeat(streams: DurableStreams, name: str, live: Live, ids: Sequence[str]) -> Live:
    """Renew the used templates' last_seen when it is due (best effort: a heartbeat that keeps
    losing races is dropped; the next wait tries again)."""
    for attempt in range(4):
        doc = plan_heartbeat(live.templates, ids, streams.clock(), live.cfg)
        if doc is None:
            return live
        if await _commit(streams, name, live, doc):
            return await open_stream(streams, name)
        await _backoff(attempt)
        live = await open_stream(streams, name)
    return live


def meta(live: Live, now_ms: int) -> dict[str, Any]:
    """``GET /touch/meta``. Touches are derived from the log when a wait reads it, so nothing
    is pending or lagging: ``settled`` is always true and ``lagSourceOffsets`` 0."""
    cfg, head = live.cfg, live.head
    memory = cfg.get("memory") or {}
    return {
        "mode": "log",
        "cursor": live.cursor(),
        "epoch": live.epoch,
        "generation": head.head_seq,
        "settled": True,
        "touchMode": "fine",
        "lagSourceOffsets": 0,
        "pendingKeys": 0,
        "overflowBuckets": 0,
        "bucketMs": memory.get("bucketMs", 100),
        "coalesceMs": cfg.get("touchCoalesceWindowMs", 100),
        "coarseIntervalMs": cfg.get("coarseIntervalMs", 100),
        "touchCoalesceWindowMs": cfg.get("touchCoalesceWindowMs", 100),
        "activeTemplates": len(live.templates.live(now_ms)),
        "walScannedThrough": encode_offset(head.epoch, head.head_seq),
        "bucketMaxSourceOffsetSeq": str(head.head_seq),
        "lastFlushAtMs": head.last_write_ts or 0,
    }


def _answer(plan: WaitPlan, *, touched_: bool, seq: int, at_ms: int, cursor: str) -> dict[str, Any]:
    return {
        "touched": touched_,
        "cursor": cursor,
        "effectiveWaitKind": plan.kind,
        "bucketMaxSourceOffsetSeq": str(seq),
        "flushAtMs": at_ms,
        "bucketStartMs": at_ms,
    }


def _stale(live: Live, plan: WaitPlan, now_ms: int) -> dict[str, Any]:
    return {
        "stale": True,
        "cursor": live.cursor(),
        "epoch": live.epoch,
        "generation": live.head.head_seq,
        "effectiveWaitKind": plan.kind,
        "bucketMaxSourceOffsetSeq": str(live.head.head_seq),
        "flushAtMs": now_ms,
        "bucketStartMs": now_ms,
        "error": {"code": "stale", "message": STALE_MESSAGE},
    }


def _by_entity(templates: Iterable[Template]) -> dict[str, list[Template]]:
    out: dict[str, list[Template]] = {}
    for t in templates:
        out.setdefault(t.entity, []).append(t)
    return out


async def wait(
    streams: DurableStreams, name: str, live: Live, req: WaitRequest, *, cap_ms: int
) -> dict[str, Any]:
    """``POST /touch/wait``: touched (an entry after the cursor touched a wanted key; the cursor
    returned is the tail then), not touched at the timeout (the cursor is where the wait read
    to) or stale."""
    started = time.monotonic()
    await streams.touch(live.head, live.state)  # a wait is a read: it renews a TTL stream
    if req.interest == "fine" and req.template_ids_used:
        live = await heartbeat(streams, name, live, req.template_ids_used)
    if req.declare:
        await activate(streams, name, req.declare, req.declare_ttl_ms, live)
        live = await open_stream(streams, name)
    plan = plan_wait(req, live.templates.live(streams.clock()))
    if req.cursor == "now":
        seq = live.head.head_seq
    else:
        parsed = parse_cursor(req.cursor)
        if parsed is None:
            raise _bad("wait.cursor must be in the form <epochHex>:<generation> or 'now'")
        if parsed[0] != live.epoch:
            return _stale(live, plan, streams.clock())
        seq = min(parsed[1], live.head.head_seq)
    deadline = started + min(req.timeout_ms, cap_ms) / 1000
    scan_until = started + SCAN_SECONDS
    records = nbytes = 0
    on_missing = str(live.cfg.get("onMissingBefore", "coarse"))
    while True:
        head = live.head
        templates = _by_entity(live.templates.live(streams.clock()))
        while seq < head.head_seq:
            if records >= SCAN_RECORDS or nbytes >= SCAN_BYTES or time.monotonic() >= scan_until:
                # Bounded work: the client waits again from here.
                return _answer(
                    plan, touched_=False, seq=seq, at_ms=streams.clock(), cursor=live.cursor(seq)
                )
            rr = await streams.read(head, seq, PAGE_RECORDS, PAGE_BYTES)
            for rec in rr.records:
                records += 1
                nbytes += len(rec.data_raw)
                try:
                    change = canonical_change(jsoncodec.loads(rec.data_raw))
                except ValueError:
                    change = None
                if change is None:
                    continue
                active = [t for t in templates.get(change.entity, ()) if t.active_from < rec.seq]
                if plan.matches(touched(change, active, on_missing)):
                    return _answer(
                        plan, touched_=True, seq=rec.seq, at_ms=rec.ts, cursor=live.cursor()
                    )
            if rr.next_seq <= seq:
                break
            seq = rr.next_seq
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return _answer(
                plan, touched_=False, seq=seq, at_ms=streams.clock(), cursor=live.cursor(seq)
            )
        try:
            moved = await streams.wait(head, remaining)
        except StreamNotFound:
            now = await open_stream(streams, name)  # 404 when it is gone for good
            return _stale(now, plan, streams.clock())
        if moved is None:
            return _answer(
                plan, touched_=False, seq=seq, at_ms=streams.clock(), cursor=live.cursor(seq)
            )
        live = await _live(streams, name, *moved)
