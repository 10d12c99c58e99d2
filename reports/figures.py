"""Figures (matplotlib, PNG + PDF, Agg backend).

- :func:`length_curves`: seqAcc and seqAccBE against test length per variant (Dubois et al.
  Figures 6-8): median over seeds with the interquartile range shaded.
- :func:`attention_figure`: an attention heatmap with μ / σ / step / mix-gate traces for one
  example (Dubois et al. Figure 9). :func:`attention_figure_from_json` reads the
  ``attention.json`` the trainer writes (keys ``weights``, ``src``, ``pred``/``gold``,
  ``source_offset``, ``mu``, ``sigma``, ``step``, ``mix_gate``).
- :func:`raffel_accuracy_curves`: Raffel & Ellis test accuracy against sequence length T0.

:func:`save_figure` writes PNG and PDF without time stamps, so the same data give the same bytes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence, TypedDict

import numpy as np
import polars as pl

from locattn import registry
from locattn.labels import task_label
from locattn.plot import axis_ticks
from record import schema
from reports.aggregate import SELECTION_KEY, aggregate, finite_metrics
from reports.row_labels import StudyLabels
from reports.runset import read_runs, resolve_source
from reports.tables import DUBOIS_INTERP_SPLITS, get_table

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def _plt():
    # matplotlib (about 0.3 s) only when a figure is drawn; the backend is chosen before pyplot
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt  # after the backend: see above

    return plt


def save_figure(fig, stem: str | Path, *, dpi: int = 120) -> list[Path]:
    """Save ``fig`` as ``<stem>.png`` and ``<stem>.pdf`` (no creation dates); close it."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    png, pdf = stem.with_suffix(".png"), stem.with_suffix(".pdf")
    fig.savefig(png, dpi=dpi, metadata={"Software": None})
    fig.savefig(pdf, metadata={"CreationDate": None, "ModDate": None, "Producer": None,
                               "Creator": None})
    _plt().close(fig)
    return [png, pdf]


# ---------------------------------------------------------------------------------------------
# Length curves

_COPY_ORDER = ("iid", "len15", "len20", "len25", "len30", "len50", "len100")


def split_position(split: str) -> tuple[float, str] | None:
    """(x position, tick label) of a test split on a length axis; None when not a length split."""
    if split == "iid":
        return 7.5, "5-10"
    m = re.fullmatch(r"len(\d+)", split)
    if m:
        return float(m.group(1)), m.group(1)
    m = re.fullmatch(r"longer_(seen|incremental|new)_(\d+)", split)
    if m:
        return float(m.group(2)), f"long {m.group(2)}"
    if split in DUBOIS_INTERP_SPLITS:  # the same two sets as Table 3's Interp. column
        return 0.0, "interp."
    return None


