"""``python -m quotaflow.conformance DIR [--modes rate,client,...] [--engine python|spark]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from quotaflow.conformance.runner import MODES, run_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quotaflow.conformance", description=__doc__)
    parser.add_argument("directory", type=Path, help="vector directory holding index.csv")
    parser.add_argument("--modes", default=None, help=f"comma-separated subset of {','.join(MODES)} (default: all)")
    parser.add_argument("--engine", choices=("python", "spark"), default="python")
    ns = parser.parse_args(argv)
    if not (ns.directory / "index.csv").exists():
        print(f"{ns.directory / 'index.csv'} not found", file=sys.stderr)
        return 2
    modes = None if ns.modes is None else [m.strip() for m in ns.modes.split(",") if m.strip()]
    results = run_all(ns.directory, modes, ns.engine)
    for r in results:
        print(r.line())
    failed = sum(not r.passed for r in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
