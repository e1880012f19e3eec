"""Constraint objects on watch/replay identifiers (headwater.notify.constraints). Cases marked
`aviso:` are ported from aviso-validators/src/constraints.rs in ecmwf/aviso-server."""

# ruff: noqa: E501 -- tables of aviso's exact error messages read best one case per line

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headwater.notify.constraints import EnumConstraint, NumericConstraint, parse_constraint
from headwater.notify.errors import FieldError
from headwater.notify.schema import FieldRule, Handler

pytestmark = pytest.mark.unit


def int_rule(bounds: tuple[int, int] | None = None) -> FieldRule:
    return FieldRule(name="severity", handler=Handler.INT, required=False, int_range=bounds)


def float_rule(bounds: tuple[float, float] | None = None) -> FieldRule:
    return FieldRule(name="temperature", handler=Handler.FLOAT, required=False, float_range=bounds)


LEVELS = FieldRule(
    name="alert_level", handler=Handler.ENUM, required=False, values=("low", "High", "critical")
)


def rejects(rule: FieldRule, value: Any) -> str:
    with pytest.raises(FieldError) as info:
        parse_constraint(rule, value)
    return info.value.message


def test_int_gte() -> None:  # aviso: int_constraint_parsing_and_matching_works
    c = parse_constraint(int_rule((1, 7)), {"gte": 4})
    assert isinstance(c, NumericConstraint)
    assert c.matches(4) and c.matches(7) and not c.matches(3)


@pytest.mark.parametrize(
    ("operator", "operand", "inside", "outside"),
    [
        ("eq", 4, [4], [3, 5]),
        ("in", [2, 4], [2, 4], [3, 5]),
        ("gt", 4, [5], [4, 3]),
        ("gte", 4, [4, 5], [3]),
        ("lt", 4, [3], [4, 5]),
        ("lte", 4, [3, 4], [5]),
        ("between", [2, 4], [2, 3, 4], [1, 5]),  # inclusive on both ends
    ],
)
def test_every_numeric_operator(
    operator: str, operand: Any, inside: list[int], outside: list[int]
) -> None:
    for rule in (int_rule(), float_rule()):
        c = parse_constraint(rule, {operator: operand})
        assert isinstance(c, NumericConstraint)
        assert all(c.matches_text(str(v)) for v in inside), (rule.handler, operator)
        assert not any(c.matches_text(str(v)) for v in outside), (rule.handler, operator)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"ge": 4}, "Field 'severity' has invalid operator 'ge'. Allowed: eq,in,gt,gte,lt,lte,between"),  # aviso: int_constraint_rejects_unknown_operator
        ({"gte": 9}, "Field 'severity' constraint value 9 is outside allowed range [1, 7]"),  # aviso: int_constraint_rejects_out_of_range_operand
        ({"between": [6, 2]}, "Field 'severity' operator 'between' expects min <= max"),  # aviso: int_between_requires_ordered_bounds
        ({"between": [0, 3]}, "Field 'severity' constraint value 0 is outside allowed range [1, 7]"),
        ({"in": [2, 8]}, "Field 'severity' constraint value 8 is outside allowed range [1, 7]"),
        ({"gte": 4, "lte": 6}, "Field 'severity' constraint must contain exactly one operator"),
        ({}, "Field 'severity' constraint must contain exactly one operator"),
        ({"gte": 4.5}, "Field 'severity' operator 'gte' expects integer value"),
        ({"gte": "4"}, "Field 'severity' operator 'gte' expects integer value"),
        ({"gte": True}, "Field 'severity' operator 'gte' expects integer value"),
        ({"eq": 2**63}, "Field 'severity' operator 'eq' expects integer value"),
        ({"in": 3}, "Field 'severity' operator 'in' expects array of integers"),
        ({"in": []}, "Field 'severity' operator 'in' must contain at least one value"),
        ({"in": [2, "x"]}, "Field 'severity' operator 'in' expects integer value"),
        ({"between": 3}, "Field 'severity' operator 'between' expects [min,max]"),
        ({"between": [1, 2, 3]}, "Field 'severity' operator 'between' expects exactly two values [min,max]"),
        ("gte 4", 'Field \'severity\' constraint must be an object (for example {"gte": 4})'),
    ],
)  # fmt: skip
def test_int_rejections(value: Any, message: str) -> None:
    assert rejects(int_rule((1, 7)), value) == message


def test_float_between_parses_and_matches() -> None:  # aviso: float_constraint_parses_and_matches
    c = parse_constraint(float_rule(), {"between": [10.5, 20.5]})
    assert isinstance(c, NumericConstraint)
    assert c.matches(15.0) and not c.matches(22.0)


