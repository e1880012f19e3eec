"""`make run`: start the embedded emulator (unless an AWS endpoint is configured), create the
tables and bucket, and serve the whole API with uvicorn. Ctrl-C stops everything."""

from __future__ import annotations

import logging
import os
import sys

import uvicorn
from starlette.types import ASGIApp

from headwater.dev.emulator import (
    FAKE_CREDENTIALS,
    MotoServer,
    external_endpoint_configured,
)
from headwater.errors import ConfigurationError
from headwater.settings import ENV_EMULATOR_PORT, Settings
from headwater.storage.bootstrap import ensure_resources
from headwater.storage.clients import AwsClients


def serve(app: ASGIApp, settings: Settings) -> None:
    """Serve with uvicorn until SIGINT/SIGTERM (uvloop + httptools when installed)."""
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    log = logging.getLogger("headwater.dev")
    emulator: MotoServer | None = None
    if not external_endpoint_configured():
        port = int(os.environ[ENV_EMULATOR_PORT]) if os.environ.get(ENV_EMULATOR_PORT) else None
        emulator = MotoServer(port).start()
        os.environ.update(emulator.env())
        log.info("embedded AWS emulator (moto) on %s", emulator.url)
    else:
        for k, v in FAKE_CREDENTIALS.items():
            if k.startswith("AWS_REGION") or k == "AWS_DEFAULT_REGION":
                os.environ.setdefault(k, v)
        log.info("using configured AWS endpoint(s); no emulator started")
    try:
        settings = Settings.from_env()
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
