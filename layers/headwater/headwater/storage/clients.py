"""boto3 client construction. Endpoints come from the standard AWS_ENDPOINT_URL and
AWS_ENDPOINT_URL_<SERVICE> variables (botocore resolves them itself), so moto, LocalStack,
DynamoDB Local or a real account need no code change. Clients are built on demand and
injected, never at import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

from headwater.settings import Settings


def client_config(settings: Settings) -> Config:
    """Retries and timeouts of every client. botocore re-sends a request whose answer was
    lost; the adapters make every write safe to re-send (storage/ddb.py).

    Standard retry mode, not adaptive: adaptive mode's client-side rate limiter assumes a
    client works against one resource, and one client here serves every table and every
    topic's keys. After one throttled hot key it held every request of the process, so
    under the fault injector's 2% throttles the fault run took 60-70 s instead of 13-14 s,
    and appends slowed past their budget lost races into 503s (docs/storage.md)."""
    return Config(
        retries={"max_attempts": settings.aws_max_attempts, "mode": "standard"},
        max_pool_connections=64,
        connect_timeout=5,
        read_timeout=settings.aws_read_timeout_ms / 1000,
        tcp_keepalive=True,
    )


@dataclass(frozen=True, slots=True)
class AwsClients:
    """The boto3 clients every adapter shares (built once per process)."""

    dynamodb: Any
    s3: Any

    @classmethod
    def create(cls, settings: Settings, session: boto3.Session | None = None) -> AwsClients:
        s = session or boto3.Session(region_name=settings.region)
        config = client_config(settings)
        s3 = s.client("s3", config=config)
        if str(s3.meta.endpoint_url).startswith("http://"):
            # A plain-HTTP endpoint (an emulator): botocore would SHA-256 every body for
            # SigV4, which over HTTPS it leaves out (TLS and a CRC checksum stand in for
            # it). Leave it out here too: ~3 ms of CPU per MiB uploaded.
            unsigned = Config(s3={"payload_signing_enabled": False})
            s3 = s.client("s3", config=config.merge(unsigned))
        return cls(dynamodb=s.client("dynamodb", config=config), s3=s3)
