"""The service container: settings, AWS clients, adapters, engine — built once, lazily, so
importing a handler never creates a client or calls AWS."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from headwater.access.keys import KeyStore
from headwater.access.limits import ConnectionLimits
from headwater.engine.log import LogEngine
from headwater.engine.quotas import (
    CountedSessions,
    Quotas,
)
from headwater.engines import Core
from headwater.errors import ConfigurationError
from headwater.once import BuiltOnce
from headwater.parameters import load_api_keys, load_secret
from headwater.settings import (
    ENV_FLAG_TOKENS_PARAMETER,
    ENV_LAMBDA_FUNCTION_NAME,
    ENV_SIGNING_KEY_PARAMETER,
    Settings,
)
from headwater.storage.clients import AwsClients

# The surfaces (Durable Streams, notifications, flags, dashboard) are imported and built on
# their first use: a function that serves one of them (WsFunction: /v0 only) does not pay
# for the others' code at its cold start (bench/bench_coldstart.py).
if TYPE_CHECKING:
    from headwater.dashboard.service import DashboardService
    from headwater.durable.service import DurableStreams
    from headwater.engine.queue import QueueEngine
    from headwater.engine.routers import RouterEngine
    from headwater.engine.tiering import Upkeep
    from headwater.flags.service import FlagService
    from headwater.flags.tokens import TokenStore
    from headwater.notify.schema import NotificationSchema
    from headwater.notify.service import NotificationService
    from headwater.storage.index_catalogue import DynamoIndexCatalogue

log = logging.getLogger(__name__)


def build_flags(core: Core, tokens: TokenStore | None = None) -> FlagService:
    """The flag surface over the core's engine (tokens parsed at app creation when given)."""
    from headwater.flags.delta import DeliveryPolicy
    from headwater.flags.service import FlagService, signing_key_bytes
    from headwater.flags.store import ManifestStore, Retention
    from headwater.flags.tokens import SnapshotSigner, TokenStore, load_tokens
    from headwater.storage.flag_slots import DynamoFlagSlots

    cfg = core.settings.flags
    if tokens is None:
        raw = load_secret(
            cfg.tokens_raw, os.environ.get(ENV_FLAG_TOKENS_PARAMETER) or None, "flag tokens"
        )
        # No tokens configured: the flag surface answers 401 to everyone.
        tokens = load_tokens(raw) if raw.strip() else TokenStore([])
    key = load_secret(
        cfg.signing_key, os.environ.get(ENV_SIGNING_KEY_PARAMETER) or None, "signing key"
    )
    if not key and len(tokens) and os.environ.get(ENV_LAMBDA_FUNCTION_NAME):
        # Each Lambda instance would sign with its own random key, and a snapshot URL is
        # rarely served by the instance that signed it: refuse rather than fail later.
        raise ConfigurationError(
            "flag tokens are configured but HEADWATER_SIGNING_KEY(_PARAMETER) is not"
        )
    retention = Retention(versions=cfg.retain_versions, max_age_ms=cfg.retain_sec * 1000)
    return FlagService(
        ManifestStore(core.engine, retention),
        tokens,
        SnapshotSigner(signing_key_bytes(key)),
        DeliveryPolicy(cfg.inline_max_bytes, cfg.churn_max_entries),
        core.engine.clock,
        DynamoFlagSlots(core.clients.dynamodb, core.settings),
    )


