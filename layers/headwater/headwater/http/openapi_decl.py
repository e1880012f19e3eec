"""What a route declares for /openapi.json: its request body, its answers and its error
envelope, by model name.

Handlers read a raw Request and parse it by hand (v0/parse.py, bodies, the surfaces' parsers):
that parsing produces the exact errors each spec requires, so it stays. The request and
response models (pydantic, one module per surface: models_v0, models_notify, models_flags,
models_dashboard, models_v1, models_probes) describe those bodies for the documentation only,
and are imported when /openapi.json is first built (api_docs), never at app import: the
Lambda's cold start does not pay for them. A route names its models here with plain strings
(`body("AppendRequest")`, `model("AppendResult")`); tests/api/test_openapi.py checks that
every name resolves to a model and that every route is documented, and schemathesis checks
the answers against the documents.

`doc(...)` returns keyword arguments for the route decorator:

    @router.post("/v0/topics/{topic}/claim", **doc(
        "v0", "Claim jobs", body=body("ClaimRequest"),
        ok={200: model("ClaimResult")}, errors=(400, 401, 403, 404, 409, 413, 415, 429),
    ))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

REF = "#/components/schemas/"

# Each surface's error envelope (a model of that name lives in the surface's models module),
# its tag, and the credential its routes take (a components.securitySchemes name).
SURFACES: dict[str, tuple[str, str, str | None]] = {
    "v0": ("V0Error", "v0 topics", "apiKey"),
    "v0-queues": ("V0Error", "v0 queues", "apiKey"),
    "v0-watch": ("V0Error", "v0 watch", "apiKey"),
    "v0-routers": ("V0Error", "v0 routers", "apiKey"),
    "probes": ("V0Error", "probes", None),
    "v1": ("V1Error", "v1 durable streams", "apiKey"),
    "notify": ("AvisoError", "api/v1 notifications", "apiKey"),
    "flags": ("FlagError", "api/v1 flags", "flagToken"),
    "dashboard": ("DashboardError", "api/v2 dashboard", None),
}

# What each error status means, whatever the surface (the envelope's code says which).
STATUS_TEXT = {
    304: "Not modified (If-None-Match matched the current ETag)",
    400: "Malformed request: bad JSON, a field of the wrong type or out of range",
    401: "Missing or invalid credentials",
    403: "The credential lacks the scope, or the name is outside its allowlist",
    404: "Not found",
    405: "Method not allowed on this resource",
    406: "Accept is not text/event-stream",
    408: "The request timed out on the server",
    409: "Conflict with the resource's current state",
    410: "Gone",
    413: "Request body over the server's limit",
    414: "Query string too long (no body)",
    415: "Unsupported Content-Type or Content-Encoding",
    422: "Semantically invalid",
    429: "Throttled: a rate or resource cap was reached (Retry-After says when to retry)",
    500: "The server failed to store or remove the data (the body says what)",
    503: "Not ready, or shutting down (Retry-After)",
}


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF + name}


def _headers(out: dict[str, Any], headers: Mapping[str, str] | None) -> dict[str, Any]:
    if headers:
        out["headers"] = {
            name: {"schema": {"type": "string"}, "description": text}
            for name, text in headers.items()
        }
    return out


def model(
    name: str, description: str = "Success", headers: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A JSON answer described by model `name` (with the response headers it carries)."""
    out = {"description": description, "content": {"application/json": {"schema": ref(name)}}}
    return _headers(out, headers)


def empty(description: str, headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An answer without a body."""
    return _headers({"description": description}, headers)


# One server-sent event (FastAPI's shape). OpenAPI 3.1 has no itemSchema (3.2 does): a
# text/event-stream schema describes each event, as schemathesis reads it.
SSE_EVENT = {
    "type": "object",
    "properties": {
        "data": {"type": "string"},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer", "minimum": 0},
    },
}


def sse(description: str) -> dict[str, Any]:
    """An event stream (text/event-stream): events as the description says."""
    return {
        "description": description,
        "content": {"text/event-stream": {"schema": SSE_EVENT}},
    }


def raw(media: str, description: str, schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A body of another media type (text, a tarball); `schema` when it has a JSON shape."""
    return {
        "description": description,
        "content": {media: {"schema": dict(schema) if schema else {"type": "string"}}},
    }


def body(
    name: str,
    *,
    required: bool = True,
    description: str = "",
    more: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A JSON request body described by model `name` (plus other media types in `more`)."""
    content: dict[str, Any] = {"application/json": {"schema": ref(name)}}
    content.update({k: dict(v) for k, v in (more or {}).items()})
    out: dict[str, Any] = {"required": required, "content": content}
    if description:
        out["description"] = description
    return out


def param(
    where: str,
    name: str,
    schema: Mapping[str, Any],
    description: str,
    *,
    required: bool = False,
) -> dict[str, Any]:
    """A query or header parameter (handlers read them from the Request by hand)."""
    return {
        "name": name,
        "in": where,
        "required": required,
        "description": description,
        "schema": dict(schema),
    }


def query(name: str, schema: Mapping[str, Any], description: str, **kw: Any) -> dict[str, Any]:
    return param("query", name, schema, description, **kw)


def header(name: str, schema: Mapping[str, Any], description: str, **kw: Any) -> dict[str, Any]:
    return param("header", name, schema, description, **kw)


# Errors every /v0 route may answer: the name (400), credentials and scope (401, 403), the
# per-key in-flight cap (429), storage unavailable (503); JSON bodies add 413 and 415.
V0_ERRORS = (400, 401, 403, 429, 503)
V0_BODY_ERRORS = (*V0_ERRORS, 413, 415)

BOOL_QUERY = {"type": "string", "enum": ["true", "false", "1", "0", "yes", "no"]}


def doc(
    surface: str,
    summary: str,
    *,
    ok: Mapping[int, Mapping[str, Any]],
    errors: Iterable[int],
    request: Mapping[str, Any] | None = None,
    params: Iterable[Mapping[str, Any]] = (),
    description: str | None = None,
    public: bool = False,
    credential: str | None = None,
    error_model: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for the route decorator: summary, tag, answers, request body and
    parameters. `errors` are answered in the surface's envelope (`error_model` overrides
    it); `public` routes take no credential, `credential` overrides the surface's."""
    envelope, tag, security = SURFACES[surface]
    security = credential or security
    responses: dict[int | str, Any] = {status: dict(answer) for status, answer in ok.items()}
    for status in errors:
        if status == 414:
            responses[status] = empty(STATUS_TEXT[status])
            continue
        responses[status] = model(error_model or envelope, STATUS_TEXT.get(status, "Error"))
    extra: dict[str, Any] = {}
    if request is not None:
        extra["requestBody"] = dict(request)
    if params:
        extra["parameters"] = [dict(p) for p in params]
    if security is not None:
        extra["security"] = [] if public else [{security: []}]
    out: dict[str, Any] = {
        "summary": summary,
        "tags": [tag],
        "responses": responses,
        "openapi_extra": extra,
    }
    if description is not None:
        out["description"] = description
    return out
