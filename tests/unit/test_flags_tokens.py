"""API tokens and signed snapshot tokens (headwater.flags.tokens)."""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from typing import Any

import pytest

from headwater.errors import ConfigurationError
from headwater.flags.errors import ClosureTokenInvalid, Unauthorized
from headwater.flags.principals import Kind, Permission
from headwater.flags.tokens import (
    SnapshotScope,
    SnapshotSigner,
    TokenConfigError,
    authenticate_header,
    bearer_token,
    load_tokens,
    parse_tokens,
)

pytestmark = pytest.mark.unit

SERVICE = "svc_" + "a" * 28
ADMIN = "adm_" + "b" * 28
CLIENT = "cli_" + "c" * 28


def entry(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "token": SERVICE,
        "tenant": "acme",
        "kind": "service",
        "permissions": ["manifest.read"],
        "namespaces": ["billing", "growth"],
    }
    return {**base, **overrides}


DOC = [
    entry(),
    entry(token=ADMIN, tenant="*", kind="superadmin", permissions=["manifest.read",
          "manifest.write"], namespaces=["*"]),
    entry(token=CLIENT, kind="namespace-client", permissions=[], namespaces=["*"]),
]  # fmt: skip


# -- API tokens -----------------------------------------------------------------------------


def test_parse_and_authenticate() -> None:
    store = parse_tokens(DOC)
    service = store.authenticate(SERVICE)
    assert service is not None
    assert service.kind is Kind.SERVICE and service.tenant == "acme"
    assert service.permissions == frozenset({Permission.READ})
    assert service.namespaces == frozenset({"billing", "growth"})
    assert service.id == hashlib.sha256(SERVICE.encode()).hexdigest()[:16]
    assert store.authenticate(SERVICE + "x") is None
    assert store.by_id(service.id) == service


def test_tokens_are_kept_only_as_hashes() -> None:
    store = parse_tokens(DOC)
    state = repr(store._entries)
    assert SERVICE not in state and ADMIN not in state


def test_permission_checks() -> None:
    store = parse_tokens(DOC)
    service, admin, client = (store.authenticate(t) for t in (SERVICE, ADMIN, CLIENT))
    assert service is not None and admin is not None and client is not None
    assert service.may(Permission.READ, "acme", "billing")
    assert not service.may(Permission.READ, "acme", "ops")
    assert not service.may(Permission.READ, "other", "billing")  # never across tenants
    assert not service.may(Permission.WRITE, "acme", "billing")
    assert admin.may(Permission.WRITE, "any-tenant", "any")
    assert not client.may(Permission.READ, "acme", "billing")


def test_inline_json_json_file_and_yaml_file() -> None:
    files = {
        "/etc/t.json": json.dumps(DOC),
        "/etc/t.yaml": "- token: " + SERVICE + "\n  tenant: acme\n  kind: service\n"
        "  permissions: [manifest.read]\n  namespaces: ['*']\n",
    }
    assert len(load_tokens(json.dumps(DOC))) == 3
    assert len(load_tokens(" /etc/t.json ", files.__getitem__)) == 3
    store = load_tokens("/etc/t.yaml", files.__getitem__)
    principal = store.authenticate(SERVICE)
    assert principal is not None and principal.namespaces is None


