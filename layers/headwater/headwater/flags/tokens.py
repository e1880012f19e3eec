"""API tokens (`HEADWATER_FLAG_TOKENS`, issue 8) and signed snapshot tokens (spec: closure
endpoint).

API tokens. The variable holds inline JSON (its first non-blank character is `[` or `{`) or names
a file: `.json` is read as JSON, anything else as YAML. The document is a list of
`{token, tenant, kind, permissions, namespaces}`, nothing more:
- `token`: 24-512 printable ASCII characters, no whitespace, unique in the file;
- `kind`: `service`, `namespace-client` or `superadmin`;
- `tenant`: a tenant id, or `"*"` exactly when kind is superadmin;
- `permissions`: a list, subset of `manifest.read`, `manifest.write` (must be empty for
  namespace-client: the spec says those tokens have no manifest.read);
- `namespaces`: a non-empty list of slugs, or `["*"]`.
Only sha256(token) is kept. `authenticate` compares the presented token's hash with every
stored hash via `hmac.compare_digest`, without stopping at a match. A principal's id is the
first 16 hex digits of its hash (it goes into snapshot tokens).

Snapshot tokens: HMAC-SHA256 keyed with HEADWATER_SIGNING_KEY over exactly
(principal_id, tenant, namespace, version, subscription, expires_at), each field written as
a big-endian u32 byte length then its UTF-8 bytes (version and expires_at as decimal).
The token is `<expires_at>.<principal_id>.<hex mac>`; expires_at is issue time + 60 s, in
whole Unix seconds, and a token is expired from that second on.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from headwater.errors import ConfigurationError
from headwater.flags import names
from headwater.flags.errors import ClosureTokenInvalid, Unauthorized
from headwater.flags.principals import Kind, Permission, Principal

ENV_VAR = "HEADWATER_FLAG_TOKENS"
TOKEN_RE = re.compile(r"[\x21-\x7e]{24,512}")
SNAPSHOT_TTL_SECONDS = 60
MIN_SIGNING_KEY_BYTES = 32


class TokenConfigError(ConfigurationError):
    """A bad HEADWATER_FLAG_TOKENS: the process refuses to start. Never quotes a token."""


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokenStore:
    def __init__(self, entries: Iterable[tuple[bytes, Principal]]) -> None:
        self._entries = tuple(entries)

    def __len__(self) -> int:
        return len(self._entries)

    def authenticate(self, token: str) -> Principal | None:
        presented = token_digest(token)
        found: Principal | None = None
        for digest, principal in self._entries:
            if hmac.compare_digest(digest, presented) and found is None:
                found = principal
        return found

    def by_id(self, principal_id: str) -> Principal | None:
        matches = [p for _, p in self._entries if hmac.compare_digest(p.id, principal_id)]
        return matches[0] if matches else None


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header, or Unauthorized (401)."""
    if authorization is None:
        raise Unauthorized("missing Authorization: Bearer <token>")
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("Authorization must be 'Bearer <token>'")
    return token


def authenticate_header(store: TokenStore, authorization: str | None) -> Principal:
    principal = store.authenticate(bearer_token(authorization))
    if principal is None:
        raise Unauthorized("unknown token")
    return principal


# -- loading ------------------------------------------------------------------------------


def load_tokens(
    value: str | None, read_text: Callable[[str], str] = lambda p: Path(p).read_text("utf-8")
) -> TokenStore:
    """The store described by the HEADWATER_FLAG_TOKENS value (module docstring)."""
    if value is None or not value.strip():
        raise TokenConfigError(f"{ENV_VAR} is not set")
    text = value.strip()
    if text.startswith(("[", "{")):
        source = f"{ENV_VAR} (inline JSON)"
        document = _parse_json(text, source)
    else:
        source = f"{ENV_VAR} file {text}"
        try:
            content = read_text(text)
        except OSError as exc:
            raise TokenConfigError(f"{source}: cannot read: {exc.strerror or exc}") from exc
        if text.endswith(".json"):
            document = _parse_json(content, source)
        else:
            try:
                document = yaml.safe_load(content)
            except yaml.YAMLError as exc:
                raise TokenConfigError(f"{source}: invalid YAML: {exc}") from exc
    return parse_tokens(document, source)


def _parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise TokenConfigError(f"{source}: invalid JSON: {exc}") from exc


_FIELDS = ("token", "tenant", "kind", "permissions", "namespaces")


def parse_tokens(document: Any, source: str = ENV_VAR) -> TokenStore:
    if not isinstance(document, list):
        raise TokenConfigError(f"{source}: must be a list of token entries")
    entries: list[tuple[bytes, Principal]] = []
    seen: set[bytes] = set()
    for index, entry in enumerate(document):
        where = f"{source}, entry {index}"
        digest, principal = _entry(entry, where)
        if digest in seen:
            raise TokenConfigError(f"{where}: token duplicates an earlier entry")
        seen.add(digest)
        entries.append((digest, principal))
    return TokenStore(entries)


def _string_list(entry: dict[str, Any], field: str, where: str) -> list[str]:
    value = entry[field]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TokenConfigError(f"{where}: '{field}' must be a list of strings")
    return value


