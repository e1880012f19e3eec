"""moto's server with every request processed one at a time.

moto's threaded server does not isolate DynamoDB TransactWriteItems: two concurrent
transactions can both pass their conditions and then partially apply, which real DynamoDB
never allows (transactions are serializable). Headwater's correctness rests on that
isolation, so the embedded emulator serializes request processing behind one lock. Sockets
are still served on threads, so a slow client does not stall the others."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple

from headwater.dev import moto_patches

_LOCK = threading.Lock()


class SerializedApp:
    def __init__(self, app: Any) -> None:
        self._app = app

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        with _LOCK:
            # Materialize the body under the lock: the work happens while it is iterated.
            return list(self._app(environ, start_response))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    moto_patches.apply()
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, SerializedApp(app), threaded=True)


if __name__ == "__main__":
    main()
