"""Who a flags API token speaks for: its kind, permissions, tenant and namespaces, and the
one authorization question (`Principal.may`). Standard library only: the token store
(flags.tokens: loading HEADWATER_FLAG_TOKENS, hashing, snapshot signing) builds these, and
the request parsers that check them (flags.subscription) stay free of its YAML loader, so
the Python client can share those parsers."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    SERVICE = "service"
    NAMESPACE_CLIENT = "namespace-client"
    SUPERADMIN = "superadmin"


class Permission(StrEnum):
    READ = "manifest.read"
    WRITE = "manifest.write"


@dataclass(frozen=True, slots=True)
class Principal:
    id: str
    tenant: str  # "*" for superadmin
    kind: Kind
    permissions: frozenset[Permission]
    namespaces: frozenset[str] | None  # None: every namespace

    @property
    def is_superadmin(self) -> bool:
        return self.kind is Kind.SUPERADMIN

    def may(self, permission: Permission, tenant: str, slug: str) -> bool:
        """Whether this principal holds `permission` on namespace `tenant/slug`."""
        if permission not in self.permissions:
            return False
        if not self.is_superadmin and tenant != self.tenant:
            return False
        return self.namespaces is None or slug in self.namespaces
