"""Entity-name sanitization exactly as Kafka's ``Sanitizer``.

User principals are URL-encoded wherever Kafka keys quotas by user (override map, ``user`` metric tag, entity
paths); client-ids stay raw. ``jmx_sanitize`` is what JMX object names carry.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote_plus

_MALFORMED_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_JMX_SAFE = re.compile(r"[\w\-%\. \t]*", re.ASCII)


def sanitize(name: str) -> str:
    """``URLEncoder.encode(name, UTF-8)`` with ``*`` → ``%2A`` and ``+`` → ``%20``: only ``[A-Za-z0-9._-]`` stay."""
    return quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    """``URLDecoder.decode``: ``+`` is a space; a malformed escape raises ``ValueError`` as Java throws."""
    if _MALFORMED_ESCAPE.search(name):
        raise ValueError(f"URLDecoder: Illegal hex characters in escape (%) pattern: {name!r}")
    return unquote_plus(name, encoding="utf-8", errors="strict")


def jmx_sanitize(name: str) -> str:
    """Kept as is when JMX-safe, else ``ObjectName.quote`` (double quotes; ``\\ " * ?`` and newline escaped)."""
    if _JMX_SAFE.fullmatch(name):
        return name
    out = ['"']
    for ch in name:
        if ch in '\\"*?':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
