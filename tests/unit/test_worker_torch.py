"""`cairn.worker.torch`: state_dicts to arrays and back without copies, and the workflows'
terms on a real module."""

from __future__ import annotations

import numpy as np
import pytest

from cairn.worker.workflows import ClientRound

torch = pytest.importorskip("torch", reason="the torch extra (make setup) is not installed")
ct = pytest.importorskip("cairn.worker.torch")


def _net() -> object:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))


def test_arrays_and_tensors_share_memory() -> None:
    net = _net()
    values = ct.arrays(net)
    assert set(values) == set(net.state_dict())  # buffers too (running stats)
    with torch.no_grad():
        net[0].weight.add_(1.0)
    np.testing.assert_array_equal(values["0.weight"], net[0].weight.detach().numpy())
    back = ct.tensors(values)
    assert back["0.weight"].data_ptr() == net[0].weight.data_ptr()
    half = ct.arrays({"w": torch.ones(2, dtype=torch.bfloat16)})
    assert half["w"].dtype == np.float32


def test_load_is_strict_and_names_what_is_wrong() -> None:
    net, other = _net(), _net()
    values = {k: v + 1 for k, v in ct.arrays(other).items()}
    ct.load(net, values)
    np.testing.assert_array_equal(net[0].bias.detach().numpy(), values["0.bias"])
    del values["0.bias"]
    with pytest.raises(RuntimeError, match=r"0\.bias"):
        ct.load(net, values)


def test_the_proximal_term_and_the_correction() -> None:
    net = _net()
    start = {k: v.copy() for k, v in ct.arrays(net).items()}
    with torch.no_grad():
        net[0].weight.add_(0.5)
    ctx = ClientRound(round=1, workflow="fedprox", global_model=start, mu=0.2)
    # 6 weights moved by 0.5: mu/2 * 6 * 0.25
    assert float(ct.proximal_term(net, ctx).detach()) == pytest.approx(0.1 * 6 * 0.25)
    assert float(ct.proximal_term(net, ClientRound(round=1, workflow="fedavg",
                                                   global_model=start))) == 0.0
    net(torch.ones(4, 3)).sum().backward()
    before = net[0].bias.grad.clone()
    correction = {k: np.full(v.shape, 2.0, dtype=np.float32) for k, v in start.items()}
    ct.correct_gradients(net, ClientRound(round=1, workflow="scaffold", global_model=start,
                                          correction=correction))
    assert torch.allclose(net[0].bias.grad, before + 2.0)
