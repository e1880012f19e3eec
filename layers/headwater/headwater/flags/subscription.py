"""The `GET /api/v1/events` request: subscription, resume hints, limits, authorization.

- `ns=<slug>:<flag-list>`, repeated; `<flag-list>` is `*` or comma-separated flag keys.
  Superadmin tokens must write `ns=<tenant>/<slug>:<flag-list>`; any other token may write
  the tenant only if it is its own (another tenant fails the manifest.read check: 403), so
  a connection never crosses tenants. A namespace may appear once per connection (twice is
  `duplicate_namespace`).
- Flag keys must be well-formed (names.KEY_RE) but need not exist; duplicates collapse.
- `since=<label>:<version>[,<label>:<version>...]`, may repeat; versions >= 1; a label twice
  is 400. Hints for namespaces not subscribed are ignored. `Last-Event-ID: <label>:<version>`
  overrides `since` for its namespace; a malformed or foreign Last-Event-ID is ignored
  (clients send back whatever id they saw last).
- The label of a namespace (event ids, `namespace` in payloads, resume hints) is its slug,
  or `<tenant>/<slug>` on a superadmin connection (two tenants may share a slug).
- Other query parameters are ignored.

Checks run in this order: query longer than 8 KiB (414, no body); no `ns` (400
invalid_request); more than 32 `ns` (too_many_namespaces); each value's syntax (malformed,
tenant_required, duplicate_namespace); more than 64 distinct flags in one (too_many_flags,
with `namespace`); `since` syntax (400 invalid_request); then manifest.read on every
namespace (403 forbidden). Existence (unknown_namespace) and the per-token connection cap
(429) need storage and are the caller's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from headwater.flags import names
from headwater.flags.closure import FlagSelection
from headwater.flags.errors import (
    Forbidden,
    InvalidRequest,
    InvalidSubscription,
    QueryTooLong,
)
from headwater.flags.principals import Permission, Principal


@dataclass(frozen=True, slots=True)
class SubscriptionLimits:
    max_namespaces: int = 32
    max_flags: int = 64
    max_query_bytes: int = 8 * 1024


DEFAULT_LIMITS = SubscriptionLimits()


@dataclass(frozen=True, slots=True)
class NamespaceSubscription:
    tenant: str
    slug: str
    selection: FlagSelection
    label: str


@dataclass(frozen=True, slots=True)
class Subscription:
    namespaces: tuple[NamespaceSubscription, ...]
    resume: Mapping[str, int] = field(default_factory=dict)  # label -> version (advisory)


def parse_flag_list(text: str) -> FlagSelection | None:
    """`*` or `a,b,...` as a selection; None if malformed (the flag cap is the caller's)."""
    if text == names.WILDCARD:
        return FlagSelection.all()
    keys = text.split(",")
    if not all(names.is_key(k) for k in keys):
        return None
    return FlagSelection.of(keys)


def parse_label_version(text: str) -> tuple[str, int] | None:
    """`billing:42` (or `acme/billing:42`) -> ("billing", 42); None if malformed."""
    label, sep, number = text.rpartition(":")
    if not sep or not number.isascii() or not number.isdigit() or len(number) > 19:
        return None
    if number.startswith("0") or not _is_label(label):
        return None
    return label, int(number)


def _is_label(label: str) -> bool:
    tenant, sep, slug = label.partition("/")
    return names.is_slug(slug) and names.is_slug(tenant) if sep else names.is_slug(label)


def _namespace(
    value: str, principal: Principal, limits: SubscriptionLimits
) -> NamespaceSubscription:
    target, sep, flag_list = value.partition(":")
    tenant, slash, slug = target.partition("/")
    if not slash:
        if principal.is_superadmin:
            raise InvalidSubscription(
                f"superadmin subscriptions name the tenant: ns=<tenant>/<slug>:..., got {value!r}",
                "tenant_required",
            )
        tenant, slug = principal.tenant, target
    selection = parse_flag_list(flag_list) if sep else None
    if selection is None or not names.is_slug(slug) or not names.is_slug(tenant):
        raise InvalidSubscription(
            f"ns must be <slug>:<flag-list> with <flag-list> '*' or comma-separated flag keys,"
            f" got {value!r}",
            "malformed",
        )
    if len(selection.keys) > limits.max_flags:
        raise InvalidSubscription(
            f"namespace {slug!r} lists {len(selection.keys)} flags; the cap is {limits.max_flags}",
            "too_many_flags",
            namespace=slug,
        )
    label = f"{tenant}/{slug}" if principal.is_superadmin else slug
    return NamespaceSubscription(tenant, slug, selection, label)


def _since(values: list[str], labels: set[str]) -> dict[str, int]:
    resume: dict[str, int] = {}
    for value in values:
        for item in value.split(","):
            parsed = parse_label_version(item)
            if parsed is None:
                raise InvalidRequest(
                    f"since must be <slug>:<version>[,<slug>:<version>...], got {item!r}",
                    details={"since": item},
                )
            label, version = parsed
            if label in resume:
                raise InvalidRequest(f"since names {label!r} twice", details={"since": item})
            resume[label] = version
    return {label: v for label, v in resume.items() if label in labels}


def parse_events_request(
    raw_query: str,
    principal: Principal,
    last_event_id: str | None = None,
    limits: SubscriptionLimits = DEFAULT_LIMITS,
) -> Subscription:
    """The subscription of one events connection, or the FlagError the spec names."""
    if len(raw_query.encode("utf-8")) > limits.max_query_bytes:
        raise QueryTooLong(f"query string is over {limits.max_query_bytes} bytes")
    pairs = parse_qsl(raw_query, keep_blank_values=True)
    ns_values = [v for k, v in pairs if k == "ns"]
    if not ns_values:
        raise InvalidRequest("at least one ns=<slug>:<flag-list> parameter is required")
    if len(ns_values) > limits.max_namespaces:
        raise InvalidSubscription(
            f"{len(ns_values)} namespaces; the cap is {limits.max_namespaces}",
            "too_many_namespaces",
        )
    subs: list[NamespaceSubscription] = []
    for value in ns_values:
        sub = _namespace(value, principal, limits)
        if any(s.label == sub.label for s in subs):
            raise InvalidSubscription(
                f"namespace {sub.label!r} is listed twice",
                "duplicate_namespace",
                namespace=sub.slug,
            )
        subs.append(sub)
    labels = {s.label for s in subs}
    resume = _since([v for k, v in pairs if k == "since"], labels)
    if last_event_id is not None:
        hint = parse_label_version(last_event_id.strip())
        if hint is not None and hint[0] in labels:
            resume[hint[0]] = hint[1]
    for sub in subs:
        if not principal.may(Permission.READ, sub.tenant, sub.slug):
            raise Forbidden(
                f"this token lacks manifest.read on namespace {sub.label!r}",
                details={"namespace": sub.label},
            )
    return Subscription(tuple(subs), resume)
