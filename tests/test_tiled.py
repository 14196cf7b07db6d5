"""Tiled attention with the online softmax equals plain attention; memory O(L)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from selfattn.softmax import softmax
from selfattn.tiled import attention_full, online_softmax, peak_memory, tiled_attention


def test_online_softmax_equals_softmax() -> None:
    s = np.random.default_rng(0).normal(size=37) * 10
    w, trace = online_softmax(s, block_size=8)
    np.testing.assert_allclose(w, softmax(s), atol=1e-15)
    assert len(trace) == 5 and trace[-1]["m"] == s.max()
    maxima = [t["m"] for t in trace]
    assert maxima == sorted(maxima)  # the running max never falls


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("bq", "bk"), [(16, 16), (7, 5), (1, 64), (100, 100)])
def test_tiled_equals_full_and_sdpa(causal: bool, bq: int, bk: int) -> None:
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(2, 3, 50, 8)), rng.normal(size=(2, 3, 50, 8)), rng.normal(
        size=(2, 3, 50, 6))
    tiled = tiled_attention(q, k, v, block_q=bq, block_k=bk, causal=causal)
    full = attention_full(q, k, v, causal=causal)
    ref = F.scaled_dot_product_attention(torch.from_numpy(q), torch.from_numpy(k),
                                         torch.from_numpy(v), is_causal=causal).numpy()
    assert np.abs(tiled - full).max() < 1e-12 and np.abs(tiled - ref).max() < 1e-12


def test_tiled_rectangular_and_float32() -> None:
    rng = np.random.default_rng(2)
    q, k, v = rng.normal(size=(5, 4)), rng.normal(size=(9, 4)), rng.normal(size=(9, 3))
    np.testing.assert_allclose(tiled_attention(q, k, v, block_q=2, block_k=4, causal=True),
                               attention_full(q, k, v, causal=True), atol=1e-12)
    out32 = tiled_attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32))
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, attention_full(q, k, v), atol=1e-5)


def test_large_scores_do_not_overflow() -> None:
    q = np.full((4, 2), 300.0)
    k = np.array([[300.0, 300.0], [0.0, 0.0], [299.0, 300.0], [-5.0, 1.0]])
    v = np.eye(4)
    out = tiled_attention(q, k, v, block_q=2, block_k=1)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, attention_full(q, k, v), atol=1e-12)


def test_peak_memory_linear_vs_quadratic() -> None:
    rng = np.random.default_rng(3)
    peaks = {}
    for L in (512, 2048):
        q, k, v = (rng.normal(size=(L, 16)) for _ in range(3))
        _, peaks["full", L] = peak_memory(attention_full, q, k, v)
        _, peaks["tiled", L] = peak_memory(tiled_attention, q, k, v, block_q=64, block_k=64)
    assert peaks["full", 2048] >= 2048 * 2048 * 8  # at least one L x L float64 matrix
    assert peaks["full", 2048] / peaks["full", 512] > 12  # ~16x for 4x the length
    assert peaks["tiled", 2048] / peaks["tiled", 512] < 6  # ~4x: linear
    assert peaks["tiled", 2048] < peaks["full", 2048] / 10


def test_errors() -> None:
    a = np.zeros((3, 4))
    with pytest.raises(TypeError, match="q"):
        tiled_attention(a.astype(int), a, a)
    with pytest.raises(ValueError, match="d_k"):
        tiled_attention(a, np.zeros((3, 5)), a)
    with pytest.raises(ValueError, match="block_k"):
        tiled_attention(a, a, a, block_k=0)
    with pytest.raises(ValueError, match="NaN"):
        tiled_attention(np.full((3, 4), np.nan), a, a)
    with pytest.raises(ValueError, match="k_len"):
        tiled_attention(np.zeros((5, 4)), a, a, causal=True)