def test_float_between_is_inclusive() -> None:  # aviso: float_between_is_inclusive
    c = parse_constraint(float_rule(), {"between": [10.5, 20.5]})
    assert isinstance(c, NumericConstraint)
    assert c.matches(10.5) and c.matches(20.5) and not c.matches(20.5000001)


def test_float_eq_and_in_are_exact() -> None:
    # aviso: float_eq_uses_exact_comparison, float_in_uses_exact_comparison
    eq = parse_constraint(float_rule(), {"eq": 0.3})
    member = parse_constraint(float_rule(), {"in": [0.3, 1.5]})
    for c in (eq, member):
        assert isinstance(c, NumericConstraint)
        assert c.matches(0.3) and not c.matches(0.1 + 0.2)


def test_float_never_matches_non_finite_values() -> None:
    # aviso: float_constraint_rejects_non_finite_notification_values
    c = parse_constraint(float_rule(), {"gt": 3.0})
    assert isinstance(c, NumericConstraint)
    assert not any(c.matches(v) for v in (float("nan"), float("inf"), float("-inf")))
    assert not c.matches_text("inf") and not c.matches_text("NaN")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"gt": 21.0}, "Field 'temperature' constraint value 21 is outside allowed range [10, 20]"),  # aviso: float_constraint_rejects_out_of_range_operand
        ({"gt": "x"}, "Field 'temperature' operator 'gt' expects numeric value"),
        ({"gt": float("nan")}, "Field 'temperature' operator 'gt' expects finite numeric value"),
        ({"lt": float("inf")}, "Field 'temperature' operator 'lt' expects finite numeric value"),
        ({"in": [12, float("-inf")]}, "Field 'temperature' operator 'in' expects finite numeric value"),
        ({"in": "12"}, "Field 'temperature' operator 'in' expects array of numbers"),
    ],
)  # fmt: skip
def test_float_rejections(value: Any, message: str) -> None:
    assert rejects(float_rule((10.0, 20.0)), value) == message


def test_float_accepts_integer_operands() -> None:
    c = parse_constraint(float_rule(), {"gte": 40})
    assert (
        isinstance(c, NumericConstraint) and c.matches_text("42.5") and not c.matches_text("12.5")
    )


def test_enum_in_is_case_insensitive() -> None:  # aviso: enum_constraint_in_works_case_insensitive
    c = parse_constraint(LEVELS, {"in": ["High", "Critical"]})
    assert isinstance(c, EnumConstraint)
    assert c.matches_text("high") and c.matches_text("CRITICAL") and not c.matches_text("low")


def test_enum_eq() -> None:
    c = parse_constraint(LEVELS, {"eq": "LOW"})
    assert isinstance(c, EnumConstraint) and c.values == ("low",) and c.matches_text("low")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"in": ["high", "urgent"]}, "Field 'alert_level' has invalid enum value 'urgent'. Allowed: [low, high, critical]"),  # aviso: enum_constraint_rejects_invalid_members
        ({"gte": "high"}, "Field 'alert_level' has invalid operator 'gte'. Allowed for enum constraints: eq,in"),
        ({"eq": 1}, "Field 'alert_level' operator 'eq' expects string value"),
        ({"in": []}, "Field 'alert_level' operator 'in' must contain at least one value"),
        ({"in": "high"}, "Field 'alert_level' operator 'in' expects array of strings"),
    ],
)  # fmt: skip
def test_enum_rejections(value: Any, message: str) -> None:
    assert rejects(LEVELS, value) == message


@pytest.mark.parametrize(
    "handler", [Handler.STRING, Handler.DATE, Handler.TIME, Handler.EXPVER, Handler.POLYGON]
)
def test_other_handlers_take_no_constraints(handler: Handler) -> None:  # fmt: skip
    rule = FieldRule(name="f", handler=handler, required=False)
    assert rejects(rule, {"eq": "x"}) == (
        "Field 'f' does not support constraint filters; expected scalar value"
    )


@given(st.integers(-1000, 1000), st.integers(-1000, 1000), st.integers(-1000, 1000))
def test_between_agrees_with_gte_and_lte(low: int, high: int, value: int) -> None:
    if low > high:
        low, high = high, low
    between = parse_constraint(int_rule(), {"between": [low, high]})
    gte = parse_constraint(int_rule(), {"gte": low})
    lte = parse_constraint(int_rule(), {"lte": high})
    assert isinstance(between, NumericConstraint)
    assert isinstance(gte, NumericConstraint) and isinstance(lte, NumericConstraint)
    assert between.matches(value) == (gte.matches(value) and lte.matches(value))
