"""Attention heatmaps with the location attender's traces beside them (Dubois et al. Fig. 9).

matplotlib is imported lazily, inside :func:`draw_attention`, with the non-interactive Agg
backend, so importing ``locattn`` never pulls it in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

#: Traces drawn in the side panel, in order, with their labels.
SIDE_TRACES = (("sigma", "σ"), ("step", "step"), ("mix_gate", "mix gate m"))


def column_labels(src: Sequence[str], n_columns: int, source_offset: int) -> list[str]:
    """Labels of the attention axis: START/END vectors around the source tokens when present."""
    labels = []
    for j in range(n_columns):
        i = j - source_offset
        if i < 0:
            labels.append("START")
        elif i < len(src):
            labels.append(src[i])
        else:
            labels.append("END")
    return labels


#: Up to this many rows/columns every tick is labelled with its token; longer axes (length 100)
#: get a numbered tick every :data:`TICK_EVERY` positions instead, readable at any length.
MAX_TOKEN_TICKS = 40
TICK_EVERY = 10
BOUNDARY_LABELS = ("START", "END", "<eos>")


def axis_ticks(labels: Sequence[str], offset: int = 0) -> tuple[list[int], list[str], bool]:
    """(positions, labels, numbered) of the ticks of one heatmap axis.

    Short axes label every position with its token. Longer ones label every
    :data:`TICK_EVERY`-th token by its index (counted from ``offset``, the first source
    column) and keep a last END/<eos> tick, so that the labels never overlap.
    """
    n = len(labels)
    if n <= MAX_TOKEN_TICKS:
        return list(range(n)), list(labels), False
    positions, names = [], []
    for j, label in enumerate(labels):
        index = j - offset
        if label in BOUNDARY_LABELS and j == n - 1 and j > 0:  # END / <eos>; START would hit 0
            positions.append(j)
            names.append(label)
        elif index >= 0 and index % TICK_EVERY == 0 and label not in BOUNDARY_LABELS:
            positions.append(j)
            names.append(str(index))
    return positions, names, True


def draw_attention(
    record: dict[str, Any],
    path: str | Path,
    *,
    title: str | None = None,
    dpi: int = 90,
) -> Path:
    """Draw one example's attention to a PNG.

    ``record`` is an ``attention.json`` record: ``weights`` (T, L) nested lists, ``src`` and
    ``pred`` token lists, ``source_offset``, and optional traces ``mu``, ``sigma``, ``step``,
    ``mix_gate`` (length T) and ``dir_gate`` (scalar). μ (a position in [0, 1]) is drawn on
    the heatmap in column units; the other traces go in a panel on the right.
    """
    # matplotlib (about 0.3 s) only when a figure is drawn; the backend is chosen before pyplot
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt  # after the backend: see above
    import matplotlib.ticker

    weights = np.asarray(record["weights"], dtype=float)  # (T, L)
    n_rows, n_cols = weights.shape
    rows = list(record.get("pred", []))[:n_rows]
    rows += ["<eos>"] * (n_rows - len(rows))
    cols = column_labels(record.get("src", []), n_cols, int(record.get("source_offset", 0)))
    side = [(k, lab) for k, lab in SIDE_TRACES if record.get(k) is not None]

    cell = 0.16
    width = min(11.0, 2.4 + cell * n_cols + (2.2 if side else 0.0))
    height = min(10.0, 1.8 + cell * n_rows)
    fig = plt.figure(figsize=(width, height), dpi=dpi)
    ratios = [max(3.0, cell * n_cols), 1.6] if side else [1.0]
    grid = fig.add_gridspec(1, len(ratios), width_ratios=ratios, wspace=0.08)
    ax = fig.add_subplot(grid[0, 0])
    ax.imshow(weights, aspect="auto", cmap="Greys", vmin=0.0, vmax=1.0, interpolation="nearest")
    if record.get("mu") is not None:
        mu = np.asarray(record["mu"], dtype=float)[:n_rows]
        ax.plot(mu * (n_cols - 1), np.arange(len(mu)), color="tab:red", lw=1.2, label="μ")
        ax.legend(loc="lower left", fontsize=6, frameon=False)
    xpos, xlab, x_numbered = axis_ticks(cols, int(record.get("source_offset", 0)))
    ypos, ylab, y_numbered = axis_ticks(rows)
    ax.set_xticks(xpos)
    ax.set_xticklabels(xlab, rotation=0 if x_numbered else 90, fontsize=7)
    ax.set_yticks(ypos)
    ax.set_yticklabels(ylab, fontsize=7)
    ax.set_xlabel("source position" if x_numbered else "source", fontsize=8)
    ax.set_ylabel("output step" if y_numbered else "output", fontsize=8)
    heading = title or record.get("title")
    if record.get("dir_gate") is not None:
        heading = f"{heading or ''}  dir gate={float(record['dir_gate']):.2f}".strip()
    if heading:
        ax.set_title(heading, fontsize=9)
    if side:
        ax2 = fig.add_subplot(grid[0, 1], sharey=ax)
        for (key, label), colour in zip(side, ("tab:blue", "tab:green", "tab:purple")):
            values = np.asarray(record[key], dtype=float)[:n_rows]
            ax2.plot(values, np.arange(len(values)), color=colour, lw=1.0, marker=".", ms=2,
                     label=label)
        ax2.legend(loc="lower right", fontsize=7, frameon=False)
        ax2.tick_params(axis="y", labelleft=False)
        ax2.tick_params(axis="x", labelsize=7)
        ax2.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(3))
        ax2.grid(alpha=0.3, lw=0.5)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.1 if x_numbered else 0.14, top=0.93)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
