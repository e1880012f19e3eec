"""Parsing the touch requests (``/touch/templates/activate``, ``heartbeat``, ``wait``) into
plans: declarations, TTLs, wait keys and the keys a wait must watch for the templates live
now."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from headwater.durable.touch.changes import (
    Template,
    Touch,
)
from headwater.durable.touch.keys import (
    _HEX16,
    ABSENT,
    key_id,
    table_key,
    template_key,
)
from headwater.durable.touch.templates import (
    Decl,
)
from headwater.errors import InvalidRequest

MAX_TEMPLATES_PER_CALL: Final = 256
MAX_TEMPLATE_FIELDS: Final = 3
MAX_WAIT_KEYS: Final = 1024
MAX_EXACT_KEYS: Final = 16
MAX_TIMEOUT_MS: Final = 120_000
DEFAULT_TIMEOUT_MS: Final = 30_000


def _bad(message: str) -> InvalidRequest:
    return InvalidRequest(message)


def _number(value: object) -> float | None:
    """A JSON number (not a boolean), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def _uint32(value: object) -> bool:
    x = _number(value)
    return x is not None and x.is_integer() and 0 <= x <= 0xFFFFFFFF


def parse_ttl(raw: object, default: int | float, where: str) -> int:
    """An inactivity TTL in ms (``ABSENT``: the default)."""
    if raw is ABSENT:
        return math.floor(default)
    x = _number(raw)
    if x is None or x < 0:
        raise _bad(f"{where} must be a non-negative number (ms)")
    return math.floor(x)


def parse_decls(raw: object, where: str) -> list[Decl]:
    """Template declarations (reference ``parseTemplateDeclsResult``); encodings are checked by
    the activation (an unknown one is denied as ``invalid``, not refused)."""
    if not isinstance(raw, list) or not raw:
        raise _bad(f"{where} must be a non-empty array")
    if len(raw) > MAX_TEMPLATES_PER_CALL:
        raise _bad(f"{where} too large (max {MAX_TEMPLATES_PER_CALL})")
    invalid = _bad(f"{where} contains invalid template definitions")
    out = []
    for t in raw:
        if not isinstance(t, Mapping):
            raise invalid
        entity = t.get("entity")
        entity = entity.strip() if isinstance(entity, str) else ""
        fields = t.get("fields")
        if (
            not entity
            or not isinstance(fields, list)
            or not 1 <= len(fields) <= MAX_TEMPLATE_FIELDS
        ):
            raise invalid
        parsed = []
        for f in fields:
            name = f.get("name") if isinstance(f, Mapping) else None
            name = name.strip() if isinstance(name, str) else ""
            if not name:
                raise invalid
            parsed.append((name, f.get("encoding")))
        out.append(Decl(entity, tuple(parsed)))
    return out


@dataclass(frozen=True, slots=True)
class WaitRequest:
    cursor: str
    timeout_ms: float = DEFAULT_TIMEOUT_MS
    keys: tuple[str, ...] = ()
    key_ids: tuple[int, ...] = ()
    exact: bool = False
    template_ids_used: tuple[str, ...] = ()
    interest: str = "fine"
    declare: tuple[Decl, ...] = ()
    declare_ttl_ms: int = 0


def _unique(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(items))