def _entry(entry: Any, where: str) -> tuple[bytes, Principal]:
    if not isinstance(entry, dict):
        raise TokenConfigError(f"{where}: must be an object with keys {', '.join(_FIELDS)}")
    missing = [f for f in _FIELDS if f not in entry]
    extra = sorted(str(k) for k in entry if k not in _FIELDS)
    if missing or extra:
        raise TokenConfigError(f"{where}: missing keys {missing}, unknown keys {extra}")
    token, tenant, kind_text = entry["token"], entry["tenant"], entry["kind"]
    if not isinstance(token, str) or TOKEN_RE.fullmatch(token) is None:
        raise TokenConfigError(
            f"{where}: 'token' must be 24-512 printable ASCII characters without spaces"
        )
    if kind_text not in {k.value for k in Kind}:
        raise TokenConfigError(f"{where}: 'kind' must be one of {[k.value for k in Kind]}")
    kind = Kind(kind_text)
    if kind is Kind.SUPERADMIN:
        if tenant != "*":
            raise TokenConfigError(f"{where}: a superadmin token's 'tenant' must be \"*\"")
    elif not isinstance(tenant, str) or not names.is_slug(tenant):
        raise TokenConfigError(
            f"{where}: 'tenant' must match [a-z0-9][a-z0-9-]{{0,62}} (\"*\" is superadmin only)"
        )
    permissions = _permissions(_string_list(entry, "permissions", where), kind, where)
    namespaces = _namespaces(_string_list(entry, "namespaces", where), where)
    digest = token_digest(token)
    principal = Principal(digest.hex()[:16], tenant, kind, permissions, namespaces)
    return digest, principal


def _permissions(values: Sequence[str], kind: Kind, where: str) -> frozenset[Permission]:
    allowed = {p.value for p in Permission}
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise TokenConfigError(f"{where}: unknown permissions {unknown}; allowed {sorted(allowed)}")
    if values and kind is Kind.NAMESPACE_CLIENT:
        raise TokenConfigError(f"{where}: namespace-client tokens hold no manifest permissions")
    return frozenset(Permission(v) for v in values)


def _namespaces(values: Sequence[str], where: str) -> frozenset[str] | None:
    if list(values) == ["*"]:
        return None
    if not values:
        raise TokenConfigError(f"{where}: 'namespaces' must list slugs or be [\"*\"]")
    bad = sorted(v for v in values if not names.is_slug(v))
    if bad:
        raise TokenConfigError(
            f'{where}: namespaces {bad} are not slugs ("*" must be the only entry)'
        )
    return frozenset(values)


# -- snapshot tokens ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SnapshotScope:
    """What a snapshot token covers; `subscription` is the canonical flag-list text."""

    principal_id: str
    tenant: str
    namespace: str
    version: int
    subscription: str


_PRINCIPAL_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SNAPSHOT_TOKEN_RE = re.compile(r"([0-9]{1,12})\.([A-Za-z0-9_-]{1,64})\.([0-9a-f]{64})")


def _mac_input(scope: SnapshotScope, expires_at: int) -> bytes:
    fields = (
        scope.principal_id,
        scope.tenant,
        scope.namespace,
        str(scope.version),
        scope.subscription,
        str(expires_at),
    )
    out = bytearray()
    for field in fields:
        raw = field.encode("utf-8")
        out += struct.pack(">I", len(raw)) + raw
    return bytes(out)


class SnapshotSigner:
    def __init__(
        self,
        key: bytes,
        *,
        ttl_seconds: int = SNAPSHOT_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if len(key) < MIN_SIGNING_KEY_BYTES:
            raise ConfigurationError(
                f"HEADWATER_SIGNING_KEY must be at least {MIN_SIGNING_KEY_BYTES} bytes"
            )
        self._key = key
        self._ttl = ttl_seconds
        self._clock = clock

    def _mac(self, scope: SnapshotScope, expires_at: int) -> str:
        return hmac.new(self._key, _mac_input(scope, expires_at), hashlib.sha256).hexdigest()

    def issue(self, scope: SnapshotScope) -> str:
        if _PRINCIPAL_ID_RE.fullmatch(scope.principal_id) is None:
            raise ValueError(f"principal id {scope.principal_id!r} cannot go in a token")
        expires_at = int(self._clock()) + self._ttl
        return f"{expires_at}.{scope.principal_id}.{self._mac(scope, expires_at)}"

    def verify(
        self,
        token: str,
        *,
        tenant: str,
        namespace: str,
        version: int,
        subscription: str,
        principal_id: str | None = None,
    ) -> SnapshotScope:
        """The scope of a valid token for this request, or ClosureTokenInvalid (401) with
        reason malformed, tampered (the signature does not cover this request: altered token
        or another scope), expired, or principal_mismatch (a bearer of another principal)."""
        match = _SNAPSHOT_TOKEN_RE.fullmatch(token)
        if match is None:
            raise ClosureTokenInvalid("malformed", "closure token is malformed")
        expires_text, token_principal, mac = match.groups()
        expires_at = int(expires_text)
        scope = SnapshotScope(token_principal, tenant, namespace, version, subscription)
        if not hmac.compare_digest(self._mac(scope, expires_at), mac):
            raise ClosureTokenInvalid("tampered", "closure token does not cover this request")
        if int(self._clock()) >= expires_at:
            raise ClosureTokenInvalid("expired", "closure token has expired")
        if principal_id is not None and not hmac.compare_digest(principal_id, token_principal):
            raise ClosureTokenInvalid(
                "principal_mismatch", "closure token was issued to another principal"
            )
        return scope
