"""The engines over storage, without any surface or HTTP concern: what every entry point
needs, the stream-triggered and scheduled Lambdas included. Importing it loads the log
engine's core (its ports, caches and I/O pools) and the storage adapters, no more (no web
framework, no surface's schemas, no geometry). The log engine's parts (append, reads,
deletes: engine/log.py), the queue, router and upkeep engines, and their adapters, are
imported and built on first use: the sealer loads only the core and its upkeep, the
forwarder and the WebSocket function never the queue (bench/bench_coldstart.py; the cold
start is billed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from headwater.engine.core import LogCore, wall_ms
from headwater.engine.quotas import (
    ROUTERS,
    TOPICS,
    TOTAL_BYTES,
    WATCH_SESSIONS,
    WS_CONNECTIONS,
    CountedSessions,
    Quotas,
)
from headwater.once import BuiltOnce
from headwater.settings import Settings
from headwater.storage.blobs import S3BlobStore
from headwater.storage.clients import AwsClients
from headwater.storage.heads import DynamoHeadStore
from headwater.storage.log_tail import DynamoLogTailStore
from headwater.storage.quota import DynamoQuotaStore
from headwater.storage.segments import DynamoSegmentStore
from headwater.storage.sessions import DynamoSessionStore

if TYPE_CHECKING:
    from headwater.engine.log import LogEngine
    from headwater.engine.queue import QueueEngine
    from headwater.engine.routers import RouterEngine
    from headwater.engine.tiering import Upkeep
    from headwater.storage.routers import DynamoRouterStore


class Core:
    """The engines over storage, without the HTTP concerns (keys, connection caps): what
    every entry point needs, the stream-triggered Lambdas included. `log_core` (the log
    engine's shared core) is built at once; `engine` (the log engine over it), `queues`,
    `routers` and `upkeep` are built (their code imported) on first use, once, whichever
    thread asks."""

    __slots__ = (
        "_parts",
        "clients",
        "log_core",
        "quotas",
        "segments",
        "sessions",
        "settings",
    )

    def __init__(
        self,
        settings: Settings,
        clients: AwsClients,
        log_core: LogCore,
        quotas: Quotas,
        sessions: CountedSessions,
        segments: DynamoSegmentStore,
    ) -> None:
        self.settings = settings
        self.clients = clients
        self.log_core = log_core
        self.quotas = quotas
        self.sessions = sessions
        self.segments = segments
        self._parts = BuiltOnce()

    @property
    def engine(self) -> LogEngine:
        def build() -> LogEngine:
            from headwater.engine.log import LogEngine

            engine = LogEngine.over(self.log_core)
            # Tiering runs after an append that crosses a threshold; its code loads then.
            engine.upkeep = lambda topic: self.upkeep.run(topic)
            return engine

        return self._parts.get("engine", build)

    @property
    def upkeep(self) -> Upkeep:
        def build() -> Upkeep:
            from headwater.engine.tiering import Upkeep

            return Upkeep(self.log_core, self.segments)

        return self._parts.get("upkeep", build)

    @property
    def router_store(self) -> DynamoRouterStore:
        def build() -> DynamoRouterStore:
            from headwater.storage.routers import DynamoRouterStore

            return DynamoRouterStore(self.clients.dynamodb, self.settings)

        return self._parts.get("router_store", build)

    @property
    def routers(self) -> RouterEngine:
        def build() -> RouterEngine:
            from headwater.engine.routers import RouterEngine

            return RouterEngine(
                self.engine, self.router_store, poll_s=self.settings.poll_interval_ms / 1000
            )

        return self._parts.get("routers", build)

    @property
    def queues(self) -> QueueEngine:
        def build() -> QueueEngine:
            from headwater.engine.queue import QueueEngine
            from headwater.storage.leases import DynamoLeaseStore

            return QueueEngine(self.engine, DynamoLeaseStore(self.clients.dynamodb, self.settings))

        return self._parts.get("queues", build)

    @classmethod
    def build(cls, settings: Settings, clients: AwsClients | None = None) -> Core:
        clients = clients or AwsClients.create(settings)
        blobs = S3BlobStore(clients.s3, settings.bucket_name)
        heads = DynamoHeadStore(clients.dynamodb, settings)
        tail = DynamoLogTailStore(clients.dynamodb, settings, blobs)
        sessions = DynamoSessionStore(clients.dynamodb, settings)
        core: Core

        def ws_connections() -> int:
            from headwater.storage.ws_connections import DynamoWsStore

            return DynamoWsStore(clients.dynamodb, settings).count_connections(wall_ms() // 1000)

        quotas = Quotas(
            DynamoQuotaStore(clients.dynamodb, settings),
            settings.caps,
            {
                TOPICS: heads.count_live,
                ROUTERS: lambda: len(core.router_store.list_all()),
                WATCH_SESSIONS: lambda: sessions.sweep(wall_ms()),
                TOTAL_BYTES: heads.total_live_bytes,
                WS_CONNECTIONS: ws_connections,
            },
        )
        segments = DynamoSegmentStore(clients.dynamodb, settings)
        log_core = LogCore(heads, tail, blobs, settings, wall_ms, quotas, segments)
        core = cls(settings, clients, log_core, quotas, CountedSessions(sessions, quotas), segments)
        return core
