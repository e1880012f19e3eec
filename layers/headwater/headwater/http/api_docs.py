"""API reference: GET /openapi.json (the OpenAPI 3.1 document of every HTTP route) and GET /docs
(Swagger UI, its files served from the `fastapi-offline` package: no CDN, same origin).

The document is built on the first request for it and kept: FastAPI's generator over the
routes, then what it cannot know. Routes declare their bodies, answers and error envelopes by
model name (`openapi_decl.doc`); the pydantic models (models_v0, models_v1, models_notify,
models_flags, models_dashboard, models_probes) are imported here, at that first build, so the
app's import (a Lambda's cold start) pays nothing for them. Added here:

- the component schemas of those models;
- the docs of the routes whose decorators cannot carry them: the probes (PROBE_DOCS) and the
  five methods of the one /v1 stream route (v1.STREAM_DOCS);
- path parameter schemas (name patterns), security schemes, tags, operation ids that are
  unique per method;
- FastAPI's defaults that do not hold here are removed: a 422 validation answer (the handlers
  read the request themselves; the surfaces answer 400) and a generic 200 where a route
  declared its own answers.

The WebSocket endpoint /v0/ws has no OpenAPI form: the info description points to the spec.
Neither page names a tenant, a topic or a key: they describe the routes of the code, the same
for every deployment, and are public like the probes (docs/security.md)."""

from __future__ import annotations

import copy
import importlib
import importlib.util
import re
import warnings
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from starlette.requests import Request
from starlette.responses import Response

from headwater import jsoncodec
from headwater.errors import NotFound
from headwater.http.openapi_decl import REF, doc, model, raw

router = APIRouter(include_in_schema=False)

OPENAPI_PATH = "/openapi.json"
DOCS_PATH = "/docs"
# Swagger UI's files, as the fastapi-offline package ships them.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon.png": "image/png",
}
ASSET_PACKAGE = "fastapi_offline"
MODEL_MODULES = (
    "headwater.http.models_v0",
    "headwater.http.models_probes",
    "headwater.http.models_v1",
    "headwater.http.models_notify",
    "headwater.http.models_flags",
    "headwater.http.models_dashboard",
)

DESCRIPTION = """\
Headwater serves five HTTP surfaces from one app:

- **/v0** — topics, queues, watch sessions and routers (spec topics-api-v0); errors
  `{"error": {"code", "message", "detail"?}, "performance"}`. Its WebSocket data plane,
  `GET /v0/ws` (JSON commands `subscribe`, `unsubscribe`, `publish`, `ping`; spec §7), has no
  OpenAPI form and is not listed here.
- **/v1** — Durable Streams; errors `{"error": {"code", "message"}}`.
- **/api/v1** — notifications (aviso-server's API; errors `{code, error, message,
  request_id, details?}`, and `X-Request-ID` on every answer) and feature-flag manifests
  and closure events (errors `{"error": {"code", "message", "details"?}}`).
- **/api/v2** — the sentiment dashboard; errors `{"detail", ...}`.

Credentials: an API key as `Authorization: Bearer <key>` (scopes `read`, `write`, `delete`,
`admin`, optionally limited to name prefixes) on /v0, /v1, notifications and dashboard
ingest; a flag token on the flag routes; `X-User-ID` identifies (does not authenticate) the
dashboard's users. A server without keys configured is open (dev mode). Request bodies are
JSON unless said otherwise; a body over the server's limit is 413, an unsupported
Content-Type or Content-Encoding 415 (bodies may be sent gzip-encoded)."""

TAGS = [
    {"name": "v0 topics", "description": "Topic lifecycle, append, read, delete, rollups"},
    {"name": "v0 queues", "description": "Lease-based work queues (spec §10)"},
    {"name": "v0 watch", "description": "Multiplexed SSE watch sessions (spec §7)"},
    {"name": "v0 routers", "description": "Server-side forwarding (spec §6)"},
    {"name": "probes", "description": "Liveness, readiness, metrics (spec §8)"},
    {"name": "v1 durable streams", "description": "The Durable Streams protocol"},
    {"name": "api/v1 notifications", "description": "aviso-compatible notifications"},
    {"name": "api/v1 flags", "description": "Feature-flag manifests and closure events"},
    {"name": "api/v2 dashboard", "description": "Sentiment ingest, metrics and streams"},
]

