"""Template sets: the immutable revision of a stream's active templates (one S3 object each),
the limits on them, and planning an activation (token bucket, eviction by inactivity) or a
heartbeat without a write when nothing is due."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from headwater import jsoncodec
from headwater.durable.touch.changes import (
    Template,
)
from headwater.durable.touch.keys import (
    template_id,
)

ENCODINGS: Final = ("string", "int64", "bool", "datetime", "bytes")
MIN_HEARTBEAT_MS: Final = 1_000
ZERO_ID: Final = "0000000000000000"


@dataclass(frozen=True, slots=True)
class TemplateSet:
    """A stream's templates, with the activation rate limiter's bucket (None: full)."""

    templates: tuple[Template, ...] = ()
    tokens: float | None = None
    refill_ms: int = 0

    def live(self, now_ms: int) -> list[Template]:
        return [t for t in self.templates if t.live(now_ms)]

    def dump(self) -> bytes:
        body: dict[str, Any] = {"v": 1, "templates": [t.dump() for t in self.templates]}
        if self.tokens is not None:
            body["rate"] = [self.tokens, self.refill_ms]
        return jsoncodec.dumps(body)

    @staticmethod
    def load(raw: bytes) -> TemplateSet:
        body = jsoncodec.loads(raw)
        rate = body.get("rate")
        return TemplateSet(
            tuple(Template.load(t) for t in body.get("templates", ())),
            float(rate[0]) if rate else None,
            int(rate[1]) if rate else 0,
        )


@dataclass(frozen=True, slots=True)
class Decl:
    entity: str
    fields: tuple[tuple[str, object], ...]  # (name, encoding as given)


@dataclass(frozen=True, slots=True)
class Limits:
    per_stream: int | float
    per_entity: int | float
    per_minute: int | float

    @staticmethod
    def of(cfg: Mapping[str, Any]) -> Limits:
        t = cfg.get("templates") or {}
        return Limits(
            t.get("maxActiveTemplatesPerStream", 2048),
            t.get("maxActiveTemplatesPerEntity", 256),
            t.get("activationRateLimitPerMinute", 100),
        )


@dataclass(frozen=True, slots=True)
class Activation:
    doc: TemplateSet | None  # the set to store (None: nothing changed that must be stored)
    activated: list[Template]
    denied: list[dict[str, str]]


def heartbeat_every(cfg: Mapping[str, Any], ttl_ms: int) -> int:
    """How stale a stored last_seen may get before a heartbeat or activation writes it."""
    persist = (cfg.get("templates") or {}).get("lastSeenPersistIntervalMs", 300_000)
    return int(max(MIN_HEARTBEAT_MS, min(persist, ttl_ms / 2)))


def _utf16(name: str) -> bytes:
    return name.encode("utf-16-be", "surrogatepass")  # JavaScript's string order


def _take_token(doc: TemplateSet, now: int, per_minute: float) -> tuple[bool, TemplateSet]:
    if per_minute <= 0:
        return True, doc
    tokens = per_minute if doc.tokens is None else doc.tokens
    since = now if doc.tokens is None else doc.refill_ms
    tokens = min(per_minute, tokens + max(0, now - since) * per_minute / 60_000)
    if tokens < 1:
        return False, replace(doc, tokens=tokens, refill_ms=now)
    return True, replace(doc, tokens=tokens - 1, refill_ms=now)


def plan_activation(
    doc: TemplateSet,
    decls: Sequence[Decl],
    *,
    ttl_ms: int,
    now_ms: int,
    tail: int,
    limits: Limits,
    cfg: Mapping[str, Any],
) -> Activation:
    """Activate `decls` on `doc` at tail `tail` (reference ``LiveTemplateRegistry.activate``):
    idempotent, not retroactive, rate-limited, evicting least recently seen templates past
    the caps. Expired templates are dropped."""
    live = {t.id: t for t in doc.live(now_ms)}
    changed = len(live) != len(doc.templates)
    bucket = doc
    activated: list[Template] = []
    denied: list[dict[str, str]] = []
    for d in decls:
        names = [n for n, _ in d.fields]
        if any(e not in ENCODINGS for _, e in d.fields) or len(set(names)) != len(names):
            denied.append({"templateId": ZERO_ID, "reason": "invalid"})
            continue
        ordered = sorted(d.fields, key=lambda f: _utf16(f[0]))
        fields = tuple(n for n, _ in ordered)
        encodings = tuple(str(e) for _, e in ordered)
        tid = template_id(d.entity, fields)
        existing = live.get(tid)
        if existing is None:
            ok, bucket = _take_token(bucket, now_ms, limits.per_minute)
            if not ok:
                denied.append({"templateId": tid, "reason": "rate_limited"})
                continue
            new = Template(tid, d.entity, fields, encodings, tail, now_ms, now_ms, ttl_ms)
            changed = True
        elif (existing.entity, existing.fields, existing.encodings) != (
            d.entity,
            fields,
            encodings,
        ):
            denied.append({"templateId": tid, "reason": "invalid"})
            continue
        else:
            new = replace(existing, last_seen_ms=now_ms, ttl_ms=ttl_ms)
            if ttl_ms != existing.ttl_ms or now_ms - existing.last_seen_ms >= heartbeat_every(
                cfg, ttl_ms
            ):
                changed = True
            else:
                new = existing
        live[tid] = new
        activated.append(new)
    protected = {t.id for t in activated}
    kept = _evict(list(live.values()), limits, protected)
    changed = changed or len(kept) != len(live)
    out = TemplateSet(tuple(kept), bucket.tokens, bucket.refill_ms) if changed else None
    return Activation(out, activated, denied)


def _evict(templates: list[Template], limits: Limits, protected: set[str]) -> list[Template]:
    """Retire the least recently seen templates past the per-entity, then per-stream caps
    (templates activated by this call last)."""

    def order(t: Template) -> tuple[bool, int, str]:
        return (t.id in protected, t.last_seen_ms, t.id)

    cap_entity, cap_stream = math.floor(limits.per_entity), math.floor(limits.per_stream)
    gone: set[str] = set()
    for entity in dict.fromkeys(t.entity for t in templates):
        group = [t for t in templates if t.entity == entity]
        if len(group) > cap_entity:
            gone |= {t.id for t in sorted(group, key=order)[: len(group) - cap_entity]}
    rest = [t for t in templates if t.id not in gone]
    if len(rest) > cap_stream:
        gone |= {t.id for t in sorted(rest, key=order)[: len(rest) - cap_stream]}
    return [t for t in templates if t.id not in gone]


def plan_heartbeat(
    doc: TemplateSet, ids: Iterable[str], now_ms: int, cfg: Mapping[str, Any]
) -> TemplateSet | None:
    """`doc` with the used templates' last_seen renewed, or None when no stored last_seen is
    stale enough to be worth a write (expired templates are not revived)."""
    used = set(ids)
    due = {
        t.id
        for t in doc.templates
        if t.id in used
        and t.live(now_ms)
        and now_ms - t.last_seen_ms >= heartbeat_every(cfg, t.ttl_ms)
    }
    if not due:
        return None
    kept = [
        replace(t, last_seen_ms=now_ms) if t.id in due else t
        for t in doc.templates
        if t.live(now_ms)
    ]
    return replace(doc, templates=tuple(kept))
