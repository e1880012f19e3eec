"""Bad input over real HTTP (issue 23, item 3): each of the hostile tester's requests is a 4xx
and the keep-alive connection it came on stays usable (a 500 used to close it: the server
error handler re-raises, and uvicorn drops the connection)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ServerProcess

pytestmark = pytest.mark.e2e

JSON = {"content-type": "application/json"}
DEEP = b"[" * 10_000 + b"]" * 10_000

# (method, path, body): each was a 500 before the fixes.
BAD: list[tuple[str, str, bytes]] = [
    ("POST", "/v0/topics/ka", b'{"records":' + DEEP + b"}"),
    ("POST", "/v0/topics/ka", b'{"records":[{"data":1,"tag":"\\ud800"}]}'),
    ("POST", "/v0/topics/ka/diff", b'{"node":"\\udfff"}'),
    ("POST", "/v1/stream/ka", b"[" + b"[" * 1100 + b"1" + b"]" * 1100 + b"]"),
    ("POST", "/api/v1/notification", b'{"payload":' + DEEP + b"}"),
    (
        "POST",
        "/api/v2/sentiment",
        b'{"ticker":"AAPL","score":1' + b"0" * 400 + b',"label":"positive",'
        b'"confidence":0.5,"source":"s"}',
    ),
]


def local_port(resp: httpx.Response) -> Any:
    """The client side of the TCP connection the response came on."""
    return resp.extensions["network_stream"].get_extra_info("client_addr")


def test_rejected_bad_input_keeps_the_connection_open(
    start_servers: Callable[..., list[ServerProcess]],
) -> None:
    (server,) = start_servers(1)
    one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    with httpx.Client(base_url=server.url, limits=one, timeout=10) as http:
        assert http.put("/v0/topics/ka", json={}).status_code in (200, 201)
        assert http.put("/v1/stream/ka", headers=JSON).status_code in (200, 201)
        first = http.get("/v0/health")
        for method, path, body in BAD:
            bad = http.request(method, path, content=body, headers=JSON)
            assert 400 <= bad.status_code < 500, (path, bad.status_code, bad.text[:200])
            assert bad.headers.get("connection", "").lower() != "close", path
            after = http.get("/v0/health")
            assert after.status_code == 200
            # the same TCP connection served the bad request and the next one
            assert local_port(bad) == local_port(after) == local_port(first), path
        assert http.get("/v0/topics/ka").json()["head_seq"] == 0
