"""Constraint expressions: every operator, regex, sets, ranges, lists and numbers."""

from __future__ import annotations

import pytest

from cairn.recipes.expressions import ExpressionError, Reading, parse_expression

CASES: list[tuple[str, Reading, bool]] = [
    (">= 6.8", "6.8.0-1024-aws", True),
    (">=6.8", "6.5.0-1024-aws", False),
    ("> 1.32", "1.32.4-eks-abc", True),
    ("> 1.32.4", "1.32.4-eks-abc", False),
    ("<= 1.34", "1.34.0", True),
    ("< 1.34", "1.34.0", False),
    ("== 24.04", "24.04", True),
    ("!= 24.04", "22.04", True),
    ("!= 24.04", "24.04", False),
    ("24.04", "24.04", True),  # bare value: exact match
    ("24.04", "24.04.1", False),
    ("ubuntu", "ubuntu", True),
    (">= v24.6.0", "v25.10.1", True),
    (">= v25.10.0", "v24.6.0", False),
    (">= 575.57.08", "580.105.08", True),
    (">= 575.57.08", "565.57.01", False),
    ("~ ^6\\.8", "6.8.0-1024-aws", True),
    ("~ ^6\\.8", "5.15.0", False),
    ("~ (?i)h100", "NVIDIA H100 80GB HBM3", True),
    ("in [ubuntu, rhel]", "rhel", True),
    ("in [ubuntu, rhel]", "debian", False),
    ("not in [ubuntu, rhel]", "debian", True),
    ("in ['ubuntu', \"rhel\"]", "ubuntu", True),
    (">=6.8,<7", "6.8.0-1024-aws", True),
    (">=6.8,<7", "7.0.1", False),
    (">=6.8,<7", "6.5", False),
    ("6.8.x", "6.8.12-generic", True),
    ("6.8.x", "6.9.1", False),
    ("^1.32", "1.33.2", True),
    ("^1.32", "2.0.0", False),
    ("^1.32", "1.31.9", False),
    # numbers compare as numbers, with binary size suffixes
    (">= 1", 8, True),
    (">= 1", 0, False),
    (">= 1GiB", 2 * 2**30, True),
    (">= 1GiB", 512 * 2**20, False),
    (">= 300", 320.5, True),
    ("<= 2000", 2100.0, False),
    ("== 0", 0, True),
    ("0", 0, True),
    ("== 8", 8.0, True),
    # booleans
    ("true", True, True),
    ("== false", True, False),
    # lists: element-wise
    ("nvidia", ["runc", "nvidia"], True),
    ("nvidia", ["runc"], False),
    ("!= nvidia", ["runc"], True),
    ("in [nvidia, nvidia-cdi]", ["runc", "nvidia-cdi"], True),
    ("not in [nvidia]", ["runc"], True),
    ("~ ^nv", ["runc", "nvidia"], True),
]


@pytest.mark.parametrize(("expression", "reading", "expected"), CASES)
def test_expression(expression: str, reading: Reading, expected: bool) -> None:
    assert parse_expression(expression).holds(reading) is expected


@pytest.mark.parametrize("expression", ["", "   ", "~ [unclosed", "in []", ">=6.8,", "^latest"])
def test_malformed_expression_is_rejected(expression: str) -> None:
    with pytest.raises(ExpressionError):
        parse_expression(expression)


@pytest.mark.parametrize(
    ("expression", "reading"),
    [
        (">= 1.2", "latest"),
        (">= 1", ["a"]),
        (">= 1", True),
        (">= many", 3),
        ("6.8.x", 6),
    ],
)
def test_uncomparable_reading_raises(expression: str, reading: Reading) -> None:
    with pytest.raises(ExpressionError):
        parse_expression(expression).holds(reading)
