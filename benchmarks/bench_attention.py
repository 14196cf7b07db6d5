"""Time the package's readable attention against PyTorch's fused kernel (CPU).

A plain script, not a test. Two comparisons per sequence length L:

* ``sdpa``: :func:`selfattn.scaled_dot_product_attention` (validates its
  inputs, forms S and A explicitly, returns both) versus
  ``torch.nn.functional.scaled_dot_product_attention`` (returns only C) on
  query/key/value of shape ``(batch=1, num_heads=8, L, head_dim=64)``.
* ``mha``: :class:`selfattn.MultiHeadAttention` (d_model = 8 * 64 = 512) on
  its readable path versus the same layer with ``use_fused=True``;
  projections are identical, so the difference is the attention core.

A third column, ``bare torch``, runs the same math with no input checks
(``softmax(q @ k.T / 8) @ v``) to separate the cost of validation (the
package checks every input and the scores for NaN/inf) from the cost of not
fusing.

float32, ``torch.set_num_threads(2)``, ``torch.inference_mode()``; each entry
is the median of ``--repeats`` timed calls after one warm-up call, as wall
time and as CPU time of this process (the latter is robust to a busy machine).
The ratio is readable time / fused time (> 1 means the fused kernel is faster).

Usage::

    .venv/bin/python benchmarks/bench_attention.py [--repeats 5] [--lengths 128 256 ...]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from selfattn import MultiHeadAttention, scaled_dot_product_attention

BATCH, NUM_HEADS, HEAD_DIM = 1, 8, 64
D_MODEL = NUM_HEADS * HEAD_DIM
LENGTHS = (128, 256, 512, 1024, 2048)


def median_times(
    fn: Callable[..., object], fn_args: tuple[object, ...], repeats: int
) -> tuple[float, float]:
    """Median wall and CPU time (seconds) of ``repeats`` calls ``fn(*fn_args)``, after a warm-up.

    CPU time (``time.process_time``, summed over both threads) is far less
    sensitive than wall time to other processes competing for the cores.
    """
    fn(*fn_args)
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn(*fn_args)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def bare_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The same math with no input checks: softmax(Q Kᵀ / sqrt(d_k)) V, shapes as F.sdpa."""
    scores = q @ k.transpose(-2, -1) / HEAD_DIM**0.5  # (batch, num_heads, L, L)
    return torch.softmax(scores, dim=-1) @ v  # (batch, num_heads, L, head_dim)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    args = parser.parse_args()

    torch.set_num_threads(2)
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, NUM_HEADS).eval()

    print(
        f"torch {torch.__version__}, {platform.machine()}, threads={torch.get_num_threads()}, "
        f"load average {os.getloadavg()[0]:.1f}, float32, batch={BATCH}, "
        f"num_heads={NUM_HEADS}, head_dim={HEAD_DIM}, median of {args.repeats}"
    )
    print("times in ms as wall / cpu; ratio = readable / fused (wall, cpu)")
    header = (
        f"{'L':>5} | {'sdpa readable':>15} {'bare torch':>15} {'F.sdpa fused':>15} "
        f"{'ratio':>11} | {'MHA readable':>15} {'MHA fused':>15} {'ratio':>11}"
    )
    print(header)
    print("-" * len(header))

    def cell(t: tuple[float, float]) -> str:
        return f"{1e3 * t[0]:>7.1f}/{1e3 * t[1]:<7.1f}"

    def ratio(a: tuple[float, float], b: tuple[float, float]) -> str:
        return f"{a[0] / b[0]:>5.1f}/{a[1] / b[1]:<5.1f}"

    with torch.inference_mode():
        for seq_len in args.lengths:
            shape = (BATCH, NUM_HEADS, seq_len, HEAD_DIM)
            q, k, v = (torch.randn(shape) for _ in range(3))
            # the paths must agree before their times mean anything
            ctx, _ = scaled_dot_product_attention(q, k, v)
            torch.testing.assert_close(ctx, F.scaled_dot_product_attention(q, k, v))
            torch.testing.assert_close(ctx, bare_attention(q, k, v))

            qkv = (q, k, v)
            t_read = median_times(scaled_dot_product_attention, qkv, args.repeats)
            t_bare = median_times(bare_attention, qkv, args.repeats)
            t_fused = median_times(F.scaled_dot_product_attention, qkv, args.repeats)

            x = torch.randn(BATCH, seq_len, D_MODEL)
            mha.use_fused = False
            m_read = median_times(mha, (x,), args.repeats)
            mha.use_fused = True
            m_fused = median_times(mha, (x,), args.repeats)

            print(
                f"{seq_len:>5} | {cell(t_read)} {cell(t_bare)} {cell(t_fused)} "
                f"{ratio(t_read, t_fused)} | {cell(m_read)} {cell(m_fused)} "
                f"{ratio(m_read, m_fused)}"
            )

if __name__ == "__main__":
    main()
