"""The demo's tables in a log (``make demo > demo.log``): whole, not squeezed to rich's 80 columns and cut short."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from quotaflow.admin import Admin
from quotaflow.demo import main as demo
from quotaflow.demo.tables import print_table
from quotaflow.store.sqlite import SqliteStore

# the columns of the gateway stage's table (the one a log showed as "demo-th…")
TRAFFIC_COLUMNS = ("client-id", "quota", "client got", "gateway logged", "last 5 s", "throttled", "max throttle")


def _log_console() -> tuple[Console, io.StringIO]:
    """A console writing to a file, as rich sees a log or a pipe (no terminal, no COLUMNS: 80 columns)."""
    out = io.StringIO()
    console = Console(file=out, width=None, color_system=None)
    assert not console.is_terminal and console.width == 80
    return console, out


def test_control_plane_stages_print_every_cell_whole_in_a_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    console, out = _log_console()
    store_path = tmp_path / "quotaflow.db"
    ctx = demo.DemoContext(tmp_path, console, Admin(SqliteStore(store_path)), store_path)
    try:
        for stage in (demo.stage_alter, demo.stage_describe, demo.stage_resolve):
            stage(ctx)
    finally:
        ctx.admin.close()
    printed = out.getvalue()
    assert "…" not in printed
    widest = max(len(line) for line in printed.splitlines())
    assert widest > 80  # the resolve table is wider than rich's default for a log: it was not squeezed
    lines = printed.splitlines()
    # each cell on one line: the resolve table's row of (alice, ingest) names its supplying entity in full
    assert any("alice" in line and "ingest" in line and "user=alice, client-id=ingest" in line for line in lines)
    assert any("quota-id (shared bucket)" in line for line in lines)
    assert console.width == 80  # the console is left as it was for what follows


def test_a_wide_table_is_printed_at_its_natural_width_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    console, out = _log_console()
    table = Table(*TRAFFIC_COLUMNS, title="Two producers, flat out for 10 s through the gateway")
    table.add_row("demo-throttled", "1 MB/s", "1.02 MB/s", "1.01 MB/s", "0.99 MB/s", "2,040 of 2,611", "1012 ms")
    table.add_row("demo-unthrottled", "unlimited", "48.31 MB/s", "48.30 MB/s", "47.95 MB/s", "0 of 1,733", "0 ms")
    print_table(console, table)
    printed = out.getvalue()
    assert "…" not in printed
    rows = [line for line in printed.splitlines() if "demo-" in line]
    assert len(rows) == 2  # one line a row: nothing folded either
    assert "2,040 of 2,611" in rows[0] and "48.31 MB/s" in rows[1]


def test_on_a_terminal_the_table_still_fits_the_window() -> None:
    out = io.StringIO()
    console = Console(file=out, width=60, force_terminal=True, color_system=None)
    table = Table(*TRAFFIC_COLUMNS)
    table.add_row("demo-throttled", "1 MB/s", "1.02 MB/s", "1.01 MB/s", "0.99 MB/s", "2,040 of 2,611", "1012 ms")
    print_table(console, table)
    assert max(len(line) for line in out.getvalue().splitlines()) <= 60