SECURITY_SCHEMES = {
    "apiKey": {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key (TOPICS_API_KEYS / the keys parameter)",
    },
    "flagToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "A flag token (HEADWATER_FLAG_TOKENS)",
    },
}

TOPIC = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$"
PATH_PARAMS: dict[str, dict[str, Any]] = {
    "topic": {"type": "string", "pattern": TOPIC, "description": "A topic name"},
    "name": {
        "type": "string",
        "pattern": r"^[A-Za-z0-9][A-Za-z0-9._:>-]{0,254}$",
        "description": "A router name",
    },
    "wid": {"type": "string", "description": "A watch session id (wid_...)"},
    "path": {
        "type": "string",
        "description": "A stream name (then /pk/<key> or a subresource)",
    },
    "tenant": {"type": "string", "description": "A tenant"},
    "slug": {
        "type": "string",
        "pattern": r"^[a-z0-9][a-z0-9-]{0,62}$",
        "description": "A namespace",
    },
    "config_id": {"type": "string", "description": "A configuration id"},
    "event_type": {"type": "string", "description": "A notification event type"},
    "notification_id": {"type": "string", "description": "<stream>@<sequence>"},
}

_PROBE_ERRORS = (401, 403, 429)  # 401 and 403 only with TOPICS_PROBE_AUTH (liveness/readiness)


def _probe_docs() -> dict[tuple[str, str], dict[str, Any]]:
    health = doc(
        "probes",
        "Liveness",
        ok={200: model("Health")},
        errors=_PROBE_ERRORS,
        credential="apiKey",
    )
    ready = doc(
        "probes",
        "Readiness",
        ok={200: model("Ready")},
        errors=(*_PROBE_ERRORS, 503),
        credential="apiKey",
    )
    metrics = doc(
        "probes",
        "Metrics: Prometheus text, or JSON with Accept: application/json",
        ok={
            200: {
                "description": "Gauges and per-topic series (the key's topics only)",
                "content": {
                    **model("MetricsSnapshot")["content"],
                    **raw("text/plain", "")["content"],
                },
            }
        },
        errors=(*_PROBE_ERRORS, 503),
        credential="apiKey",
    )
    for probe in (health, ready):  # a key only with TOPICS_PROBE_AUTH
        probe["openapi_extra"]["security"] = [{}, {"apiKey": []}]
    return {
        **{(p, "get"): health for p in ("/health", "/healthz", "/v0/health")},
        **{(p, "get"): ready for p in ("/readyz", "/v0/ready")},
        ("/v0/metrics", "get"): metrics,
    }


# --- building the document ------------------------------------------------------------------
def component_schemas() -> dict[str, Any]:
    """Every documentation model's JSON schema, by class name (nested ones too)."""
    from pydantic import BaseModel
    from pydantic.json_schema import models_json_schema

    models: list[type[BaseModel]] = []
    for name in MODEL_MODULES:
        models.extend(importlib.import_module(name).MODELS)
    names = [m.__name__ for m in models]
    if len(set(names)) != len(names):
        raise RuntimeError(f"documentation model names collide: {sorted(names)}")
    _, top = models_json_schema([(m, "validation") for m in models], ref_template=REF + "{model}")
    defs: dict[str, Any] = top.get("$defs", {})
    missing = set(names) - set(defs)
    if missing:  # pydantic renamed a model: two classes share a name
        raise RuntimeError(f"documentation models without a component: {sorted(missing)}")
    return defs


def _apply(operation: dict[str, Any], declared: dict[str, Any]) -> None:
    """A doc(...) declaration onto an operation FastAPI generated without one."""
    operation["summary"] = declared["summary"]
    operation["tags"] = declared["tags"]
    if "description" in declared:
        operation["description"] = declared["description"]
    operation["responses"] = {str(k): copy.deepcopy(v) for k, v in declared["responses"].items()}
    extra = copy.deepcopy(declared["openapi_extra"])
    if "parameters" in extra:
        operation["parameters"] = [*operation.get("parameters", []), *extra["parameters"]]
    for key in ("requestBody", "security"):
        if key in extra:
            operation[key] = extra[key]


