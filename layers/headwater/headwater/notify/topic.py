"""aviso's topic subjects: `base.value1.value2...` with `.`, `*`, `>` and `%` percent-encoded
in each token (so `1.45` becomes `1%2E45`); watch/replay wildcards are the token `*`."""

from __future__ import annotations

from collections.abc import Mapping

WILDCARD = "*"
_RESERVED = {".": "%2E", "*": "%2A", ">": "%3E", "%": "%25"}
_HEX = "0123456789abcdefABCDEF"


class TopicDecodeError(ValueError):
    pass


def encode_token(token: str) -> str:
    return "".join(_RESERVED.get(ch, ch) for ch in token)


def decode_token(token: str) -> str:
    """Strict single-pass decode: a malformed `%HH` is an error, never passed through."""
    raw = token.encode("utf-8")
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i] == 0x25:  # '%'
            if i + 2 >= len(raw):
                raise TopicDecodeError(f"Invalid percent-encoding: trailing '%' in token '{token}'")
            pair = raw[i + 1 : i + 3].decode("latin-1")
            for ch in pair:
                if ch not in _HEX:
                    raise TopicDecodeError(
                        f"Invalid percent-encoding: non-hex '{ch}' in token '{token}'"
                    )
            out.append(int(pair, 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TopicDecodeError(f"Decoded token is not valid UTF-8 ('{token}'): {exc}") from exc


def encode_subject(parts: list[str]) -> str:
    return ".".join(encode_token(part) for part in parts)


def decode_subject(subject: str) -> list[str]:
    return [decode_token(part) for part in subject.split(".")]


def display_topic(subject: str) -> str:
    """The logical topic aviso logs and puts in error bodies (the wire subject if malformed)."""
    try:
        return ".".join(decode_subject(subject))
    except TopicDecodeError:
        return subject


def build_topic(base: str, key_order: tuple[str, ...], values: Mapping[str, str]) -> str:
    """Wire subject from `base` and the values of `key_order` (use `*` for a wildcard)."""
    missing = [key for key in key_order if key not in values]
    if missing:
        raise KeyError(f"Missing key '{missing[0]}' for topic building")
    return encode_subject([base, *(values[key] for key in key_order)])
