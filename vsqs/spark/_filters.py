"""Filters that Spark pushes down to a ``vsqs`` read, judged on names alone.

Every column but ``body``, ``group`` and ``attributes`` is known from a
message's name, so a pushed filter on ``id``, ``sent_at``, ``state``,
``receive_count`` or ``visible_at`` drops messages on the driver, before any
body is read. A part of a bundle names its messages' state, not their ids
(the bundle holds them), so the driver judges it by the columns its
messages share and keeps it for the others. Executors apply every filter
again to each message, under the name it is read under (it may have moved
since the listing), so every row returned satisfies them: Spark need not.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from .. import _names as names

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)
#: Filters compared with a literal, by the operator name a :class:`Test` keeps.
_COMPARE: dict[type[Filter], str] = {
    EqualTo: "eq",
    GreaterThan: "gt",
    GreaterThanOrEqual: "ge",
    LessThan: "lt",
    LessThanOrEqual: "le",
}
#: Columns a name gives.
COLUMNS = ("id", "sent_at", "state", "receive_count", "visible_at")


def values(parsed: names.Name, now_ms: int, message_id: str) -> dict[str, Any]:
    """The columns of message ``message_id`` under the name ``parsed`` (its
    own, or its part's) that the name and the id give (timestamps in µs since 1970)."""
    sent = names.id_ms(message_id)
    expiry = sent if parsed.expiry_ms is None else parsed.expiry_ms
    return {
        "id": message_id,
        "sent_at": sent * 1000,
        "state": names.visibility(parsed, now_ms),
        "receive_count": parsed.receive_count,
        "visible_at": expiry * 1000,
    }


def _literal(column: str, value: object) -> object:
    """A filter's literal as :func:`values` spells the column; ``None`` if it cannot match."""
    if column in ("sent_at", "visible_at"):
        if not isinstance(value, dt.datetime):
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return (value - _EPOCH) // _US
    if column == "receive_count":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Test:
    """One pushed filter, as plain data (picklable): ``column <op> operand``,
    negated if ``negate``. ``op`` is an :mod:`operator` name, ``"in"``,
    ``"startswith"`` or ``"always"`` (the operand is the outcome)."""

    column: str
    op: str
    operand: Any
    negate: bool = False

    def passes(self, value: Any) -> bool:
        if self.op == "always":
            outcome = bool(self.operand)
        elif self.op == "in":
            outcome = value in self.operand
        elif self.op == "startswith":
            outcome = value.startswith(self.operand)
        else:
            outcome = getattr(operator, self.op)(value, self.operand)
        return outcome != self.negate


def _test(pushed: Filter) -> Test | None:
    """The test of a filter vsqs can judge from names; ``None`` for the others."""
    negate = isinstance(pushed, Not)
    inner = pushed.child if isinstance(pushed, Not) else pushed
    attribute: tuple[str, ...] = getattr(inner, "attribute", ())
    column = attribute[0] if len(attribute) == 1 else ""
    if column not in COLUMNS:
        return None
    if isinstance(inner, IsNotNull | IsNull):  # no column of a message is ever null
        return Test(column, "always", isinstance(inner, IsNotNull), negate)
    if type(inner) in _COMPARE:
        literal = _literal(column, inner.value)  # type: ignore[attr-defined]
        if literal is None:
            return None
        return Test(column, _COMPARE[type(inner)], literal, negate)
    if isinstance(inner, In):
        literals = [_literal(column, v) for v in inner.value]
        if None in literals:
            return None
        return Test(column, "in", frozenset(literals), negate)
    if isinstance(inner, StringStartsWith) and column in ("id", "state"):
        return Test(column, "startswith", inner.value, negate)
    return None


class NameFilter:
    """The pushed filters a read takes (all must pass); picklable."""

    def __init__(self) -> None:
        self.tests: list[Test] = []

    def push(self, filters: Iterable[Filter]) -> Iterator[Filter]:
        """Take the filters vsqs can judge; yield the others back to Spark."""
        for pushed in filters:
            test = _test(pushed)
            if test is None:
                yield pushed
            else:
                self.tests.append(test)

    def accepts(self, parsed: names.Name, now_ms: int) -> bool:
        """Whether a listed name, at ``now_ms``, may hold a message that passes
        every filter: a message alone must pass them all; a part of a bundle
        those on the columns its name gives every message of it (``state``,
        ``receive_count``, and ``visible_at`` once it has an expiry), since
        ``id`` and ``sent_at`` are each message's own."""
        if not self.tests:
            return True
        row = values(parsed, now_ms, parsed.id)
        shared = COLUMNS
        if names.is_bundle(parsed.id):
            shared = (
                "state",
                "receive_count",
                *(("visible_at",) if parsed.expiry_ms is not None else ()),
            )
        return all(test.passes(row[test.column]) for test in self.tests if test.column in shared)

    def passes(self, row: dict[str, Any]) -> bool:
        """Whether a message's row (its :func:`values`) passes every filter."""
        return all(test.passes(row[test.column]) for test in self.tests)
