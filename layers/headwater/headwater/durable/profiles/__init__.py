"""Stream profiles of Durable Streams (protocol §2.3, §7A): ``GET``/``POST /_profile``.

Pure and storage-free. A profile is a plain JSON ``dict`` (what ``GET /_profile`` returns under
``"profile"``); every function takes it and returns new values. The design follows the reference
Bun + TypeScript server (``prisma/streams``: ``docs/stream-profiles.md``,
``docs/profile-{generic,evlog,metrics,state-protocol}.md``, ``src/profiles/**``,
``src/touch/spec.ts``): profile = semantics, schema = structure.

One module per kind with options or behaviour: ``evlog.py``, ``metrics.py``,
``state_protocol.py`` (``generic`` has neither); ``common.py`` holds what they share. This
module is the package's API and dispatches on the kind.

Public API:

* ``parse_profile_update(body, content_type)``: validate a ``POST /_profile`` body
  ``{"apiVersion": PROFILE_API_VERSION (optional), "profile": {"kind": ..., ...}}`` against the
  stream's content type; return the canonical profile to store. Client errors raise
  ``ProfileError`` (HTTP 400).
* ``check_install(profile, *, current_kind, stream_is_empty)``: may this profile be installed on
  the stream now, and must the schema registry be (re)written? (see "Installing" below)
* ``install(profile, stream)``: the ``schema.apply_update`` body the install writes, or ``None``.
* ``normalize(profile, value, *, now_ms=None)``: one JSON append value -> the value to store.
* ``derived_routing_key(profile, value)``: the profile's routing key for a *normalized* value;
  callers use it only when the schema registry has no ``routingKey``.
* ``resource(profile)``, ``touch_config(profile)``, ``DEFAULT_PROFILE``, ``KINDS``.

Kinds (``otel-traces`` of the reference is not supported):

* ``generic`` ``{"kind": "generic"}``: no options, no registry, appends unchanged.
* ``evlog`` ``{"kind": "evlog", "redactKeys": [str], "correlation": {"requestIdFields": [str],
  "traceContextFields": [str], "parseTraceparent": bool}, "observability": {"request":
  {"tracesStream": str}}}``, all optional. Canonically ``redactKeys`` are trimmed, lower-cased and
  de-duplicated (max 64), correlation lists trimmed and de-duplicated (max 64); empty
  ``correlation``/``observability`` objects are dropped.
* ``metrics`` ``{"kind": "metrics"}``: no options.
* ``state-protocol`` ``{"kind": "state-protocol", "touch": {...}}``: ``touch`` optional. With
  ``enabled: true`` the canonical ``touch`` carries every option with the reference defaults
  (``TOUCH_DEFAULTS``); otherwise it is ``{"enabled": false}``. The ``/touch/*`` routes exist
  only when ``touch.enabled`` (``touch_config``).

evlog, metrics and state-protocol need an ``application/json`` stream (media type compared
without parameters, case-insensitive); the message says ``"... requires application/json stream
content-type"`` as in the reference.

Installing (reference ``persistProfileResult`` + ``replaceRegistryResult``):

* evlog/metrics *replace* the stream's registry with a fresh one: apply ``install()`` to
  ``schema.empty_registry(stream)`` (never to the existing registry) with
  ``stream_is_empty=True``; the boundary lands at the empty stream's ``end_offset``. evlog installs
  schema v1 + its ``search`` (fields, aliases, defaultFields, no rollups: the reference's
  ``EVLOG_DEFAULT_SEARCH_CONFIG`` has none although its doc mentions them); metrics installs
  schema v1 + ``routingKey /seriesKey (required)`` + ``search`` with the ``metrics`` rollup. The
  internal ``__stream_metrics__`` stream gets the lean registry (schema only), as in the
  reference.
* generic/state-protocol never touch the registry (switching evlog -> generic keeps the evlog
  registry, as in the reference).
* Non-empty streams: the reference rejects a *new* evlog install ("must be installed before
  appending data"). We reject a new metrics install on a non-empty stream too (the reference
  silently replaces the registry with a boundary at offset 0, which would leave earlier entries
  unvalidated and unpromotable; our ``schema.apply_update`` refuses a first schema on a non-empty
  stream anyway). Re-installing the *same* kind on a non-empty stream is allowed but keeps the
  existing registry (the reference resets it to the defaults, discarding any evolution).

Normalization (append time; errors raise ``ProfileError``, HTTP 400):

* evlog: the value must be an object. Output has exactly the keys of ``EVLOG_ENVELOPE_FIELDS``
  (all present, ``null`` when unknown): strings are trimmed (empty -> ``null``); ``status`` an
  integer (numeric strings accepted), ``duration`` a number; ``timestamp`` any non-empty string
  as given, else ``now`` as ``YYYY-MM-DDTHH:MM:SS.mmmZ``; ``level`` one of
  debug/info/warn/error, else derived (``why``/``fix``/``link`` -> error, status >= 500 -> error,
  >= 400 -> warn, else info); ``requestId`` from ``correlation.requestIdFields`` (default
  ``requestId``, ``context.requestId``; dotted paths); ``traceId``/``spanId`` from the field,
  ``traceContext.<field>``, configured ``traceContextFields``, then a W3C ``traceparent`` (in
  ``traceparent``, ``traceContext.traceparent``, ``context.traceparent``,
  ``headers.traceparent``) unless ``parseTraceparent`` is false; ``sampling`` copied if present;
  every non-reserved key is moved into ``context`` (merged over an object ``context``; a non-object
  ``context`` is kept as ``context.context``); keys of ``context`` matching ``redactKeys`` or the
  defaults (password, token, secret, authorization, cookie, apikey; case-insensitive, at any
  depth) become ``"[REDACTED]"`` and their dotted paths are listed in ``redaction.keys``.
* metrics: the canonical interval envelope (``METRICS_ENVELOPE_FIELDS``; rules in
  ``metrics.normalize``).
  ``seriesKey`` is ``metricKind|temporality|metric|unit|stream|instance|dimensionKey`` with
  ``dimensionKey`` the sorted ``k=v`` attribute pairs joined by NUL (``null`` without
  attributes). Attribute keys and pairs are sorted by code point (the reference uses
  ``localeCompare``).
* state-protocol: the value is validated as a State Protocol change or control message
  (reference ``ingest.ts``) and returned unchanged.
* generic: identity.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import Any

from headwater.durable.profiles import evlog, metrics, state_protocol
from headwater.durable.profiles.common import (
    _JSON_KINDS,
    _REGISTRY_KINDS,
    DEFAULT_PROFILE,
    INTERNAL_METRICS_STREAM,
    KINDS,
    METRICS_API_VERSION,
    PROFILE_API_VERSION,
    Profile,
    ProfileError,
    _kind,
    _media_type,
    _object,
    _reject_unknown,
)
from headwater.durable.profiles.evlog import EVLOG_ENVELOPE_FIELDS
from headwater.durable.profiles.metrics import METRICS_ENVELOPE_FIELDS
from headwater.durable.profiles.state_protocol import TOUCH_DEFAULTS
from headwater.durable.schema import REGISTRY_API_VERSION

__all__ = [
    "DEFAULT_PROFILE",
    "EVLOG_ENVELOPE_FIELDS",
    "INTERNAL_METRICS_STREAM",
    "KINDS",
    "METRICS_API_VERSION",
    "METRICS_ENVELOPE_FIELDS",
    "PROFILE_API_VERSION",
    "TOUCH_DEFAULTS",
    "Profile",
    "ProfileError",
    "check_install",
    "derived_routing_key",
    "install",
    "normalize",
    "parse_profile_update",
    "resource",
    "touch_config",
]


def parse_profile_update(body: object, content_type: str | None) -> Profile:
    """Validate a ``POST /_profile`` body for a stream of ``content_type``; the canonical profile.

    Raises ``ProfileError`` for a malformed body, an unknown kind or option, a wrong
    ``apiVersion`` (it may be omitted) or a kind that needs an ``application/json`` stream.
    """
    if not isinstance(body, Mapping):
        raise ProfileError("profile update must be a JSON object")
    for key in body:
        if key not in ("apiVersion", "profile"):
            raise ProfileError(
                f"profile update field {key!r} is not supported; accepted fields: "
                "apiVersion, profile"
            )
    if "apiVersion" in body and body["apiVersion"] != PROFILE_API_VERSION:
        raise ProfileError(f"apiVersion must be {PROFILE_API_VERSION!r}")
    if "profile" not in body:
        raise ProfileError("profile is required")
    obj = _object(body["profile"], "profile")
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind.strip():
        raise ProfileError("profile.kind must be a non-empty string")
    if kind not in KINDS:
        raise ProfileError(f"profile.kind must be {'|'.join(KINDS)}")
    profile: Profile
    if kind == "generic":
        _reject_unknown(obj, ("kind",), "profile")
        profile = {"kind": "generic"}
    elif kind == "metrics":
        _reject_unknown(obj, ("kind",), "profile")
        profile = {"kind": "metrics"}
    elif kind == "evlog":
        profile = evlog.parse(obj)
    else:
        profile = state_protocol.parse(obj)
    if kind in _JSON_KINDS and _media_type(content_type) != "application/json":
        raise ProfileError(f"{kind} profile requires application/json stream content-type")
    return profile


def resource(profile: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``GET /_profile`` body; ``None`` (nothing stored) means ``generic``."""
    chosen = profile if profile is not None else DEFAULT_PROFILE
    return {"apiVersion": PROFILE_API_VERSION, "profile": copy.deepcopy(dict(chosen))}


