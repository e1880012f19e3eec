"""`make run`: start the embedded emulator (unless an AWS endpoint is configured), create the
tables and bucket, and serve the whole API with uvicorn. Ctrl-C stops everything. With
HEADWATER_EMULATOR=off it serves against AWS itself: no emulator, nothing created (the
tables and bucket of a deployed stack, named by HEADWATER_RESOURCE_PREFIX and
HEADWATER_BUCKET).

/api/v1 serves the example notification schema (infra/notification_schema.example.yaml)
unless HEADWATER_NOTIFICATION_SCHEMA names another (set it empty for none), and, bound to
loopback, the example flag tokens (infra/flag_tokens.example.yaml) unless
HEADWATER_FLAG_TOKENS is set. On SIGINT or
SIGTERM, open notification streams are closed with `server_shutdown` before uvicorn waits
for connections to end."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from headwater.dev.emulator import (
    FAKE_CREDENTIALS,
    MotoServer,
    external_endpoint_configured,
)
from headwater.errors import ConfigurationError
from headwater.settings import (
    ENV_EMULATOR_PORT,
    ENV_FLAG_TOKENS,
    ENV_NOTIFICATION_SCHEMA,
    Settings,
)
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients

# The repository's example schema (a source checkout; absent from an installed package).
EXAMPLE_SCHEMA = Path(__file__).resolve().parents[4] / "infra" / "notification_schema.example.yaml"
EXAMPLE_FLAG_TOKENS = Path(__file__).resolve().parents[4] / "infra" / "flag_tokens.example.yaml"
ENV_DEBUG_LOGGERS = "HEADWATER_DEBUG_LOGGERS"
ENV_EMULATOR = "HEADWATER_EMULATOR"  # "off": serve against AWS itself (deployed tables)
CLOSING_GRACE_S = 0.5  # lets closing frames reach the sockets before uvicorn closes them


class GracefulServer(uvicorn.Server):
    """uvicorn, but open /api/v1 streams end with `connection-closing` `server_shutdown` as
    soon as it starts stopping (uvicorn would wait for them, then cancel them)."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.headwater_app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        from headwater.http.app import begin_shutdown

        if begin_shutdown(self.headwater_app):
            await asyncio.sleep(CLOSING_GRACE_S)
        await super().shutdown(sockets)


def serve(app: FastAPI, settings: Settings) -> None:
    """Serve with uvicorn until SIGINT/SIGTERM (uvloop when installed), through httptools
    with the stalled-client guards (headwater.http.serving: a header deadline, bounded
    unsent bytes, sockets of clients that stopped reading reset once closed)."""
    GracefulServer(uvicorn_config(app, settings), app).run()


def uvicorn_config(app: FastAPI, settings: Settings) -> uvicorn.Config:
    from headwater.http.serving import KEEP_ALIVE_S, http_protocol

    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        http=http_protocol(settings),
        log_level="warning",
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=5,
    )


def default_notification_schema() -> str | None:
    """The schema `make run` serves when none is configured: the example, if present."""
    if ENV_NOTIFICATION_SCHEMA in os.environ or not EXAMPLE_SCHEMA.is_file():
        return None
    os.environ[ENV_NOTIFICATION_SCHEMA] = str(EXAMPLE_SCHEMA)
    return str(EXAMPLE_SCHEMA)


def default_flag_tokens(settings: Settings) -> str | None:
    """The flag tokens `make run` uses when none are configured: the example file, and only
    on a loopback bind (its tokens are public)."""
    if (
        ENV_FLAG_TOKENS in os.environ
        or not EXAMPLE_FLAG_TOKENS.is_file()
        or not settings.bind_is_loopback()
    ):
        return None
    os.environ[ENV_FLAG_TOKENS] = str(EXAMPLE_FLAG_TOKENS)
    return str(EXAMPLE_FLAG_TOKENS)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # e.g. HEADWATER_DEBUG_LOGGERS=headwater.engine.routers: those loggers at DEBUG
    for name in filter(None, os.environ.get(ENV_DEBUG_LOGGERS, "").split(",")):
        logging.getLogger(name.strip()).setLevel(logging.DEBUG)
    log = logging.getLogger("headwater.dev")
    emulator: MotoServer | None = None
    real_aws = os.environ.get(ENV_EMULATOR, "").strip().lower() in ("off", "0", "false", "no")
    if real_aws:
        # Against AWS itself (the default credential chain and region): the tables and the
        # bucket are the ones a `sam deploy` made (HEADWATER_RESOURCE_PREFIX = the stack
        # name, HEADWATER_BUCKET = its DataBucketName output); nothing is created here.
        log.info("%s=off: serving against AWS; no emulator, no resources created", ENV_EMULATOR)
    elif not external_endpoint_configured():
        port = int(os.environ[ENV_EMULATOR_PORT]) if os.environ.get(ENV_EMULATOR_PORT) else None
        emulator = MotoServer(port).start()
        os.environ.update(emulator.env())
        log.info("embedded AWS emulator (moto) on %s", emulator.url)
    else:
        for k, v in FAKE_CREDENTIALS.items():
            if k.startswith("AWS_REGION") or k == "AWS_DEFAULT_REGION":
                os.environ.setdefault(k, v)
        log.info("using configured AWS endpoint(s); no emulator started")
    example = default_notification_schema()
    if example is not None:
        log.info("notification schema: %s (set %s to change)", example, ENV_NOTIFICATION_SCHEMA)
    try:
        tokens = default_flag_tokens(Settings.from_env())
        if tokens is not None:
            log.info("flag tokens: %s (set %s to change)", tokens, ENV_FLAG_TOKENS)
        settings = Settings.from_env()
        if not real_aws:
            ensure_resources(settings, AwsClients.create(settings))
        from headwater.http.app import create_app

        try:
            app = create_app(settings)
        except ConfigurationError as exc:
            log.error("refusing to start: %s", exc)
            return 2
        log.info("serving Headwater on http://%s:%d", settings.host, settings.port)
        serve(app, settings)
    finally:
        if emulator is not None:
            emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
