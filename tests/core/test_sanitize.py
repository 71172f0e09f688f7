from __future__ import annotations

import csv
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from quotaflow.core.sanitize import desanitize, jmx_sanitize, sanitize


def test_sanitizer_vectors(vectors_dir: Path) -> None:
    rows = list(csv.DictReader((vectors_dir / "sanitizer.expected.csv").open()))
    assert len(rows) >= 20
    for r in rows:
        assert sanitize(r["raw"]) == r["sanitized"], r
        assert jmx_sanitize(r["raw"]) == r["jmx_sanitized"], r
        assert (desanitize(r["sanitized"]) == r["raw"]) == (r["desanitized_roundtrip_ok"] == "true"), r


@given(st.text())
def test_sanitize_roundtrip(s: str) -> None:
    out = sanitize(s)
    assert all(c.isascii() and (c.isalnum() or c in "._-%") for c in out)
    assert desanitize(out) == s


def test_default_literal_is_not_default() -> None:
    assert sanitize("<default>") == "%3Cdefault%3E"
    assert sanitize("a b*c+d~") == "a%20b%2Ac%2Bd%7E"
