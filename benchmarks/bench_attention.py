"""Time the package's attention against PyTorch on the CPU (a script, not a test).

Per sequence length L, with query/key/value of shape ``(batch=4, num_heads=8, L,
head_dim=64)``, float32, two threads, ``torch.inference_mode()``:

* ``ours_fused``: ``selfattn.scaled_dot_product_attention(..., need_weights=False)``
  against ``torch_fused``: ``torch.nn.functional.scaled_dot_product_attention``;
* ``ours_weights``: the same function returning the weights (it forms S and A)
  against ``bare``: three lines of torch with no checks,
  ``softmax(q @ kᵀ / 8) @ v``;
* ``checks``: the input and output checks alone, what validation costs;
* ``mha_weights``, ``mha_no_weights``, ``mha_fused``: ``selfattn.MultiHeadAttention``
  (d_model 512) returning weights, with ``need_weights=False``, and with
  ``use_fused=True``.

Every round runs each variant once, in turn, and the figures are medians over
``--repeats`` rounds (after a warm-up round) of wall and CPU time; the ratios
are medians of the per-round ratios, so a machine that gets slower or faster
during the run moves both sides of a ratio together. The results (with the
machine and its load) go to ``benchmarks/results/attention.json`` and a plot to
``benchmarks/results/attention.png``; the book's benchmark page shows the
committed JSON.

Usage::

    .venv/bin/python benchmarks/bench_attention.py [--repeats 7] [--lengths 128 ... 2048]

With a package that has no ``need_weights`` argument (an older version on the
path), ``ours_fused`` falls back to the weights path and says so in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

import selfattn
from selfattn import MultiHeadAttention, scaled_dot_product_attention
from selfattn._checks import check_operand, check_qk

try:
    from selfattn.attention import _check_overflow
except ImportError:  # an older package checked the (..., L, L) scores instead
    from selfattn.attention import _check_scores_finite

BATCH, NUM_HEADS, HEAD_DIM = 4, 8, 64
D_MODEL = NUM_HEADS * HEAD_DIM
LENGTHS = (128, 256, 512, 1024, 2048)
RESULTS = Path(__file__).resolve().parent / "results"
PAIRS = {"fused": ("ours_fused", "torch_fused"), "weights": ("ours_weights", "bare")}


def bare_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The math with no checks: softmax(Q Kᵀ / sqrt(d_k)) V, shapes as F.sdpa."""
    scores = q @ k.transpose(-2, -1) / HEAD_DIM**0.5  # (batch, num_heads, L, L)
    return torch.softmax(scores, dim=-1) @ v  # (batch, num_heads, L, head_dim)


def checks_only(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: torch.Tensor, scores: torch.Tensor
) -> None:
    """The validation ``scaled_dot_product_attention`` does, without the attention."""
    check_qk(q, k)
    check_operand("value", v, "(..., k_len, head_dim_v)")
    if "_check_overflow" in globals():
        _check_overflow(ctx, tuple(scores.shape), "query, key")
    else:
        _check_scores_finite(scores, "query, key")


def rounds(variants: dict[str, Callable[[], object]], repeats: int) -> dict[str, list]:
    """``repeats`` rounds (after a warm-up round) of every variant once, in turn."""
    times: dict[str, list] = {name: [] for name in variants}
    for r in range(repeats + 1):
        for name, fn in variants.items():
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            if r:
                times[name].append((wall, cpu))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--out", type=Path, default=RESULTS / "attention.json")
    args = parser.parse_args()

    torch.set_num_threads(2)
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, NUM_HEADS).eval()
    mha_fused = MultiHeadAttention(D_MODEL, NUM_HEADS, use_fused=True).eval()
    mha_fused.load_state_dict(mha.state_dict())
    try:
        scaled_dot_product_attention(*(torch.zeros(1, 1, 2) for _ in range(3)),
                                     need_weights=False)
        fused_flag = True
    except TypeError:
        fused_flag = False
    if fused_flag:
        def fused_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
            return scaled_dot_product_attention(q, k, v, need_weights=False)
    else:  # an older package: the weights path is all there is
        def fused_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
            return scaled_dot_product_attention(q, k, v)
    load_before = os.getloadavg()
    rows = []
    with torch.inference_mode():
        for seq_len in args.lengths:
            shape = (BATCH, NUM_HEADS, seq_len, HEAD_DIM)
            q, k, v = (torch.randn(shape) for _ in range(3))
            x = torch.randn(BATCH, seq_len, D_MODEL)
            ctx, _ = scaled_dot_product_attention(q, k, v)
            scores = q @ k.transpose(-2, -1)  # (batch, num_heads, L, L): for the old checks
            # the variants must agree before their times mean anything
            for other in (F.scaled_dot_product_attention(q, k, v), bare_attention(q, k, v)):
                torch.testing.assert_close(ctx, other, rtol=1e-5, atol=2e-6)
            torch.testing.assert_close(mha(x)[0], mha_fused(x)[0], rtol=1e-5, atol=2e-6)

            variants = {
                "ours_fused": lambda q=q, k=k, v=v: fused_call(q, k, v),
                "torch_fused": lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v),
                "ours_weights": lambda q=q, k=k, v=v: scaled_dot_product_attention(q, k, v),
                "bare": lambda q=q, k=k, v=v: bare_attention(q, k, v),
                "checks": lambda q=q, k=k, v=v, c=ctx, s=scores: checks_only(q, k, v, c, s),
                "mha_weights": lambda x=x: mha(x),
                "mha_no_weights": lambda x=x: mha(x, need_weights=False),
                "mha_fused": lambda x=x: mha_fused(x),
            }
            times = rounds(variants, args.repeats)
            row: dict = {"L": seq_len}
            for name, pairs in times.items():
                row[name] = {
                    "wall_ms": round(1e3 * statistics.median(p[0] for p in pairs), 3),
                    "cpu_ms": round(1e3 * statistics.median(p[1] for p in pairs), 3),
                }
            for label, (a, b) in PAIRS.items():
                row[f"ratio_{label}"] = round(statistics.median(
                    pa[0] / pb[0] for pa, pb in zip(times[a], times[b], strict=True)), 3)
            rows.append(row)
            print(f"L={seq_len:5d}  fused {row['ours_fused']['wall_ms']:9.2f} ms vs "
                  f"{row['torch_fused']['wall_ms']:9.2f} ms (x{row['ratio_fused']:.2f})   "
                  f"weights {row['ours_weights']['wall_ms']:9.2f} ms vs bare "
                  f"{row['bare']['wall_ms']:9.2f} ms (x{row['ratio_weights']:.2f})   "
                  f"checks {row['checks']['wall_ms']:7.2f} ms", flush=True)

    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs ({platform.processor() or '?'}),"
                   f" {platform.system()} {platform.release()}",
        "load_average_before": [round(a, 2) for a in load_before],
        "load_average_after": [round(a, 2) for a in os.getloadavg()],
        "torch": torch.__version__,
        "selfattn": str(Path(selfattn.__file__).parent),
        "need_weights_flag": fused_flag,
        "threads": torch.get_num_threads(),
        "dtype": "float32",
        "shape": {"batch": BATCH, "num_heads": NUM_HEADS, "head_dim": HEAD_DIM},
        "repeats": args.repeats,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    from plot_results import draw

    from selfattn.plotting import use_book_style

    use_book_style(inline=False)
    draw(result).savefig(args.out.with_suffix(".png"), dpi=150)
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
