"""Qualitative exhibits: the papers' example tables and trace figures, from the runs' artifacts.

Unlike the numeric tables (``reports/tables.py``), these read files each finished run logs as
MLflow artifacts (``study/recording/record_callback.py``): ``examples.json`` (per test split, the first wrong and right
greedy predictions, ``locattn/training/examples.py``) and ``attention.json`` (the attention trace
of the example chosen by ``outputs.trace_split`` / ``outputs.trace_index``).

- ``rc_table10``: Ray Chowdhury & Caragea, Table 10: failure examples (input, gold, prediction),
  with the correctly generated prefix highlighted and the first wrong position marked.
- ``dubois_fig9``: Dubois et al., Figure 9: the Mix attender's final attention, its
  interpretable variables per decoding step (mu, sigma, the building-block weights, the mix
  gate) and its content and location attention, on one Noisy Lookup long-4 example.

Which run: among the finished runs of the cell (task, variant), the hyperparameters with the
best median dev score (as the tables choose), then the lowest seed. The caption says which.
Artifacts are read from the run's artifact location (a local directory for the SQLite stores
the study package writes; downloaded through MLflow for a tracking server).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence
from urllib.parse import unquote, urlsplit

import numpy as np
import polars as pl

from reports.aggregate import finite_metrics
from reports.figures import save_figure
from reports.render import Provenance, latex_escape
from record import store
from record.layout import ARTIFACTS_DIR, ATTENTION_JSON, EXAMPLES_JSON
from reports.runset import ReportsError, RunSet
from reports.tables import EXHIBITS
from record import schema
from record.summary import SELECTION_KEY

ExhibitKind = Literal["examples", "trace"]
Labeler = Callable[[str], str]



@dataclass(frozen=True, kw_only=True)
class ExampleBlock:
    """One block of an examples table: a cell of the study and the split its examples come from."""

    variant: str
    """Variant key (the row label is its paper name)."""
    task: str
    """Task key."""
    split: str
    """Test split the examples are drawn from."""
    n: int = 2
    """Examples shown (the paper shows two per block)."""


@dataclass(frozen=True, kw_only=True)
class ExhibitDef:
    """A qualitative exhibit of a paper."""

    id: str
    """Exhibit id (a key of ``reports.tables.EXHIBITS``)."""
    source: str
    """Which paper exhibit this regenerates."""
    title: str
    """Caption's first sentence."""
    kind: ExhibitKind
    """``examples`` (a table of predictions, Markdown/LaTeX/CSV) or ``trace`` (a figure, PNG/PDF)."""
    blocks: tuple[ExampleBlock, ...]
    """What to show: for ``trace`` one block (its ``split`` is the traced example's split)."""
    note: str = ""
    """Extra caption text."""


DEFS: dict[str, ExhibitDef] = {
    "rc_table10": ExhibitDef(
        id="rc_table10",
        source="Ray Chowdhury & Caragea (2023), Table 10",
        title="Failure examples of OneStepAttn and MonoAttn",
        kind="examples",
        blocks=(
            ExampleBlock(variant="onestep", task="inv_recopy", split="len20"),
            ExampleBlock(variant="mono", task="reverse_lookup", split="longer_seen_5"),
        ),
        note=("The paper's examples have 20 output digits (Inv ReCopy, our len20 split) and 9 "
              "tables (Reverse Lookup long 5, our longer_seen_5). Shown are the first wrong "
              "predictions of the split in split order, not hand-picked ones."),
    ),
    "dubois_fig9": ExhibitDef(
        id="dubois_fig9",
        source="Dubois et al. (2020), Figure 9",
        title="Example output of the Mix attender on Lookup with a noisy start (Long 4 test set)",
        kind="trace",
        blocks=(ExampleBlock(variant="dubois_mix", task="noisy_lookup", split="longer_seen_4", n=1),),
    ),
}


def get_exhibit(exhibit_id: str) -> ExhibitDef:
    """The exhibit definition; ReportsError listing the valid ids otherwise."""
    try:
        return DEFS[exhibit_id]
    except KeyError:
        raise ReportsError(f"unknown exhibit id {exhibit_id!r}; valid: {', '.join(sorted(DEFS))}") from None


# ---------------------------------------------------------------------------------------------
# Finding runs and their artifacts


