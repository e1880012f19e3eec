"""The events request (headwater.flags.subscription) and the closure endpoint's query, URL
and ETag (headwater.flags.snapshot)."""

from __future__ import annotations

import base64
from urllib.parse import parse_qs, urlsplit

import pytest

from headwater.flags.closure import FlagSelection
from headwater.flags.errors import (
    FlagError,
    Forbidden,
    InvalidRequest,
    InvalidSubscription,
    QueryTooLong,
    unknown_namespace,
)
from headwater.flags.principals import Kind, Permission, Principal
from headwater.flags.snapshot import (
    closure_etag,
    decode_subscription,
    encode_subscription,
    etag_matches,
    parse_closure_query,
    snapshot_url,
)
from headwater.flags.subscription import Subscription, parse_events_request

pytestmark = pytest.mark.unit

READ = frozenset({Permission.READ})
SERVICE = Principal("p1", "acme", Kind.SERVICE, READ, None)
NARROW = Principal("p2", "acme", Kind.SERVICE, READ, frozenset({"billing"}))
WRITER = Principal("p3", "acme", Kind.SERVICE, frozenset({Permission.WRITE}), None)
CLIENT = Principal("p4", "acme", Kind.NAMESPACE_CLIENT, frozenset(), None)
ADMIN = Principal("p5", "*", Kind.SUPERADMIN, READ, None)


def parse(query: str, principal: Principal = SERVICE, last: str | None = None) -> Subscription:
    return parse_events_request(query, principal, last)


def refused(query: str, principal: Principal = SERVICE) -> FlagError:
    with pytest.raises(FlagError) as info:
        parse(query, principal)
    return info.value


def test_spec_example() -> None:
    sub = parse(
        "ns=billing:checkout-redesign,homepage-banner-copy&ns=growth:*"
        "&ns=experiments:onboarding-quiz-variant"
    )
    assert [(n.tenant, n.slug, n.label) for n in sub.namespaces] == [
        ("acme", "billing", "billing"),
        ("acme", "growth", "growth"),
        ("acme", "experiments", "experiments"),
    ]
    assert sub.namespaces[0].selection == FlagSelection.of(
        ["checkout-redesign", "homepage-banner-copy"]
    )
    assert sub.namespaces[1].selection.wildcard
    assert sub.resume == {}


def test_percent_encoding_and_unknown_params() -> None:
    sub = parse("ns=billing%3Aa%2Cb&cachebust=1")
    assert sub.namespaces[0].selection == FlagSelection.of(["a", "b"])


def test_unknown_flags_are_accepted_and_duplicates_collapse() -> None:
    sub = parse("ns=billing:does-not-exist-yet,a,a")
    assert sub.namespaces[0].selection.keys == frozenset({"does-not-exist-yet", "a"})


def test_no_ns_is_invalid_request() -> None:
    for query in ("", "since=billing:3", "NS=billing:*"):
        error = refused(query)
        assert (error.status, error.code) == (400, "invalid_request")


def test_query_over_8_kib_is_414_without_body() -> None:
    base = "ns=billing:*&pad="
    ok = base + "x" * (8192 - len(base))
    assert len(parse(ok).namespaces) == 1
    error = refused(ok + "x")
    assert isinstance(error, QueryTooLong) and error.status == 414
    assert error.envelope() is None


def test_namespace_cap() -> None:
    ok = "&".join(f"ns=n{i}:*" for i in range(32))
    assert len(parse(ok).namespaces) == 32
    error = refused(ok + "&ns=n32:*")
    assert isinstance(error, InvalidSubscription)
    assert error.envelope() == {
        "error": {
            "code": "invalid_subscription",
            "message": error.message,
            "details": {"reason": "too_many_namespaces"},
        }
    }


def test_flag_cap_with_namespace_in_details() -> None:
    flags = ",".join(f"f{i}" for i in range(64))
    assert len(parse(f"ns=billing:{flags}").namespaces[0].selection.keys) == 64
    error = refused(f"ns=billing:{flags},f64")
    assert error.status == 400 and error.details == {
        "reason": "too_many_flags",
        "namespace": "billing",
    }


@pytest.mark.parametrize(
    "value",
    ["billing", "billing:", ":*", "billing:a,,b", "billing:*,a", "billing:A", "Billing:*",
     "billing:a.b", "bil ling:*", "billing:a:b", "a/b/c:*"],
)  # fmt: skip
def test_malformed_ns(value: str) -> None:
    error = refused(f"ns={value}")
    assert isinstance(error, InvalidSubscription) and error.reason == "malformed"


def test_same_namespace_twice() -> None:
    error = refused("ns=billing:a&ns=billing:b")
    assert isinstance(error, InvalidSubscription) and error.reason == "duplicate_namespace"


def test_permission_checks_are_403() -> None:
    assert isinstance(refused("ns=billing:*&ns=growth:*", NARROW), Forbidden)
    assert parse("ns=billing:*", NARROW).namespaces[0].slug == "billing"
    assert refused("ns=billing:*", WRITER).status == 403
    assert refused("ns=billing:*", CLIENT).status == 403  # namespace-client: no manifest.read


def test_cross_tenant_is_impossible_for_tenant_tokens() -> None:
    error = refused("ns=other/billing:*")
    assert isinstance(error, Forbidden)
    own = parse("ns=acme/billing:*").namespaces[0]
    assert (own.tenant, own.slug, own.label) == ("acme", "billing", "billing")