def build(app: FastAPI) -> dict[str, Any]:
    from fastapi.openapi.utils import get_openapi
    from fastapi.routing import iter_route_contexts

    from headwater.http import v1
    from headwater.http.lazy_routes import load_all

    load_all(app)  # every surface's routes, not only those requests have used so far
    with warnings.catch_warnings():
        # one route, five methods (/v1/stream/...): FastAPI warns that they share an
        # operation id; they get one each below
        warnings.simplefilter("ignore")
        document = get_openapi(
            title=app.title,
            version=app.version,
            openapi_version=app.openapi_version,
            description=DESCRIPTION,
            routes=app.routes,
            tags=TAGS,
        )
    declared: dict[tuple[str, str], dict[str, Any]] = {}
    for route in iter_route_contexts(app.routes):
        path, methods = route.path_format, route.methods
        answers = getattr(route, "responses", None)
        if path is not None and methods and answers:
            for method in methods:
                declared[(path, method.lower())] = {str(k): v for k, v in answers.items()}
    late = _probe_docs()
    late.update({("/v1/stream/{path}", m.lower()): d for m, d in v1.STREAM_DOCS.items()})
    seen: set[str] = set()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if (path, method) in late:
                _apply(operation, late[(path, method)])
            elif (path, method) in declared:
                # Exactly the declared answers: FastAPI adds a JSON "Successful Response" 200
                # (and merges it into a declared 200 of another media type) and a 422 that no
                # handler answers (they read the request themselves; the surfaces say 400).
                answers = declared[(path, method)]
                operation["responses"] = {k: copy.deepcopy(v) for k, v in answers.items()}
            op_id = re.sub(r"_(get|put|post|delete|head|patch)$", "", operation["operationId"])
            op_id = f"{op_id}_{method}"
            if op_id in seen:
                raise RuntimeError(f"duplicate operation id {op_id}")
            seen.add(op_id)
            operation["operationId"] = op_id
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "path" and parameter["name"] in PATH_PARAMS:
                    parameter["schema"] = dict(PATH_PARAMS[parameter["name"]])
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)  # no route answers FastAPI's 422 (checked below)
    schemas.update(component_schemas())
    components["securitySchemes"] = SECURITY_SCHEMES
    unresolved = sorted(
        {r for r in _refs(document) if r.removeprefix(REF) not in schemas or not r.startswith(REF)}
    )
    if unresolved:
        raise RuntimeError(f"/openapi.json refers to undefined schemas: {unresolved}")
    return document


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        out = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        for value in node.values():
            out.extend(_refs(value))
        return out
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


def install(app: FastAPI) -> None:
    """The document is built once, on the first call (app.openapi(), or GET /openapi.json)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.include_router(router)


# --- routes ---------------------------------------------------------------------------------
@router.get(OPENAPI_PATH)
async def openapi_json(request: Request) -> Response:
    body: bytes | None = getattr(request.app.state, "openapi_bytes", None)
    if body is None:
        body = jsoncodec.dumps(request.app.openapi())
        request.app.state.openapi_bytes = body
    return Response(body, media_type="application/json")


@router.get(DOCS_PATH)
async def swagger_ui(request: Request) -> Response:
    from fastapi.openapi.docs import get_swagger_ui_html

    root = request.scope.get("root_path", "").rstrip("/")
    return get_swagger_ui_html(
        openapi_url=root + OPENAPI_PATH,
        title=f"{request.app.title} API reference",
        swagger_js_url=f"{root}{DOCS_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{DOCS_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{root}{DOCS_PATH}/favicon.png",
        oauth2_redirect_url=None,
        # validatorUrl null: no badge fetched from the public validator
        swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": False},
    )


_asset_cache: dict[str, bytes] = {}


def asset_dir() -> Path | None:
    """fastapi-offline's static folder, found without importing the package."""
    spec = importlib.util.find_spec(ASSET_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "static"


@router.get(DOCS_PATH + "/{asset}")
async def swagger_asset(request: Request) -> Response:
    # the path parameter read by hand: a typed one costs FastAPI a pydantic field at import
    asset: str = request.path_params["asset"]
    media = ASSETS.get(asset)
    if media is None:
        raise NotFound(f"no documentation file {asset!r}")
    content = _asset_cache.get(asset)
    if content is None:
        folder = asset_dir()
        if folder is None or not (folder / asset).is_file():
            raise NotFound(f"documentation file {asset!r} is not installed ({ASSET_PACKAGE})")
        content = _asset_cache[asset] = (folder / asset).read_bytes()
    return Response(content, media_type=media, headers={"Cache-Control": "public, max-age=3600"})