@dataclass(frozen=True)
class ChosenRun:
    """The run an exhibit block draws from."""

    run_id: str
    seed: int
    hparams: str
    n_finished: int
    """Finished runs of the cell (all hyperparameters and seeds)."""


def choose_run(runset: RunSet, task: str, variant: str) -> ChosenRun | None:
    """The finished run of (task, variant) with the best-median-dev hyperparameters, lowest seed."""
    runs = runset.runs.filter(
        (pl.col("task") == task) & (pl.col("variant") == variant)
        & (pl.col("status") == schema.STATUS_FINISHED)
        & (pl.col("role").fill_null(schema.ROLE_TRIAL) != schema.ROLE_STUDY)
    ).with_columns(pl.col("hparams").fill_null("{}"))
    if runs.height == 0:
        return None
    dev = finite_metrics(runset.metrics).filter(pl.col("key") == SELECTION_KEY).select(
        "run_id", pl.col("value").alias("dev"))
    runs = runs.join(dev, on="run_id", how="left")
    best = (runs.group_by("hparams").agg(pl.col("dev").median())
            .sort(["dev", "hparams"], descending=[True, False], nulls_last=True))["hparams"][0]
    pick = runs.filter(pl.col("hparams") == best).sort(["seed", "run_id"], nulls_last=True).row(0, named=True)
    return ChosenRun(run_id=pick["run_id"], seed=int(pick["seed"] if pick["seed"] is not None else -1),
                     hparams=best, n_finished=runs.height)


def artifact_uris(tracking_uri: str, run_ids: Sequence[str]) -> dict[str, str]:
    """Artifact location of each run (:func:`record.store.artifact_uris`)."""
    db = store.sqlite_path(tracking_uri)
    try:
        return store.artifact_uris(tracking_uri, run_ids,
                                   local_root=db.parent / ARTIFACTS_DIR if db is not None else None)
    except store.StoreError as exc:
        raise ReportsError(str(exc)) from exc


def read_artifact_json(tracking_uri: str, artifact_uri: str, name: str) -> Any | None:
    """The JSON artifact ``name`` of a run, or None when the run did not log it."""
    parts = urlsplit(artifact_uri)
    if parts.scheme in ("", "file"):
        path = Path(unquote(parts.path) if parts.scheme == "file" else artifact_uri) / name
        if not path.is_file():
            return None
        text = path.read_text(encoding="utf-8")
    else:  # a tracking server's artifact store (mlflow-artifacts:/, s3://, ...)
        import mlflow.artifacts  # mlflow (about 1 s) only for a tracking server's artifacts

        with tempfile.TemporaryDirectory() as tmp:
            try:
                local = mlflow.artifacts.download_artifacts(
                    artifact_uri=f"{artifact_uri.rstrip('/')}/{name}", dst_path=tmp,
                    tracking_uri=tracking_uri)
            except Exception:  # absent artifact: MLflow raises its own error types
                return None
            text = Path(local).read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ReportsError(f"artifact {name} of {artifact_uri} is not valid JSON: {exc}") from exc


# ---------------------------------------------------------------------------------------------
# Examples table (rc_table10)


@dataclass(frozen=True)
class ExampleItem:
    """One shown example (its task, variant and split are its block's, its seed its run's)."""

    src: tuple[str, ...]
    gold: tuple[str, ...]
    pred: tuple[str, ...]
    ended: bool
    first_error: int | None


@dataclass(frozen=True)
class BlockResult:
    block: ExampleBlock
    run: ChosenRun | None
    items: tuple[ExampleItem, ...]
    n: int
    """Examples in the split (0 when unknown)."""
    n_wrong: int
    problem: str = ""
    """Why the block is empty (no run, no artifact, no such split, no wrong prediction)."""


