"""Shared test configuration. Fixtures for real components live in tests/fixtures/."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

pytest_plugins = [
    "tests.fixtures.nats",
    "tests.fixtures.federation",
    "tests.fixtures.docker",
    "tests.fixtures.slurm",
    "tests.fixtures.slurm_lab",
    "tests.fixtures.api",
]

REPO = Path(__file__).resolve().parent.parent
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"


@pytest.fixture
def shared_fixtures() -> Path:
    """Real nvidia-smi outputs kept beside the checkout (skips where the folder is absent)."""
    if not SHARED_FIXTURES.is_dir():
        pytest.skip("../shared/fixtures is not beside this checkout (it is in CI)")
    return SHARED_FIXTURES


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
        item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport,
                                                                      pytest.TestReport]:
    """Under CI=true a skip is a failure: CI installs every component, so a test that would
    skip there hides a broken setup. An expected failure (xfail) stays what it is."""
    report = yield
    if _in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        _fail_the_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
        collector: pytest.Collector) -> Generator[None, pytest.CollectReport,
                                                  pytest.CollectReport]:
    """The same for a whole module that skips itself (`pytest.importorskip`)."""
    report = yield
    if _in_ci() and report.skipped:
        _fail_the_skip(report)
    return report


def _fail_the_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
    report.outcome = "failed"
    report.longrepr = f"skipped under CI=true (nothing may skip in CI): {reason}"
