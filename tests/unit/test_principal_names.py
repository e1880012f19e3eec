"""A key's name allowlist as the listings and metrics use it (spec §0.2): the prefixes a
listing scans for a requested prefix, narrowed and never widened, each name listed once."""

from __future__ import annotations

import pytest

from headwater.access.keys import ALL_SCOPES, KeyStore, Principal

pytestmark = pytest.mark.unit


def key(prefixes: str) -> Principal:
    return KeyStore.parse(f"k::{prefixes}").authenticate("Bearer k")


@pytest.mark.parametrize(
    ("prefixes", "requested", "scanned"),
    [
        ("", "", [""]),  # no allowlist: the request as given
        ("", "ab", ["ab"]),
        ("tenant42:|shared.", "", ["shared.", "tenant42:"]),
        ("tenant42:|shared.", "tenant", ["tenant42:"]),  # narrowed to the allowlist
        ("tenant42:|shared.", "tenant42:b", ["tenant42:b"]),  # narrower than the allowlist
        ("tenant42:|shared.", "tenant43:", []),  # outside it: nothing
        ("t:|t:a|u", "", ["t:", "u"]),  # overlapping prefixes: a name is listed once
        ("t:a|t:|t:ab", "t:", ["t:"]),
        ("ab|a|abc|b", "", ["a", "b"]),
    ],
)
def test_listing_prefixes(prefixes: str, requested: str, scanned: list[str]) -> None:
    assert key(prefixes).listing_prefixes(requested) == scanned


def test_restricted_and_names() -> None:
    p = key("tenant42:|shared.")
    assert p.restricted and p.scopes == ALL_SCOPES
    assert p.allows_names("tenant42:a", "shared.b") and not p.allows_names("tenant42:a", "x")
    assert not key("").restricted