def examples_blocks(defn: ExhibitDef, runset: RunSet, tracking_uri: str) -> list[BlockResult]:
    """The examples of every block of ``defn`` from the chosen runs' ``examples.json``."""
    chosen = {(b.task, b.variant): choose_run(runset, b.task, b.variant) for b in defn.blocks}
    uris = artifact_uris(tracking_uri, [c.run_id for c in chosen.values() if c is not None])
    out: list[BlockResult] = []
    for b in defn.blocks:
        run = chosen[(b.task, b.variant)]
        if run is None:
            out.append(BlockResult(b, None, (), 0, 0, "no finished run of this cell"))
            continue
        data = read_artifact_json(tracking_uri, uris.get(run.run_id, ""), EXAMPLES_JSON)
        if data is None:
            out.append(BlockResult(b, run, (), 0, 0, f"the run logged no {EXAMPLES_JSON}"))
            continue
        split = data.get(b.split)
        if split is None:
            out.append(BlockResult(b, run, (), 0, 0, f"the run has no test split {b.split!r} "
                                   f"(it has {', '.join(sorted(data))})"))
            continue
        items = tuple(
            ExampleItem(tuple(e["src"]), tuple(e["gold"]), tuple(e["pred"]), bool(e["ended"]),
                        e["first_error"])
            for e in split["wrong"][: b.n]
        )
        problem = "" if items else "no wrong prediction on this split"
        out.append(BlockResult(b, run, items, int(split["n"]), int(split["n_wrong"]), problem))
    return out


def _block_caption(r: BlockResult, label: Labeler) -> str:
    b = r.block
    head = f"{label(b.variant)} on {b.task} ({b.split})"
    if r.run is None or r.problem and not r.items:
        return f"{head}: {r.problem}."
    return (f"{head}: seed {r.run.seed}, {r.n_wrong} of {r.n} test predictions wrong; "
            f"the first {len(r.items)} shown")


def _caption(defn: ExhibitDef, blocks: Sequence[BlockResult], label: Labeler) -> list[str]:
    lines = [f"{defn.source}. {defn.title}. The correctly generated prefix of each prediction is "
             "highlighted and its first wrong token marked [like this] (a missing token shows as "
             "[<eos>] when the model stopped early, a never-ended prediction ends in [...])."]
    lines += [_block_caption(r, label).rstrip(".") + "." for r in blocks]
    if defn.note:
        lines.append(defn.note)
    return lines


def _pred_tokens(item: ExampleItem) -> list[tuple[str, str]]:
    """(token, role) with role ``ok`` (matching prefix), ``err`` (first wrong) or ``rest``."""
    k = item.first_error
    out: list[tuple[str, str]] = []
    for i, tok in enumerate(item.pred):
        out.append((tok, "ok" if k is None or i < k else ("err" if i == k else "rest")))
    if k is not None and k >= len(item.pred):  # the error is the end of the prediction
        out.append(("<eos>" if item.ended else "...", "err"))
    return out


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def render_examples_markdown(defn: ExhibitDef, blocks: Sequence[BlockResult], prov: Provenance,
                             label: Labeler) -> str:
    """Markdown: one row per example; the matching prefix in bold, the first error in brackets."""
    out = ["<!--", *(f"  {ln}" for ln in prov.lines()), "-->", "",
           f"**Table {defn.id}.** " + " ".join(_caption(defn, blocks, label)), "",
           "| Model | Task | Examples |", "|---|---|---|"]
    for r in blocks:
        if not r.items:
            out.append(f"| {_md_escape(label(r.block.variant))} | {_md_escape(r.block.task)} | "
                       f"– ({_md_escape(r.problem)}) |")
            continue
        for it in r.items:
            ok = " ".join(t for t, role in _pred_tokens(it) if role == "ok")
            err = [t for t, role in _pred_tokens(it) if role == "err"]
            rest = " ".join(t for t, role in _pred_tokens(it) if role == "rest")
            pred = " ".join(p for p in (f"**{_md_escape(ok)}**" if ok else "",
                                        f"[{_md_escape(err[0])}]" if err else "",
                                        _md_escape(rest)) if p)
            text = (f"Input: {_md_escape(' '.join(it.src))}<br>Oracle: {_md_escape(' '.join(it.gold))}"
                    f"<br>Prediction: {pred or '(empty)'}")
            out.append(f"| {_md_escape(label(r.block.variant))} | {_md_escape(r.block.task)} | {text} |")
    return "\n".join(out) + "\n"


