"""The predicates a filter or a ``_search`` query compiles to (``And``, ``Or``, ``Not``,
``Has``, ``Compare``, ``Prefix``, ``Text``): each matches a decoded entry through the
stream's typed fields (fields.py), and text predicates score it."""

from __future__ import annotations

import operator
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from headwater.durable.fields import (
    FieldSpec,
    Scalar,
)

CompareOp: TypeAlias = Literal["eq", "gt", "gte", "lt", "lte"]
_OP_SYMBOL: Final[dict[CompareOp, str]] = {"eq": "", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_OPS: Final[dict[CompareOp, Callable[[Scalar, Scalar], bool]]] = {
    "eq": operator.eq,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}


class Predicate(ABC):
    """A compiled filter. ``str(p)`` is a canonical, fully parenthesised filter text."""

    __slots__ = ()

    @abstractmethod
    def matches(self, doc: object, *, version: int | None = None) -> bool:
        """Whether a decoded JSON ``doc`` (of schema ``version``; newest if None) matches."""

    def evaluate(self, doc: object, *, version: int | None = None) -> tuple[bool, float]:
        """(matches, score): only text clauses score (``_search``); everything else is 0."""
        return self.matches(doc, version=version), 0.0


@dataclass(frozen=True, slots=True)
class And(Predicate):
    children: tuple[Predicate, ...]

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        return all(c.matches(doc, version=version) for c in self.children)

    def evaluate(self, doc: object, *, version: int | None = None) -> tuple[bool, float]:
        total = 0.0
        for c in self.children:
            ok, score = c.evaluate(doc, version=version)
            if not ok:
                return False, 0.0
            total += score
        return True, total

    def __str__(self) -> str:
        return "(" + " AND ".join(map(str, self.children)) + ")"


@dataclass(frozen=True, slots=True)
class Or(Predicate):
    children: tuple[Predicate, ...]

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        return any(c.matches(doc, version=version) for c in self.children)

    def evaluate(self, doc: object, *, version: int | None = None) -> tuple[bool, float]:
        results = [c.evaluate(doc, version=version) for c in self.children]
        return any(ok for ok, _ in results), sum(score for ok, score in results if ok)

    def __str__(self) -> str:
        return "(" + " OR ".join(map(str, self.children)) + ")"


@dataclass(frozen=True, slots=True)
class Not(Predicate):
    child: Predicate

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        return not self.child.matches(doc, version=version)

    def __str__(self) -> str:
        return f"NOT {self.child}"


@dataclass(frozen=True, slots=True)
class Has(Predicate):
    field: FieldSpec

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        return bool(self.field.values(doc, version))

    def __str__(self) -> str:
        return f"has:{self.field.name}"


@dataclass(frozen=True, slots=True)
class Compare(Predicate):
    field: FieldSpec
    op: CompareOp
    value: Scalar

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        test = _OPS[self.op]
        return any(test(v, self.value) for v in self.field.values(doc, version))

    def __str__(self) -> str:
        value = self.value
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float):
            text = repr(value)
        elif isinstance(value, int):
            text = str(value)
        else:
            text = _quote_if_needed(value)
        return f"{self.field.name}:{_OP_SYMBOL[self.op]}{text}"


_WORD_RE: Final = re.compile(r"[^\W_]+")


def analyze(text: str) -> list[str]:
    """The ``unicode_word_v1`` analyzer: lowercase, then the maximal runs of Unicode letters
    and digits (categories L* and N*; everything else, ``_`` included, separates tokens)."""
    return _WORD_RE.findall(text.lower())


@dataclass(frozen=True, slots=True)
class Prefix(Predicate):
    """``field:value*`` on a keyword field with ``prefix: true`` (normalized like equality)."""

    field: FieldSpec
    value: str

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        return any(
            isinstance(v, str) and v.startswith(self.value) for v in self.field.values(doc, version)
        )

    def __str__(self) -> str:
        return f"{self.field.name}:{_quote_if_needed(self.value)}*"


@dataclass(frozen=True, slots=True)
class TextTarget:
    """One field a text clause searches, with its query tokens and ``defaultFields`` boost.
    A keyword target has one token (the whole normalized value); a text target the
    analyzer's tokens of the clause."""

    field: FieldSpec
    tokens: tuple[str, ...]
    boost: float = 1.0


@dataclass(frozen=True, slots=True)
class Text(Predicate):
    """A full-text clause (``_search`` only): a bare term or phrase over
    ``search.defaultFields``, or ``field:words`` / ``field:"a phrase"`` on a text field.

    On a text target: a phrase matches consecutive tokens; otherwise every query token must
    occur. With a trailing ``*`` the last query token matches as a token prefix. On a keyword
    target the normalized value is compared whole (or as a prefix). The score follows the
    reference: per target (occurrences of the query tokens + 2 per token for a phrase) times
    the boost, the best target counting; AND and OR add the scores of matching children."""

    targets: tuple[TextTarget, ...]
    phrase: bool = False
    prefix: bool = False
    raw: str = ""

    def matches(self, doc: object, *, version: int | None = None) -> bool:
        return self.evaluate(doc, version=version)[0]

    def evaluate(self, doc: object, *, version: int | None = None) -> tuple[bool, float]:
        matched, best = False, 0.0
        for t in self.targets:
            for value in t.field.values(doc, version):
                if not isinstance(value, str):
                    continue
                if t.field.kind == "keyword":
                    want = t.tokens[0]
                    if value.startswith(want) if self.prefix else value == want:
                        matched, best = True, max(best, t.boost)
                    continue
                score = _text_score(analyze(value), t.tokens, self.phrase, self.prefix)
                if score is not None:
                    matched, best = True, max(best, score * t.boost)
        return matched, best

    def __str__(self) -> str:
        body = '"' + self.raw.replace("\\", "\\\\").replace('"', '\\"') + '"'
        names = ",".join(t.field.name for t in self.targets)
        return f"text[{names}]:{body}{'*' if self.prefix else ''}"


def _token_hit(doc_token: str, want: str, prefix: bool) -> bool:
    return doc_token.startswith(want) if prefix else doc_token == want


def _text_score(doc: list[str], query: tuple[str, ...], phrase: bool, prefix: bool) -> float | None:
    """Score of one analyzed value against the query tokens, None when it does not match."""
    last = len(query) - 1
    if phrase:
        ok = any(
            all(_token_hit(doc[start + i], q, prefix and i == last) for i, q in enumerate(query))
            for start in range(len(doc) - len(query) + 1)
        )
    else:
        ok = all(
            any(_token_hit(d, q, prefix and i == last) for d in doc) for i, q in enumerate(query)
        )
    if not ok:
        return None
    hits = sum(
        sum(1 for d in doc if _token_hit(d, q, prefix and i == last)) for i, q in enumerate(query)
    )
    return float(hits + (2 * len(query) if phrase else 0))


def _quote_if_needed(value: str) -> str:
    if value and not re.search(r'[\s()"]', value) and value[0] not in "<>=":
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
