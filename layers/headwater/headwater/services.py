"""The service container: settings, AWS clients, adapters, engine — built once, lazily, so
importing a handler never creates a client or calls AWS."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from headwater.engine.log import LogEngine
from headwater.engine.routers import RouterEngine
from headwater.errors import ConfigurationError
from headwater.http.auth import KeyStore
from headwater.settings import Settings
from headwater.storage.blobs import S3BlobStore
from headwater.storage.clients import AwsClients
from headwater.storage.dynamo import DynamoHeadStore, DynamoLogTailStore
from headwater.storage.routers import DynamoRouterStore

log = logging.getLogger(__name__)


def load_api_keys(settings: Settings, parameter_name: str | None) -> str:
    """TOPICS_API_KEYS wins; on Lambda the keys come from SSM / Secrets Manager by name."""
    if settings.api_keys_raw or not parameter_name:
        return settings.api_keys_raw
    from aws_lambda_powertools.utilities import parameters

    if parameter_name.startswith("secret:"):
        value = parameters.get_secret(parameter_name.removeprefix("secret:"), max_age=300)
    else:
        value = parameters.get_parameter(parameter_name, decrypt=True, max_age=300)
    keys = str(value or "").strip()
    if not keys:
        # A deployment that names a keys parameter never silently serves without auth.
        raise ConfigurationError(f"API keys parameter {parameter_name!r} is empty")
    return keys


@dataclass(slots=True)
class Services:
    settings: Settings
    clients: AwsClients
    engine: LogEngine
    keys: KeyStore
    routers: RouterEngine
    started_monotonic: float = field(default_factory=time.monotonic)
    shutting_down: bool = False

    @classmethod
    def build(cls, settings: Settings, clients: AwsClients | None, keys: KeyStore) -> Services:
        clients = clients or AwsClients.create(settings)
        blobs = S3BlobStore(clients.s3, settings.bucket_name)
        heads = DynamoHeadStore(clients.dynamodb, settings)
        tail = DynamoLogTailStore(clients.dynamodb, settings, blobs)
        engine = LogEngine(heads, tail, blobs, settings)
        routers = RouterEngine(
            engine,
            DynamoRouterStore(clients.dynamodb, settings),
            poll_s=settings.poll_interval_ms / 1000,
        )
        return cls(settings, clients, engine, keys, routers)

    def uptime_ms(self) -> int:
        return int((time.monotonic() - self.started_monotonic) * 1000)


class LazyServices:
    def __init__(
        self,
        settings: Settings,
        clients: AwsClients | None,
        keys: KeyStore | None,
        parameter_name: str | None,
    ) -> None:
        self._settings = settings
        self._clients = clients
        self._keys = keys
        self._parameter_name = parameter_name
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
                    self._built = Services.build(self._settings, self._clients, keys)
        return self._built

    @property
    def built(self) -> Services | None:
        return self._built
