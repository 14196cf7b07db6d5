"""RoPE and ALiBi (selfattn.positional): scores depend on the offset only."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfattn.positional import (
    alibi_bias,
    alibi_slopes,
    apply_rotary,
    rotary_angles,
    sinusoidal_shift_matrix,
)


def test_rotary_preserves_norm_and_matches_torch() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 10, 8))
    r = apply_rotary(x)
    np.testing.assert_allclose(np.linalg.norm(r, axis=-1), np.linalg.norm(x, axis=-1))
    rt = apply_rotary(torch.from_numpy(x))
    np.testing.assert_allclose(rt.numpy(), r, atol=1e-12)
    np.testing.assert_allclose(r[:, 0], x[:, 0])  # position 0: no rotation


def test_rotary_is_the_sinusoidal_rotation() -> None:
    # RoPE at position p multiplies each row by a rotation of sinusoidal_shift_matrix
    # (R_{-p}: that matrix rotates (sin, cos) pairs, whose order turns the other way)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 8))
    r = apply_rotary(x, positions=np.arange(6))
    for p in range(6):
        np.testing.assert_allclose(r[p], x[p] @ sinusoidal_shift_matrix(-p, 8), atol=1e-12)


def test_rotary_scores_depend_only_on_offset() -> None:
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=(8,)), rng.normal(size=(8,))
    L = 40
    qs = apply_rotary(np.tile(q, (L, 1)))  # the same query vector at every position
    ks = apply_rotary(np.tile(k, (L, 1)))
    scores = qs @ ks.T  # (L, L): S[i, j] = q R_i . k R_j
    for off in range(-5, 6):
        diag = np.diagonal(scores, offset=off)
        np.testing.assert_allclose(diag, diag[0], atol=1e-10)
    assert np.ptp(np.diagonal(scores)) < 1e-10 and not np.allclose(scores[0, 0], scores[0, 3])
    # shifting every position by 100 changes no score
    shifted = apply_rotary(np.tile(q, (L, 1)), np.arange(100, 100 + L)) @ apply_rotary(
        np.tile(k, (L, 1)), np.arange(100, 100 + L)).T
    np.testing.assert_allclose(shifted, scores, atol=1e-9)


def test_rotary_angles_and_errors() -> None:
    a = rotary_angles(3, 4, base=100.0)
    np.testing.assert_allclose(a, [[0, 0], [1, 0.1], [2, 0.2]])
    with pytest.raises(ValueError, match="head_dim"):
        apply_rotary(np.zeros((2, 5)))
    with pytest.raises(ValueError, match="positions"):
        apply_rotary(np.zeros((3, 4)), positions=np.arange(2))
    with pytest.raises(TypeError):
        apply_rotary(np.zeros((3, 4), dtype=int))


def test_alibi_slopes_values() -> None:
    np.testing.assert_allclose(alibi_slopes(8), 2.0 ** -np.arange(1, 9))
    np.testing.assert_allclose(alibi_slopes(4), 2.0 ** (-2.0 * np.arange(1, 5)))
    s6 = alibi_slopes(6)  # 4 slopes of h=4, then every other of h=8
    np.testing.assert_allclose(s6, list(2.0 ** (-2.0 * np.arange(1, 5))) + [2**-1, 2**-3])


def test_alibi_bias_offset_only_and_cached_alignment() -> None:
    b = alibi_bias(4, 6)  # (4, 6, 6)
    assert b.shape == (4, 6, 6)
    for h in range(4):
        for off in range(-5, 6):
            d = np.diagonal(b[h], offset=off)
            np.testing.assert_allclose(d, -alibi_slopes(4)[h] * abs(off))
    last = alibi_bias(4, 1, 6)  # the newest query over 6 cached keys = last row
    np.testing.assert_allclose(last, b[:, -1:])
    t = alibi_bias(2, 3, like=torch.zeros(1, dtype=torch.float32))
    assert t.dtype == torch.float32 and t.shape == (2, 3, 3)
    with pytest.raises(ValueError, match="k_len"):
        alibi_bias(2, 5, 3)
