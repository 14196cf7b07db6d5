"""SwiGLU: the formula by hand, the parameter-matched width, token by token, errors."""

from __future__ import annotations

import pytest
import torch

from checking import raises
from selfattn.feedforward import SwiGLU, swiglu_width


def test_equals_the_formula_by_hand() -> None:
    """(SiLU(x W_1) ⊙ x W_3) W_2 with SiLU(u) = u sigmoid(u), W = weight.T."""
    torch.manual_seed(0)
    ff = SwiGLU(6, 10).double()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    w1, w3, w2 = (lin.weight.T for lin in (ff.w_1, ff.w_3, ff.w_2))  # (6,10) (6,10) (10,6)
    u = x @ w1
    by_hand = ((u * torch.sigmoid(u)) * (x @ w3)) @ w2
    assert torch.allclose(ff(x), by_hand, atol=1e-12, rtol=0)
    # the gate matters: GELU or no nonlinearity in its place gives other numbers
    assert (ff(x) - (torch.nn.functional.gelu(u) * (x @ w3)) @ w2).abs().max() > 1e-3
    assert (ff(x) - (u * (x @ w3)) @ w2).abs().max() > 1e-2


def test_no_biases_by_default_and_biases_on_request() -> None:
    ff = SwiGLU(8, 12)
    assert all(lin.bias is None for lin in (ff.w_1, ff.w_2, ff.w_3))
    assert sum(p.numel() for p in ff.parameters()) == 3 * 8 * 12
    with_bias = SwiGLU(8, 12, bias=True)
    assert sum(p.numel() for p in with_bias.parameters()) == 3 * 8 * 12 + 2 * 12 + 8
    # no bias: zero in, zero out
    assert torch.equal(ff(torch.zeros(1, 8)), torch.zeros(1, 8))


@pytest.mark.parametrize("d_model", [1, 2, 3, 16, 32, 64, 100, 768])
def test_parameter_matched_width(d_model: int) -> None:
    """Three d x h matrices against two d x 4d: h = 2/3 * 4d rounded, |3h - 8d| <= 1, so the
    weight counts 3dh and 8d^2 differ by at most d."""
    h = swiglu_width(d_model)
    assert h == round(8 * d_model / 3)
    gelu_weights = 2 * d_model * (4 * d_model)
    swiglu_weights = sum(p.numel() for p in SwiGLU(d_model).parameters())
    assert swiglu_weights == 3 * d_model * h
    assert abs(swiglu_weights - gelu_weights) <= d_model
    assert SwiGLU(d_model).d_ff == h


def test_width_examples() -> None:
    assert swiglu_width(32) == 85  # 256 / 3 = 85.33
    assert swiglu_width(768) == 2048  # 8 * 768 / 3, exact
    assert swiglu_width(4096) == 10923  # Llama rounds 10923 up to a multiple of 256: 11008
    assert swiglu_width(32, mlp_width=96) == 64


def test_each_token_on_its_own() -> None:
    torch.manual_seed(1)
    ff = SwiGLU(8)
    x = torch.randn(1, 5, 8)
    x2 = x.clone()
    x2[0, 2] += 1.0
    with torch.no_grad():
        moved = (ff(x2) - ff(x)).abs().amax(-1)[0]
    assert moved[2] > 0 and (moved[[0, 1, 3, 4]] == 0).all()


def test_bad_input() -> None:
    with raises(ValueError, "d_model", "positive int", "0"):
        SwiGLU(0)
    with raises(TypeError, "d_ff", "positive int", "float"):
        SwiGLU(8, 12.0)  # type: ignore[arg-type]
    with raises(ValueError, "mlp_width", "positive int", "-3"):
        swiglu_width(8, -3)