def parse_wait(body: object, cfg: Mapping[str, Any]) -> WaitRequest:
    """A ``/touch/wait`` body, validated as the reference does (messages included)."""
    if not isinstance(body, Mapping):
        raise _bad("wait body must be a JSON object")
    keys_raw = body.get("keys", ABSENT)
    if keys_raw is not ABSENT and (
        not isinstance(keys_raw, list)
        or not all(isinstance(k, str) and k.strip() for k in keys_raw)
    ):
        raise _bad("wait.keys must be a non-empty string array when provided")
    keys = _unique(k.strip() for k in keys_raw) if isinstance(keys_raw, list) else ()
    if len(keys) > MAX_WAIT_KEYS:
        raise _bad(f"wait.keys too large (max {MAX_WAIT_KEYS})")
    ids_raw = body.get("keyIds", ABSENT)
    if ids_raw is not ABSENT and (
        not isinstance(ids_raw, list) or not all(_uint32(x) for x in ids_raw)
    ):
        raise _bad("wait.keyIds must be a non-empty uint32 array when provided")
    key_ids = _unique(int(x) for x in ids_raw) if isinstance(ids_raw, list) else ()
    if not keys and not key_ids:
        raise _bad("wait requires keys or keyIds")
    if len(key_ids) > MAX_WAIT_KEYS:
        raise _bad(f"wait.keyIds too large (max {MAX_WAIT_KEYS})")
    exact = body.get("exact", False)
    if not isinstance(exact, bool):
        raise _bad("wait.exact must be a boolean when provided")
    cursor = body.get("cursor")
    if not isinstance(cursor, str) or not cursor.strip():
        raise _bad("wait.cursor must be a non-empty string")
    timeout = _number(body.get("timeoutMs", DEFAULT_TIMEOUT_MS))
    if timeout is None:
        raise _bad("wait.timeoutMs must be a number (ms)")
    used_raw = body.get("templateIdsUsed")
    if isinstance(used_raw, list) and not all(isinstance(x, str) and x.strip() for x in used_raw):
        raise _bad("wait.templateIdsUsed must be a string array")
    used = _unique(x.strip() for x in used_raw) if isinstance(used_raw, list) else ()
    interest = body.get("interestMode", "fine")
    if interest not in ("fine", "coarse"):
        raise _bad("wait.interestMode must be 'fine' or 'coarse'")
    declare: tuple[Decl, ...] = ()
    ttl = 0
    raw_declare = body.get("declareTemplates")
    if isinstance(raw_declare, list) and raw_declare:
        declare = tuple(parse_decls(raw_declare, "wait.declareTemplates"))
        default = (cfg.get("templates") or {}).get("defaultInactivityTtlMs", 3_600_000)
        ttl = parse_ttl(body.get("inactivityTtlMs", ABSENT), default, "wait.inactivityTtlMs")
    return WaitRequest(
        cursor=cursor.strip(),
        timeout_ms=max(0, min(MAX_TIMEOUT_MS, timeout)),
        keys=keys,
        key_ids=key_ids,
        exact=exact,
        template_ids_used=used,
        interest=str(interest),
        declare=declare,
        declare_ttl_ms=ttl,
    )


@dataclass(frozen=True, slots=True)
class WaitPlan:
    """What a wait wakes on (reference: effective wait key translation)."""

    kind: str  # fineKey | tableKey (templateKey needs a degraded mode this server never enters)
    key_ids: frozenset[int]
    exact_keys: frozenset[str] = frozenset()
    fallback_ids: frozenset[int] = frozenset()

    def matches(self, touch: Touch) -> bool:
        if touch.everything:
            return True
        if self.exact_keys:
            return bool(self.exact_keys & touch.keys) or any(
                key_id(k) in self.fallback_ids for k in touch.keys
            )
        return any(key_id(k) in self.key_ids for k in touch.keys)


def plan_wait(req: WaitRequest, live: Sequence[Template]) -> WaitPlan:
    raw = set(req.key_ids) | {key_id(k) for k in req.keys}
    used = [t for t in req.template_ids_used if _HEX16.fullmatch(t)]
    tpl_ids = {key_id(template_key(t)) for t in used}
    kind, ids = "fineKey", set(raw)
    if req.interest == "coarse":
        kind = "tableKey"
        if used:
            entities = {t.entity for t in live if t.id in set(used)}
            ids = {key_id(table_key(e)) for e in entities}
    if req.exact and kind != "fineKey":
        raise _bad("wait.exact requires fine interest while runtime is in fine-key mode")
    exact: frozenset[str] = frozenset()
    if req.exact:
        normal = {k.lower() for k in req.keys}
        if not 1 <= len(normal) <= MAX_EXACT_KEYS or not all(_HEX16.fullmatch(k) for k in normal):
            raise _bad(f"wait.exact requires 1 to {MAX_EXACT_KEYS} literal 64-bit routing keys")
        exact = frozenset(normal)
    if kind == "fineKey" and not exact:
        ids |= tpl_ids  # template-key fallbacks (only a degraded reference emits them)
    if not ids:
        kind, ids = "fineKey", raw
    fallback = frozenset(tpl_ids) if kind == "fineKey" else frozenset()
    return WaitPlan(kind, frozenset(ids), exact, fallback)
