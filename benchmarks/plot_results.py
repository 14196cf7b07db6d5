"""Draw the attention benchmark's results (shared by the script and the book's page)."""

from __future__ import annotations

from typing import Any

SERIES = [
    # (key, label, line style)
    ("ours_weights", "selfattn, weights returned", "-o"),
    ("bare", "bare torch, 3 lines", "--o"),
    ("ours_fused", "selfattn, need_weights=False", "-s"),
    ("torch_fused", "F.scaled_dot_product_attention", "--s"),
]


def draw(result: dict[str, Any]) -> Any:
    """Wall time against L (log-log), and the two ratios, as a matplotlib Figure."""
    import matplotlib.pyplot as plt

    rows = result["rows"]
    lengths = [r["L"] for r in rows]
    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(5.5, 2.9), layout="constrained")
    for key, label, style in SERIES:
        ax_t.plot(lengths, [r[key]["wall_ms"] for r in rows], style, label=label, ms=4)
    ax_t.set(xscale="log", yscale="log", xlabel="sequence length L", ylabel="wall time (ms)")
    ax_t.set_xticks(lengths, [str(n) for n in lengths], rotation=45)
    ax_t.minorticks_off()
    ax_t.legend(fontsize=7, loc="upper left")
    ax_r.plot(lengths, [r["ratio_weights"] for r in rows], "-o", ms=4, label="weights / bare")
    ax_r.plot(lengths, [r["ratio_fused"] for r in rows], "-s", ms=4, label="fused / F.sdpa")
    ax_r.axhline(1.5, color="0.5", lw=1, ls=":", label="goal: 1.5")
    ax_r.set(xscale="log", xlabel="sequence length L", ylabel="time ratio",
             ylim=(0, max(2.0, *(r["ratio_weights"] for r in rows),
                          *(r["ratio_fused"] for r in rows)) * 1.1))
    ax_r.set_xticks(lengths, [str(n) for n in lengths], rotation=45)
    ax_r.minorticks_off()
    ax_r.legend(fontsize=7, loc="upper right")
    return fig
