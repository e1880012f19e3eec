"""Constraint objects on watch/replay identifiers: `{"gte": 4}`, `{"in": ["north"]}`, ...

Int and Float fields take eq, in, gt, gte, lt, lte, between; Enum fields take eq and in. One
operator per object, operands inside the handler's range, `between` inclusive with min <= max,
floats finite and compared exactly. Wording of every rejection is aviso's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from headwater.notify.errors import FieldError
from headwater.notify.numbers import (
    I64_MAX,
    I64_MIN,
    RustParseError,
    parse_rust_f64,
    parse_rust_int,
    rust_display_f64,
)
from headwater.notify.schema import FieldRule, Handler

NUMERIC_OPERATORS = ("eq", "in", "gt", "gte", "lt", "lte", "between")
ENUM_OPERATORS = ("eq", "in")


@dataclass(frozen=True, slots=True)
class NumericConstraint:
    """`operands` holds one value (eq, gt, gte, lt, lte), the `in` list, or `between`'s pair."""

    field: str
    operator: str
    operands: tuple[float, ...]
    integer: bool

    def matches(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        first = self.operands[0]
        match self.operator:
            case "eq":
                return value == first
            case "in":
                return value in self.operands
            case "gt":
                return value > first
            case "gte":
                return value >= first
            case "lt":
                return value < first
            case "lte":
                return value <= first
            case _:
                return first <= value <= self.operands[1]

    def matches_text(self, stored: str) -> bool:
        """Test a stored canonical value; a value that does not parse never matches."""
        try:
            value: float = parse_rust_int(stored) if self.integer else parse_rust_f64(stored)
        except RustParseError:
            return False
        return self.matches(value)


@dataclass(frozen=True, slots=True)
class EnumConstraint:
    field: str
    operator: str
    values: tuple[str, ...]

    def matches_text(self, stored: str) -> bool:
        return stored.lower() in self.values


Constraint = NumericConstraint | EnumConstraint


def parse_constraint(rule: FieldRule, value: Any) -> Constraint:
    """A constraint object for `rule`'s field, or FieldError."""
    name = rule.name
    if rule.handler is Handler.INT:
        return _numeric(name, value, integer=True, bounds=rule.int_range)
    if rule.handler is Handler.FLOAT:
        return _numeric(name, value, integer=False, bounds=rule.float_range)
    if rule.handler is Handler.ENUM:
        return _enum(name, value, rule.values)
    raise FieldError(f"Field '{name}' does not support constraint filters; expected scalar value")


def _single_operator(name: str, value: Any) -> tuple[str, Any]:
    if not isinstance(value, dict):
        raise FieldError(
            f"Field '{name}' constraint must be an object (for example {{\"gte\": 4}})"
        )
    if len(value) != 1:
        raise FieldError(f"Field '{name}' constraint must contain exactly one operator")
    ((operator, operand),) = value.items()
    return str(operator), operand


def _int_operand(name: str, operator: str, value: Any) -> int:
    # serde_json's as_i64: integers that fit i64; never booleans, floats or strings
    if isinstance(value, int) and not isinstance(value, bool) and I64_MIN <= value <= I64_MAX:
        return value
    raise FieldError(f"Field '{name}' operator '{operator}' expects integer value")


def _float_operand(name: str, operator: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FieldError(f"Field '{name}' operator '{operator}' expects numeric value")
    number = float(value)
    if not math.isfinite(number):
        raise FieldError(f"Field '{name}' operator '{operator}' expects finite numeric value")
    return number


def _operand_list(name: str, operator: str, value: Any, kind: str) -> list[Any]:
    if not isinstance(value, list):
        raise FieldError(f"Field '{name}' operator '{operator}' expects array of {kind}")
    if not value:
        raise FieldError(f"Field '{name}' operator '{operator}' must contain at least one value")
    return value


def _numeric(
    name: str, value: Any, *, integer: bool, bounds: tuple[int, int] | tuple[float, float] | None
) -> NumericConstraint:
    operator, operand = _single_operator(name, value)
    one = _int_operand if integer else _float_operand
    operands: tuple[float, ...]
    if operator in ("eq", "gt", "gte", "lt", "lte"):
        operands = (one(name, operator, operand),)
    elif operator == "in":
        kind = "integers" if integer else "numbers"
        operands = tuple(
            one(name, operator, v) for v in _operand_list(name, operator, operand, kind)
        )
    elif operator == "between":
        if not isinstance(operand, list):
            raise FieldError(f"Field '{name}' operator '{operator}' expects [min,max]")
        if len(operand) != 2:
            raise FieldError(
                f"Field '{name}' operator '{operator}' expects exactly two values [min,max]"
            )
        low, high = one(name, operator, operand[0]), one(name, operator, operand[1])
        if low > high:
            raise FieldError(f"Field '{name}' operator '{operator}' expects min <= max")
        operands = (low, high)
    else:
        raise FieldError(
            f"Field '{name}' has invalid operator '{operator}'. "
            "Allowed: eq,in,gt,gte,lt,lte,between"
        )
    if bounds is not None:
        low_bound, high_bound = bounds
        for operand_value in operands:
            if not low_bound <= operand_value <= high_bound:
                raise FieldError(
                    f"Field '{name}' constraint value {_number(operand_value, integer)} is "
                    f"outside allowed range [{_number(low_bound, integer)}, "
                    f"{_number(high_bound, integer)}]"
                )
    return NumericConstraint(field=name, operator=operator, operands=operands, integer=integer)


def _number(value: float, integer: bool) -> str:
    return str(int(value)) if integer else rust_display_f64(value)


def _enum_operand(name: str, operator: str, value: Any) -> str:
    if not isinstance(value, str):
        raise FieldError(f"Field '{name}' operator '{operator}' expects string value")
    return value.lower()


def _enum(name: str, value: Any, allowed: tuple[str, ...]) -> EnumConstraint:
    operator, operand = _single_operator(name, value)
    normalized = [option.lower() for option in allowed]
    values: tuple[str, ...]
    if operator == "eq":
        values = (_enum_operand(name, operator, operand),)
    elif operator == "in":
        values = tuple(
            _enum_operand(name, operator, v)
            for v in _operand_list(name, operator, operand, "strings")
        )
    else:
        raise FieldError(
            f"Field '{name}' has invalid operator '{operator}'. Allowed for enum constraints: eq,in"
        )
    for member in values:
        if member not in normalized:
            raise FieldError(
                f"Field '{name}' has invalid enum value '{member}'. "
                f"Allowed: [{', '.join(normalized)}]"
            )
    return EnumConstraint(field=name, operator=operator, values=values)
