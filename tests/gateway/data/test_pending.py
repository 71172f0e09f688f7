"""``Pending`` in its two forms: the extension type ``make setup`` builds (pending.pxd) and its pure twin."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from quotaflow.gateway.data import pending
from quotaflow.gateway.data.enforcement import NO_DECISIONS, RequestDecisions
from quotaflow.gateway.wire.protocol import RequestHeader
from twins import assert_compiled, forms, pure_twin

FORMS = forms(pending)
HEADER = RequestHeader(0, 9, 7, "app-1", 15, 16)


def test_make_setup_built_the_compiled_form() -> None:
    assert_compiled(pending)


def test_the_pxd_declares_exactly_the_annotated_fields() -> None:
    """A field annotated in pending.py but not declared in pending.pxd would exist only in the pure twin."""
    pxd = Path(pending.__file__ or "").with_name("pending.pxd").read_text()
    declared = {name for line in re.findall(r"cdef public [\w ]+? (\w+(?:, \w+)*)$", pxd, re.M)
                for name in line.split(", ")}
    assert declared == set(pure_twin(pending).Pending.__annotations__)


@pytest.mark.parametrize("form", FORMS)
def test_a_new_request_starts_from_the_same_state_in_both_forms(form: ModuleType) -> None:
    p = form.Pending(HEADER, 1111, 22)
    assert (p.header, p.request_bytes, p.received_ms, p.thread_ns, p.network_ns) == (HEADER, 1111, 22, 0, 0)
    assert p.decisions is NO_DECISIONS
    for name in ("acks", "local", "reply", "forward", "mutations", "fetch_cap", "response", "authz", "handler"):
        assert getattr(p, name) is None, name
    for name in ("forwarded", "local_api_versions", "close_after", "holds_reading", "exempt", "oversized"):
        assert getattr(p, name) is False, name
    assert p.hold_then_close_ms == 0
    decisions = RequestDecisions(1, 2, 3, 3)
    q = form.Pending(HEADER, 1, 2, thread_ns=3, network_ns=4, acks=-1, decisions=decisions)
    assert (q.thread_ns, q.network_ns, q.acks, q.decisions) == (3, 4, -1, decisions)


@pytest.mark.parametrize("form", FORMS)
def test_no_field_outside_the_declared_ones(form: ModuleType) -> None:
    p = form.Pending(HEADER, 1, 2)
    with pytest.raises(AttributeError):
        p.forwarded_at = 5  # a misspelt field fails in both forms, not only in the compiled one
    p.thread_ns += 7
    p.exempt = True
    assert (p.thread_ns, p.exempt) == (7, True)