@dataclass(slots=True)
class Services:
    """What every route needs, built at once, and the surfaces, each built (and its code
    imported) on first use."""

    settings: Settings
    clients: AwsClients
    engine: LogEngine
    keys: KeyStore
    quotas: Quotas
    sessions: CountedSessions
    limits: ConnectionLimits
    core: Core
    schema: NotificationSchema | None = None
    flag_tokens: TokenStore | None = None
    started_monotonic: float = field(default_factory=time.monotonic)
    shutting_down: bool = False
    _surfaces: BuiltOnce = field(default_factory=BuiltOnce)

    # The core's own lazy parts (headwater/engines.py): imported and built on first use.
    @property
    def routers(self) -> RouterEngine:
        return self.core.routers

    @property
    def queues(self) -> QueueEngine:
        return self.core.queues

    @property
    def upkeep(self) -> Upkeep:
        return self.core.upkeep

    @property
    def notifications(self) -> NotificationService:
        def build() -> NotificationService:
            from headwater.notify.service import NotificationService
            from headwater.notify.store import NotificationStore

            assert self.schema is not None
            return NotificationService(
                self.schema, NotificationStore(self.engine), self.settings.notify
            )

        return self._surfaces.get("notifications", build)

    @property
    def flags(self) -> FlagService:
        return self._surfaces.get("flags", lambda: build_flags(self.core, self.flag_tokens))

    @property
    def streams(self) -> DurableStreams:
        def build() -> DurableStreams:
            from headwater.durable.service import DurableStreams

            return DurableStreams(self.engine, self.engine.clock)

        return self._surfaces.get("streams", build)

    @property
    def index_catalogue(self) -> DynamoIndexCatalogue:
        return self._surfaces.get("index_catalogue", self._build_catalogue)

    def _build_catalogue(self) -> DynamoIndexCatalogue:
        from headwater.storage.index_catalogue import DynamoIndexCatalogue

        catalogue = DynamoIndexCatalogue(self.clients.dynamodb, self.settings)
        self.engine.on_purged.append(lambda head: catalogue.delete(head.topic, head.epoch))
        return catalogue

    @property
    def dashboard(self) -> DashboardService:
        def build() -> DashboardService:
            from headwater.dashboard.service import DashboardService
            from headwater.storage.dashboard_configs import DynamoConfigStore

            return DashboardService(
                self.engine,
                self.settings.dashboard,
                DynamoConfigStore(self.clients.dynamodb, self.settings),
                self.engine.clock,
                self.uptime_ms,
            )

        return self._surfaces.get("dashboard", build)

    @classmethod
    def build(
        cls,
        settings: Settings,
        clients: AwsClients | None,
        keys: KeyStore,
        schema: NotificationSchema | None = None,
        flag_tokens: TokenStore | None = None,
    ) -> Services:
        core = Core.build(settings, clients)
        if schema is None:
            # An s3:// schema is read here, through the app's clients (a file was read by
            # create_app already); a bad one raises ConfigurationError.
            from headwater.notify.schema import load_notification_schema
            from headwater.storage.blobs import read_object

            s3 = core.clients.s3
            schema = load_notification_schema(
                settings.notify.schema, lambda bucket, key: read_object(s3, bucket, key)
            )
        svc = cls(
            settings,
            core.clients,
            core.engine,
            keys,
            core.quotas,
            core.sessions,
            ConnectionLimits(settings.caps),
            core,
            schema,
            flag_tokens,
        )
        # A purged incarnation's index catalogue is removed whichever surface runs the purge.
        svc._surfaces.get("index_catalogue", svc._build_catalogue)
        return svc

    def begin_shutdown(self) -> None:
        """The server is stopping: refuse new work and close every open notification
        stream with `server_shutdown` (idempotent; call it on the serving loop). A surface
        never built has nothing open."""
        self.shutting_down = True
        built = self._surfaces
        if "notifications" in built:
            self.notifications.shutdown.set()
        if "flags" in built:
            self.flags.shutdown.set()
            self.flags.hub.wake_all()
        if "dashboard" in built:
            self.dashboard.begin_shutdown()

    def uptime_ms(self) -> int:
        return int((time.monotonic() - self.started_monotonic) * 1000)


class LazyServices:
    def __init__(
        self,
        settings: Settings,
        clients: AwsClients | None,
        keys: KeyStore | None,
        parameter_name: str | None,
        schema: NotificationSchema | None = None,
        flag_tokens: TokenStore | None = None,
    ) -> None:
        self._settings = settings
        self._clients = clients
        self._keys = keys
        self._parameter_name = parameter_name
        self._schema = schema
        self._flag_tokens = flag_tokens
        self._built: Services | None = None
        self._lock = threading.Lock()
        self.started_monotonic = time.monotonic()

    @property
    def settings(self) -> Settings:
        return self._settings

    def uptime_ms(self) -> int:
        return int((time.monotonic() - self.started_monotonic) * 1000)

    def get(self) -> Services:
        if self._built is None:
            with self._lock:
                if self._built is None:
                    keys = self._keys or KeyStore.parse(
                        load_api_keys(self._settings, self._parameter_name)
                    )
                    self._built = Services.build(
                        self._settings, self._clients, keys, self._schema, self._flag_tokens
                    )
        return self._built

    @property
    def built(self) -> Services | None:
        return self._built

    @property
    def open_without_keys(self) -> bool:
        """No API keys at all (dev mode: every request is the single tenant), as opposed to
        keys given inline or from a parameter (then a caller must present one)."""
        return self._parameter_name is None and self._keys is not None and not self._keys.enabled
