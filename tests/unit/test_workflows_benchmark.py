"""The workflow library on the shared, seeded, non-IID benchmark (tests/fixtures/flbench.py;
the figures in docs/workflows.md come from the same runs)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cairn.worker.workflows import Cyclic, FedAvg, Median, make_workflow
from cairn.worker.workflows.base import Update
from tests.fixtures import flbench

# Synthetic(1, 1): every site its own true model and feature distribution.
HETEROGENEOUS = flbench.synthetic(seed=0, sites=5, alpha=1.0, beta=1.0)
CONVERGING = {"fedavg": {}, "fedprox": {"mu": 0.1}, "fedadam": {"server_lr": 0.1},
              "fedyogi": {"server_lr": 0.1},
              "fedavgm": {"momentum": 0.5}, "scaffold": {}}


@pytest.mark.parametrize("name", sorted(CONVERGING))
def test_each_workflow_converges(name: str) -> None:
    _, run = flbench.simulate(make_workflow(name, CONVERGING[name]), HETEROGENEOUS,
                              rounds=30, steps=50, lr=0.5)
    chance = math.log(flbench.CLASSES)  # the loss of the all-zero model it starts from
    assert run.loss[-1] < 0.5 * chance, run.loss
    assert np.mean(run.loss[-5:]) < np.mean(run.loss[:5]), run.loss
    assert run.accuracy[-1] > 0.7


def test_scaffold_and_fedprox_beat_fedavg_under_strong_heterogeneity() -> None:
    # Much local work per round (50 steps at a large rate): FedAvg's sites drift to their
    # own optima, and their average lands far from the federation's.
    final = {}
    for name, params in (("fedavg", {}), ("fedprox", {"mu": 0.05}), ("scaffold", {})):
        _, run = flbench.simulate(make_workflow(name, params), HETEROGENEOUS, rounds=30,
                                  steps=50, lr=1.5)
        final[name] = (run.loss[-1], run.accuracy[-1])
    assert final["fedprox"][0] < final["fedavg"][0] - 0.05, final
    assert final["scaffold"][0] < final["fedavg"][0] - 0.05, final
    assert final["fedprox"][1] > final["fedavg"][1] and final["scaffold"][1] > final["fedavg"][1]


def test_cyclic_visits_the_sites_in_turn() -> None:
    sites = HETEROGENEOUS[:3]
    _, fixed = flbench.simulate(Cyclic(), sites, rounds=3, steps=5, lr=0.5)
    assert fixed.order == [["site-a", "site-b", "site-c"]] * 3
    shuffled = make_workflow("cyclic", {"order": "shuffled", "seed": 3})
    _, run = flbench.simulate(shuffled, sites, rounds=4, steps=5, lr=0.5)
    assert all(sorted(o) == ["site-a", "site-b", "site-c"] for o in run.order)
    assert len({tuple(o) for o in run.order}) > 1  # a new order per round...
    again = make_workflow("cyclic", {"order": "shuffled", "seed": 3})
    assert [again.order(r, ["site-c", "site-a", "site-b"]) for r in range(1, 5)] == run.order
    # ...and each site trains from the model the one before it sent.
    for answers in run.updates:
        assert len(answers) == 3
    model, single = flbench.simulate(Cyclic(), sites[:1], rounds=1, steps=5, lr=0.5)
    np.testing.assert_array_equal(model["w"], single.updates[0][0]["weights"]["w"])


def test_robust_aggregation_ignores_a_site_that_sends_garbage() -> None:
    good = [Update(site=f"s{i}", n=100.0, weights={"w": np.full(3, 1.0 + 0.01 * i)})
            for i in range(4)]
    bad = Update(site="evil", n=10_000.0, weights={"w": np.full(3, 1e6)})
    start = {"w": np.zeros(3)}
    assert np.all(FedAvg().aggregate(1, start, [*good, bad])["w"] > 1e5)
    assert np.all(np.abs(Median().aggregate(1, start, [*good, bad])["w"] - 1.02) < 0.02)
    trimmed = make_workflow("trimmed-mean", {"beta": 0.2}).aggregate(1, start, [*good, bad])
    assert np.all(np.abs(trimmed["w"] - 1.015) < 0.01)


def test_a_client_that_sends_another_model_is_named() -> None:
    from cairn.errors import InvalidInput

    start = {"w": np.zeros(3), "b": np.zeros(1)}
    odd = Update(site="site-z", n=1.0, weights={"w": np.zeros(3)})
    with pytest.raises(InvalidInput, match=r"site site-z .*missing: b"):
        FedAvg().aggregate(1, start, [odd])


@pytest.mark.parametrize(("payload", "problem"), [
    ({"weights": {"w": np.zeros(3), "b": np.zeros(1)}, "n": -1}, "sample count of -1"),
    ({"weights": {"w": np.array([0.0, np.nan, 0.0]), "b": np.zeros(1)}, "n": 1},
     "w with values that are not finite"),
    ({"weights": {"w": np.zeros(4), "b": np.zeros(1)}, "n": 1}, "w of shape (4,)"),
    ({"weights": {"w": np.zeros(3)}, "n": 1}, "missing: b"),
    ({"n": 1}, "malformed update"),
    (["not", "a", "dict"], "malformed update"),
])
def test_a_servers_round_drops_an_update_it_cannot_aggregate(payload: object,
                                                             problem: str) -> None:
    from cairn.worker.rounds import _refusal

    start = {"w": np.zeros(3), "b": np.zeros(1)}
    why = _refusal(FedAvg(), start, "site-z", payload)
    assert why is not None and "site-z" in why and problem in why
    good = {"weights": {"w": np.ones(3), "b": np.ones(1)}, "n": 5, "extras": {}}
    assert _refusal(FedAvg(), start, "site-a", good) is None
    scaffold = make_workflow("scaffold")
    assert "no control_delta" in (_refusal(scaffold, start, "site-a", good) or "")
