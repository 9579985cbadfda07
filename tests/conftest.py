"""Shared test configuration. Fixtures for real components live in tests/fixtures/."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = [
    "tests.fixtures.nats",
    "tests.fixtures.federation",
    "tests.fixtures.docker",
    "tests.fixtures.slurm",
]

REPO = Path(__file__).resolve().parent.parent
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"


@pytest.fixture
def shared_fixtures() -> Path:
    """Real nvidia-smi outputs kept beside the checkout (skips where the folder is absent)."""
    if not SHARED_FIXTURES.is_dir():
        pytest.skip("../shared/fixtures is not beside this checkout (it is in CI)")
    return SHARED_FIXTURES
