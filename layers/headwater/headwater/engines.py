"""The engines over storage, without any surface or HTTP concern: what every entry point
needs, the stream-triggered and scheduled Lambdas included. Importing it loads the engine and
the storage adapters only (no web framework, no surface's schemas, no geometry), so the
sealer and the forwarder start as fast as their work allows."""

from __future__ import annotations

from dataclasses import dataclass

from headwater.engine.log import LogEngine, wall_ms
from headwater.engine.queue import QueueEngine
from headwater.engine.quotas import (
    ROUTERS,
    TOPICS,
    TOTAL_BYTES,
    WATCH_SESSIONS,
    WS_CONNECTIONS,
    CountedSessions,
    Quotas,
)
from headwater.engine.routers import RouterEngine
from headwater.engine.tiering import Upkeep
from headwater.settings import Settings
from headwater.storage.blobs import S3BlobStore
from headwater.storage.clients import AwsClients
from headwater.storage.dynamo import DynamoHeadStore, DynamoLogTailStore
from headwater.storage.leases import DynamoLeaseStore
from headwater.storage.quota import DynamoQuotaStore
from headwater.storage.routers import DynamoRouterStore
from headwater.storage.segments import DynamoSegmentStore
from headwater.storage.sessions import DynamoSessionStore
from headwater.storage.ws_connections import DynamoWsStore


@dataclass(slots=True)
class Core:
    """The engines over storage, without the HTTP concerns (keys, connection caps): what
    every entry point needs, the stream-triggered Lambdas included."""

    settings: Settings
    clients: AwsClients
    engine: LogEngine
    routers: RouterEngine
    quotas: Quotas
    sessions: CountedSessions
    queues: QueueEngine
    upkeep: Upkeep

    @classmethod
    def build(cls, settings: Settings, clients: AwsClients | None = None) -> Core:
        clients = clients or AwsClients.create(settings)
        blobs = S3BlobStore(clients.s3, settings.bucket_name)
        heads = DynamoHeadStore(clients.dynamodb, settings)
        tail = DynamoLogTailStore(clients.dynamodb, settings, blobs)
        sessions = DynamoSessionStore(clients.dynamodb, settings)
        router_store = DynamoRouterStore(clients.dynamodb, settings)
        ws_store = DynamoWsStore(clients.dynamodb, settings)
        quotas = Quotas(
            DynamoQuotaStore(clients.dynamodb, settings),
            settings.caps,
            {
                TOPICS: heads.count_live,
                ROUTERS: lambda: len(router_store.list_all()),
                WATCH_SESSIONS: lambda: sessions.sweep(wall_ms()),
                TOTAL_BYTES: heads.total_live_bytes,
                WS_CONNECTIONS: lambda: ws_store.count_connections(wall_ms() // 1000),
            },
        )
        segments = DynamoSegmentStore(clients.dynamodb, settings)
        engine = LogEngine(heads, tail, blobs, settings, quotas=quotas, segments=segments)
        upkeep = Upkeep(engine, segments)
        engine.upkeep = upkeep.run
        routers = RouterEngine(
            engine,
            router_store,
            poll_s=settings.poll_interval_ms / 1000,
        )
        queues = QueueEngine(engine, DynamoLeaseStore(clients.dynamodb, settings))
        return cls(
            settings,
            clients,
            engine,
            routers,
            quotas,
            CountedSessions(sessions, quotas),
            queues,
            upkeep,
        )
