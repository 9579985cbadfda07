"""Quantities and durations: the numbers the agent allocates with."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.errors import InvalidInput
from cairn.spec import (
    format_cpus,
    format_duration,
    format_memory,
    parse_cpus,
    parse_duration,
    parse_gpus,
    parse_memory,
)


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("500m", 500),
        ("2", 2000),
        (2, 2000),
        ("1.5", 1500),
        (1.5, 1500),
        ("0.25", 250),
        ("100m", 100),
        ("1k", 1_000_000),
        ("1e1", 10_000),
        (0, 0),
    ],
)
def test_cpus(text: object, milli: int) -> None:
    assert parse_cpus(text) == milli


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("512Mi", 512 * 2**20),
        ("4Gi", 4 * 2**30),
        ("1G", 10**9),
        ("1000", 1000),
        (1000, 1000),
        ("1.5Gi", 3 * 2**29),
        ("1k", 1000),
        ("1Ki", 1024),
        ("2Ti", 2 * 2**40),
        ("1e3", 1000),
    ],
)
def test_memory(text: object, count: int) -> None:
    assert parse_memory(text) == count


@pytest.mark.parametrize(("text", "count"), [(0, 0), (2, 2), ("4", 4), (1.0, 1)])
def test_gpus(text: object, count: int) -> None:
    assert parse_gpus(text) == count


@pytest.mark.parametrize(
    ("parser", "bad", "says"),
    [
        (parse_cpus, "0.0001", "finer than 1m"),
        (parse_cpus, "two", "not a cpus quantity"),
        (parse_cpus, "-1", "not a cpus quantity"),
        (parse_cpus, -1, "negative"),
        (parse_cpus, "2Gi", "unknown cpus suffix"),
        (parse_cpus, True, "not a cpus quantity"),
        (parse_cpus, None, "not a cpus quantity"),
        (parse_memory, "512m", "did you mean 'Mi'"),
        (parse_memory, "1.5", "whole number of bytes"),
        (parse_memory, "4GB", "unknown memory suffix"),
        (parse_memory, "", "not a memory quantity"),
        (parse_memory, float("nan"), "not a memory quantity"),
        (parse_gpus, 0.5, "whole number of GPUs"),
        (parse_gpus, "500m", "whole number of GPUs"),
        (parse_gpus, "1.5", "whole number of GPUs"),
        (parse_gpus, -1, "negative"),
    ],
)
def test_bad_quantities_say_why(parser: object, bad: object, says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        parser(bad)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("milli", "text"),
    [(500, "500m"), (2000, "2"), (1500, "1.5"), (1250, "1250m"), (0, "0"), (123456700, "123456.7")],
)
def test_format_cpus(milli: int, text: str) -> None:
    assert format_cpus(milli) == text


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (512 * 2**20, "512Mi"),
        (10**9, "1G"),
        (3 * 2**29, "1.5Gi"),
        (1000, "1k"),
        (7, "7"),
        (64 * 2**30, "64Gi"),
    ],
)
def test_format_memory(count: int, text: str) -> None:
    assert format_memory(count) == text


@given(st.integers(min_value=0, max_value=2**60))  # MAX_MEMORY_BYTES
def test_memory_format_parses_back(count: int) -> None:
    assert parse_memory(format_memory(count)) == count


@given(st.integers(min_value=0, max_value=10**9))
def test_cpus_format_parses_back(milli: int) -> None:
    assert parse_cpus(format_cpus(milli)) == milli


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30m", 1800),
        ("1h", 3600),
        ("90s", 90),
        ("2h30m", 9000),
        ("7d", 604800),
        (45, 45),
        ("1d2h3m4s", 93784),
    ],
)
def test_durations(text: object, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "1x", "30 minutes", "m30", "1.5h", 0, "0s", -5, True, None])
def test_bad_durations(bad: object) -> None:
    with pytest.raises(InvalidInput):
        parse_duration(bad)


@given(st.integers(min_value=1, max_value=366 * 86400))  # MAX_DURATION_S
def test_duration_format_parses_back(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds
