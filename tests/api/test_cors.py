"""CORS has one source, the app (template.yaml gives the function URLs no CORS configuration
and passes CorsAllowOrigin / DashboardOrigin as HEADWATER_CORS_ORIGINS): the configured
origins are admitted on every surface, preflights included, any other origin gets no CORS
headers, and response headers (Stream-Next-Offset, X-Request-ID, Retry-After, ...) are
readable by the page."""

from __future__ import annotations

from api_helpers import MakeClient
from fastapi.testclient import TestClient

DASH = "https://dash.example.com"
APP = "https://app.example.com"


def test_any_origin_by_default(client: TestClient) -> None:
    r = client.get("/v0/health", headers={"Origin": "https://anywhere.example"})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "*"


def test_only_the_configured_origins(make_client: MakeClient) -> None:
    c = make_client(cors_origins=(APP, DASH))
    for origin in (APP, DASH):
        r = c.get("/api/v2/stream/status", headers={"Origin": origin})
        assert r.headers["access-control-allow-origin"] == origin
        assert r.headers["access-control-expose-headers"] == "*"  # Retry-After, X-Request-ID...
    other = c.get("/api/v2/stream/status", headers={"Origin": "https://evil.example"})
    assert other.status_code == 200
    assert "access-control-allow-origin" not in other.headers


def test_a_preflight_is_answered_for_a_configured_origin(make_client: MakeClient) -> None:
    c = make_client(cors_origins=(DASH,))
    preflight = {
        "Origin": DASH,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-user-id,idempotency-key",
    }
    r = c.options("/api/v2/configurations", headers=preflight)
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == DASH
    assert "POST" in r.headers["access-control-allow-methods"]
    allowed = r.headers["access-control-allow-headers"].lower()
    assert all(h in allowed for h in ("content-type", "x-user-id", "idempotency-key"))
    refused = c.options(
        "/api/v2/configurations", headers={**preflight, "Origin": "https://evil.example"}
    )
    assert refused.status_code == 400
    assert "access-control-allow-origin" not in refused.headers
