"""The flag surface's operations over the manifest store: publish, read, versions and the
closure endpoint (the event stream is `headwater.flags.live`).

Authorization: every operation authenticates `Authorization: Bearer <token>` against
HEADWATER_FLAG_TOKENS (401 `unauthorized` when missing or unknown), then needs the
permission on the namespace (403 `forbidden`: wrong permission, another tenant, a namespace
outside the token's list). Existence is checked after authorization, so a token learns
nothing about namespaces it may not read. The closure endpoint also takes the signed
snapshot token of an event instead of a bearer."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from headwater.engine.ports import Head
from headwater.flags import manifest
from headwater.flags.delta import DeliveryPolicy
from headwater.flags.errors import (
    ClosureTokenInvalid,
    ClosureUnavailable,
    Forbidden,
    InvalidRequest,
    NamespaceNotFound,
)
from headwater.flags.lint import check
from headwater.flags.live import FlagHub
from headwater.flags.names import is_slug
from headwater.flags.ports import ConnectionSlots
from headwater.flags.principals import Permission, Principal
from headwater.flags.snapshot import (
    ClosureRequest,
    closure_etag,
    etag_matches,
    parse_closure_query,
)
from headwater.flags.store import ManifestStore, PublishResult, VersionInfo
from headwater.flags.tarball import Snapshot
from headwater.flags.tokens import SnapshotSigner, TokenStore, authenticate_header

log = logging.getLogger(__name__)

GZIP_TYPES = frozenset({"application/gzip", "application/x-gzip", "application/x-tar"})
JSON_TYPES = frozenset({"application/json"})


def iso_ms(ms: int) -> str:
    """RFC 3339 UTC with milliseconds: 2026-11-22T10:04:05.123Z."""
    secs, rem = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{rem:03d}Z"


def signing_key_bytes(raw: str) -> bytes:
    """HEADWATER_SIGNING_KEY as bytes; unset: a random per-process key (snapshot URLs then
    verify only in the process that issued them, so set it wherever more than one runs)."""
    if raw:
        return raw.encode("utf-8")
    log.warning("HEADWATER_SIGNING_KEY is not set: snapshot URLs are signed with a per-process key")
    return secrets.token_bytes(32)


@dataclass(frozen=True, slots=True)
class ManifestBody:
    version: int
    files: dict[str, str]


@dataclass(frozen=True, slots=True)
class ClosureResult:
    version: int
    closure_hash: str
    etag: str
    snapshot: Snapshot | None  # None: the client's If-None-Match matched (304)


class FlagService:
    def __init__(
        self,
        store: ManifestStore,
        tokens: TokenStore,
        signer: SnapshotSigner,
        policy: DeliveryPolicy,
        clock_ms: Callable[[], int],
        slots: ConnectionSlots,
    ) -> None:
        self.store = store
        self.tokens = tokens
        self.signer = signer
        self.policy = policy
        self.clock_ms = clock_ms
        self.slots = slots
        self.hub = FlagHub(store.engine)
        self.shutdown = asyncio.Event()

    # --- auth -----------------------------------------------------------------------------
    def principal(self, authorization: str | None) -> Principal:
        return authenticate_header(self.tokens, authorization)

    def require(self, principal: Principal, permission: Permission, tenant: str, slug: str) -> None:
        if not principal.may(permission, tenant, slug):
            raise Forbidden(
                f"this token lacks {permission.value} on {tenant}/{slug}",
                details={"tenant": tenant, "namespace": slug},
            )

    def require_write(self, principal: Principal, tenant: str, slug: str) -> None:
        """Checked before the body is read: a caller without manifest.write uploads nothing."""
        self.require(principal, Permission.WRITE, tenant, slug)

    async def existing_head(self, tenant: str, slug: str) -> Head:
        head = await self.store.head(tenant, slug) if _names_ok(tenant, slug) else None
        if head is None:
            raise NamespaceNotFound(
                f"namespace {tenant}/{slug} does not exist",
                details={"tenant": tenant, "namespace": slug},
            )
        return head

    # --- publish / read -------------------------------------------------------------------
    async def publish(
        self, principal: Principal, tenant: str, slug: str, content_type: str, body: bytes
    ) -> PublishResult:
        self.require(principal, Permission.WRITE, tenant, slug)
        if not _names_ok(tenant, slug):
            raise NamespaceNotFound(
                f"{tenant}/{slug} is not a valid namespace name (tenant and slug are"
                " [a-z0-9][a-z0-9-]{0,62})",
                details={"tenant": tenant, "namespace": slug},
            )
        media = content_type.split(";", 1)[0].strip().lower()
        if media in GZIP_TYPES:
            tree = manifest.parse_tarball(body)
        elif media in JSON_TYPES:
            tree = manifest.parse_json_body(body)
        else:
            raise InvalidRequest(
                "Content-Type must be application/gzip (a tar.gz of the tree) or"
                ' application/json ({"files": {...}})',
                details={"content_type": content_type},
            )
        model = check(tree)
        return await self.store.publish(tenant, slug, tree, model)

    async def manifest(self, principal: Principal, tenant: str, slug: str) -> ManifestBody:
        self.require(principal, Permission.READ, tenant, slug)
        head = await self.existing_head(tenant, slug)
        index = await self.store.index(tenant, slug, head.ext)
        tree = await self.store.tree(tenant, slug, index)
        files = {p: tree[p].decode("utf-8") for p in sorted(tree, key=lambda p: p.encode())}
        return ManifestBody(head.head_seq, files)

    async def current_version(self, principal: Principal, tenant: str, slug: str) -> int:
        """For a conditional GET: the current version without reading the tree."""
        self.require(principal, Permission.READ, tenant, slug)
        return (await self.existing_head(tenant, slug)).head_seq

    async def versions(self, principal: Principal, tenant: str, slug: str) -> list[VersionInfo]:
        self.require(principal, Permission.READ, tenant, slug)
        head = await self.existing_head(tenant, slug)
        return await self.store.versions(head)

    # --- closure endpoint -----------------------------------------------------------------
    def closure_caller(
        self,
        tenant: str,
        slug: str,
        req: ClosureRequest,
        authorization: str | None,
    ) -> Principal:
        """Who may fetch this closure: the signed token's principal (verified over exactly
        this request), else the bearer with manifest.read on (tenant, slug)."""
        bearer: Principal | None = None
        if authorization is not None or req.token is None:
            bearer = authenticate_header(self.tokens, authorization)
        if req.token is None:
            assert bearer is not None
            self.require(bearer, Permission.READ, tenant, slug)
            return bearer
        scope = self.signer.verify(
            req.token,
            tenant=tenant,
            namespace=slug,
            version=req.version,
            subscription=req.subscription_text,
            principal_id=bearer.id if bearer is not None else None,
        )
        principal = self.tokens.by_id(scope.principal_id)
        if principal is None or not principal.may(Permission.READ, tenant, slug):
            # The token was issued to a principal that is gone or lost the permission.
            raise ClosureTokenInvalid("revoked", "closure token's principal may not read this")
        return principal

    async def closure(
        self,
        tenant: str,
        slug: str,
        params: Mapping[str, str],
        authorization: str | None,
        if_none_match: str | None,
    ) -> ClosureResult:
        req = parse_closure_query(params)
        self.closure_caller(tenant, slug, req, authorization)
        head = await self.existing_head(tenant, slug)
        if req.version > head.head_seq:
            raise NamespaceNotFound(
                f"namespace {tenant}/{slug} has no version {req.version}",
                details={"tenant": tenant, "namespace": slug, "version": req.version},
            )
        if not await self.store.is_retained(head, req.version, self.clock_ms()):
            raise ClosureUnavailable(
                f"version {req.version} of {tenant}/{slug} is past retention",
                details={"version": req.version},
            )
        info = await self.store.version(head, req.version)
        index = await self.store.index(tenant, slug, info.tree_hash)
        closure = self.store.closure(index, req.selection)
        etag = closure_etag(req.version, closure.hash)
        if etag_matches(if_none_match, etag):
            return ClosureResult(req.version, closure.hash, etag, None)
        snap = await self.store.closure_tarball(tenant, slug, index, closure)
        return ClosureResult(req.version, closure.hash, etag, snap)


def _names_ok(tenant: str, slug: str) -> bool:
    return is_slug(tenant) and is_slug(slug)


def version_json(info: VersionInfo) -> dict[str, Any]:
    return {
        "version": info.version,
        "created_at": iso_ms(info.created_ms),
        "closure_hash": info.tree_hash,
    }
