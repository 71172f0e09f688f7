"""BENCHMARKS.md stays a reader's document: one section per bench script, and its contents table's links resolve."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "BENCHMARKS.md"
# bench/ scripts that are not benchmarks: started by others (bench/gateway_cpu.py's Python floor)
HELPERS = {"l4_forwarder.py"}


def _headings() -> list[str]:
    return re.findall(r"^## (.+)$", DOC.read_text(), re.MULTILINE)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_bench_script_has_a_section() -> None:
    headings = _headings()
    scripts = sorted(p.name for p in (ROOT / "bench").glob("*.py") if p.name not in HELPERS)
    assert scripts
    missing = [name for name in scripts if not any(f"bench/{name}" in h for h in headings)]
    assert not missing, f"BENCHMARKS.md has no section for {missing}"


def test_the_contents_links_resolve() -> None:
    anchors = {_anchor(h) for h in _headings()}
    links = re.findall(r"\]\(#([^)]+)\)", DOC.read_text())
    assert links
    assert [link for link in links if link not in anchors] == []


def test_docs_links_into_benchmarks_resolve() -> None:
    anchors = {_anchor(h) for h in _headings()}
    broken = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for link in re.findall(r"BENCHMARKS\.md#([\w\-]+)", doc.read_text()):
            if link not in anchors:
                broken.append(f"{doc.relative_to(ROOT)}: #{link}")
    assert broken == []
