"""Bearer-key auth (spec §0.2): scopes per route, prefix allowlists, fail-closed parsing, the
non-loopback no-auth refusal."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import httpx
import pytest
from api_helpers import MakeClient, assert_error, ok
from starlette.testclient import TestClient

from headwater.errors import ConfigurationError
from headwater.http.app import create_app
from headwater.settings import Settings
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.api

KEYS = ",".join(
    [
        "full-key",
        "reader:read",
        "writer:w",
        "rw-key:rw",
        "deleter:delete",
        "admin-key:a",
        "combo:r+w+d",
        "tenant::tenant42:|shared.",
        "tenant-reader:read:tenant42:",
    ]
)
ALL_KEYS = ["full-key", "reader", "writer", "rw-key", "deleter", "admin-key", "combo", "tenant"]
SCOPES = {
    "full-key": {"read", "write", "delete", "admin"},
    "reader": {"read"},
    "writer": {"write"},
    "rw-key": {"read", "write"},
    "deleter": {"delete"},
    "admin-key": {"admin"},
    "combo": {"read", "write", "delete"},
    "tenant": {"read", "write", "delete", "admin"},
}

Call = Callable[[TestClient, dict[str, str]], httpx.Response]

# Every /v0 topic route with the scope the spec's table requires. Each call addresses
# "tenant42:t", which every key's allowlist covers.
T = "/v0/topics/tenant42:t"
ROUTES: list[tuple[str, str, Call]] = [
    ("list", "read", lambda c, h: c.get("/v0/topics", headers=h)),
    ("state", "read", lambda c, h: c.get(T, headers=h)),
    ("diff", "read", lambda c, h: c.post(f"{T}/diff", json={}, headers=h)),
    ("append", "write", lambda c, h: c.post(T, json={"records": [{"data": 1}]}, headers=h)),
    (
        "delete-records",
        "delete",
        lambda c, h: c.post(f"{T}/delete", json={"before_seq": 1}, headers=h),
    ),
    ("put", "admin", lambda c, h: c.put(T, json={}, headers=h)),
    ("delete-topic", "delete", lambda c, h: c.delete(T, headers=h)),
]


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture
def authed(make_client: MakeClient) -> TestClient:
    c = make_client(api_keys_raw=KEYS)
    ok(c.put(T, json={}, headers=bearer("full-key")), 201)
    ok(c.post(T, json={"records": [{"data": 0}]}, headers=bearer("full-key")))
    return c


def test_missing_or_invalid_token_is_401(authed: TestClient) -> None:
    for name, _, call in ROUTES:
        for headers in (
            {},
            bearer("nope"),
            bearer("full-keyX"),
            bearer("full"),
            bearer("reader:read"),  # the entry text is not the secret
            {"authorization": "Basic ZnVsbC1rZXk6"},
            {"authorization": "full-key"},
            {"authorization": "Bearer "},
        ):
            assert call(authed, headers).status_code == 401, (name, headers)
            assert_error(call(authed, headers), 401, "unauthorized")
    st = ok(authed.get(T, params={"touch": "false"}, headers=bearer("full-key")))
    assert st["head_seq"] == 1


def test_scope_table(authed: TestClient) -> None:
    for name, scope, call in ROUTES:
        for key in ALL_KEYS:
            r = call(authed, bearer(key))
            if scope in SCOPES[key]:
                assert r.status_code in (200, 201), (name, key, r.text)
                ok(r, 200, 201)
            else:
                assert r.status_code == 403, (name, key, r.text)
                assert_error(r, 403, "forbidden")
            # recreate what a permitted destructive call removed
            if name == "delete-topic" and r.status_code == 200:
                ok(authed.post(T, json={"records": [{"data": 0}]}, headers=bearer("full-key")), 201)


def test_forbidden_write_appends_nothing(authed: TestClient) -> None:
    assert_error(
        authed.post(T, json={"records": [{"data": 1}]}, headers=bearer("reader")), 403, "forbidden"
    )
    # 403 is decided before the body is read: malformed JSON from a reader is still 403
    r = authed.post(
        T, content=b"{", headers={**bearer("reader"), "content-type": "application/json"}
    )
    assert_error(r, 403, "forbidden")
    st = ok(authed.get(T, params={"touch": "false"}, headers=bearer("reader")))
    assert st["head_seq"] == 1


def test_auth_is_checked_before_existence(authed: TestClient) -> None:
    assert_error(authed.get("/v0/topics/tenant42:missing"), 401, "unauthorized")
    assert_error(
        authed.post("/v0/topics/tenant42:missing/diff", json={}, headers=bearer("writer")),
        403,
        "forbidden",
    )
    assert_error(
        authed.get("/v0/topics/tenant42:missing", headers=bearer("reader")), 404, "topic_not_found"
    )


def test_bearer_scheme_is_case_insensitive(authed: TestClient) -> None:
    ok(authed.get(T, headers={"authorization": "bearer full-key"}))
    ok(authed.get(T, headers={"authorization": "BEARER full-key"}))


def test_prefix_allowlist(authed: TestClient) -> None:
    h = bearer("tenant")
    # inside the allowlist: every route works
    ok(authed.put("/v0/topics/tenant42:a", json={}, headers=h), 201)
    ok(authed.post("/v0/topics/shared.log", json={"records": [{"data": 1}]}, headers=h), 201)
    ok(authed.post("/v0/topics/shared.log/diff", json={}, headers=h))
    # outside it: 403 on every route, and nothing is created
    outside = "/v0/topics/tenant43:a"
    for r in (
        authed.put(outside, json={}, headers=h),
        authed.get(outside, headers=h),
        authed.post(outside, json={"records": [{"data": 1}]}, headers=h),
        authed.post(f"{outside}/diff", json={}, headers=h),
        authed.post(f"{outside}/delete", json={"before_seq": 1}, headers=h),
        authed.delete(outside, headers=h),
        authed.put("/v0/topics/tenant4", json={}, headers=h),  # a prefix of the prefix
        authed.put("/v0/topics/shared", json={}, headers=h),
    ):
        assert_error(r, 403, "forbidden")
    assert_error(authed.get(outside, headers=bearer("full-key")), 404, "topic_not_found")


def test_scope_and_prefix_combine(authed: TestClient) -> None:
    h = bearer("tenant-reader")
    ok(authed.get(T, headers=h))
    assert_error(authed.post(T, json={"records": [{"data": 1}]}, headers=h), 403, "forbidden")
    ok(authed.put("/v0/topics/other", json={}, headers=bearer("full-key")), 201)
    assert_error(authed.get("/v0/topics/other", headers=h), 403, "forbidden")


def test_list_is_filtered_to_the_allowlist(authed: TestClient) -> None:
    full = bearer("full-key")
    for name in ("tenant42:b", "tenant43:x", "shared.y", "sharedz", "zzz", "a"):
        ok(authed.put(f"/v0/topics/{name}", json={}, headers=full), 201)
    everything = [t["topic"] for t in ok(authed.get("/v0/topics", headers=full))["topics"]]
    assert everything == [
        "a",
        "shared.y",
        "sharedz",
        "tenant42:b",
        "tenant42:t",
        "tenant43:x",
        "zzz",
    ]
    # WHEN a prefix-limited key lists
    mine = [t["topic"] for t in ok(authed.get("/v0/topics", headers=bearer("tenant")))["topics"]]
    # THEN it sees only its allowlist
    assert mine == ["shared.y", "tenant42:b", "tenant42:t"]
    # AND a requested prefix narrows within it, never widens it
    narrowed = ok(
        authed.get("/v0/topics", params={"prefix": "tenant42:b"}, headers=bearer("tenant"))
    )
    assert [t["topic"] for t in narrowed["topics"]] == ["tenant42:b"]
    wide = ok(authed.get("/v0/topics", params={"prefix": "tenant"}, headers=bearer("tenant")))
    assert [t["topic"] for t in wide["topics"]] == ["tenant42:b", "tenant42:t"]
    other = ok(authed.get("/v0/topics", params={"prefix": "tenant43:"}, headers=bearer("tenant")))
    assert other["topics"] == [] and "next_cursor" not in other


def test_filtered_list_paginates(authed: TestClient) -> None:
    full = bearer("full-key")
    for i in range(4):
        ok(authed.put(f"/v0/topics/tenant42:p{i}", json={}, headers=full), 201)
        ok(authed.put(f"/v0/topics/shared.p{i}", json={}, headers=full), 201)
        ok(authed.put(f"/v0/topics/other{i}", json={}, headers=full), 201)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, str | int] = {"page_size": 3}
        if cursor:
            params["cursor"] = cursor
        body = ok(authed.get("/v0/topics", params=params, headers=bearer("tenant")))
        seen.extend(t["topic"] for t in body["topics"])
        cursor = body.get("next_cursor")
        if cursor is None:
            break
    expected = sorted(
        [f"tenant42:p{i}" for i in range(4)] + [f"shared.p{i}" for i in range(4)] + ["tenant42:t"]
    )
    assert seen == expected


MALFORMED_KEYS = [
    "k:bogus",
    "k:read+bogus",
    "k:READ",
    "k:r w",
    "k:read+:",
    ":read",
    "good,k:admin+x",
]


def test_malformed_key_entry_refuses_to_start(settings: Settings, aws: AwsClients) -> None:
    for raw in MALFORMED_KEYS:
        with pytest.raises(ConfigurationError):
            create_app(dataclasses.replace(settings, api_keys_raw=raw), aws)


def test_scope_aliases_are_accepted(make_client: MakeClient) -> None:
    readers = {"r", "rw", "read+write+delete+admin", "r+a"}
    for alias in ("r", "w", "d", "a", "rw", "read+write+delete+admin", "r+a"):
        c = make_client(api_keys_raw=f"k:{alias}")
        r = c.get("/v0/topics", headers=bearer("k"))
        assert r.status_code == (200 if alias in readers else 403), (alias, r.text)


def test_empty_scope_field_means_all_scopes(make_client: MakeClient) -> None:
    c = make_client(api_keys_raw="k:")
    h = bearer("k")
    ok(c.put("/v0/topics/x", json={}, headers=h), 201)
    ok(c.post("/v0/topics/x", json={"records": [{"data": 1}]}, headers=h))
    ok(c.post("/v0/topics/x/delete", json={"before_seq": 2}, headers=h))
    ok(c.get("/v0/topics", headers=h))


def test_no_keys_means_auth_disabled(client: TestClient) -> None:
    ok(client.put("/v0/topics/x", json={}, headers=bearer("anything")), 201)
    ok(client.get("/v0/topics/x"))


def test_tokens_are_never_logged(authed: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    authed.get(T, headers=bearer("super-secret-token-123"))
    authed.get(T, headers=bearer("full-key"))
    authed.post(T, json={"records": "bad"}, headers=bearer("full-key"))
    assert "super-secret-token-123" not in caplog.text
    assert "full-key" not in caplog.text


# --- bind refusal ----------------------------------------------------------------------


def test_non_loopback_without_keys_refuses_to_start(settings: Settings, aws: AwsClients) -> None:
    for host in ("0.0.0.0", "10.1.2.3", "::", "example.com"):
        with pytest.raises(ConfigurationError):
            create_app(dataclasses.replace(settings, host=host), aws)


def test_loopback_without_keys_starts(settings: Settings, aws: AwsClients) -> None:
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        create_app(dataclasses.replace(settings, host=host), aws)


def test_non_loopback_with_keys_or_override_starts(make_client: MakeClient) -> None:
    keyed = make_client(host="0.0.0.0", api_keys_raw="k")
    assert_error(keyed.get("/v0/topics"), 401, "unauthorized")
    insecure = make_client(host="0.0.0.0", allow_insecure_no_auth=True)
    ok(insecure.get("/v0/topics"))
