"""Privacy filters on what leaves a site: the Gaussian noise has the advertised spread, the
accountant's epsilon is right, excluded parameters never leave, and a site's rule wins."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest

from cairn.errors import InvalidInput
from cairn.events.workflow import DPRule, PrivacyRule
from cairn.spec import Cause, Resources, StudyUsage, check_deployment
from cairn.spec.privacy import effective
from cairn.spec.runtime import parse_study_runtime
from cairn.worker.privacy import ORDERS, PrivacyFilter, gaussian_epsilon

CLIP, Z = 0.5, 1.1


def test_the_noise_on_a_known_update_has_the_expected_spread() -> None:
    rng = np.random.default_rng(2026)
    received = {"w": np.zeros(200_000), "b": np.zeros(1)}
    direction = rng.normal(size=200_001)
    delta = 10.0 * direction / np.linalg.norm(direction)  # norm 10, far over the clip
    trained = {"w": delta[:-1], "b": delta[-1:]}
    dp = PrivacyFilter(PrivacyRule(dp=DPRule(clip=CLIP, noise_multiplier=Z)),
                       rng=np.random.default_rng(1))
    sent, report = dp.update(trained, received)
    clipped = delta * CLIP / 10.0
    noise = np.concatenate([sent["w"], sent["b"]]) - clipped
    # The sample std of 200k normal draws is within 1% of sigma with overwhelming odds.
    assert abs(noise.std() / (Z * CLIP) - 1) < 0.01
    assert abs(noise.mean()) < 4 * Z * CLIP / math.sqrt(noise.size)
    assert report["dp_noise_std"] == pytest.approx(Z * CLIP)
    assert report["dp_clip_scale"] == pytest.approx(CLIP / 10.0)
    assert report["dp_update_norm"] == pytest.approx(10.0)
    # An update inside the clip is not scaled, only noised.
    small = {"w": delta[:-1] * 0.01, "b": delta[-1:] * 0.01}
    _, inside = dp.update(small, received)
    assert inside["dp_clip_scale"] == 1.0


def test_the_accountant_composes_and_converts_rdp() -> None:
    delta = 1e-5
    for z, rounds in ((1.1, 1), (1.1, 10), (4.0, 100)):
        eps = gaussian_epsilon(z, rounds, delta)
        # The minimum over every order alpha > 1, in closed form: the grid is at least that,
        # and close to it.
        best = rounds / (2 * z * z) + math.sqrt(2 * rounds * math.log(1 / delta)) / z
        assert best <= eps <= best * 1.05, (z, rounds, eps, best)
    assert gaussian_epsilon(1.1, 0, delta) == 0.0
    assert gaussian_epsilon(1.1, 20, delta) > gaussian_epsilon(1.1, 10, delta)
    assert gaussian_epsilon(2.2, 10, delta) < gaussian_epsilon(1.1, 10, delta)
    assert min(ORDERS) > 1
    dp = PrivacyFilter(PrivacyRule(dp=DPRule(clip=1.0, noise_multiplier=1.1)))
    spent = [dp.update({"w": np.ones(3)}, {"w": np.zeros(3)})[1]["dp_epsilon"]
             for _ in range(3)]
    assert spent == [pytest.approx(gaussian_epsilon(1.1, r, 1e-5)) for r in (1, 2, 3)]


def test_excluded_parameters_never_leave_and_stay_local() -> None:
    f = PrivacyFilter(PrivacyRule(exclude=["bn.*", "*.running_mean"]))
    received = {"fc": {"weight": np.zeros(2)}, "bn": {"scale": np.ones(2)},
                "head": {"running_mean": np.zeros(2)}}
    trained = {"fc": {"weight": np.full(2, 5.0)}, "bn": {"scale": np.full(2, 7.0)},
               "head": {"running_mean": np.full(2, 9.0)}}
    sent, report = f.update(trained, received)
    np.testing.assert_array_equal(sent["fc"]["weight"], [5.0, 5.0])
    np.testing.assert_array_equal(sent["bn"]["scale"], [1.0, 1.0])  # what it received
    np.testing.assert_array_equal(sent["head"]["running_mean"], [0.0, 0.0])
    assert report["excluded_params"] == 2
    start = f.keep_local(received, trained)  # the next round trains from its own values
    np.testing.assert_array_equal(start["bn"]["scale"], [7.0, 7.0])
    np.testing.assert_array_equal(start["fc"]["weight"], [0.0, 0.0])


RUNTIME = """\
format: 1
studies:
  lung:
    privacy:
      dp: {clip: 1.0, noise_multiplier: 1.2, delta: 1.0e-6}
      exclude: ["bn.*"]
  open: {}
"""


def test_a_site_that_requires_dp_refuses_a_job_that_turns_it_off() -> None:
    runtime = parse_study_runtime(RUNTIME, "study_runtime.yaml", "/")
    off = PrivacyRule(dp_off=True)
    d = check_deployment("study_runtime.yaml", runtime, "lung", Resources(millicpus=1000),
                         None, StudyUsage(), privacy=off)
    assert not d.accepted and d.cause is Cause.SITE_POLICY
    assert "requires differential privacy" in d.message
    assert "studies.lung.privacy.dp in study_runtime.yaml" in d.message
    assert "workflow.privacy.dp: false" in d.message
    # The same job where the study requires nothing, and a job silent on DP: accepted.
    assert check_deployment("study_runtime.yaml", runtime, "open", Resources(millicpus=1000),
                            None, StudyUsage(), privacy=off).accepted
    assert check_deployment("study_runtime.yaml", runtime, "lung", Resources(millicpus=1000),
                            None, StudyUsage(), privacy=None).accepted


def test_the_sites_rule_wins() -> None:
    site = parse_study_runtime(RUNTIME, "f", "/").studies["lung"].privacy
    job = PrivacyRule(dp=DPRule(clip=2.0, noise_multiplier=0.5, delta=1e-3), exclude=["x"])
    merged = effective(site, job)
    assert merged == PrivacyRule(dp=DPRule(clip=1.0, noise_multiplier=1.2, delta=1e-6),
                                 exclude=["bn.*", "x"])
    stricter = PrivacyRule(dp=DPRule(clip=0.1, noise_multiplier=3.0, delta=1e-9))
    assert effective(site, stricter).dp == stricter.dp  # a stricter job keeps its own
    assert effective(site, None) == PrivacyRule(dp=site.dp, exclude=["bn.*"])
    assert effective(None, None) is None


@pytest.mark.parametrize(("block", "field", "problem"), [
    ("dp: {clip: 0, noise_multiplier: 1}", "studies.lung.privacy.dp.clip", "more than 0"),
    ("dp: {clip: 1, noise_multiplier: 0}", "studies.lung.privacy.dp.noise_multiplier",
     "no noise"),
    ("dp: {clip: 1, noise_multiplier: 1, delta: 2}", "studies.lung.privacy.dp.delta",
     "between 0 and 1"),
    ("dp: {clip: 1, noise: 1}", "studies.lung.privacy.dp.noise", "unknown field"),
    ("dp: false", "studies.lung.privacy.dp", ""),
    ("exclude: ['']", "studies.lung.privacy.exclude[0]", "empty pattern"),
])
def test_a_bad_site_rule_names_its_field(block: str, field: str, problem: str) -> None:
    text = "format: 1\nstudies:\n  lung:\n    privacy:\n" + textwrap.indent(block, " " * 6)
    with pytest.raises(InvalidInput) as info:
        parse_study_runtime(text + "\n", "study_runtime.yaml", "/")
    assert info.value.field == field and problem in info.value.message
