"""boto3 client construction. Endpoints come from the standard AWS_ENDPOINT_URL and
AWS_ENDPOINT_URL_<SERVICE> variables (botocore resolves them itself), so moto, LocalStack,
DynamoDB Local or a real account need no code change. Clients are built on demand and
injected, never at import."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

from headwater import __version__
from headwater.settings import Settings


def user_agent() -> str:
    """The User-Agent of every request: fixed for the process. botocore's own is rebuilt
    for every request (each component sanitised, the per-call feature metrics added), twice
    per call: ~0.06 ms of CPU per DynamoDB call here, a fifth of botocore's own work before
    the socket (docs/benchmarks.md). A string given in the config is sent as it is, and
    boto3's session adds `Botocore/<version>` after it."""
    parts = [
        f"Boto3/{boto3.__version__}",
        f"Python/{platform.python_version()}",
        f"headwater/{__version__}",
    ]
    env = os.environ.get("AWS_EXECUTION_ENV")  # AWS_Lambda_python3.13 on Lambda, as botocore
    if env:
        parts.append(f"exec-env/{env}")
    return " ".join(parts)


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
        user_agent=user_agent(),
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
