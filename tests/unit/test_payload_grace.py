"""The coordinator's payload grace (`-O payload_grace_s=`, `cairn up --payload-grace`)."""

from __future__ import annotations

import pytest

from cairn.coordinator.retention import DEFAULT_GRACE_S, grace_option
from cairn.errors import InvalidInput


@pytest.mark.parametrize(("raw", "seconds"), [(None, DEFAULT_GRACE_S), ("", DEFAULT_GRACE_S),
                                              ("0", 0.0), ("7", 7.0), ("1.5", 1.5)])
def test_a_grace_is_seconds_and_defaults_to_an_hour(raw: str | None, seconds: float) -> None:
    assert grace_option(raw) == seconds


@pytest.mark.parametrize("raw", ["soon", "-1", "nan", "inf", "1e999"])
def test_a_bad_grace_is_refused_naming_the_option(raw: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        grace_option(raw)
    assert caught.value.field == "payload_grace_s"
    assert repr(raw) in str(caught.value)