def length_frame(runset, task: str, metric: str, *, lookup_family: str = "seen") -> pl.DataFrame:
    """Tidy ``variant, split, x, seed, value`` (value in %) of finished trial runs of ``task``.

    Lookup tasks use the ``longer_<lookup_family>_i`` files; the interpolation sets are averaged
    into one point. When a cell has several hyperparameter settings, the one with the best
    median ``best_selection_score`` is used, as in the tables.
    """
    runs = runset.runs.filter(
        (pl.col("task") == task) & (pl.col("status") == schema.STATUS_FINISHED)
        & (pl.col("role").fill_null(schema.ROLE_TRIAL) != schema.ROLE_STUDY)
    ).with_columns(pl.col("hparams").fill_null("{}"))
    if runs.height == 0:
        return pl.DataFrame(schema={"variant": pl.String, "split": pl.String, "x": pl.Float64,
                                    "seed": pl.Int64, "value": pl.Float64})
    dev = finite_metrics(runset.metrics).filter(pl.col("key") == SELECTION_KEY).select(
        "run_id", pl.col("value").alias("dev"))
    best = (runs.join(dev, on="run_id", how="left").group_by(["variant", "hparams"])
            .agg(pl.col("dev").median()).sort(["variant", "dev", "hparams"],
                                              descending=[False, True, False], nulls_last=True)
            .group_by("variant", maintain_order=True).first().select("variant", "hparams"))
    runs = runs.join(best, on=["variant", "hparams"], how="inner")
    m = finite_metrics(runset.metrics).filter(pl.col("key").str.starts_with("test.")
                                      & pl.col("key").str.ends_with(f".{metric}"))
    m = m.with_columns(pl.col("key").str.slice(5).str.replace(f"\\.{metric}$", "").alias("split"))
    rows = []
    for rec in m.join(runs.select("run_id", "variant", "seed"), on="run_id").iter_rows(named=True):
        pos = split_position(rec["split"])
        if pos is None:
            continue
        fam = re.fullmatch(r"longer_(seen|incremental|new)_\d+", rec["split"])
        if fam and fam.group(1) != lookup_family:
            continue
        split = "interp." if pos[1] == "interp." else rec["split"]
        rows.append((rec["variant"], split, pos[0], rec["seed"], rec["value"] * 100.0))
    df = pl.DataFrame(rows, schema={"variant": pl.String, "split": pl.String, "x": pl.Float64,
                                    "seed": pl.Int64, "value": pl.Float64}, orient="row")
    return df.group_by(["variant", "split", "x", "seed"]).agg(pl.col("value").mean()).sort(
        ["variant", "x", "seed"])


#: Per curve, in order: marker, line style. Curves that coincide (OneStepAttn and −Sigmoid at
#: 100 %) stay visible: later curves draw smaller, hollow markers and other dash patterns on
#: top of the earlier ones.
CURVE_STYLES = (("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", (0, (5, 1))),
                ("P", (0, (3, 1, 1, 1, 1, 1))), ("X", (0, (1, 2))), ("*", (0, (8, 2))))


class CurveStyle(TypedDict):
    """matplotlib ``plot`` keywords of one curve (:func:`curve_style`)."""

    marker: str
    linestyle: str | tuple[int, tuple[int, ...]]
    markersize: float
    markerfacecolor: str | None
    linewidth: float
    zorder: int


def curve_style(i: int) -> CurveStyle:
    """matplotlib ``plot`` keywords of the ``i``-th curve of a panel (see :data:`CURVE_STYLES`)."""
    marker, linestyle = CURVE_STYLES[i % len(CURVE_STYLES)]
    return {"marker": marker, "linestyle": linestyle, "markersize": max(3.5, 8.0 - 1.0 * i),
            "markerfacecolor": "none" if i % 2 else None, "linewidth": max(1.0, 2.2 - 0.3 * i),
            "zorder": 2 + i}


#: Legend entry of the shaded band around each median curve.
IQR_LABEL = "band: 25th–75th percentile over seeds (line: median)"


