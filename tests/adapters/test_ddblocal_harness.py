"""The DynamoDB Local harness itself: it answers on 127.0.0.1 and on no other address."""

from __future__ import annotations

import socket

import pytest

from headwater.dev.ddblocal import DynamoDBLocal, DynamoDBLocalUnavailable, find_jar

pytestmark = [pytest.mark.adapters, pytest.mark.ddblocal]


def _non_loopback_address() -> str | None:
    # A UDP "connect" only picks the outgoing interface; no packet is sent.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 9))
        except OSError:
            return None
        addr = str(s.getsockname()[0])
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


def test_listens_on_loopback_only(ddblocal_server: DynamoDBLocal) -> None:
    with socket.create_connection(("127.0.0.1", ddblocal_server.port), timeout=2):
        pass
    if not ddblocal_server.loopback_only:
        pytest.skip("no JDK compiler: DynamoDB Local fell back to listening on all interfaces")
    other = _non_loopback_address()
    if other is None:
        pytest.skip("this machine has no non-loopback IPv4 address to probe")
    with pytest.raises(OSError):
        socket.create_connection((other, ddblocal_server.port), timeout=2).close()


def test_missing_jar_says_how_to_install(tmp_path: object) -> None:
    with pytest.raises(DynamoDBLocalUnavailable, match="HEADWATER_DDBLOCAL_DIR"):
        find_jar({"HEADWATER_DDBLOCAL_DIR": str(tmp_path)})
