"""``RowQueue`` in its two forms: the extension type ``make setup`` builds (row_queue.pxd) and its pure twin. The
event log's accounting rests on it: every append counted, a full queue dropping its oldest row, a refusal raised
instead of an append."""

from __future__ import annotations

import itertools
from types import ModuleType

import pytest

from quotaflow.gateway.observation import row_queue
from twins import assert_compiled, forms

FORMS = forms(row_queue)


def test_the_row_queue_is_compiled() -> None:
    assert_compiled(row_queue)


@pytest.mark.parametrize("module", FORMS)
def test_a_full_queue_drops_its_oldest_rows_and_counts_every_append(module: ModuleType) -> None:
    queue = module.RowQueue(3, itertools.count(7).__next__)
    for i in range(5):
        queue.append((queue.next_seq(), f"row-{i}"))
    assert list(queue.rows) == [(9, "row-2"), (10, "row-3"), (11, "row-4")]
    assert queue.appended == 5  # the writer finds 5 - taken - len(rows) = 2 dropped


class Refused(Exception):
    pass


@pytest.mark.parametrize("module", FORMS)
def test_a_refusal_is_raised_instead_of_an_append(module: ModuleType) -> None:
    queue = module.RowQueue(10, itertools.count().__next__)
    queue.append(("kept",))

    def refuse() -> None:
        raise Refused("event log is closed")

    queue.refusal = refuse
    with pytest.raises(Refused, match="closed"):
        queue.append(("late",))
    assert list(queue.rows) == [("kept",)] and queue.appended == 1


@pytest.mark.parametrize("module", FORMS)
def test_only_its_own_fields(module: ModuleType) -> None:
    """A typo in the event log's code must fail, not make a field nobody reads."""
    queue = module.RowQueue(1, itertools.count().__next__)
    with pytest.raises(AttributeError):
        queue.apended = 3  # type: ignore[attr-defined]
