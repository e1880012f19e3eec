"""Durable Streams offsets (protocol §5): a 128-bit tuple as 26 Crockford base32 characters.

Layout, big-endian: ``epoch`` (u32) | ``hi`` (u32) | ``lo`` (u32) | ``in_block`` (u32), where
``hi|lo`` is the 64-bit ``seq``. The 128 bits are left-padded with two zero bits to 130 bits and
written as 26 five-bit digits, so canonical strings sort lexicographically exactly like the
``(epoch, seq, in_block)`` tuples they encode.

Input rules (``decode_offset``):

* ``"-1"`` is the start-of-stream shorthand and decodes to ``START``.
* Otherwise exactly 26 characters from ``0-9 A-Z`` minus ``I L O U``, in either case
  (§5.2 "case-insensitive on input"). Output is always uppercase.
* Crockford's decode aliases (``I``/``L`` -> 1, ``O`` -> 0) are **rejected**: the server never
  emits them, and accepting them would give one offset many spellings (cache keys, ETags).
* The first character carries the two pad bits, so it must be ``0``-``7``.
* Decimal aliases (``0``, ``42``), signs, whitespace and empty input are rejected (§5.2).

This module is a codec only. Which ``seq`` names "before the first entry" is the storage
layer's choice: the reference server stores ``entry_seq + 1`` so that the all-zero string sorts
before every entry; ``-1`` never appears in responses (§5.2), only ``START`` on input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "OFFSET_LENGTH",
    "START",
    "U32_MAX",
    "U64_MAX",
    "Offset",
    "OffsetError",
    "StartOfStream",
    "decode_offset",
    "encode_offset",
]

OFFSET_LENGTH: Final = 26
U32_MAX: Final = 2**32 - 1
U64_MAX: Final = 2**64 - 1

_ALPHABET: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DECODE: Final[dict[str, int]] = {
    **{ch: i for i, ch in enumerate(_ALPHABET)},
    **{ch.lower(): i for i, ch in enumerate(_ALPHABET)},
}
_START_TEXT: Final = "-1"
_MAX_DECIMAL_DIGITS: Final = len(str(U64_MAX))  # longer digit runs read as mangled offsets


class OffsetError(ValueError):
    """An offset string or component is invalid; ``str(err)`` is a client-facing message."""


class StartOfStream:
    """The ``-1`` start-of-stream shorthand (singleton: use ``START``)."""

    _instance: StartOfStream | None = None

    def __new__(cls) -> StartOfStream:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "START"

    def __str__(self) -> str:
        return _START_TEXT


START: Final = StartOfStream()


def _check_uint(name: str, value: object, maximum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise OffsetError(f"{name} must be an integer, got {type(value).__name__}")
    if not 0 <= value <= maximum:
        raise OffsetError(f"{name} must be in 0..{maximum}, got {value}")
    return value


@dataclass(frozen=True, order=True, slots=True)
class Offset:
    """A decoded offset; ordering is by ``(epoch, seq, in_block)``, same as the encoded text."""

    epoch: int
    seq: int
    in_block: int = 0

    def __post_init__(self) -> None:
        _check_uint("epoch", self.epoch, U32_MAX)
        _check_uint("seq", self.seq, U64_MAX)
        _check_uint("in_block", self.in_block, U32_MAX)

    def encode(self) -> str:
        """The canonical 26-character uppercase form."""
        n = (self.epoch << 96) | (self.seq << 32) | self.in_block
        return "".join(_ALPHABET[(n >> (5 * i)) & 31] for i in range(OFFSET_LENGTH - 1, -1, -1))

    def __str__(self) -> str:
        return self.encode()


def encode_offset(epoch: int, seq: int, in_block: int = 0) -> str:
    """Encode ``(epoch u32, seq u64, in_block u32)``; raises ``OffsetError`` when out of range."""
    return Offset(epoch, seq, in_block).encode()


def decode_offset(text: str) -> Offset | StartOfStream:
    """Parse a client-supplied offset: ``"-1"`` gives ``START``, else a 26-char offset."""
    if not isinstance(text, str):
        raise OffsetError(f"offset must be a string, got {type(text).__name__}")
    if text == "":
        raise OffsetError("offset must not be empty; use -1 for the start of the stream")
    if text == _START_TEXT:
        return START
    if any(ch.isspace() for ch in text):
        raise OffsetError("offset must not contain whitespace")
    if len(text) != OFFSET_LENGTH:
        body = text[1:] if text[:1] in "+-" else text
        if body.isascii() and body.isdigit() and len(body) <= _MAX_DECIMAL_DIGITS:
            raise OffsetError(
                f"decimal offset {text!r} is not accepted; use -1 for the start of the stream "
                f"or a {OFFSET_LENGTH}-character offset from Stream-Next-Offset"
            )
        raise OffsetError(f"offset must be -1 or {OFFSET_LENGTH} characters long, got {len(text)}")
    n = 0
    for pos, ch in enumerate(text):
        digit = _DECODE.get(ch)
        if digit is None:
            raise OffsetError(
                f"offset has invalid character {ch!r} at position {pos}; "
                "expected Crockford base32 (0-9, A-Z without I, L, O, U)"
            )
        n = (n << 5) | digit
    if n >> 128:
        raise OffsetError(
            f"offset is out of range: the first character must be 0-7, got {text[0]!r}"
        )
    return Offset(n >> 96, (n >> 32) & U64_MAX, n & U32_MAX)


def boundary_seq(offset: str) -> int:
    """The seq a schema registry boundary's offset names (0: the start of the stream)."""
    off = decode_offset(offset)
    return off.seq if isinstance(off, Offset) else 0