def render_examples_latex(defn: ExhibitDef, blocks: Sequence[BlockResult], prov: Provenance,
                          label: Labeler) -> str:
    """LaTeX ``table``: the matching prefix in a cyan box (as the paper), the first error boxed red."""
    out = [f"% {ln}" for ln in prov.lines()]
    out.append(r"% requires \usepackage{booktabs,xcolor}")
    cap = " ".join(_caption(defn, blocks, label)).replace("[like this]", "in red")
    out += [r"\begin{table}[t]", r"\centering", r"\small",
            r"\begin{tabular}{llp{0.62\linewidth}}", r"\toprule",
            r"Model & Task & Examples \\", r"\midrule"]
    for r in blocks:
        if not r.items:
            out.append(f"{latex_escape(label(r.block.variant))} & {latex_escape(r.block.task)} & "
                       f"-- ({latex_escape(r.problem)}) \\\\")
            continue
        for it in r.items:
            parts = []
            toks = _pred_tokens(it)
            ok = " ".join(latex_escape(t) for t, role in toks if role == "ok")
            if ok:
                parts.append(r"\colorbox{cyan!25}{" + ok + "}")
            parts += [r"\colorbox{red!25}{" + latex_escape(t) + "}" for t, role in toks if role == "err"]
            rest = " ".join(latex_escape(t) for t, role in toks if role == "rest")
            if rest:
                parts.append(rest)
            cell = (r"Input: " + latex_escape(" ".join(it.src)) + r" \newline "
                    + r"Oracle: " + latex_escape(" ".join(it.gold)) + r" \newline "
                    + r"Prediction: " + (" ".join(parts) or "(empty)"))
            out.append(f"{latex_escape(label(r.block.variant))} & {latex_escape(r.block.task)} & {cell} \\\\")
        out.append(r"\midrule" if r is not blocks[-1] else r"\bottomrule")
    if not blocks or out[-1] not in (r"\bottomrule",):
        out.append(r"\bottomrule")
    out += [r"\end{tabular}", r"\caption{" + latex_escape(cap) + "}",
            r"\label{tab:" + defn.id + "}", r"\end{table}"]
    return "\n".join(out) + "\n"


def render_examples_csv(defn: ExhibitDef, blocks: Sequence[BlockResult], prov: Provenance,
                        label: Labeler) -> str:
    """One CSV line per shown example (tokens space-separated; first_error 0-based, empty if right)."""
    rows = [(defn.id, r.block.variant, label(r.block.variant), r.block.task, r.block.split, r.run.seed,
             " ".join(it.src), " ".join(it.gold), " ".join(it.pred), it.ended,
             "" if it.first_error is None else it.first_error)
            for r in blocks for it in r.items]
    df = pl.DataFrame(rows, schema=["exhibit", "variant", "variant_label", "task", "split", "seed",
                                    "input", "gold", "prediction", "ended", "first_error"],
                      orient="row")
    return df.write_csv()


# ---------------------------------------------------------------------------------------------
# Trace figure (dubois_fig9)

# Dubois et al.'s names for the interpretable variables (sec. 5.1, Figure 9).
BLOCK_LABELS = (r"$\rho^{(1/n)}$", r"$\rho^{(\bar\alpha)}$", r"$\rho^{(1)}$")
MIX_LABEL = r"$\rho^{(\lambda)}$"


def _axis_labels(record: Mapping[str, Any], L: int) -> list[str]:
    src = list(record["src"])
    off = int(record.get("source_offset", 0))
    return [("START" if j < off else src[j - off] if j - off < len(src) else "END") for j in range(L)]


