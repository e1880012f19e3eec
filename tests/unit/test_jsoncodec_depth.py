"""The JSON codec's nesting cap (MAX_DEPTH, whichever parser runs), and its promise that
anything `loads` accepts `dumps` encodes: deep values never end in a RecursionError."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater import jsoncodec, jsondepth
from headwater.jsoncodec import MAX_DEPTH
from headwater.jsondepth import NestingTooDeep

pytestmark = pytest.mark.unit

ASCII = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)

# What sends a body down each parser path: orjson; the stdlib (a >64-bit integer); orjson's
# refusal, then the stdlib (a lone surrogate).
INNERMOST = [b"1", b"123456789012345678901234567890", b'"a\\ud800b"']


def nested(depth: int, inner: bytes, obj: bool = False) -> bytes:
    if obj:
        return b'{"k":' * depth + inner + b"}" * depth
    return b"[" * depth + inner + b"]" * depth


def value_of(depth: int, inner: object, obj: bool = False) -> object:
    for _ in range(depth):
        inner = {"k": inner} if obj else [inner]
    return inner


def unwrap(value: object, depth: int, obj: bool = False) -> object:
    """The innermost value under `depth` single-element wrappers (checked on the way down;
    `==` on the whole would itself recurse too deep)."""
    for _ in range(depth):
        if obj:
            assert isinstance(value, dict) and list(value) == ["k"]
            value = value["k"]
        else:
            assert isinstance(value, list) and len(value) == 1
            value = value[0]
    return value


@pytest.mark.parametrize("inner", INNERMOST)
@pytest.mark.parametrize("obj", [False, True])
def test_max_depth_parses_and_encodes_back_byte_for_byte(inner: bytes, obj: bool) -> None:
    raw = nested(MAX_DEPTH - 1, b"[" + inner + b"]", obj)  # the innermost array: depth 1024
    value = jsoncodec.loads(raw)
    assert unwrap(value, MAX_DEPTH - 1, obj) == [json.loads(inner)]
    assert jsoncodec.dumps(value) == raw


@pytest.mark.parametrize("inner", INNERMOST)
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 10_000])
def test_deeper_is_a_value_error_on_every_path(inner: bytes, depth: int) -> None:
    with pytest.raises(NestingTooDeep) as caught:
        jsoncodec.loads(nested(depth, inner))
    assert caught.value.limit == MAX_DEPTH and caught.value.pos == MAX_DEPTH
    assert isinstance(caught.value, ValueError)  # every caller's `except ValueError` holds


@pytest.mark.parametrize("raw", [b"[" * 100_000, b'{"a":' * 50_000, b"[" * 2000 + b"1,]"])
def test_unclosed_or_broken_deep_input_is_a_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        jsoncodec.loads(raw)


@pytest.mark.parametrize("depth", [254, 255, 256, 999, 1000, MAX_DEPTH])
def test_encoding_never_fails_on_a_depth_that_parses(depth: int) -> None:
    # orjson encodes at most 254 levels and the stdlib's C encoder gives up near the
    # recursion limit: the explicit-stack encoder takes over, with the same output.
    for inner, levels in ((1, 0), (2**70, 0), ("\ud800", 0), ({"x": [1.5, None, True]}, 2)):
        outer = depth - levels  # the whole value is `depth` deep
        value = value_of(outer - 1, [inner])
        encoded = jsoncodec.dumps(value)
        assert encoded == b"[" * outer + ASCII.encode(inner).encode() + b"]" * outer
        assert unwrap(jsoncodec.loads(encoded), outer - 1) == [inner]


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters() | st.sampled_from(["\ud800", "\udfff", "\x00", '"', "\\"])),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(values, st.booleans())
@settings(max_examples=300, deadline=None)
def test_the_explicit_stack_codec_reads_and_writes_what_the_stdlib_does(
    value: object, spaced: bool
) -> None:
    # Called directly: hypothesis raises the recursion limit while a test runs, so values
    # deep enough to need them would not reach them through loads/dumps here.
    text = json.dumps(value, indent=1 if spaced else None)
    assert jsoncodec._loads_deep(text, MAX_DEPTH) == json.loads(text)
    assert jsoncodec._dumps_deep(value) == ASCII.encode(value)


def test_deep_encoder_writes_non_string_keys_as_the_stdlib_does() -> None:
    value = value_of(1100, {1: "a", 2.5: "b", None: "c", False: "d"}, obj=True)
    inner = ASCII.encode({1: "a", 2.5: "b", None: "c", False: "d"}).encode()
    assert jsoncodec.dumps(value) == b'{"k":' * 1100 + inner + b"}" * 1100


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), object()])
def test_deep_encoder_refuses_what_the_stdlib_refuses(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        jsoncodec.dumps(value_of(1100, [bad]))


def test_nesting_error_skips_brackets_inside_strings() -> None:
    text = '["[[[[[[", {"{{{{": "]]]]"}, [[]]]'
    assert jsondepth.nesting_error(text, 3) is None
    err = jsondepth.nesting_error(text, 2)
    assert err is not None and err.pos == text.index("[[]]") + 1
    escaped = '["\\"[[[[", [1]]'  # an escaped quote does not end the string
    assert jsondepth.nesting_error(escaped, 2) is None


def test_scalar_text_means_no_lone_surrogate() -> None:
    assert jsoncodec.is_scalar_text("plain") and jsoncodec.is_scalar_text("é🙂\x00")
    for bad in ("\ud800", "a\udfffb", "\udc00\ud800"):
        assert not jsoncodec.is_scalar_text(bad)