def test_unreadable_or_unparseable_sources() -> None:
    def missing(path: str) -> str:
        raise FileNotFoundError(2, "No such file or directory")

    with pytest.raises(TokenConfigError, match="cannot read"):
        load_tokens("/nope.yaml", missing)
    with pytest.raises(TokenConfigError, match="invalid JSON"):
        load_tokens("[{")
    with pytest.raises(TokenConfigError, match="invalid YAML"):
        load_tokens("/t.yaml", lambda _: "- [unclosed")
    with pytest.raises(TokenConfigError, match="not set"):
        load_tokens("  ")
    with pytest.raises(TokenConfigError, match="must be a list"):
        load_tokens('{"tokens": []}')


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"token": "short"}, "'token' must be"),
        ({"token": "has space " + "x" * 30}, "'token' must be"),
        ({"token": 12345}, "'token' must be"),
        ({"kind": "admin"}, "'kind' must be one of"),
        ({"tenant": "*"}, "superadmin only"),
        ({"tenant": "Acme"}, "'tenant' must match"),
        ({"kind": "superadmin"}, 'must be "\\*"'),
        ({"permissions": ["manifest.delete"]}, "unknown permissions"),
        ({"permissions": "manifest.read"}, "'permissions' must be a list"),
        ({"kind": "namespace-client"}, "hold no manifest permissions"),
        ({"namespaces": []}, "must list slugs"),
        ({"namespaces": ["*", "billing"]}, "are not slugs"),
        ({"namespaces": "*"}, "'namespaces' must be a list"),
        ({"extra": 1}, "unknown keys \\['extra'\\]"),
    ],
)
def test_entry_validation(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(TokenConfigError, match=message) as info:
        parse_tokens([entry(**bad)], "tokens.yaml")
    assert "entry 0" in str(info.value) and SERVICE not in str(info.value)


def test_missing_key_and_duplicate_token() -> None:
    partial = entry()
    del partial["namespaces"]
    with pytest.raises(TokenConfigError, match="missing keys \\['namespaces'\\]"):
        parse_tokens([partial])
    with pytest.raises(TokenConfigError, match="entry 1: token duplicates"):
        parse_tokens([entry(), entry(tenant="other")])
    with pytest.raises(TokenConfigError, match="must be an object"):
        parse_tokens(["token"])
    assert issubclass(TokenConfigError, ConfigurationError)


def test_bearer_header() -> None:
    store = parse_tokens(DOC)
    assert bearer_token(f"Bearer {SERVICE}") == SERVICE
    assert bearer_token(f"bearer  {SERVICE} ") == SERVICE
    assert authenticate_header(store, f"Bearer {ADMIN}").kind is Kind.SUPERADMIN
    for header in (None, "", "Basic abc", "Bearer", "Bearer   "):
        with pytest.raises(Unauthorized):
            bearer_token(header)
    with pytest.raises(Unauthorized, match="unknown token") as info:
        authenticate_header(store, "Bearer " + "z" * 30)
    assert info.value.status == 401 and info.value.code == "unauthorized"


# -- snapshot tokens ------------------------------------------------------------------------

KEY = b"k" * 32
SCOPE = SnapshotScope("0123456789abcdef", "acme", "billing", 42, "checkout-redesign,employees")


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def verify(signer: SnapshotSigner, token: str, **overrides: Any) -> SnapshotScope:
    request = {
        "tenant": SCOPE.tenant,
        "namespace": SCOPE.namespace,
        "version": SCOPE.version,
        "subscription": SCOPE.subscription,
        **overrides,
    }
    return signer.verify(token, **request)


def reason(signer: SnapshotSigner, token: str, **overrides: Any) -> str:
    with pytest.raises(ClosureTokenInvalid) as info:
        verify(signer, token, **overrides)
    assert info.value.status == 401 and info.value.code == "closure_token_invalid"
    return info.value.reason


def test_mac_covers_exactly_the_tuple() -> None:
    clock = Clock(1_700_000_000.9)
    token = SnapshotSigner(KEY, clock=clock).issue(SCOPE)
    expires_at = 1_700_000_060
    message = b""
    for field in (
        b"0123456789abcdef",
        b"acme",
        b"billing",
        b"42",
        b"checkout-redesign,employees",
        b"1700000060",
    ):
        message += struct.pack(">I", len(field)) + field
    mac = hmac.new(KEY, message, hashlib.sha256).hexdigest()
    assert token == f"{expires_at}.0123456789abcdef.{mac}"


def test_valid_within_60_seconds_then_expired() -> None:
    clock = Clock(1000.0)
    signer = SnapshotSigner(KEY, clock=clock)
    token = signer.issue(SCOPE)
    clock.now = 1059.99
    assert verify(signer, token) == SCOPE
    clock.now = 1060.0
    assert reason(signer, token) == "expired"


@pytest.mark.parametrize(
    "overrides",
    [
        {"tenant": "other"},
        {"namespace": "growth"},
        {"version": 41},
        {"subscription": "employees,checkout-redesign"},
        {"subscription": "*"},
    ],
)
def test_scope_mismatch_is_rejected(overrides: dict[str, Any]) -> None:
    signer = SnapshotSigner(KEY, clock=Clock(1000.0))
    assert reason(signer, signer.issue(SCOPE), **overrides) == "tampered"


def test_tampered_tokens() -> None:
    clock = Clock(1000.0)
    signer = SnapshotSigner(KEY, clock=clock)
    token = signer.issue(SCOPE)
    expires, principal, mac = token.split(".")
    later = f"{int(expires) + 3600}.{principal}.{mac}"
    assert reason(signer, later) == "tampered"  # extending expiry breaks the MAC
    flipped = mac[:-1] + ("0" if mac[-1] != "0" else "1")
    assert reason(signer, f"{expires}.{principal}.{flipped}") == "tampered"
    assert reason(signer, f"{expires}.fedcba9876543210.{mac}") == "tampered"
    other_key = SnapshotSigner(b"o" * 32, clock=clock)
    assert reason(other_key, token) == "tampered"


@pytest.mark.parametrize(
    "token", ["", "abc", "1.2", "x.abc." + "0" * 64, "1.abc." + "0" * 63, "1.a b." + "0" * 64,
              "1.abc." + "G" * 64, "1.abc." + "0" * 64 + ".extra"],
)  # fmt: skip
def test_malformed_tokens(token: str) -> None:
    assert reason(SnapshotSigner(KEY, clock=Clock(0)), token) == "malformed"


def test_principal_binding_when_a_bearer_is_present() -> None:
    signer = SnapshotSigner(KEY, clock=Clock(1000.0))
    token = signer.issue(SCOPE)
    assert verify(signer, token, principal_id=SCOPE.principal_id) == SCOPE
    assert reason(signer, token, principal_id="ffffffffffffffff") == "principal_mismatch"


def test_signing_key_and_principal_id_rules() -> None:
    with pytest.raises(ConfigurationError):
        SnapshotSigner(b"short")
    signer = SnapshotSigner(KEY)
    with pytest.raises(ValueError):
        signer.issue(SnapshotScope("has.dot", "acme", "billing", 1, "*"))
