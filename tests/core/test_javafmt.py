"""Java Double.toString, as kafka-configs.sh prints quota values (ConfigCommand)."""

from __future__ import annotations

import math

import pytest

from quotaflow.core.javafmt import java_double_str, parse_double, plain_number


@pytest.mark.parametrize(
    ("value", "text"),
    [(1024.0, "1024.0"), (12.3, "12.3"), (1e7, "1.0E7"), (20000.0, "20000.0"), (9999999.0, "9999999.0"),
     (0.001, "0.001"), (1e-4, "1.0E-4"), (123456789.0, "1.23456789E8"), (-2.5, "-2.5"), (math.nan, "NaN"),
     (math.inf, "Infinity"), (0.0, "0.0")],
)
def test_java_double_str(value: float, text: str) -> None:
    assert java_double_str(value) == text


def test_plain_number() -> None:
    assert plain_number(2000000.0) == "2000000"
    assert plain_number(12.3) == "12.3"


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1.0), (" 2.5d ", 2.5), ("1e7", 1e7), ("-1F", -1.0), (".5", 0.5), ("+Infinity", math.inf)],
)
def test_parse_double(text: str, value: float) -> None:
    assert parse_double(text) == value
    assert math.isnan(parse_double("NaN"))


@pytest.mark.parametrize("text", ["1,5", "1_000", "inf", "nan", "0x10", "", "1e", "Infinityd"])
def test_parse_double_refuses_what_java_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_double(text)
