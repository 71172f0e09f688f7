"""The ``--workers`` supervisor's restart policy with real forked processes (no broker): a crash-looping slot is
restarted with a growing, capped backoff and never stops a healthy one; only a fleet in which no worker ever became
ready is given up."""

from __future__ import annotations

import logging
import signal
import time

import pytest

from quotaflow.cli.gateway_workers import Backoff, Listeners, SlotBoard, Supervisor, describe_exit


def _never_ready(index: int, listeners: Listeners, board: SlotBoard) -> int:
    return 3


def _slot0_serves_slot1_crashes(index: int, listeners: Listeners, board: SlotBoard) -> int:
    if index == 1:
        return 2
    board.mark_ready(index)
    time.sleep(120)  # stopped by the supervisor (SIGTERM)
    return 0


def test_backoff_doubles_and_is_capped() -> None:
    backoff = Backoff(initial_s=0.5, max_s=4.0)
    assert [backoff.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_exit_descriptions_name_the_signal() -> None:
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(2) == "exited with status 2"


def test_gives_up_only_when_no_worker_ever_became_ready(caplog: pytest.LogCaptureFixture) -> None:
    supervisor = Supervisor(2, _never_ready, {}, backoff=Backoff(initial_s=0.05, max_s=0.1))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert supervisor.run() == 1
    assert time.monotonic() - started < 30
    assert "no worker became ready" in caplog.text
    assert "worker 0" in caplog.text and "exited with status 3" in caplog.text


def test_a_crash_looping_slot_backs_off_and_never_stops_the_healthy_one(caplog: pytest.LogCaptureFixture) -> None:
    supervisor = Supervisor(2, _slot0_serves_slot1_crashes, {}, backoff=Backoff(initial_s=0.05, max_s=0.4))
    try:
        with caplog.at_level(logging.WARNING):
            supervisor.spawn(0)
            supervisor.spawn(1)
            healthy = supervisor.procs[0]
            assert healthy is not None
            deadline = time.monotonic() + 60
            while supervisor.board.restarts(1) < 5:
                assert time.monotonic() < deadline, caplog.text
                assert not supervisor.step(time.monotonic())  # never gives up: slot 0 became ready
                time.sleep(0.02)
        assert supervisor.procs[0] is healthy and healthy.exitcode is None  # untouched all along
        assert supervisor.board.is_ready(0) and supervisor.board.restarts(0) == 0
        delays = [float(line.split("restarting it in ")[1].split(" s")[0])
                  for line in caplog.messages if "restarting it in" in line]
        assert delays[:5] == [0.05, 0.1, 0.2, 0.4, 0.4], delays
        samples = {(s.name, s.tags): s.value for s in supervisor.board.metric_samples(0)}
        assert samples[("restarts", (("worker", "1"),))] >= 5
        assert samples[("ready", (("worker", "0"),))] == 1.0
    finally:
        supervisor.stop()
    assert healthy.exitcode == -signal.SIGTERM