def trace_figure(record: Mapping[str, Any], *, title: str = ""):
    """Figure 9 layout: final attention (top left), the variables per decoding step as a table
    (top right), content and location attention (bottom). Returns the figure."""
    # matplotlib (about 0.3 s) only when a figure is drawn; the backend is chosen before pyplot
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt  # after the backend: see above
    w = np.asarray(record["weights"], dtype=float)
    if w.ndim != 2 or w.size == 0:
        raise ReportsError(f"attention record has no (T, L) weights (shape {w.shape})")
    T, L = w.shape
    cols = _axis_labels(record, L)
    pred = list(record.get("pred") or [])
    rows = (pred + ["<eos>"])[:T] + [""] * max(0, T - len(pred) - 1)
    mix = record.get("content_weights") is not None
    fig, axes = plt.subplots(2 if mix else 1, 2, squeeze=False,
                             figsize=(max(9.0, 0.36 * L * 2 + 3), 3.2 + 0.32 * T * (2 if mix else 1)))

    def heat(ax, m, name):
        im = ax.imshow(np.asarray(m, dtype=float), aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(L), cols, rotation=90, fontsize=7)
        ax.set_yticks(range(T), rows, fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("input")
        ax.set_ylabel("output")
        return im

    im = heat(axes[0][0], w, "final attention")
    fig.colorbar(im, ax=axes[0][0], fraction=0.04)
    # the variables table
    header = ["step", "output", r"$\mu$", r"$\sigma$"]
    columns: list[list[float] | None] = [record.get("mu"), record.get("sigma")]
    blocks = record.get("blocks")
    if blocks is not None:
        b = np.asarray(blocks, dtype=float)
        header += list(BLOCK_LABELS)
        columns += [b[:, 0].tolist(), b[:, 1].tolist(), b[:, 2].tolist()]
    if record.get("mix_gate") is not None:
        header.append(MIX_LABEL)
        columns.append(record["mix_gate"])
    cells = []
    for t in range(T):
        row = [str(t + 1), rows[t]]
        row += ["–" if c is None else f"{float(c[t]):.2f}" for c in columns]
        cells.append(row)
    tx = axes[0][1]
    tx.axis("off")
    table = tx.table(cellText=cells, colLabels=header, loc="center", cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    table.scale(1.0, 1.1)
    tx.set_title("interpretable variables per decoding step", fontsize=9)
    if mix:
        heat(axes[1][0], record["content_weights"], "content attention")
        heat(axes[1][1], record["location_weights"], "location attention")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def trace_caption(defn: ExhibitDef, record: Mapping[str, Any] | None, run: ChosenRun | None,
                  label: Labeler, problem: str = "") -> str:
    b = defn.blocks[0]
    text = f"{defn.source}. {defn.title}."
    if record is None:
        return f"{text} {label(b.variant)} on {b.task}: {problem}."
    split = record.get("split")
    text += (f" {label(b.variant)} on {b.task}, seed {run.seed if run else '?'}, example "
             f"{record.get('index')} of {split}" + (" (correct)." if record.get("correct") else " (wrong)."))
    if split != b.split:
        text += (f" The run traced {split}, not {b.split}: set outputs.trace_split={b.split} "
                 "in the spec.")
    return text


# ---------------------------------------------------------------------------------------------


def build_exhibits(
    runset: RunSet,
    tracking_uri: str,
    ids: Sequence[str],
    out_dir: str | Path,
    formats: Sequence[str],
    prov: Provenance,
    label: Labeler,
) -> list[Path]:
    """Write every exhibit in ``ids``: ``<id>.md/.tex/.csv`` (examples) or ``<id>.png/.pdf`` and
    ``<id>.md`` (its caption) for traces. Returns the written paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for exhibit_id in ids:
        defn = get_exhibit(exhibit_id)
        if defn.kind == "examples":
            blocks = examples_blocks(defn, runset, tracking_uri)
            renderers = {"md": (render_examples_markdown, "md"),
                         "latex": (render_examples_latex, "tex"),
                         "csv": (render_examples_csv, "csv")}
            for fmt in formats:
                fn, ext = renderers[fmt]
                path = out / f"{defn.id}.{ext}"
                path.write_text(fn(defn, blocks, prov, label), encoding="utf-8")
                written.append(path)
            continue
        b = defn.blocks[0]
        run = choose_run(runset, b.task, b.variant)
        record, problem = None, "no finished run of this cell"
        if run is not None:
            uri = artifact_uris(tracking_uri, [run.run_id]).get(run.run_id, "")
            record = read_artifact_json(tracking_uri, uri, ATTENTION_JSON)
            problem = f"the run logged no {ATTENTION_JSON}"
        caption = trace_caption(defn, record, run, label, problem)
        if record is not None:
            fig = trace_figure(record, title=f"{label(b.variant)}, {record.get('split')} "
                                             f"#{record.get('index')}")
            written += save_figure(fig, out / defn.id)
        path = out / f"{defn.id}.md"
        path.write_text("<!--\n" + "".join(f"  {ln}\n" for ln in prov.lines()) + "-->\n\n"
                        + (f"![{defn.id}]({defn.id}.png)\n\n" if record is not None else "")
                        + f"**Figure {defn.id}.** {caption}\n", encoding="utf-8")
        written.append(path)
    return written


__all__ = ["DEFS", "ExampleBlock", "ExhibitDef", "artifact_uris", "build_exhibits", "choose_run",
           "examples_blocks", "get_exhibit", "read_artifact_json", "trace_figure"]