def touch_config(profile: Mapping[str, Any]) -> dict[str, Any] | None:
    """The enabled touch config of a state-protocol profile, else ``None`` (no ``/touch/*``)."""
    if profile.get("kind") != "state-protocol":
        return None
    touch = profile.get("touch")
    if not isinstance(touch, Mapping) or touch.get("enabled") is not True:
        return None
    return copy.deepcopy(dict(touch))


def check_install(profile: Mapping[str, Any], *, current_kind: str, stream_is_empty: bool) -> bool:
    """May ``profile`` be installed now; must the caller (re)write the schema registry?

    ``current_kind`` is the stream's current profile kind (``"generic"`` if none is stored).
    Returns ``True`` when the caller must replace the registry with
    ``schema.apply_update(schema.empty_registry(stream), install(profile, stream),
    stream_is_empty=True, end_offset=<tail>)``, ``False`` when the registry stays as it is.
    Raises ``ProfileError`` for an evlog/metrics install on a stream that already holds data
    under another profile.
    """
    kind = _kind(profile)
    if kind not in _REGISTRY_KINDS:
        return False
    if stream_is_empty:
        return True
    if current_kind == kind:
        return False
    raise ProfileError(f"{kind} profile must be installed before appending data")


def install(profile: Mapping[str, Any], stream: str) -> dict[str, Any] | None:
    """The ``schema.apply_update`` body installing ``profile`` writes, or ``None`` (no registry).

    Apply it to ``schema.empty_registry(stream)``: the install replaces the registry.
    """
    kind = _kind(profile)
    if kind == "evlog":
        return {
            "apiVersion": REGISTRY_API_VERSION,
            "schema": copy.deepcopy(dict(evlog.SCHEMA)),
            "search": copy.deepcopy(dict(evlog.SEARCH)),
        }
    if kind == "metrics":
        body: dict[str, Any] = {
            "apiVersion": REGISTRY_API_VERSION,
            "schema": copy.deepcopy(dict(metrics.SCHEMA)),
        }
        if stream != INTERNAL_METRICS_STREAM:
            body["routingKey"] = {"jsonPointer": "/seriesKey", "required": True}
            body["search"] = copy.deepcopy(dict(metrics.SEARCH))
        return body
    return None


