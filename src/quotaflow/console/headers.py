"""Security headers on every console response: what the browser may load and run, and where the console may be
framed.

The console's pages load only their own files (no inline script or style, no other origin), so the policy allows
``'self'`` and nothing else: an injected ``<script>`` (should escaping ever miss one) does not run, and the pages
cannot be framed by another site (clickjacking a quota change). ``/report`` serves a rendered backtest report
(inline CSS, charts as ``data:`` images, no script) under its own, stricter policy (:data:`REPORT_CSP`).
Over TLS the browser is also told to stay on HTTPS (``Strict-Transport-Security``).
"""

from __future__ import annotations

from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONSOLE_CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
REPORT_CSP: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
HSTS: Final = "max-age=31536000"
_CSP: Final = b"content-security-policy"


class SecurityHeaders:
    """ASGI middleware: adds the headers to every HTTP response (a response that set its own CSP keeps it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tls = scope.get("scheme") == "https"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                if _CSP not in names:
                    headers.append((_CSP, CONSOLE_CSP.encode()))
                headers += [(b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
                            (b"referrer-policy", b"same-origin")]
                if tls:
                    headers.append((b"strict-transport-security", HSTS.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
