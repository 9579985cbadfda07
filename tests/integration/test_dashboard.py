"""The dashboard in a real browser: Debian's Chromium driven by Playwright (no download).

Screenshots are written as test artifacts to `$CAIRN_TEST_ARTIFACTS/dashboard/` (default
`build/test-artifacts/dashboard/`); docs/dashboard.md shows copies of them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

playwright = pytest.importorskip("playwright.sync_api", reason="playwright is a dev tool: "
                                 "make setup")

from cairn.recipes import load_catalog  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.fixtures.api import EVIDENCED, LEADS, ROUNDS, ApiFederation  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("CAIRN_TEST_ARTIFACTS", REPO / "build" / "test-artifacts")
                 ) / "dashboard"
WAIT_MS = 30_000


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.skip("no chromium: apt-get install chromium (.ci/run does)")
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def _signed_in(browser: object, api: ApiFederation, who: str) -> object:
    # The federation's own CA signs the API's certificate; the browser is not told of it.
    context = browser.new_context(ignore_https_errors=True,  # type: ignore[attr-defined]
                                  viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.goto(f"{api.url}/login?token={api.token(who)}")
    assert page.url.rstrip("/") == api.url, page.content()
    return page


def _shot(page: object, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]


def test_the_catalog_filtered_to_one_accelerator_and_intent(
        browser: object, api_federation: ApiFederation) -> None:
    catalog = load_catalog()
    expected = sorted(e.name for e in catalog.overlays.values()
                      if e.spec.criteria.accelerator == "h100"
                      and e.spec.criteria.intent == "training")
    assert expected
    page = _signed_in(browser, api_federation, LEADS["alpha"])
    page.goto(f"{api_federation.url}/recipes")  # type: ignore[attr-defined]
    page.select_option("select[name=accelerator]", "h100")  # type: ignore[attr-defined]
    page.select_option("select[name=intent]", "training")  # type: ignore[attr-defined]
    page.click("#filters button[type=submit]")  # type: ignore[attr-defined]
    page.wait_for_url("**/recipes?*accelerator=h100*")  # type: ignore[attr-defined]
    rows = page.locator("#recipes tbody tr")  # type: ignore[attr-defined]
    names = sorted(rows.locator(".recipe").all_inner_texts())
    assert names == expected
    statuses = rows.locator(".badge").all_inner_texts()
    assert len(statuses) == len(expected)
    assert set(statuses) <= {"CONFIRMED", "SINGLE", "CONTESTED", "FAILING", "UNTESTED"}
    _shot(page, "recipes-h100-training")
    # The evidenced recipe, found by its status, with its signer and tested hardware.
    page.goto(f"{api_federation.url}/recipes?status=SINGLE")  # type: ignore[attr-defined]
    rows = page.locator("#recipes tbody tr")  # type: ignore[attr-defined]
    assert rows.locator(".recipe").all_inner_texts() == [EVIDENCED]
    row = rows.first.inner_text()
    assert "SINGLE" in row and "federation" in row
    _shot(page, "recipes-evidenced")


def test_a_running_job_shows_its_rounds_and_its_plot_growing_live(
        browser: object, api_federation: ApiFederation) -> None:
    job = api_federation.jobs["alpha"]
    page = _signed_in(browser, api_federation, LEADS["alpha"])
    page.goto(f"{api_federation.url}/studies/alpha/jobs/{job}")  # type: ignore[attr-defined]
    page.locator("body[data-live=open]").wait_for(timeout=WAIT_MS)  # type: ignore[attr-defined]
    start = int(page.get_attribute("#rounds", "data-rounds"))  # type: ignore[attr-defined]
    for rnd in range(start + 1, min(start + 3, ROUNDS) + 1):
        api_federation.release_round(rnd)
        # The page changes because the event arrived: no reload, no sleep.
        page.locator(f"#rounds[data-rounds='{rnd}']").wait_for(  # type: ignore[attr-defined]
            timeout=WAIT_MS)
        points = page.locator("#metrics-plot circle[data-metric=accuracy]")  # type: ignore[attr-defined]
        assert points.count() == rnd
        assert page.locator("#metrics-plot polyline[data-metric=loss]").count() == 1  # type: ignore[attr-defined]
    _shot(page, "job-live-rounds")
    page.goto(f"{api_federation.url}/studies/alpha")  # type: ignore[attr-defined]
    assert job in page.inner_text("#jobs")  # type: ignore[attr-defined]
    _shot(page, "study-jobs")


def test_a_caller_of_study_a_sees_no_page_of_study_b(
        browser: object, api_federation: ApiFederation) -> None:
    beta_job = api_federation.jobs["beta"]
    page = _signed_in(browser, api_federation, LEADS["alpha"])
    url = api_federation.url
    for path, status in (("/", 200), ("/recipes", 200), ("/sites", 200), ("/evidence", 200),
                         ("/studies/alpha", 200), ("/studies/beta", 404),
                         (f"/studies/beta/jobs/{beta_job}", 404)):
        answer = page.goto(f"{url}{path}")  # type: ignore[attr-defined]
        assert answer.status == status, path
        shown = page.content()  # type: ignore[attr-defined]
        for secret in ("beta", beta_job, LEADS["beta"]):
            assert secret not in shown.replace("/studies/beta", "") or status == 404, \
                (path, secret)
            if status == 200:
                assert secret not in shown, (path, secret)
    page.goto(f"{url}/")  # type: ignore[attr-defined]
    _shot(page, "overview-alice")
    page.goto(f"{url}/sites")  # type: ignore[attr-defined]
    _shot(page, "sites")