def length_curves(frames: Mapping[str, pl.DataFrame], *, title: str = "",
                  label=lambda k: k):
    """One panel per metric (e.g. ``{"seqAcc": df, "seqAccBE": df}``) of :func:`length_frame`
    frames: median over seeds per variant and x, IQR shaded, each variant with its own marker
    and line style (:func:`curve_style`). Returns the figure."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(frames), figsize=(5 * len(frames), 3.6), squeeze=False)
    for ax, (name, df) in zip(axes[0], frames.items()):
        ticks: dict[float, str] = {}
        for i, variant in enumerate(sorted(df["variant"].unique().to_list()) if df.height else []):
            d = (df.filter(pl.col("variant") == variant).group_by(["x", "split"])
                 .agg(pl.col("value").median().alias("med"),
                      pl.col("value").quantile(0.25, "linear").alias("lo"),
                      pl.col("value").quantile(0.75, "linear").alias("hi"))
                 .sort("x"))
            xs = d["x"].to_numpy()
            line, = ax.plot(xs, d["med"].to_numpy(), label=label(variant), **curve_style(i))
            ax.fill_between(xs, d["lo"].to_numpy(), d["hi"].to_numpy(), alpha=0.15,
                            color=line.get_color(), linewidth=0)
            for x, s in zip(xs, d["split"].to_list()):
                ticks[float(x)] = split_position(s)[1] if split_position(s) else s
        if ticks:
            ax.set_xticks(sorted(ticks), [ticks[k] for k in sorted(ticks)])
        if df.height and df["x"].max() >= 50:
            ax.set_xscale("symlog", linthresh=10)
            ax.set_xticks(sorted(ticks), [ticks[k] for k in sorted(ticks)])
        if len(ticks) > 1:
            lo, hi = min(ticks), max(ticks)
            ax.set_xlim(lo - 0.12 * (min(hi, 10) - lo) - 0.5, hi * 1.1 + 0.5)
        ax.set_ylim(-3, 103)
        ax.set_ylabel(f"{name} (%)")
        ax.set_xlabel("test length")
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if title:
        fig.suptitle(title)
    if handles:  # one legend for all panels, below them, where it hides no curve
        handles.append(plt.Rectangle((0, 0), 1, 1, color="grey", alpha=0.3, linewidth=0))
        labels.append(IQR_LABEL)
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8,
                   frameon=False)
        rows = (len(labels) + 4) // 5
        fig.tight_layout(rect=(0, 0.06 + 0.05 * rows, 1, 1))
    else:
        fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# Attention example


def attention_figure(
    weights: ArrayLike,
    src: Sequence[str],
    tgt: Sequence[str],
    *,
    mu: Sequence[float] | None = None,
    sigma: Sequence[float] | None = None,
    step: Sequence[float] | None = None,
    mix_gate: Sequence[float] | None = None,
    source_offset: int = 0,
    title: str | None = None,
):
    """Heatmap of ``weights`` (T, L) with target tokens as rows and the attention axis as columns
    (START/END around ``src`` when ``source_offset`` is 1), plus a side panel with the traces
    that are given (each of length T). μ is also drawn on the heatmap, in source positions.
    Returns the figure."""
    plt = _plt()
    w = np.asarray(weights, dtype=float)
    if w.ndim != 2:
        raise ValueError(f"weights must be 2-D (T, L); got shape {w.shape}")
    T, L = w.shape
    traces = {k: np.asarray(v, dtype=float) for k, v in
              (("μ", mu), ("σ", sigma), ("step", step), ("mix gate", mix_gate)) if v is not None}
    for k, v in traces.items():
        if v.shape != (T,):
            raise ValueError(f"trace {k} must have shape ({T},) like the weights' rows; got {v.shape}")
    cols = []
    for j in range(L):
        i = j - source_offset
        cols.append("START" if i < 0 else (src[i] if i < len(src) else "END"))
    rows = list(tgt)[:T] + ["<eos>"] * max(0, T - len(tgt))
    side = len(traces) > 0
    # 0.32 in per cell up to 40 cells; a length-100 example keeps a readable size (≤ 12 in).
    width = min(12.0, max(4.0, 0.32 * min(L, 40) + 0.1 * max(0, L - 40) + 2) + (2.6 if side else 0))
    height = min(10.0, max(3.0, 0.3 * min(T, 40) + 0.08 * max(0, T - 40) + 1.5))
    fig, axes = plt.subplots(
        1, 2 if side else 1, figsize=(width, height),
        gridspec_kw={"width_ratios": [max(min(L, 60), 4), 6]} if side else None, squeeze=False,
    )
    ax = axes[0][0]
    im = ax.imshow(w, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0)
    xpos, xlab, x_numbered = axis_ticks(cols, source_offset)
    ypos, ylab, y_numbered = axis_ticks(rows)
    ax.set_xticks(xpos, xlab, rotation=0 if x_numbered else 90, fontsize=8 if x_numbered else 7)
    ax.set_yticks(ypos, ylab, fontsize=8 if y_numbered else 7)
    ax.set_xlabel("source position" if x_numbered else "source")
    ax.set_ylabel("output step" if y_numbered else "output")
    if "μ" in traces:
        # μ is a relative position in [0, 1] over the L attention columns.
        ax.plot(traces["μ"] * (L - 1), range(T), color="red", lw=1, marker=".", label="μ")
        ax.legend(fontsize=7, loc="lower right")
    fig.colorbar(im, ax=ax, fraction=0.04)
    if side:
        sx = axes[0][1]
        for k, v in traces.items():
            sx.plot(v, range(T), marker=".", label=k)
        sx.set_ylim(T - 0.5, -0.5)
        sx.set_yticks(ypos, [])
        sx.set_xlabel("value")
        sx.legend(fontsize=7)
        sx.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def attention_figure_from_json(record: str | Path | Mapping[str, Any], *, title: str | None = None):
    """:func:`attention_figure` for the trainer's ``attention.json`` (a path or the dict)."""
    if not isinstance(record, Mapping):
        path = Path(record)
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read attention record {str(path)!r}: {exc}") from exc
    missing = [k for k in ("weights", "src") if k not in record]
    if missing:
        raise ValueError(f"attention record lacks {', '.join(missing)}; "
                         "expected keys: weights, src, pred or gold, source_offset, mu, sigma, step, mix_gate")
    tgt = record.get("pred") or record.get("gold") or []
    if title is None and "split" in record:
        title = f"{record['split']} #{record.get('index', 0)}"
    return attention_figure(
        record["weights"], record["src"], tgt, mu=record.get("mu"), sigma=record.get("sigma"),
        step=record.get("step"), mix_gate=record.get("mix_gate"),
        source_offset=int(record.get("source_offset", 0)), title=title,
    )


