"""The console behind real protection (issues 19.4, 22.5): failed sign-ins delayed and limited per client IP with
the gateway's own buckets, security headers on every response, and pages that still work under the policy."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from starlette.testclient import TestClient

from quotaflow.console import ConsoleConfig, create_app
from quotaflow.console.access import Access
from quotaflow.console.headers import CONSOLE_CSP, REPORT_CSP
from quotaflow.console.state import Console
from quotaflow.core.errors import SaslAuthenticationFailedError
from quotaflow.store.sqlite import SqliteStore
from quotaflow.testing.asgi import serve

from .conftest import ADMIN, write_backtest

ATTACKER = "127.0.0.2"  # another loopback address: another client IP, with its own bucket
DELAY_MS = 100  # connection.failed.authentication.delay.ms, Kafka's default


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_an_ip_out_of_failed_login_tokens_gets_no_check_even_with_the_right_password(store: SqliteStore) -> None:
    now = [0.0]
    access = Access(store, admins=frozenset({"admin"}), failed_rate_per_ip=1, clock=lambda: now[0])
    assert access.principal(basic(*ADMIN), "10.0.0.1") is not None  # signed in before the attack
    for guess in range(3):  # the burst: 3 checks
        with pytest.raises(SaslAuthenticationFailedError):
            access.principal(basic("admin", f"guess-{guess}"), "10.0.0.9")
    assert access.hashed == 4 and access.refused == 0
    with pytest.raises(SaslAuthenticationFailedError, match="Invalid username or password"):
        access.principal(basic(*ADMIN), "10.0.0.9")  # the right password, unchecked: the guess is worth nothing
    assert access.hashed == 4 and access.refused == 1
    # remembered since the admin signed in, but not a free oracle for the guessing IP
    with pytest.raises(SaslAuthenticationFailedError):
        access.principal(basic(*ADMIN), "10.0.0.9")
    assert access.refused == 2
    for _ in range(5):  # the admin's own address is untouched: successes cost no tokens
        assert access.principal(basic(*ADMIN), "10.0.0.1") is not None
    assert access.hashed == 4
    now[0] += 1.0  # one token back per second
    with pytest.raises(SaslAuthenticationFailedError):
        access.principal(basic("operator", "wrong"), "10.0.0.9")
    assert access.hashed == 5 and access.refused == 2
    now[0] += 1.0
    assert access.principal(basic(*ADMIN), "10.0.0.9") is not None  # a token again: the remembered sign-in
    assert access.hashed == 5


@pytest.fixture
def live_console(store: SqliteStore) -> Iterator[tuple[str, Console]]:
    app = create_app(store, ConsoleConfig(admins=frozenset({"admin"})))  # the defaults: Kafka's delay, 1 check/s
    with serve(app) as url:
        yield url, app.state.console


def test_a_password_guessing_flood_is_delayed_and_limited_per_ip(live_console: tuple[str, Console]) -> None:
    """Issue 22.5's attack over real sockets: 8 threads guessing Basic passwords from one IP. Every failure is
    answered after the delay, only the bucket's checks are hashed, and a user on another IP signs in at once."""
    url, console = live_console
    assert console.config.failed_authentication_delay_ms == DELAY_MS
    timings: list[tuple[int, float]] = []
    lock = threading.Lock()

    def guess(thread: int) -> None:
        with httpx2.Client(transport=httpx2.HTTPTransport(local_address=ATTACKER), timeout=30) as client:
            for i in range(5):
                started = time.monotonic()
                status = client.get(f"{url}/api/whoami",
                                    headers={"Authorization": basic("admin", f"guess-{thread}-{i}")}).status_code
                with lock:
                    timings.append((status, time.monotonic() - started))

    started = time.monotonic()
    threads = [threading.Thread(target=guess, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    elapsed = time.monotonic() - started
    assert len(timings) == 40 and {status for status, _ in timings} == {401}
    assert min(took for _, took in timings) >= DELAY_MS / 1000  # every failure waits (a lower bound: load-safe)
    assert console.access.failures.rate == 1
    # checks the bucket allows: the burst (3) plus one per second of the flood, and one for a refill in flight
    assert console.access.hashed <= 3 + elapsed + 1, (console.access.hashed, elapsed)
    assert console.access.refused >= 40 - console.access.hashed
    # the real admin, from another address, is not locked out by the flood
    with httpx2.Client(timeout=30) as client:
        me = client.get(f"{url}/api/whoami", headers={"Authorization": basic(*ADMIN)})
    assert me.status_code == 200 and me.json()["principal"] == "admin"


@pytest.mark.parametrize("path", ["/quotas", "/resolve", "/api/quotas", "/static/console.js", "/no-such-page",
                                  "/login"])
def test_security_headers_on_every_response(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.headers["content-security-policy"] == CONSOLE_CSP
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "strict-transport-security" not in response.headers  # plain HTTP: only over TLS


def test_the_report_keeps_its_own_stricter_policy(store: SqliteStore, tmp_path: Path) -> None:
    root = tmp_path / "bt"
    write_backtest(root / "one" / "backtest")
    report = root / "one" / "backtest" / "report"
    report.mkdir()
    (report / "report.html").write_text("<html><style>h1{}</style><h1>report</h1></html>")
    with TestClient(create_app(store, ConsoleConfig(backtests=root))) as c:
        listing = c.get("/api/backtests").json()
        response = c.get("/report", params={"id": listing[0]["id"]})
    assert response.status_code == 200, response.text
    assert response.headers["content-security-policy"] == REPORT_CSP
    assert response.headers["x-frame-options"] == "DENY"
