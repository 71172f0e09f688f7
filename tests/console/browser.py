"""Real-browser plumbing for the console tests (the app itself is served by :func:`quotaflow.testing.asgi.serve`):
Debian's chromium driven by Playwright (never a downloaded browser), and screenshots kept for a person to look at."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SCREENSHOTS_ENV = "QUOTAFLOW_SCREENSHOTS"  # a directory to keep the pages' screenshots in


@contextmanager
def browser(credentials: tuple[str, str] | None = None, *, refusals_expected: bool = False) -> Iterator[Any]:
    """A fresh chromium profile (its own --user-data-dir); HTTP Basic answered with ``credentials`` when given.
    Any JavaScript error, or content the page's Content-Security-Policy refused (unless ``refusals_expected``),
    fails the test."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} not found: `make test-setup` (run by `make test`) installs Debian's chromium "
                    "(apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="qf-chromium-") as profile, sync_playwright() as p:
        kwargs: dict[str, Any] = {"viewport": {"width": 1300, "height": 900}}
        if credentials is not None:
            kwargs["http_credentials"] = {"username": credentials[0], "password": credentials[1]}
        context = p.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, **kwargs
        )
        context.set_default_timeout(20_000)
        errors: list[str] = []
        context.on("weberror", lambda e: errors.append(str(e.error)))
        # the Content-Security-Policy refuses anything inline or foreign: chromium reports each refusal as a
        # console error, and a page that needed one is broken
        if not refusals_expected:
            context.on("console", lambda m: errors.append(m.text)
                       if m.type == "error" and "Content Security Policy" in m.text else None)
        try:
            yield context
        finally:
            context.close()
        assert not errors, f"JavaScript errors or refused content on the page: {errors}"


def screenshot(page: Any, tmp_path: Path, name: str) -> Path:
    """Full-page PNG in the test's directory, and in ``$QUOTAFLOW_SCREENSHOTS`` when set."""
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    keep = os.environ.get(SCREENSHOTS_ENV)
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / path.name).write_bytes(path.read_bytes())
    assert path.stat().st_size > 10_000, "an empty page"
    return path
