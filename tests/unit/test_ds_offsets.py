"""Durable Streams offsets (protocol §5): 26-char Crockford base32 of (epoch, seq, in_block)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.durable.offsets import (
    OFFSET_LENGTH,
    START,
    U32_MAX,
    U64_MAX,
    Offset,
    OffsetError,
    StartOfStream,
    decode_offset,
    encode_offset,
)

pytestmark = pytest.mark.unit

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
u32 = st.integers(min_value=0, max_value=U32_MAX)
u64 = st.integers(min_value=0, max_value=U64_MAX)
offsets = st.builds(Offset, u32, u64, u32)


def reference_encode(epoch: int, seq: int, in_block: int) -> str:
    """Independent oracle: pack bytes big-endian, pad to 130 bits, slice 5-bit groups."""
    raw = (
        epoch.to_bytes(4, "big")
        + (seq >> 32).to_bytes(4, "big")
        + (seq & U32_MAX).to_bytes(4, "big")
        + in_block.to_bytes(4, "big")
    )
    bits = "00" + "".join(f"{b:08b}" for b in raw)
    return "".join(ALPHABET[int(bits[i : i + 5], 2)] for i in range(0, 130, 5))


# ---------------------------------------------------------------- encoding


@pytest.mark.parametrize(
    ("epoch", "seq", "in_block", "expected"),
    [
        (0, 0, 0, "0" * 26),
        (0, 0, 1, "0" * 25 + "1"),
        (0, 0, 31, "0" * 25 + "Z"),
        (0, 0, 32, "0" * 24 + "10"),
        (0, 1, 0, "0" * 19 + "4" + "0" * 6),  # lo bit 0 is bit 32 of 128
        (1, 0, 0, "0" * 6 + "2" + "0" * 19),  # epoch bit 0 is bit 96
        (U32_MAX, U64_MAX, U32_MAX, "7" + "Z" * 25),
    ],
)
def test_encode_known_vectors(epoch: int, seq: int, in_block: int, expected: str) -> None:
    assert encode_offset(epoch, seq, in_block) == expected
    assert str(Offset(epoch, seq, in_block)) == expected


@given(u32, u64, u32)
def test_encode_matches_independent_bit_oracle(epoch: int, seq: int, in_block: int) -> None:
    assert encode_offset(epoch, seq, in_block) == reference_encode(epoch, seq, in_block)


@given(u32, u64, u32)
def test_encoding_is_26_uppercase_crockford_chars(epoch: int, seq: int, in_block: int) -> None:
    text = encode_offset(epoch, seq, in_block)
    assert len(text) == OFFSET_LENGTH == 26
    assert set(text) <= set(ALPHABET)
    assert text[0] in "01234567"  # two leading zero pad bits


def test_in_block_defaults_to_zero() -> None:
    assert encode_offset(3, 9) == encode_offset(3, 9, 0)
    assert Offset(3, 9).in_block == 0


def test_seq_is_split_into_hi_and_lo_words() -> None:
    # hi|lo = seq: crossing the 32-bit boundary carries into the hi word, not into in_block.
    below = decode_offset(encode_offset(0, 2**32 - 1))
    above = decode_offset(encode_offset(0, 2**32))
    assert below == Offset(0, 2**32 - 1, 0)
    assert above == Offset(0, 2**32, 0)
    assert encode_offset(0, 2**32) == reference_encode(0, 2**32, 0)


@pytest.mark.parametrize(
    ("epoch", "seq", "in_block", "message"),
    [
        (-1, 0, 0, "epoch must be in 0..4294967295, got -1"),
        (2**32, 0, 0, "epoch must be in 0..4294967295"),
        (0, -1, 0, "seq must be in 0..18446744073709551615, got -1"),
        (0, 2**64, 0, "seq must be in 0..18446744073709551615"),
        (0, 0, -1, "in_block must be in 0..4294967295"),
        (0, 0, 2**32, "in_block must be in 0..4294967295"),
    ],
)
def test_encode_rejects_out_of_range_components(
    epoch: int, seq: int, in_block: int, message: str
) -> None:
    with pytest.raises(OffsetError, match=message.replace(".", r"\.")):
        encode_offset(epoch, seq, in_block)


@pytest.mark.parametrize("bad", [True, 1.0, "1", None])
def test_encode_rejects_non_integers(bad: object) -> None:
    with pytest.raises(OffsetError, match="seq must be an integer"):
        encode_offset(0, bad)  # type: ignore[arg-type]


def test_offset_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        decode_offset("nope")


# ---------------------------------------------------------------- decoding


@given(offsets)
def test_round_trip(offset: Offset) -> None:
    assert decode_offset(offset.encode()) == offset


@given(offsets)
def test_decode_is_case_insensitive(offset: Offset) -> None:
    text = offset.encode()
    assert decode_offset(text.lower()) == offset
    mixed = "".join(ch.lower() if i % 2 else ch for i, ch in enumerate(text))
    assert decode_offset(mixed) == offset


@given(st.text(alphabet=ALPHABET + ALPHABET.lower(), min_size=25, max_size=25))
def test_every_valid_string_round_trips_to_its_uppercase(tail: str) -> None:
    for head in "01234567":
        text = head + tail
        assert decode_offset(text).encode() == text.upper()  # type: ignore[union-attr]


def test_minus_one_is_start_of_stream() -> None:
    assert decode_offset("-1") is START
    assert StartOfStream() is START
    assert str(START) == "-1"
    assert repr(START) == "START"
    assert not isinstance(START, Offset)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "must not be empty"),
        ("0", "decimal offset '0' is not accepted"),
        ("1", "decimal offset '1' is not accepted"),
        ("42", "decimal offset '42' is not accepted"),
        ("-2", "decimal offset '-2' is not accepted"),
        ("+1", "decimal offset '\\+1' is not accepted"),
        ("-0", "decimal offset '-0' is not accepted"),
        ("-01", "decimal offset '-01' is not accepted"),
        ("18446744073709551615", "decimal offset"),
        ("1" * 21, "26 characters long, got 21"),
        (" -1", "whitespace"),
        ("-1 ", "whitespace"),
        ("-1\n", "whitespace"),
        ("\t" + "0" * 25, "whitespace"),
        ("0" * 13 + " " + "0" * 12, "whitespace"),
        ("0" * 25, "26 characters long, got 25"),
        ("0" * 27, "26 characters long, got 27"),
        ("abc", "26 characters long, got 3"),
        ("-1" + "0" * 24, "invalid character '-' at position 0"),
        ("0" * 25 + "U", "invalid character 'U' at position 25"),
        ("0" * 25 + "u", "invalid character 'u' at position 25"),
        ("0" * 10 + "!" + "0" * 15, "invalid character '!' at position 10"),
        ("0" * 25 + "\u0660", "invalid character"),  # Arabic-Indic zero is not ASCII 0
        ("0" * 25 + "\uff10", "invalid character"),  # fullwidth zero
    ],
)
def test_decode_rejections(text: str, message: str) -> None:
    with pytest.raises(OffsetError, match=message):
        decode_offset(text)


@pytest.mark.parametrize("alias", ["I", "i", "L", "l", "O", "o"])
def test_crockford_decode_aliases_are_rejected(alias: str) -> None:
    # Strict by design: the server never emits I/L/O, and one offset gets one spelling.
    with pytest.raises(OffsetError, match=f"invalid character '{alias}' at position 5"):
        decode_offset("0" * 5 + alias + "0" * 20)


@pytest.mark.parametrize("head", list("89ABCDEFGHJKMNPQRSTVWXYZabcz"))
def test_nonzero_pad_bits_are_rejected(head: str) -> None:
    with pytest.raises(OffsetError, match=f"first character must be 0-7, got '{head}'"):
        decode_offset(head + "0" * 25)


def test_largest_value_decodes_to_all_max_components() -> None:
    assert decode_offset("7" + "Z" * 25) == Offset(U32_MAX, U64_MAX, U32_MAX)
    assert decode_offset("7" + "z" * 25) == Offset(U32_MAX, U64_MAX, U32_MAX)


def test_decode_rejects_non_strings() -> None:
    with pytest.raises(OffsetError, match="offset must be a string, got bytes"):
        decode_offset(b"-1")  # type: ignore[arg-type]


# ---------------------------------------------------------------- ordering


@settings(max_examples=300)
@given(st.lists(offsets, min_size=2, max_size=20))
def test_string_order_equals_tuple_order(items: list[Offset]) -> None:
    by_string = sorted(items, key=lambda o: o.encode())
    by_tuple = sorted(items, key=lambda o: (o.epoch, o.seq, o.in_block))
    assert [o.encode() for o in by_string] == [o.encode() for o in by_tuple]
    assert sorted(items) == by_tuple  # dataclass ordering is the tuple ordering


@given(offsets, offsets)
def test_pairwise_comparisons_agree(a: Offset, b: Offset) -> None:
    sa, sb = a.encode(), b.encode()
    assert (a < b) == (sa < sb)
    assert (a == b) == (sa == sb)
    # Case-insensitive input never changes the decoded order.
    assert (decode_offset(sa.lower()) < decode_offset(sb)) == (sa < sb)  # type: ignore[operator]


def test_ordering_prefers_epoch_then_seq_then_in_block() -> None:
    ordered = [Offset(0, 5, 9), Offset(1, 0, 0), Offset(1, 0, 1), Offset(1, 1, 0), Offset(2, 0, 0)]
    assert sorted(reversed(ordered)) == ordered
    assert sorted(o.encode() for o in reversed(ordered)) == [o.encode() for o in ordered]


def test_offset_is_frozen_and_hashable() -> None:
    offset = Offset(1, 2, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        offset.seq = 4  # type: ignore[misc]
    assert {offset, Offset(1, 2, 3)} == {offset}
