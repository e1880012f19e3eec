"""Bearer-key auth for /v0 (spec §0.2): scopes, prefix allowlists, SHA-256 at rest, and a
constant-time comparison over every configured key."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from headwater.errors import ConfigurationError, Forbidden, Unauthorized

ALL_SCOPES = frozenset({"read", "write", "delete", "admin"})
_SCOPE_WORDS = {
    "read": {"read"},
    "write": {"write"},
    "delete": {"delete"},
    "admin": {"admin"},
    "r": {"read"},
    "w": {"write"},
    "d": {"delete"},
    "a": {"admin"},
    "rw": {"read", "write"},
}


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: its key id, scopes, and the name prefixes it may touch."""

    key_id: str  # short digest prefix: safe to log and to attribute per-key caps
    scopes: frozenset[str]
    prefixes: tuple[str, ...]  # empty: any name

    def require(self, *scopes: str) -> None:
        missing = [s for s in scopes if s not in self.scopes]
        if missing:
            raise Forbidden(
                f"api key lacks {'+'.join(missing)} scope", detail={"required": list(scopes)}
            )

    def allows_name(self, name: str) -> bool:
        return not self.prefixes or any(name.startswith(p) for p in self.prefixes)

    def allows_names(self, *names: str) -> bool:
        return all(self.allows_name(n) for n in names)

    def require_name(self, name: str) -> None:
        if not self.allows_name(name):
            raise Forbidden(f"api key may not access {name!r}", detail={"name": name})

    def require_names(self, *names: str) -> None:
        for name in names:
            self.require_name(name)

    @property
    def restricted(self) -> bool:
        """Limited to name prefixes: listings, metrics and errors must not show it other
        names than those."""
        return bool(self.prefixes)

    def listing_prefixes(self, requested: str = "") -> list[str]:
        """The name prefixes a listing filtered to `requested` scans for this key: the
        requested prefix narrowed by the allowlist, never widened. Sorted, and none covered
        by another (a name is listed once). Empty: nothing to list."""
        if not self.prefixes:
            return [requested]
        found: set[str] = set()
        for p in self.prefixes:
            if p.startswith(requested):
                found.add(p)
            elif requested.startswith(p):
                found.add(requested)
        ordered = sorted(found)  # a prefix sorts before every name it covers
        out: list[str] = []
        for p in ordered:
            if not out or not p.startswith(out[-1]):
                out.append(p)
        return out


ANONYMOUS = Principal("anonymous", ALL_SCOPES, ())


@dataclass(frozen=True, slots=True)
class _Key:
    """A configured key: the digest of its secret and the principal it authenticates as."""

    digest: bytes
    principal: Principal


class KeyStore:
    def __init__(self, keys: list[_Key]) -> None:
        self._keys = keys

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    @classmethod
    def parse(cls, raw: str) -> KeyStore:
        keys: list[_Key] = []
        for n, entry in enumerate(e.strip() for e in raw.split(",")):
            if not entry:
                continue
            secret, _, rest = entry.partition(":")
            if not secret:
                raise ConfigurationError(f"TOPICS_API_KEYS entry {n + 1} has an empty key")
            scope_field, _, prefix_field = rest.partition(":")
            scopes: set[str] = set()
            for word in (w for w in scope_field.split("+") if scope_field):
                if word not in _SCOPE_WORDS:
                    raise ConfigurationError(
                        f"TOPICS_API_KEYS entry {n + 1} has an unknown scope {word!r}"
                    )
                scopes |= _SCOPE_WORDS[word]
            prefixes = tuple(p for p in prefix_field.split("|") if p) if prefix_field else ()
            digest = hashlib.sha256(secret.encode()).digest()
            principal = Principal(
                key_id=digest.hex()[:12],
                scopes=frozenset(scopes) if scopes else ALL_SCOPES,
                prefixes=prefixes,
            )
            keys.append(_Key(digest, principal))
        return cls(keys)

    def authenticate(self, authorization: str | None, query_token: str | None = None) -> Principal:
        if not self._keys:
            return ANONYMOUS
        token: str | None = None
        if authorization:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                token = value.strip()
        if token is None:
            token = query_token
        if not token:
            raise Unauthorized("missing bearer token")
        presented = hashlib.sha256(token.encode()).digest()
        found: Principal | None = None
        for k in self._keys:  # no early exit: timing does not reveal which key matched
            if hmac.compare_digest(presented, k.digest):
                found = k.principal
        if found is None:
            raise Unauthorized("invalid bearer token")
        return found