# --------------------------------------------------------------------------- append path


def normalize(profile: Mapping[str, Any], value: object, *, now_ms: int | None = None) -> object:
    """The value to store for one JSON append ``value`` (validate it with the schema after).

    ``now_ms`` (epoch ms, default: the wall clock) fills a missing evlog ``timestamp``. The
    input is not modified. Raises ``ProfileError`` for a value the profile cannot accept.
    """
    kind = _kind(profile)
    if kind == "evlog":
        return evlog.normalize(
            profile, value, time.time_ns() // 1_000_000 if now_ms is None else now_ms
        )
    if kind == "metrics":
        return metrics.normalize(value)
    if kind == "state-protocol":
        state_protocol.check(value)
    return value


def derived_routing_key(profile: Mapping[str, Any], value: object) -> str | None:
    """The profile's routing key for a *normalized* value (``None`` if it has none).

    evlog: ``requestId``, else ``traceId``; metrics: ``seriesKey``; others: ``None``. Use it only
    when the schema registry has no ``routingKey``.
    """
    kind = _kind(profile)
    if not isinstance(value, Mapping):
        return None
    candidates = {"evlog": ("requestId", "traceId"), "metrics": ("seriesKey",)}.get(kind, ())
    for name in candidates:
        found = value.get(name)
        if isinstance(found, str) and found:
            return found
    return None