# ---------------------------------------------------------------------------------------------
# Raffel & Ellis


def raffel_frame(runset) -> pl.DataFrame:
    """``task, variant, t0, seed, accuracy`` (%) of finished Raffel runs (needs param task.t0).

    Where a (task, variant, T0) ran several learning rates, only the runs of the one the
    ``raffel_table1`` table chose are kept (by the test result under the paper's protocol, by dev
    under the dev-selected one; read ``eval.regression_protocol`` and ``epochs_to_100`` too)."""
    if "task.t0" not in runset.runs.columns:
        raise ValueError("Raffel figures need the run param 'task.t0'; read it with param_keys")
    table = get_table("raffel_table1")
    res = aggregate(runset, table)
    chosen = {(c.tasks[0], v, dict(c.params)["task.t0"]): res.cell(v, c.key).hparams[0]
              for c in table.columns for v in table.rows if res.cell(v, c.key).hparams}
    runs = runset.runs.filter(pl.col("task").is_in(["raffel_add", "raffel_mul"])
                              & (pl.col("status") == schema.STATUS_FINISHED))
    keep = [chosen.get((t, v, t0), h) == h for t, v, t0, h in runs.select(
        "task", "variant", "task.t0", pl.col("hparams").fill_null("{}")).iter_rows()]
    runs = runs.filter(pl.Series(keep, dtype=pl.Boolean))
    m = finite_metrics(runset.metrics).filter(pl.col("key") == "test.test.accuracy")
    return (runs.join(m, on="run_id").select(
        "task", "variant", pl.col("task.t0").cast(pl.Float64).alias("t0"), "seed",
        (pl.col("value") * 100).alias("accuracy"))
        .sort(["task", "variant", "t0", "seed"]))


