"""Run vector sets: dispatch each to its mode module (or to the Spark pipeline) and compare with expected."""

from __future__ import annotations

import csv
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeAlias

from quotaflow.conformance.compare import compare_metrics, compare_rows, read_expected

Output: TypeAlias = tuple[list[dict[str, str]], dict[str, str] | None]
ModeRunner: TypeAlias = Callable[[str, list[str], Path], Output]

MODES: Final = ("rate", "client", "conn", "sanitizer")
PYTHON_ONLY_MODES: Final = frozenset({"sanitizer"})  # not an engine computation: same code on every engine


@dataclass(frozen=True, slots=True)
class SetResult:
    name: str
    mode: str
    passed: bool
    rows: int
    problems: tuple[str, ...] = ()

    def line(self) -> str:
        if self.passed:
            return f"PASS {self.name} [{self.mode}] {self.rows} rows"
        more = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        return f"FAIL {self.name} [{self.mode}] {self.problems[0]}{more}"


def mode_runner(mode: str, engine: str) -> ModeRunner:
    """The ``run`` function for a mode; raises LookupError with a reason when it does not exist."""
    if engine == "spark" and mode not in PYTHON_ONLY_MODES:
        try:
            spark = importlib.import_module("quotaflow.conformance.spark")
        except ModuleNotFoundError as e:
            raise LookupError(f"engine spark unavailable ({e.name} not found)") from e
        run_spark: Callable[[str, str, list[str], Path], Output] = spark.run
        return lambda name, args, path: run_spark(mode, name, args, path)
    if engine not in ("python", "spark"):
        raise LookupError(f"unknown engine {engine!r}")
    module_name = f"quotaflow.conformance.{mode}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:
            raise LookupError(f"mode {mode!r} not implemented ({module_name} does not exist)") from e
        raise
    runner: ModeRunner = module.run
    return runner


def run_set(directory: Path, name: str, mode: str, args: list[str], engine: str = "python") -> SetResult:
    expected_path = directory / f"{name}.expected.csv"
    if not expected_path.exists():
        return SetResult(name, mode, False, 0, (f"{expected_path.name} missing",))
    try:
        runner = mode_runner(mode, engine)
    except LookupError as e:
        return SetResult(name, mode, False, 0, (str(e),))
    expected_rows, expected_metrics = read_expected(expected_path)
    try:
        rows, metrics = runner(name, args, directory / f"{name}.input.csv")
    except Exception as e:  # a crash is a failed set, reported with its reason; the run goes on
        return SetResult(name, mode, False, 0, (f"error: {type(e).__name__}: {e}",))
    problems = compare_rows(expected_rows, rows) + compare_metrics(expected_metrics, metrics)
    return SetResult(name, mode, not problems, len(rows), tuple(problems))


def read_index(directory: Path) -> list[tuple[str, str, list[str]]]:
    with (directory / "index.csv").open(newline="", encoding="utf-8") as f:
        return [(r["name"], r["mode"], [a for a in r["args"].split() if a != "-" or r["mode"] != "sanitizer"])
                for r in csv.DictReader(f)]


def run_all(directory: Path, modes: Iterable[str] | None = None, engine: str = "python") -> list[SetResult]:
    """Every set of ``directory/index.csv`` whose mode is selected (all modes when None), in index order."""
    wanted = None if modes is None else set(modes)
    return [
        run_set(directory, name, mode, args, engine)
        for name, mode, args in read_index(directory)
        if wanted is None or mode in wanted
    ]
