"""The demo's tables printed whole wherever its output goes.

On a terminal rich fits a table to the window. Anywhere else (``make demo > demo.log``, a CI log, a pipe) rich
assumes 80 columns and squeezes a wider table into them, cutting cells short (``demo-th…`` for
``demo-throttled``): a log would keep numbers and names nobody can read back. There the table is printed at its
natural width instead; a log has no window to fit.
"""

from __future__ import annotations

from typing import Final

from rich.console import Console
from rich.table import Table

# No demo table comes near this; it only bounds the measurement (rich measures within a maximum width).
MAX_LOG_WIDTH: Final = 1_000


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` on ``console``: fitted to a terminal's window, at its natural width anywhere else."""
    if console.is_terminal:
        console.print(table)
        return
    natural = console.measure(table, options=console.options.update_width(MAX_LOG_WIDTH)).maximum
    width = console.width
    if natural <= width:
        console.print(table)
        return
    console.width = natural  # rich lays a table out within the console's width; print(width=) cannot exceed it
    try:
        console.print(table)
    finally:
        console.width = width
