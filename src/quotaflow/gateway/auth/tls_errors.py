"""TLS errors a client causes, logged as what they are: one INFO line naming the client and OpenSSL's reason.

A client that asks to renegotiate (refused: OpenSSL's no-renegotiation), sends a bad record, does not trust the
gateway's certificate or speaks plain text on a TLS port ends its own connection; nothing is wrong with the
gateway, and anyone can cause it at will, so it is neither an ERROR nor a traceback. Anything else that ends a
connection unexpectedly still is.
"""

from __future__ import annotations

import logging
import re
import ssl
from typing import Final

_SOURCE_LINE: Final = re.compile(r"\s*\(_ssl\.c:\d+\)$")


def tls_reason(exc: ssl.SSLError) -> str:
    """OpenSSL's words, without CPython's source line: ``[SSL: NO_RENEGOTIATION] no renegotiation``."""
    return _SOURCE_LINE.sub("", str(exc.strerror or exc))


def log_connection_failure(log: logging.Logger, exc: BaseException, client_ip: str, client_port: int,
                           listener: str) -> None:
    """One line for a connection that ended with ``exc``: INFO for a client's TLS error, else ERROR with the
    traceback (a fault of the gateway's)."""
    if isinstance(exc, ssl.SSLError):
        log.info("TLS error from %s:%d on %s, connection closed: %s", client_ip, client_port, listener,
                 tls_reason(exc))
    else:
        log.error("connection from %s:%d on %s failed", client_ip, client_port, listener, exc_info=exc)
