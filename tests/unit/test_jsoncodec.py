"""The JSON codec keeps every value exact (payloads are stored verbatim)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater import jsoncodec

pytestmark = pytest.mark.unit

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner, max_size=5)
    ),
    max_leaves=25,
)


@given(values)
@settings(max_examples=300, deadline=None)
def test_round_trip_is_value_exact(value: object) -> None:
    encoded = jsoncodec.dumps(value)
    assert json.loads(encoded) == value  # any standard parser reads the same value back
    assert jsoncodec.loads(encoded) == value


@pytest.mark.parametrize(
    "raw",
    [
        b"123456789012345678901234567890",
        b'{"n": -98765432109876543210}',
        b"[18446744073709551616]",
    ],
)
def test_integers_beyond_64_bits_stay_exact(raw: bytes) -> None:
    assert jsoncodec.loads(raw) == json.loads(raw)
    assert (
        jsoncodec.dumps(jsoncodec.loads(raw))
        == json.dumps(json.loads(raw)).replace(" ", "").encode()
    )


def test_lone_surrogates_are_kept_and_encoded_as_escapes() -> None:
    value = jsoncodec.loads(b'"a\\ud800b"')
    assert value == "a\ud800b"
    encoded = jsoncodec.dumps({"s": value})
    assert encoded == b'{"s":"a\\ud800b"}'
    assert json.loads(encoded) == {"s": value}


@pytest.mark.parametrize("raw", [b"NaN", b"[Infinity]", b"-Infinity", b"1e400", b"{", b"[1,]", b""])
def test_invalid_json_is_rejected(raw: bytes) -> None:
    with pytest.raises(ValueError):
        jsoncodec.loads(raw)