def test_superadmin_names_the_tenant() -> None:
    sub = parse("ns=acme/billing:*&ns=globex/billing:a", ADMIN)
    assert [(n.tenant, n.slug, n.label) for n in sub.namespaces] == [
        ("acme", "billing", "acme/billing"),
        ("globex", "billing", "globex/billing"),
    ]
    error = refused("ns=billing:*", ADMIN)
    assert isinstance(error, InvalidSubscription) and error.reason == "tenant_required"


def test_since_and_last_event_id() -> None:
    sub = parse("ns=billing:*&ns=growth:*&since=billing:41,growth:7&since=ghost:3")
    assert sub.resume == {"billing": 41, "growth": 7}  # hints for other namespaces dropped
    sub = parse("ns=billing:*&ns=growth:*&since=billing:41,growth:7", last="billing:45")
    assert sub.resume == {"billing": 45, "growth": 7}  # Last-Event-ID wins for its slug
    sub = parse("ns=billing:*", last="growth:3")
    assert sub.resume == {}
    for junk in ("garbage", "billing:0", "billing:-1", "billing:x", ""):
        assert parse("ns=billing:*", last=junk).resume == {}  # advisory: ignored
    admin = parse("ns=acme/billing:*&since=acme/billing:9", ADMIN)
    assert admin.resume == {"acme/billing": 9}


@pytest.mark.parametrize(
    "since", ["billing", "billing:0", "billing:01", "billing:x", "billing:1,billing:2", ""]
)
def test_malformed_since_is_invalid_request(since: str) -> None:
    assert isinstance(refused(f"ns=billing:*&since={since}"), InvalidRequest)


# -- closure endpoint query -----------------------------------------------------------------


def test_subscription_encoding_matches_the_spec_example() -> None:
    assert (
        encode_subscription("checkout-redesign,employees") == "Y2hlY2tvdXQtcmVkZXNpZ24sZW1wbG95ZWVz"
    )
    assert (
        decode_subscription("Y2hlY2tvdXQtcmVkZXNpZ24sZW1wbG95ZWVz") == "checkout-redesign,employees"
    )
    assert encode_subscription("*") == "Kg"


@pytest.mark.parametrize("value", ["", "Kg==", "Kh", "K", "!!", "Y2hlY2tvdXQ+", "éé"])
def test_subscription_must_decode_exactly(value: str) -> None:
    assert decode_subscription(value) is None


def test_parse_closure_query() -> None:
    request = parse_closure_query(
        {"version": "42", "subscription": "Y2hlY2tvdXQtcmVkZXNpZ24sZW1wbG95ZWVz", "token": "t"}
    )
    assert request.version == 42 and request.token == "t"
    assert request.selection == FlagSelection.of(["checkout-redesign", "employees"])
    assert request.subscription_text == "checkout-redesign,employees"
    reversed_text = encode_subscription("employees,checkout-redesign")
    kept = parse_closure_query({"version": "1", "subscription": reversed_text})
    assert kept.subscription_text == "employees,checkout-redesign" and kept.token is None


@pytest.mark.parametrize(
    "params",
    [
        {"subscription": "Kg"},
        {"version": "0", "subscription": "Kg"},
        {"version": "-1", "subscription": "Kg"},
        {"version": "01", "subscription": "Kg"},
        {"version": "x", "subscription": "Kg"},
        {"version": "9223372036854775808", "subscription": "Kg"},
        {"version": "1"},
        {"version": "1", "subscription": "Kg=="},
        {"version": "1", "subscription": base64.urlsafe_b64encode(b"a,,b").decode().rstrip("=")},
        {"version": "1", "subscription": encode_subscription(",".join(f"f{i}" for i in range(65)))},
    ],
)
def test_closure_query_errors_are_400(params: dict[str, str]) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_closure_query(params)
    assert info.value.status == 400 and info.value.code == "invalid_request"


def test_snapshot_url_round_trips() -> None:
    url = snapshot_url(
        "https://hw.example/",
        tenant="acme",
        slug="billing",
        version=42,
        selection=FlagSelection.of(["employees", "checkout-redesign"]),
        token="1700000060.abc.ff",
    )
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc) == ("https", "hw.example")
    assert parts.path == "/api/v1/tenants/acme/namespaces/billing/closure"
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert query == {
        "version": "42",
        "subscription": "Y2hlY2tvdXQtcmVkZXNpZ24sZW1wbG95ZWVz",
        "token": "1700000060.abc.ff",
    }
    assert parse_closure_query(query).subscription_text == "checkout-redesign,employees"


def test_etag() -> None:
    etag = closure_etag(42, "sha256:9c2e")
    assert etag == '"v42-sha256:9c2e"'
    assert etag_matches('"v42-sha256:9c2e"', etag)
    assert etag_matches('W/"v42-sha256:9c2e"', etag)
    assert etag_matches('"v41-sha256:0", "v42-sha256:9c2e"', etag)
    assert etag_matches("*", etag)
    assert not etag_matches('"v41-sha256:9c2e"', etag)
    assert not etag_matches(None, etag)


def test_unknown_namespace_error_shape() -> None:
    error = unknown_namespace("billing")
    assert error.status == 400
    assert error.envelope() == {
        "error": {
            "code": "invalid_subscription",
            "message": "namespace 'billing' does not exist",
            "details": {"reason": "unknown_namespace", "namespace": "billing"},
        }
    }
