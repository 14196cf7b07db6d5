"""Draw the attention benchmark's results (shared by the script and the book's page)."""

from __future__ import annotations

from typing import Any

SERIES = [
    # (key, label, line style)
    ("ours_weights", "selfattn, weights", "-o"),
    ("bare", "bare torch", "--o"),
    ("ours_fused", "selfattn, no weights", "-s"),
    ("torch_fused", "F.sdpa", "--s"),
]


def draw(result: dict[str, Any]) -> Any:
    """Wall time against L (log-log) above the two ratios, as a matplotlib Figure.

    Stacked, 5.2 in wide, text at the book's sizes (no legend below 10.5 pt): on a
    390 px phone its smallest text is drawn at 9 px or more, like the chapters' figures.
    """
    import matplotlib.pyplot as plt

    rows = result["rows"]
    lengths = [r["L"] for r in rows]
    fig, (ax_t, ax_r) = plt.subplots(2, 1, figsize=(5.2, 6.4), layout="constrained")
    for key, label, style in SERIES:
        ax_t.plot(lengths, [r[key]["wall_ms"] for r in rows], style, label=label, ms=4)
    ax_t.set(xscale="log", yscale="log", xlabel="sequence length L", ylabel="wall time (ms)")
    ax_t.set_xticks(lengths, [str(n) for n in lengths])
    ax_t.minorticks_off()
    ax_t.yaxis.set_major_formatter(lambda y, _: f"{y:g}")  # 1000, not 10³ in small type
    ax_t.legend(loc="upper left", ncols=1)
    ax_r.plot(lengths, [r["ratio_weights"] for r in rows], "-o", ms=4, label="weights / bare")
    ax_r.plot(lengths, [r["ratio_fused"] for r in rows], "-s", ms=4, label="fused / F.sdpa")
    ax_r.axhline(1.5, color="0.5", lw=1, ls=":", label="goal: 1.5")
    ax_r.set(xscale="log", xlabel="sequence length L", ylabel="time ratio",
             ylim=(0, max(2.0, *(r["ratio_weights"] for r in rows),
                          *(r["ratio_fused"] for r in rows)) * 1.1))
    ax_r.set_xticks(lengths, [str(n) for n in lengths])
    ax_r.minorticks_off()
    ax_r.legend(loc="upper right")
    return fig
