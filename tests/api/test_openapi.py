"""The API reference (issue 27): /openapi.json documents every route of the app, and /docs
serves Swagger UI from same-origin files shipped in a pinned package.

The routes come from the app itself (a new route without documentation fails here): every
HTTP route has an operation per method with a 2xx answer (a JSON one described by a model),
its error answers in its surface's envelope, and a request body where it takes one. The error
envelope models are checked against the real renderer (`responses.error_response`) for every
documented status. Whether the answers really match their documents, request by request, is
test_schemathesis.py's job."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from starlette.requests import Request
from starlette.routing import BaseRoute
from starlette.testclient import TestClient

from headwater.errors import HeadwaterError
from headwater.flags.errors import FlagError
from headwater.http import api_docs
from headwater.http.app import create_app
from headwater.http.lazy_routes import load_all
from headwater.http.responses import error_response
from headwater.settings import Settings
from headwater.storage.clients import AwsClients

pytestmark = pytest.mark.api

REPO = Path(__file__).resolve().parents[2]
REF = "#/components/schemas/"
# Routes that are not OpenAPI operations, and why.
NOT_OPERATIONS = {
    "/v0/ws": "a WebSocket (JSON commands, spec §7): named in the document's description",
    "/openapi.json": "the document itself",
    "/docs": "the Swagger UI page",
    "/docs/{asset}": "Swagger UI's files",
    "/console": "the web console's page and files",
}
# DELETE routes that take a JSON body (every POST and PUT takes one).
DELETE_WITH_BODY = {"/api/v1/admin/wipe/stream"}


def envelopes(path: str) -> set[str]:
    """The models an error answer of `path` may be documented with."""
    if path == "/api/v1/events" or path.startswith("/api/v1/tenants/"):
        return {"FlagError"}
    if path.startswith("/api/v1/"):
        # aviso's error body, and the admin and schema routes' own answers
        return {"AvisoError", "AdminResult", "SchemaNotFound"}
    if path.startswith("/api/v2/"):
        return {"DashboardError"}
    if path.startswith("/v1/"):
        return {"V1Error"}
    return {"V0Error"}


def walk(routes: list[BaseRoute]) -> Iterator[BaseRoute]:
    for r in routes:
        inner = getattr(r, "original_router", None)  # an included router (FastAPI >= 0.120)
        yield from walk(inner.routes) if inner is not None else [r]


@pytest.fixture(scope="module")
def app() -> Any:
    app = create_app(Settings(resource_prefix="hw-openapi"))
    load_all(app)  # the surfaces' routes are imported on first use
    return app


@pytest.fixture(scope="module")
def document(app: Any) -> dict[str, Any]:
    out: dict[str, Any] = app.openapi()
    return out


def schema_of(document: dict[str, Any], ref: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": ref, "components": document["components"]})


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


# --- every route ------------------------------------------------------------------------------
def test_every_route_is_documented(app: Any, document: dict[str, Any]) -> None:
    problems: list[str] = []
    operations = 0
    for route in walk(list(app.routes)):
        path = getattr(route, "path_format", None) or getattr(route, "path", "")
        methods = sorted(getattr(route, "methods", None) or [])
        if not methods or not getattr(route, "include_in_schema", True):
            if path not in NOT_OPERATIONS:
                problems.append(f"{type(route).__name__} {path}: neither documented nor listed")
            continue
        item = document["paths"].get(path, {})
        for method in (m.lower() for m in methods):
            operations += 1
            where = f"{method.upper()} {path}"
            op = item.get(method)
            if op is None:
                problems.append(f"{where}: no operation")
                continue
            problems += [f"{where}: {p}" for p in check_operation(path, method, op)]
    assert operations >= 50, operations  # the walk found the app's routes
    assert not problems, "\n".join(problems)


def test_every_surface_route_calls_its_endpoint_directly(app: Any) -> None:
    # The design the models above document: handlers take the raw Request and their path
    # parameters and parse the rest by hand, so each route is a LeanRoute called directly
    # (http/lean_route.py), the Durable Streams resource among them; the docs routes aside
    from fastapi.routing import APIRoute

    from headwater.http.lean_route import LeanRoute, direct_call

    routes = [r for r in walk(list(app.routes)) if isinstance(r, APIRoute)]
    surface = [r for r in routes if not r.path.startswith(("/openapi.json", "/docs"))]
    assert len(surface) > 40
    slow = [
        r.path
        for r in surface
        if not isinstance(r, LeanRoute) or not direct_call(r.endpoint, set(r.param_convertors))
    ]
    assert slow == []
    assert "/v1/stream/{path:path}" in {r.path for r in surface}


def check_operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    if not op.get("summary") or not op.get("tags"):
        problems.append("no summary or tag")
    responses: dict[str, Any] = op.get("responses", {})
    ok = {s: r for s, r in responses.items() if s.startswith(("2", "3"))}
    if not any(s.startswith("2") for s in ok):
        problems.append("no 2xx answer")
    for status, answer in ok.items():
        content = answer.get("content")
        if not content:
            if not (status in ("204", "304") or method == "head" or answer.get("headers")):
                problems.append(f"{status}: no body and nothing else documented")
            continue
        for media, body in content.items():
            if "schema" not in body and "itemSchema" not in body:
                problems.append(f"{status} {media}: no schema")
            elif media == "application/json" and not body["schema"].get("$ref", "").startswith(REF):
                problems.append(f"{status}: the JSON answer is not a model")
    errors = {s: r for s, r in responses.items() if s.startswith(("4", "5"))}
    if not errors and path not in ("/api/v1/schema", "/api/v2/stream/status"):
        problems.append("no error answer")  # the two are public reads of in-memory state
    allowed = envelopes(path)
    for status, answer in errors.items():
        if status == "414":
            continue  # the flag surface's 414 has no body
        schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
        if schema.get("$ref", "").removeprefix(REF) not in allowed:
            problems.append(f"{status}: not in the surface's envelope {sorted(allowed)}")
    takes_body = method in ("post", "put") or path in DELETE_WITH_BODY
    request = op.get("requestBody")
    if takes_body and request is None:
        problems.append("takes a body, documents none")
    if not takes_body and request is not None:
        problems.append("documents a body it does not read")
    if request is not None:
        content = request.get("content", {})
        if not content:
            problems.append("a request body without content")
        json_body = content.get("application/json")
        if json_body is not None and not json_body["schema"].get("$ref", "").startswith(REF):
            problems.append("the JSON request body is not a model")
    for parameter in op.get("parameters", []):
        if parameter["in"] == "header" and parameter["name"].lower() in (
            "accept",
            "content-type",
            "authorization",
        ):
            problems.append(f"header parameter {parameter['name']} (OpenAPI ignores it)")
    return problems


def test_the_document_is_valid_openapi_and_every_reference_resolves(
    document: dict[str, Any],
) -> None:
    from openapi_spec_validator import validate

    validate(document)
    assert document["openapi"].startswith("3.1")
    schemas = document["components"]["schemas"]
    unresolved = {r for r in refs(document) if r.removeprefix(REF) not in schemas}
    assert not unresolved
    assert "HTTPValidationError" not in schemas  # no route answers FastAPI's 422
    ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def test_error_envelope_models_match_what_the_app_renders(document: dict[str, Any]) -> None:
    """Each documented error status of each route, rendered by the one error renderer the
    app uses (with and without detail), validates against the model documented for it."""
    for path, item in document["paths"].items():
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        for method, op in item.items():
            for status, answer in op["responses"].items():
                if not status.startswith(("4", "5")) or status == "414":
                    continue
                ref = answer["content"]["application/json"]["schema"]["$ref"]
                if ref.removeprefix(REF) in ("AdminResult", "SchemaNotFound"):
                    continue  # answered by the route itself (schemathesis checks those)
                validator = schema_of(document, ref)
                for exc in errors_for(concrete, int(status)):
                    request = Request(
                        {"type": "http", "method": method.upper(), "path": concrete, "headers": []}
                    )
                    body = json.loads(bytes(error_response(request, exc).body))
                    failures = [e.message for e in validator.iter_errors(body)]
                    assert not failures, (method, path, status, body, failures)


def errors_for(path: str, status: int) -> list[HeadwaterError]:
    plain = HeadwaterError("why", status=status, code="some_code")
    detailed = HeadwaterError("why", status=status, code="some_code", detail={"field": "x"})
    out = [plain, detailed]
    if path == "/api/v1/events" or path.startswith("/api/v1/tenants/"):
        out += [
            FlagError("why", status=status, code="c", details={"reason": "r"}),
            FlagError("why", status=status, code="c", details=[{"rule": "r"}]),
        ]
    return out


# --- serving ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client(aws: AwsClients) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(resource_prefix="hw-docs"), aws)) as c:
        yield c


def test_openapi_json_is_served(client: TestClient, document: dict[str, Any]) -> None:
    r = client.get("/openapi.json")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json() == json.loads(json.dumps(document))


def test_docs_page_loads_only_same_origin_files_and_they_are_served(client: TestClient) -> None:
    r = client.get("/docs")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    html = r.text
    assert "://" not in html, "an absolute URL: a CDN or another origin"
    urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    urls += re.findall(r"""url:\s*["']([^"']+)["']""", html)
    assert "/openapi.json" in urls and len(urls) >= 4, urls
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
        got = client.get(url)
        assert got.status_code == 200, (url, got.status_code)
        assert got.content, url
    js = client.get("/docs/swagger-ui-bundle.js")
    assert js.headers["content-type"].startswith("text/javascript")
    assert b"SwaggerUIBundle" in js.content
    assert client.get("/docs/swagger-ui.css").headers["content-type"].startswith("text/css")
    assert '"validatorUrl": null' in html  # no badge fetched from the public validator


def test_an_unknown_docs_file_is_a_404_in_the_v0_envelope(client: TestClient) -> None:
    for name in ("nope.js", "..%2Fapp.py", "swagger-ui-bundle.js.map"):
        r = client.get(f"/docs/{name}")
        assert r.status_code == 404, (name, r.text)
        assert r.json()["error"]["code"] == "not_found"


def test_the_swagger_ui_package_is_pinned_for_the_app_and_the_layer() -> None:
    version = metadata.version(api_docs.ASSET_PACKAGE)
    pin = f"fastapi-offline=={version}"
    for requirements in ("requirements.txt", "layers/headwater/requirements.txt"):
        lines = (REPO / requirements).read_text().split()
        assert pin in lines, (requirements, pin)
    folder = api_docs.asset_dir()
    assert folder is not None
    assert all((folder / name).is_file() for name in api_docs.ASSETS)


def test_importing_the_app_loads_no_documentation_model_nor_swagger_files() -> None:
    """Cold start: the models and the Swagger UI package load on the first /openapi.json or
    /docs request, never when the Lambda imports the app."""
    probe = (
        "import sys, json\n"
        "from headwater.http.app import create_app\n"
        "from headwater.settings import Settings\n"
        "create_app(Settings(resource_prefix='hw-probe'))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith("
        "('headwater.http.models_', 'fastapi_offline')))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={"PYTHONPATH": str(REPO / "layers" / "headwater"), "PATH": "/usr/bin:/bin"},
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
