"""The Makefile's two entry points: ``make demo`` installs no system package, ``make test`` all the tests need.

``make -n`` prints every command a target would run without running one, so the dependency graph is checked
whatever this machine already has installed (the chromium and kcat recipes test for their binary inside the
command, so a dry run prints them whether or not the binary is there).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _dry_run(target: str) -> str:
    done = subprocess.run(["make", "--no-print-directory", "-n", "-C", str(ROOT), target], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_demo_installs_neither_chromium_nor_kcat() -> None:
    commands = _dry_run("demo")
    assert "python -m quotaflow.demo" in commands  # the dry run reached the demo itself
    assert "apt-get" not in commands
    assert "chromium" not in commands and "kcat" not in commands


def test_make_test_installs_chromium_and_kcat_when_missing() -> None:
    commands = _dry_run("test")
    assert "python -m pytest" in commands
    assert "apt-get install -y -qq chromium" in commands
    assert "apt-get install -y -qq kcat" in commands
    assert commands.index("apt-get install -y -qq chromium") < commands.index("python -m pytest")
