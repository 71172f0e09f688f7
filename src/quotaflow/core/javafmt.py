"""Java ``Double.toString`` for quota values, so CLI output reads as kafka-configs.sh (``ConfigCommand``) prints it,
and ``Double.parseDouble`` for the values people type (:func:`parse_double`).

Java prints the shortest decimal that round-trips (JDK 19+, the same digits as Python's ``repr``), as a plain
decimal when ``1e-3 <= |x| < 1e7`` and in computerized scientific notation otherwise: ``1024.0``, ``12.3``,
``1.0E7``, ``1.0E-4``.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Final

_JAVA_DOUBLE: Final = re.compile(r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?)")


def parse_double(text: str) -> float:
    """``Double.parseDouble`` (decimal forms): ``2.5d``, ``1e7``, ``+Infinity``, ``NaN``; ``ValueError`` for anything
    Java refuses, including what Python's ``float`` alone would take (``1_000``, ``inf``, ``nan``)."""
    stripped = text.strip()
    if not _JAVA_DOUBLE.fullmatch(stripped):
        raise ValueError(f"not a Java double: {text!r}")
    body = stripped if stripped.endswith("Infinity") else stripped.rstrip("fFdD")
    return math.nan if body.lstrip("+-") == "NaN" else float(body)


def java_double_str(x: float) -> str:
    """``Double.toString(x)``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    _, digit_tuple, exp = Decimal(repr(abs(x))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    assert isinstance(exp, int)
    # value = 0.d1d2d3... * 10**point, i.e. the decimal point sits after `point` digits
    point = len(digit_tuple) + exp
    if 1e-3 <= abs(x) < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    frac = digits[1:] or "0"
    return f"{sign}{digits[0]}.{frac}E{point - 1}"


def plain_number(x: float) -> str:
    """A compact human form: integral values without a fraction (``2000000``), others as ``repr`` (``12.3``)."""
    if math.isfinite(x) and x == int(x) and abs(x) < 1e17:
        return str(int(x))
    return repr(x)
