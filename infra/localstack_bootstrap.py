#!/usr/bin/env python3
"""Create Headwater's tables and bucket in LocalStack (idempotent).

    set -a; . infra/localstack.env; set +a
    python infra/localstack_bootstrap.py                  # endpoint from AWS_ENDPOINT_URL
    python infra/localstack_bootstrap.py --localstack-host 127.0.0.1:4566

Resource names come from HEADWATER_RESOURCE_PREFIX / HEADWATER_BUCKET (headwater.settings);
the table definitions from headwater.storage.schema, the same ones template.yaml declares.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from botocore.config import Config

try:
    import headwater  # noqa: F401
except ModuleNotFoundError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "layers" / "headwater"))

from localstack_client.session import Session

from headwater.settings import Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

# Path-style S3: works with any emulator host name (plain "localhost" has no wildcard DNS).
_CONFIG = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5, "mode": "standard"})


def build_clients(settings: Settings, localstack_host: str | None = None) -> AwsClients:
    """Clients bound to LocalStack: AWS_ENDPOINT_URL if set, else `localstack_host`
    (host[:port]), else $LOCALSTACK_HOST, else localhost:4566."""
    session = Session(
        aws_access_key_id="test",
        aws_secret_access_key="test",
        aws_session_token="test",
        region_name=settings.region,
        localstack_host=localstack_host,
    )
    return AwsClients(
        dynamodb=session.client("dynamodb", config=_CONFIG),
        s3=session.client("s3", config=_CONFIG),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--localstack-host", default=None, help="host[:port] of LocalStack")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    settings = Settings.from_env()
    clients = build_clients(settings, args.localstack_host)
    ensure_resources(settings, clients)
    tables = ", ".join(
        n
        for n in clients.dynamodb.list_tables()["TableNames"]
        if n.startswith(settings.resource_prefix + "-")
    )
    print(f"tables: {tables}\nbucket: {settings.bucket_name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
