"""The conformance runner on Kafka's reference vectors: every set of every implemented mode passes exactly."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from quotaflow.conformance import run_all
from quotaflow.conformance.compare import format_number, values_match
from quotaflow.conformance.runner import MODES


def implemented_modes() -> list[str]:
    return [m for m in MODES if importlib.util.find_spec(f"quotaflow.conformance.{m}") is not None]


def test_required_modes_exist() -> None:
    assert {"rate", "client", "sanitizer"} <= set(implemented_modes())


def test_every_implemented_mode_passes(vectors_dir: Path) -> None:
    modes = implemented_modes()
    results = run_all(vectors_dir, modes)
    failures = [r.line() for r in results if not r.passed]
    assert not failures, "\n".join(failures)
    covered = {r.mode for r in results}
    assert covered == set(modes)
    assert sum(r.rows for r in results if r.mode == "client") > 500


def test_cli_exit_code_and_summary(vectors_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "quotaflow.conformance", str(vectors_dir), "--modes", "rate,sanitizer"],
        capture_output=True, text=True, check=False, timeout=120,
    )
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert lines[-1] == f"{len(lines) - 1} passed, 0 failed"
    assert all(line.startswith("PASS ") for line in lines[:-1])


def copy_vectors(src: Path, dst: Path, names: list[str]) -> None:
    index = (src / "index.csv").read_text().splitlines()
    keep = [index[0]] + [line for line in index[1:] if line.split(",", 1)[0] in names]
    (dst / "index.csv").write_text("\n".join(keep) + "\n")
    for name in names:
        for suffix in (".input.csv", ".expected.csv"):
            if (src / (name + suffix)).exists():
                shutil.copy(src / (name + suffix), dst / (name + suffix))


def test_a_wrong_throttle_fails(vectors_dir: Path, tmp_path: Path) -> None:
    name = "client_produce_kafka_testQuotaViolation"
    copy_vectors(vectors_dir, tmp_path, [name])
    path = tmp_path / f"{name}.expected.csv"
    path.write_text(path.read_text().replace(",2100,1", ",2101,1"))
    proc = subprocess.run([sys.executable, "-m", "quotaflow.conformance", str(tmp_path)],
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 1
    assert "throttle_ms expected '2101' got '2100'" in proc.stdout
    assert proc.stdout.strip().endswith("0 passed, 1 failed")


def test_missing_mode_module_is_a_failure_with_reason(vectors_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "index.csv").write_text("name,mode,args,description\nx,nosuchmode,1,test\n")
    (tmp_path / "x.expected.csv").write_text("a\n1\n")
    (result,) = run_all(tmp_path)
    assert not result.passed
    assert "not implemented" in result.problems[0]


def test_spark_engine_dispatch(vectors_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--engine spark hands (mode, name, args, input path) to quotaflow.conformance.spark.run; the
    sanitizer set stays in Python. A stand-in module records the calls (Spark itself is the pipeline's test)."""
    from quotaflow.conformance import rate
    from quotaflow.conformance.runner import Output

    calls: list[tuple[str, str, list[str], str]] = []

    def fake_run(mode: str, name: str, args: list[str], input_path: Path) -> Output:
        calls.append((mode, name, args, input_path.name))
        return rate.run(name, args, input_path)

    fake = types.ModuleType("quotaflow.conformance.spark")
    fake.run = fake_run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "quotaflow.conformance.spark", fake)
    copy_vectors(vectors_dir, tmp_path, ["rate_samples1", "sanitizer"])
    results = run_all(tmp_path, engine="spark")
    assert [r.passed for r in results] == [True, True]
    assert calls == [("rate", "rate_samples1", ["1", "1"], "rate_samples1.input.csv")]


def test_rate_tolerance_is_relative() -> None:
    assert values_match("rate_after", "39.215686275", "39.2156862745098")
    assert not values_match("rate_after", "39.2156", "39.2157")
    assert not values_match("throttle_ms", "2100", "2100.4")
    assert values_match("quota_limit", "500", "500.0")
    assert format_number(20.0) == "20"
    assert format_number(1 / 3) == "0.333333333"
