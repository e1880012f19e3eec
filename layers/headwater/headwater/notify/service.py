"""/api/v1 notifications as use cases: publish one notification, open a watch or replay
stream, and aviso's admin operations (delete one notification, wipe a stream, wipe all),
with the schema, settings and shutdown signal they share. No HTTP here: the routes in
`headwater.http.notifications` parse, authorize and frame; this module decides.

Admin names follow aviso: a *stream* is a topic base (`mars`, `diss`, `polygon`; JetStream
spells them upper case), and an event type's name is accepted as an alias for its base. Here
every event type has its own log, so a name resolves to the event type owning that base."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from headwater.notify.cloudevents import CloudEventSettings, cloudevent_json
from headwater.notify.errors import RequestKind
from headwater.notify.match import CompiledFilter
from headwater.notify.numbers import wire_json
from headwater.notify.requests import Notification, StreamRequest
from headwater.notify.schema import NotificationSchema, load_notification_schema
from headwater.notify.store import NotificationStore, Stored
from headwater.notify.stream import NotificationStream, StartAt
from headwater.settings import NotifySettings

__all__ = ["NotificationService", "load_notification_schema"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def instant_ms(moment: datetime) -> int:
    """A from_date as epoch milliseconds, rounded up: records are stamped in whole ms, so a
    record stamped before a sub-millisecond instant is never included."""
    micros = (moment - EPOCH) // timedelta(microseconds=1)
    return -(-micros // 1000)


def record_time(ts_ms: int) -> datetime:
    """A record's append time as an exact UTC datetime (no float rounding of the ms)."""
    return datetime.fromtimestamp(ts_ms // 1000, UTC).replace(microsecond=(ts_ms % 1000) * 1000)


class NotificationService:
    def __init__(
        self, schema: NotificationSchema, store: NotificationStore, settings: NotifySettings
    ) -> None:
        self.schema = schema
        self.store = store
        self.settings = settings
        self.events = CloudEventSettings(base_url=settings.base_url)
        #: set once when the server starts shutting down; every open stream watches it and
        #: closes with `connection-closing` `server_shutdown`
        self.shutdown = asyncio.Event()

    async def publish(self, notification: Notification) -> Stored:
        """Store one validated notification. The payload is kept as aviso stores it:
        compact JSON with sorted keys (`null` when omitted)."""
        payload = notification.payload
        raw = None if payload is None else wire_json(payload).encode()
        return await self.store.publish(
            notification.event_type, notification.topic, notification.identifier, raw
        )

    def render(self, n: Stored) -> bytes:
        """A stored notification's CloudEvent, with its payload bytes spliced in unchanged."""
        return cloudevent_json(
            n.event_type, n.seq, n.identifier, n.payload_raw, record_time(n.ts_ms), self.events
        )

    def stream(self, request: StreamRequest, request_id: str) -> NotificationStream:
        """A watch or replay of one validated request (its frames start when iterated)."""
        matches = CompiledFilter(request.filter)
        start = StartAt(
            seq=request.from_id,
            date_ms=None if request.from_date is None else instant_ms(request.from_date),
        )
        return NotificationStream(
            self.store,
            request.filter.event_type,
            request.filter.topic,
            start,
            lambda n: matches(n.identifier),
            self.render,
            self.settings.stream,
            self.shutdown,
            request_id,
            replay_only=request.kind is RequestKind.REPLAY,
        )

    # --- admin -----------------------------------------------------------------------------
    async def resolve_stream(self, name: str) -> str | None:
        """The event type behind an aviso stream name or event-type alias: an event type
        (exactly, then ignoring case), the event type whose topic base it names (ignoring
        case), or a stored log of that exact name (an event type since removed from the
        schema). None: no such stream."""
        events = self.schema.events
        if name in events:
            return name
        folded = name.lower()
        for event_type in sorted(events):
            if event_type.lower() == folded:
                return event_type
        for event_type, schema in sorted(events.items()):
            if schema.base.lower() == folded:
                return event_type
        return name if name and name in await self.store.event_types() else None

    async def delete(self, name: str, seq: int) -> bool:
        """Delete notification `seq` of stream `name`: False when there is none."""
        event_type = await self.resolve_stream(name)
        return event_type is not None and await self.store.delete(event_type, seq)

    async def wipe_stream(self, name: str) -> str | None:
        """Remove every notification of one stream (new ones start again at seq 1): the
        event type wiped, or None when no stream has that name."""
        event_type = await self.resolve_stream(name)
        if event_type is not None:
            await self.store.wipe(event_type)
        return event_type

    async def wipe_all(self) -> int:
        """Remove every stored notification of every event type: how many logs went."""
        event_types = await self.store.event_types()
        for event_type in event_types:
            await self.store.wipe(event_type)
        return len(event_types)
