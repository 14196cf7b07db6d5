"""RMSNorm: equal to torch.nn.RMSNorm, the formula by hand, its properties, its errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from checking import raises
from selfattn.normalization import RMSNorm, make_norm


def _pair(dim: int, eps: float | None, dtype: torch.dtype, seed: int = 0):
    """Ours and torch's, with the same random (not all-ones) gain."""
    torch.manual_seed(seed)
    ours, ref = RMSNorm(dim, eps=eps).to(dtype), nn.RMSNorm(dim, eps=eps).to(dtype)
    with torch.no_grad():
        ours.weight.copy_(1.0 + 0.5 * torch.randn(dim, dtype=dtype))
        ref.weight.copy_(ours.weight)
    return ours, ref


@pytest.mark.parametrize("eps", [None, 1e-6, 1e-5, 0.3])
@pytest.mark.parametrize("shape", [(7,), (3, 7), (2, 5, 7), (2, 4, 5, 7)])
def test_equals_torch_rmsnorm(eps: float | None, shape: tuple[int, ...]) -> None:
    ours, ref = _pair(shape[-1], eps, torch.float64)
    x = 3.0 + 2.0 * torch.randn(*shape, dtype=torch.float64)  # off-centre: not a LayerNorm
    assert torch.allclose(ours(x), ref(x), atol=1e-12, rtol=0)
    ours32, ref32 = _pair(shape[-1], eps, torch.float32)
    x32 = x.float()
    assert torch.allclose(ours32(x32), ref32(x32), atol=1e-6, rtol=0)


def test_gradients_equal_torch_rmsnorm() -> None:
    ours, ref = _pair(6, 1e-5, torch.float64)
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    upstream = torch.randn(4, 6, dtype=torch.float64)
    (ours(x) * upstream).sum().backward()
    (ref(x2) * upstream).sum().backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-12)
    assert torch.allclose(ours.weight.grad, ref.weight.grad, atol=1e-12)
    assert torch.autograd.gradcheck(ours, (x.detach().requires_grad_(True),))


def test_exact_small_numbers() -> None:
    """x = (3, 4): mean square (9 + 16) / 2 = 12.5, so y = x / sqrt(12.5) with eps = 0 + tiny."""
    norm = RMSNorm(2, eps=1e-300).double()
    y = norm(torch.tensor([3.0, 4.0], dtype=torch.float64))
    expected = torch.tensor([3.0, 4.0], dtype=torch.float64) / 12.5**0.5
    assert torch.allclose(y, expected, atol=1e-15, rtol=0)
    assert torch.allclose(y.pow(2).mean(), torch.tensor(1.0, dtype=torch.float64))
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([2.0, -1.0]))
    assert torch.allclose(norm(torch.tensor([3.0, 4.0], dtype=torch.float64)),
                          expected * torch.tensor([2.0, -1.0], dtype=torch.float64))


def test_differs_from_layernorm_unless_centred() -> None:
    """No mean is subtracted: on off-centre tokens RMSNorm and LayerNorm differ; on tokens
    whose mean is 0 (and with the same eps, gain 1, no shift) they are the same map."""
    rms, ln = RMSNorm(8, eps=1e-5).double(), nn.LayerNorm(8, eps=1e-5).double()
    x = 3.0 + torch.randn(5, 8, dtype=torch.float64)
    assert (rms(x) - ln(x)).abs().max() > 0.5
    centred = x - x.mean(-1, keepdim=True)
    assert torch.allclose(rms(centred), ln(centred), atol=1e-12)


def test_scale_invariant_and_parameter_count() -> None:
    norm = RMSNorm(16, eps=1e-12).double()
    x = torch.randn(3, 16, dtype=torch.float64)
    assert torch.allclose(norm(1000.0 * x), norm(x), atol=1e-10)
    assert torch.allclose(norm(-x), -norm(x), atol=1e-12)  # odd: LayerNorm's shift is gone
    assert sum(p.numel() for p in norm.parameters()) == 16  # LayerNorm: 32
    assert sum(p.numel() for p in nn.LayerNorm(16).parameters()) == 32


def test_make_norm() -> None:
    ln = make_norm("layernorm", 8, eps=1e-3)
    assert isinstance(ln, nn.LayerNorm) and ln.eps == 1e-3
    rms = make_norm("rmsnorm", 8, eps=1e-3)
    assert isinstance(rms, RMSNorm) and rms.eps == 1e-3 and rms.dim == 8
    with raises(ValueError, "norm", "'batchnorm'"):
        make_norm("batchnorm", 8)


def test_bad_input() -> None:
    with raises(TypeError, "dim", "positive int"):
        RMSNorm(8.0)  # type: ignore[arg-type]
    with raises(ValueError, "dim", "positive int", "0"):
        RMSNorm(0)
    with raises(ValueError, "eps", "-1"):
        RMSNorm(4, eps=-1.0)
    with raises(ValueError, "eps", "True"):
        RMSNorm(4, eps=True)  # type: ignore[arg-type]
    norm = RMSNorm(4)
    with raises(ValueError, "x", "last dimension 4", "(2, 3, 5)"):
        norm(torch.randn(2, 3, 5))
    with raises(TypeError, "x", "floating-point", "torch.int64"):
        norm(torch.ones(2, 4, dtype=torch.long))
    with raises(TypeError, "x", "torch.Tensor", "list"):
        norm([1.0, 2.0, 3.0, 4.0])  # type: ignore[arg-type]
    with raises(TypeError, "x", "torch.float32", "torch.float64"):
        norm(torch.randn(2, 4, dtype=torch.float64))
