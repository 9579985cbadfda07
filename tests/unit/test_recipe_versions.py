"""Version comparison on the strings sites really report."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.recipes.versions import caret_upper, compare_versions, parse_version


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        ("6.8.0-1024-aws", "6.8", 0),  # kernel build suffix ignored against a release
        ("6.8.0-1024-aws", "6.9", -1),
        ("6.5.0-1024-aws", "6.8", -1),
        ("v25.10.1", "v24.6.0", 1),  # leading v
        ("v25.10.1", "25.10.1", 0),
        ("580.105.08", "575.57.08", 1),  # zero-padded driver components
        ("580.105.08", "580.105.8", 0),
        ("1.32.4-eks-abc", "1.32.4", 0),
        ("1.32.4-eks-abc", "1.32.5", -1),
        ("1.30", "1.4", 1),  # numeric, not decimal
        ("24.04", "24.10", -1),
        ("v0.1.0-alpha.12", "v0.1.0-alpha.8", 1),  # suffixes break ties when both have one
        ("6.8.0-1024-aws", "6.8.0-999-aws", 1),
        ("12.8", "12.8.0", 0),
    ],
)
def test_compare_versions(left: str, right: str, expected: int) -> None:
    assert compare_versions(left, right) == expected
    assert compare_versions(right, left) == -expected


@pytest.mark.parametrize("text", ["latest", "", "v", "abc-1.2"])
def test_not_a_version(text: str) -> None:
    assert parse_version(text) is None
    with pytest.raises(ValueError):
        compare_versions(text, "1.0")


@pytest.mark.parametrize(("low", "high"), [("1.32", "2"), ("0.5", "0.6"), ("0.0.3", "0.0.4")])
def test_caret_upper(low: str, high: str) -> None:
    assert caret_upper(low) == high


_versions = st.lists(st.integers(0, 999), min_size=1, max_size=4).map(
    lambda parts: ".".join(map(str, parts))
)


@given(_versions, _versions, _versions)
def test_ordering_is_a_total_preorder(a: str, b: str, c: str) -> None:
    assert compare_versions(a, a) == 0
    assert compare_versions(a, b) == -compare_versions(b, a)
    if compare_versions(a, b) <= 0 and compare_versions(b, c) <= 0:
        assert compare_versions(a, c) <= 0


@given(_versions, st.sampled_from(["-1024-aws", "-eks-abc", "+build.7", ""]))
def test_suffix_never_makes_a_release_older(core: str, suffix: str) -> None:
    assert compare_versions(core + suffix, core) == 0
    assert compare_versions("v" + core + suffix, core) == 0
