"""The console's page says whether the server has API keys, so the console on an open server
(make run) goes straight in instead of asking for a key it does not need."""

from __future__ import annotations

import pytest
from api_helpers import MakeClient
from starlette.testclient import TestClient

pytestmark = pytest.mark.api

OPEN = b'<meta name="headwater-auth" content="none">'


def test_an_open_server_says_so_in_the_console_page(client: TestClient) -> None:
    # GIVEN a server started without API keys WHEN the console page is fetched
    r = client.get("/console/")
    # THEN it carries the open-server meta tag, inside <head>
    assert r.status_code == 200
    head = r.content.split(b"</head>", 1)[0]
    assert OPEN in head
    # AND a revalidation with its ETag is a 304
    again = client.get("/console/", headers={"If-None-Match": r.headers["etag"]})
    assert again.status_code == 304


def test_a_server_with_keys_does_not(make_client: MakeClient) -> None:
    # GIVEN a server with API keys WHEN the console page is fetched (no credentials needed)
    keyed = make_client(api_keys_raw="secret-one:read")
    r = keyed.get("/console/")
    # THEN it has no open-server tag (the console asks for a key)
    assert r.status_code == 200 and OPEN not in r.content
    # AND its ETag is not the open page's, so a cache never mixes the two
    open_page = make_client().get("/console/")
    assert r.headers["etag"] != open_page.headers["etag"]
