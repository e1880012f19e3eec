"""The ``filter=`` predicate language of filtered reads (protocol §4.1, §8.5).

A filter is evaluated against the decoded JSON value of each entry, using only the fields
declared in the stream's schema ``search.fields`` (§4.1, §12; field shape as in the reference
``schemas.md``: ``kind``, per-schema-version ``bindings`` of ``jsonPointer``, capability bits).

Grammar (keywords ``AND``/``OR``/``NOT`` are case-insensitive; field names are case-sensitive)::

    expr    := and ( OR and )*
    and     := unary ( [AND] unary )*          -- juxtaposition is an implicit AND
    unary   := ( NOT | "-" ) unary | primary   -- "-x" is shorthand for "NOT x"
    primary := "(" expr ")" | "has:" FIELD | FIELD ":" [ ">=" | ">" | "<=" | "<" | "=" ] VALUE
    VALUE   := bare | '"' chars '"'            -- inside quotes only \\" and \\\\ are escapes

Precedence is ``NOT`` > ``AND`` > ``OR``. A bare value runs to the next whitespace or
parenthesis, so ``ts:>=2024-01-01T00:00:00Z`` and ``n:-5`` need no quotes; values containing
whitespace, parentheses or a double quote, or starting with ``>``, ``<`` or ``=``, must be quoted.
``field:=v`` is accepted as an explicit spelling of ``field:v`` (reference parity).

Typing follows the reference server (``src/read_filter.ts``, ``src/search/schema.ts``):

* ``keyword``: equality only, string values only, ``lowercase_v1`` normalizer applied to both
  sides. ``bool``: equality with ``true``/``false``. ``integer``, ``float``, ``date``: equality and
  range comparisons. ``date`` values are RFC 3339 timestamps with a zone, ``YYYY-MM-DD`` (UTC
  midnight) or integer epoch milliseconds, compared as epoch milliseconds.
* ``text`` fields only support ``has:`` (full-text matching belongs to ``_search``).
* Capability bits gate clauses: ``has:`` needs ``exists``, ``exact`` or ``column``; equality needs
  ``exact`` or ``column``; range comparisons need ``column``.
* A JSON array value is flattened (recursively); a clause matches if any element matches. Values
  of the wrong JSON type are ignored, so ``has:f`` is true only if at least one usable value is
  present. A missing field never satisfies a clause (so ``-f:x`` matches documents without ``f``).

Caps: ``MAX_FILTER_LENGTH`` (4096) characters, ``MAX_FILTER_CLAUSES`` (64) field clauses and
``MAX_FILTER_DEPTH`` (32) nested parentheses / negations. Positions in ``FilterError`` messages
are 0-based character indexes. ``has:`` is always the existence test, so a field literally
named ``has`` can only appear as ``has:has``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, cast

from headwater.durable.fields import (
    RANGE_KINDS,
    FieldSpec,
    FilterError,
    query_value,
)
from headwater.durable.predicates import (
    And,
    Compare,
    CompareOp,
    Has,
    Not,
    Or,
    Predicate,
    Prefix,
    Text,
    TextTarget,
    analyze,
)

__all__ = [
    "MAX_FILTER_CLAUSES",
    "MAX_FILTER_DEPTH",
    "MAX_FILTER_LENGTH",
    "And",
    "Compare",
    "CompareOp",
    "FilterError",
    "Has",
    "Not",
    "Or",
    "Predicate",
    "Prefix",
    "Text",
    "TextTarget",
    "analyze",
    "parse_filter",
    "parse_query",
]

MAX_FILTER_LENGTH: Final = 4096
MAX_FILTER_CLAUSES: Final = 64
MAX_FILTER_DEPTH: Final = 32


_SYMBOL_OP: Final[dict[str, CompareOp]] = {
    ">": "gt",
    ">=": "gte",
    "<": "lt",
    "<=": "lte",
    "=": "eq",
}


# --------------------------------------------------------------------------- lexer


@dataclass(frozen=True, slots=True)
class _Token:
    kind: Literal["(", ")", "NOT", "AND", "OR", "has", "clause", "term"]
    pos: int
    field: str = ""
    op: CompareOp = "eq"
    value: str = ""
    quoted: bool = False


_WORD_STOP: Final = frozenset('():"')
_VALUE_STOP: Final = frozenset("()")


def _run(text: str, start: int, stop: frozenset[str]) -> int:
    end = start
    while end < len(text) and not text[end].isspace() and text[end] not in stop:
        end += 1
    return end


def _quoted(text: str, start: int) -> tuple[str, int]:
    """Parse a quoted value starting at ``text[start] == '"'``; return (value, end)."""
    out: list[str] = []
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = i + 1
            if end < len(text) and not text[end].isspace() and text[end] not in "()":
                raise FilterError(
                    f"expected whitespace or ')' after closing quote at position {end}"
                )
            return "".join(out), end
        if ch == "\\":
            nxt = text[i + 1] if i + 1 < len(text) else ""
            if nxt not in ('"', "\\"):
                raise FilterError(
                    f'invalid escape at position {i}; only \\" and \\\\ are allowed in quotes'
                )
            out.append(nxt)
            i += 2
            continue
        out.append(ch)
        i += 1
    raise FilterError(f"unterminated quoted value starting at position {start}")


def _tokenize(text: str, search: bool = False) -> list[_Token]:
    """Tokens of ``text``; ``search`` admits bare terms and quoted phrases (``q=``)."""
    tokens: list[_Token] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "()":
            tokens.append(_Token(cast(Literal["(", ")"], ch), i))
            i += 1
        elif ch == "-":
            tokens.append(_Token("NOT", i))
            i += 1
        elif ch == '"':
            if not search:
                raise FilterError(
                    f"unexpected quoted text at position {i}; filter clauses are field:value "
                    "(bare terms are not supported)"
                )
            _count_clause(tokens)
            value, end = _quoted(text, i)
            tokens.append(_Token("term", i, value=value, quoted=True))
            i = end
        else:
            end = _run(text, i, _WORD_STOP)
            word = text[i:end]
            if end < len(text) and text[end] == ":":
                _count_clause(tokens)
                token, end = _clause(text, i, word, end + 1)
                tokens.append(token)
            elif word.upper() in ("AND", "OR", "NOT"):
                tokens.append(_Token(cast(Literal["AND", "OR", "NOT"], word.upper()), i))
            elif word and search:
                _count_clause(tokens)
                tokens.append(_Token("term", i, value=word))
            elif word:
                raise FilterError(
                    f"expected field:value, has:field, AND, OR, NOT or '(' at position {i}, "
                    f"got {word!r} (bare terms are not supported)"
                )
            else:
                raise FilterError(f"missing field name before ':' at position {i}")
            i = end
    return tokens


def _count_clause(tokens: list[_Token]) -> None:
    if sum(t.kind in ("clause", "has", "term") for t in tokens) >= MAX_FILTER_CLAUSES:
        raise FilterError(f"filter has more than {MAX_FILTER_CLAUSES} clauses")


def _clause(text: str, start: int, field: str, i: int) -> tuple[_Token, int]:
    """Lex the part after ``field:`` (``i`` points just past the colon)."""
    if not field:
        raise FilterError(f"missing field name before ':' at position {start}")
    if field == "has":
        end = _run(text, i, frozenset('()"'))
        if end == i:
            raise FilterError(f"has: at position {start} requires a field name")
        return _Token("has", start, field=text[i:end]), end
    op: CompareOp = "eq"
    for symbol in (">=", "<=", ">", "<", "="):
        if text.startswith(symbol, i):
            op, i = _SYMBOL_OP[symbol], i + len(symbol)
            break
    quoted = i < len(text) and text[i] == '"'
    if quoted:
        value, end = _quoted(text, i)
    else:
        end = _run(text, i, _VALUE_STOP)
        value = text[i:end]
        if not value:
            raise FilterError(f"missing value after '{text[start:i]}' at position {i}")
        if '"' in value:
            at = i + value.index('"')
            raise FilterError(f"unexpected '\"' at position {at}; quote the whole value")
    return _Token("clause", start, field=field, op=op, value=value, quoted=quoted), end


# --------------------------------------------------------------------------- parser


class _Parser:
    def __init__(
        self,
        tokens: list[_Token],
        fields: Mapping[str, FieldSpec],
        search: Mapping[str, object] | None = None,
    ) -> None:
        self.tokens = tokens
        self.fields = fields
        self.search = search  # None: the filter= language; else the search config (q=)
        self.pos = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def parse(self) -> Predicate:
        expr = self.parse_or(0)
        tok = self.peek()
        if tok is not None:
            raise FilterError(f"unexpected ')' at position {tok.pos} (no matching '(')")
        return expr

    def parse_or(self, depth: int) -> Predicate:
        children = [self.parse_and(depth)]
        while (tok := self.peek()) is not None and tok.kind == "OR":
            self.pos += 1
            children.append(self.parse_and(depth))
        return children[0] if len(children) == 1 else Or(tuple(children))

    def parse_and(self, depth: int) -> Predicate:
        children = [self.parse_unary(depth)]
        while (tok := self.peek()) is not None and tok.kind not in (")", "OR"):
            if tok.kind == "AND":
                self.pos += 1
            children.append(self.parse_unary(depth))
        return children[0] if len(children) == 1 else And(tuple(children))

    def parse_unary(self, depth: int) -> Predicate:
        tok = self.peek()
        if tok is not None and tok.kind == "NOT":
            self.pos += 1
            return Not(self.parse_unary(self.deeper(depth, tok)))
        return self.parse_primary(depth)

    def deeper(self, depth: int, tok: _Token) -> int:
        if depth >= MAX_FILTER_DEPTH:
            raise FilterError(
                f"filter nests parentheses/negations deeper than {MAX_FILTER_DEPTH} levels "
                f"(at position {tok.pos})"
            )
        return depth + 1

    def parse_primary(self, depth: int) -> Predicate:
        tok = self.peek()
        if tok is None:
            after = f" after {self.tokens[-1].kind}" if self.tokens else ""
            raise FilterError(f"expected a clause{after} at end of filter")
        self.pos += 1
        if tok.kind == "(":
            inner_depth = self.deeper(depth, tok)
            nxt = self.peek()
            if nxt is not None and nxt.kind == ")":
                raise FilterError(f"empty parentheses at position {tok.pos}")
            expr = self.parse_or(inner_depth)
            close = self.peek()
            if close is None or close.kind != ")":
                raise FilterError(f"missing ')' for '(' at position {tok.pos}")
            self.pos += 1
            return expr
        if tok.kind in ("has", "clause"):
            return self.compile(tok)
        if tok.kind == "term":
            return self.compile_term(tok)
        raise FilterError(f"unexpected {tok.kind} at position {tok.pos}; expected a clause")

    def lookup(self, name: str, pos: int) -> FieldSpec:
        spec = self.fields.get(name)
        if spec is None:
            known = ", ".join(sorted(self.fields)[:20]) or "(none)"
            raise FilterError(
                f"unknown filter field {name!r} at position {pos}; "
                f"filters may only use search.fields: {known}"
            )
        return spec

    def compile(self, tok: _Token) -> Predicate:
        spec = self.lookup(tok.field, tok.pos)
        name = tok.field
        if self.search is not None and tok.kind == "clause":
            found = self.compile_search(tok, spec)
            if found is not None:
                return found
        if tok.kind == "has":
            text_ok = self.search is not None and spec.kind == "text"
            if not (spec.exists or spec.exact or spec.column or text_ok):
                raise FilterError(
                    f"field {name!r} does not support has: (needs exists, exact or column)"
                )
            return Has(spec)
        if spec.kind == "text":
            raise FilterError(
                f"field {name!r} is a text field; filters support only has:{name} on text "
                "fields (use _search for full-text queries)"
            )
        if tok.op != "eq":
            if spec.kind not in RANGE_KINDS:
                raise FilterError(
                    f"field {name!r} is a {spec.kind} field; comparisons (>, >=, <, <=) are only "
                    "supported on integer, float and date fields"
                )
            if not spec.column:
                raise FilterError(f"field {name!r} does not support comparisons (needs column)")
        elif not (spec.exact or spec.column):
            raise FilterError(f"field {name!r} does not support equality (needs exact or column)")
        return Compare(spec, tok.op, query_value(spec, tok.value))

    def compile_search(self, tok: _Token, spec: FieldSpec) -> Predicate | None:
        """The ``q=`` forms beyond ``filter=``: keyword prefixes and text clauses (None: the
        clause is compiled as in a filter)."""
        name, value = tok.field, tok.value
        star = not tok.quoted and len(value) > 1 and value.endswith("*")
        if spec.kind == "keyword" and star and tok.op == "eq":
            if not spec.prefix:
                raise FilterError(f"field {name!r} does not support prefix queries (needs prefix)")
            return Prefix(spec, str(query_value(spec, value[:-1])))
        if spec.kind != "text":
            return None
        if tok.op != "eq":
            raise FilterError(f"field {name!r} is a text field; comparisons are not supported")
        return self.text([(spec, 1.0)], value, tok.quoted, tok.pos)

    def compile_term(self, tok: _Token) -> Predicate:
        """A bare term or quoted phrase: a text clause over ``search.defaultFields`` (every
        text field when none are listed)."""
        assert self.search is not None  # the filter tokenizer never makes terms
        targets: list[tuple[FieldSpec, float]] = []
        defaults = self.search.get("defaultFields") or []
        if isinstance(defaults, list) and defaults:
            for item in defaults:
                if isinstance(item, Mapping) and item.get("field") in self.fields:
                    boost = item.get("boost", 1)
                    targets.append((self.fields[str(item["field"])], float(cast(float, boost))))
        else:
            targets = [(s, 1.0) for n, s in self.fields.items() if s.kind == "text" and s.name == n]
        targets = [(s, b) for s, b in targets if s.kind in ("text", "keyword")]
        if not targets:
            raise FilterError(
                f"bare term at position {tok.pos} needs search.defaultFields (or a text field) "
                "to search; use field:value"
            )
        return self.text(targets, tok.value, tok.quoted, tok.pos)

    def text(
        self, fields: list[tuple[FieldSpec, float]], value: str, quoted: bool, pos: int
    ) -> Predicate:
        prefix = len(value) > 1 and value.endswith("*")
        body = value[:-1] if prefix else value
        targets: list[TextTarget] = []
        for spec, boost in fields:
            tokens: tuple[str, ...]
            if spec.kind == "keyword":
                tokens = (str(query_value(spec, body.strip())),) if body.strip() else ()
            else:
                tokens = tuple(analyze(body))
                if quoted and len(tokens) > 1 and not spec.positions:
                    raise FilterError(
                        f"phrase at position {pos} on field {spec.name!r}, which does not "
                        "support phrases (needs positions)"
                    )
            if tokens:
                targets.append(TextTarget(spec, tokens, boost))
        if not targets:
            raise FilterError(f"text at position {pos} has no searchable words")
        return Text(tuple(targets), phrase=quoted, prefix=prefix, raw=body)


def parse_query(
    text: str, fields: Mapping[str, FieldSpec], search: Mapping[str, object]
) -> Predicate:
    """Parse a ``_search`` / ``_aggregate`` ``q`` (docs/durable-streams.md, "Search"): the
    ``filter=`` language plus bare terms and quoted phrases over ``search.defaultFields``,
    ``field:words`` and ``field:"a phrase"`` on text fields (phrases need ``positions``),
    and ``field:value*`` prefixes on keyword fields with ``prefix``. Raises ``FilterError``."""
    if not isinstance(text, str):
        raise FilterError(f"q must be a string, got {type(text).__name__}")
    if len(text) > MAX_FILTER_LENGTH:
        raise FilterError(f"q is longer than {MAX_FILTER_LENGTH} characters")
    if not text.strip():
        raise FilterError("q must not be empty")
    return _Parser(_tokenize(text, search=True), fields, search).parse()


def parse_filter(text: str, fields: Mapping[str, FieldSpec]) -> Predicate:
    """Parse and type-check ``text`` against ``fields``; raises ``FilterError``."""
    if not isinstance(text, str):
        raise FilterError(f"filter must be a string, got {type(text).__name__}")
    if len(text) > MAX_FILTER_LENGTH:
        raise FilterError(f"filter is longer than {MAX_FILTER_LENGTH} characters")
    if not text.strip():
        raise FilterError("filter must not be empty")
    return _Parser(_tokenize(text), fields).parse()
