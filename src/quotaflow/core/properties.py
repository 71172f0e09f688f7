"""Java properties text (``server.properties``, Kafka client configs): the syntax ``java.util.Properties`` reads."""

from __future__ import annotations

from typing import Final

from quotaflow.core.errors import CommandError

_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX: Final = frozenset("0123456789abcdefABCDEF")


def _logical_lines(text: str) -> list[str]:
    """java.util.Properties lines: comments (# !) dropped, a trailing odd backslash joins the next line."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        out.append(pending + line)
        pending = ""
    if pending:
        out.append(pending)
    return out


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u":
                digits = s[i + 2 : i + 6]
                if len(digits) != 4 or not all(d in _HEX for d in digits):
                    raise CommandError("Malformed \\uxxxx encoding.")  # java.util.Properties' own message
                out.append(chr(int(digits, 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java properties text (``key=value``, ``key: value`` or ``key value``); later keys win.
    A malformed ``\\uxxxx`` escape is a :class:`CommandError`, as Java's ``load`` refuses it."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        while i < len(line):
            if line[i] == "\\":
                i += 2
                continue
            if line[i] in "=: \t\f":
                break
            i += 1
        key = line[:i]
        j = i
        while j < len(line) and line[j] in " \t\f":
            j += 1
        if j < len(line) and line[j] in "=:":
            j += 1
        while j < len(line) and line[j] in " \t\f":
            j += 1
        value = line[j:]
        props[_unescape(key)] = _unescape(value)
    return props