def raffel_accuracy_curves(df: pl.DataFrame, *, label=lambda k: k):
    """Test accuracy after training against T0, one panel per task, median over seeds."""
    plt = _plt()
    tasks = [t for t in ("raffel_add", "raffel_mul") if t in set(df["task"].to_list())] or ["raffel_add"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        d = df.filter(pl.col("task") == task)
        for i, variant in enumerate(sorted(d["variant"].unique().to_list())):
            g = (d.filter(pl.col("variant") == variant).group_by("t0")
                 .agg(pl.col("accuracy").median()).sort("t0"))
            ax.plot(g["t0"].to_numpy(), g["accuracy"].to_numpy(), label=label(variant),
                    **curve_style(i))
        ax.set_xscale("log")
        t0s = sorted(set(d["t0"].to_list()))
        if t0s:  # the lengths run, as plain numbers (not 5×10¹)
            ax.set_xticks(t0s, [f"{t:g}" for t in t0s])
            ax.xaxis.set_minor_locator(_plt().NullLocator())
        ax.set_xlabel("sequence length T0")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(task_label(task))
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:  # below the panels, where it hides no curve
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8,
                   frameon=False)
        fig.tight_layout(rect=(0, 0.06 + 0.05 * ((len(labels) + 4) // 5), 1, 1))
    else:
        fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# Ablation effects


def forest_plot(res, *, label=lambda k: k):
    """A forest plot of a :class:`reports.effects.EffectsResult`: per (ablation, column) a row,
    the mean paired difference (ablation − base) as a marker with its bootstrap interval as a
    bar, a line at 0, the ablations in groups (each its own marker, :func:`curve_style`), top to
    bottom in table order. Returns the figure."""
    plt = _plt()
    rows = len(res.effects) + len(res.variants) - 1
    fig, ax = plt.subplots(figsize=(6.4, max(2.4, 0.28 * rows + 1.4)))
    y, ticks, names = 0.0, [], []
    for i, variant in enumerate(res.variants):
        group = [e for e in res.effects if e.variant == variant]
        style = curve_style(i)
        ys = [-(y + k) for k in range(len(group))]
        xs = [e.mean for e in group]
        lo = [e.mean - (e.ci_low if e.ci_low is not None else e.mean) for e in group]
        hi = [(e.ci_high if e.ci_high is not None else e.mean) - e.mean for e in group]
        ax.errorbar(xs, ys, xerr=[lo, hi], fmt=style["marker"], markerfacecolor=style["markerfacecolor"],
                    capsize=2, linewidth=1.2, label=label(variant))
        ticks += ys
        names += [f"{e.column_label} (n={e.n})" for e in group]
        y += len(group) + 1
    ax.axvline(0.0, color="grey", linewidth=0.8, zorder=0)
    ax.set_yticks(ticks, names, fontsize=7)
    accuracy = registry.is_accuracy(res.metric)
    if accuracy:  # differences of percentages: the whole scale, so that rows compare at a glance
        ax.set_xlim(-105, 105)
    ax.set_xlabel(f"ablation − {label(res.base)}: mean over paired seeds{' (points)' if accuracy else ''}\n"
                  "bar: 95 % percentile bootstrap interval over the pairs", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="best", frameon=False)
    ax.set_title(f"{label(res.base)} and its ablations ({', '.join(res.tables)})", fontsize=9)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------


def study_figures(source, study: str | None, out_dir: str | Path) -> list[Path]:
    """Every figure the study's data allow: length curves per task, Raffel accuracy curves."""
    src = str(source)
    uri, name = (resolve_source(tracking_uri=src, study=study) if "://" in src
                 else resolve_source(src, study=study))
    rs = read_runs(uri, name, metric_keys=[SELECTION_KEY, "epochs_to_100"],
                   metric_prefixes=["test."], param_keys=["task.t0", "eval.regression_protocol",
                                                            "optim.updates_per_epoch"])
    out = Path(out_dir) / "figures"
    written: list[Path] = []
    labels = StudyLabels.from_tags(rs.recorded_labels())
    tasks = sorted(set(rs.runs["task"].drop_nulls().to_list()))
    for task in tasks:
        if task.startswith("raffel"):
            continue
        frames = {"seqAcc": length_frame(rs, task, "seq_acc"),
                  "seqAccBE": length_frame(rs, task, "seq_acc_be")}
        if all(f.height == 0 for f in frames.values()):
            continue
        fig = length_curves(frames, title=labels.task(task), label=labels.variant)
        written += save_figure(fig, out / f"length_{task}")
    if any(t.startswith("raffel") for t in tasks):
        df = raffel_frame(rs)
        if df.height:
            written += save_figure(raffel_accuracy_curves(df, label=labels.variant), out / "raffel_accuracy")
    return written
