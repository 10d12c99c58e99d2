"""How many cells of a table agree with the paper, counted first where the paper's number is
not trivially near zero.

Most of the agreement between a failing reproduction and a paper sits in cells where both
score about 0: a model that fails a split agrees with a paper whose model fails it too. So an
accuracy table's agreement is counted twice: over the cells where the paper reports more than
:data:`NONTRIVIAL` percent (the count that says whether a result reproduces), and over every
compared cell. Tables whose metric is not an accuracy (edit distance, attnLoss, epochs) get the
second count only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping

from locattn import registry
from reports.aggregate import TableResult, wilcoxon_pair
from reports.paper import PaperValue
from reports.render import paper_diff
from reports.tables import TableDef

NONTRIVIAL = 10.0
"""A published accuracy above this (percent) makes a cell non-trivial."""
TOLERANCE = 10.0
"""Accuracy (%): ours within this many points of the paper counts as agreement (the write-up's
verdict, :func:`verdict`; a table's cells use their metric's registered tolerance)."""


class _Rules(Mapping[str, str]):
    """{metric record key: its agreement tolerance in words}, read from the metric registry
    (:func:`locattn.register_metric`'s ``tolerance``): a live view, so a plugin metric appears."""

    def _metrics(self) -> dict[str, str]:
        return {str(e.meta["key"]): e.meta["tolerance"].rule
                for e in registry.entries("metric").values()}

    def __getitem__(self, key: str) -> str:
        return self._metrics()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._metrics())

    def __len__(self) -> int:
        return len(self._metrics())


#: Per metric (by record key), the agreement tolerance and why (:func:`tolerance`), as the
#: metric registry gives it. One tolerance in units for every metric made a 10-token edit
#: distance on a 7-token Lookup target, and 10 epochs on a count of 2, "agreement".
TOLERANCE_RULES: Mapping[str, str] = _Rules()


def metric_tolerance(metric: str, table: TableDef | None = None) -> registry.Tolerance:
    """The tolerance of ``metric`` (a name or record key): the one ``table`` keeps for its own
    metric (a study's own or a plugin's table, recorded with the study), else the registered
    one, else the default (:data:`locattn.registry.DEFAULT_TOLERANCE`)."""
    if table is not None and table.tolerance is not None and metric == table.metric:
        kind, amount, rule, fallback = table.tolerance
        return registry.Tolerance(kind, amount, rule, fallback)
    try:
        return registry.metric(metric).meta["tolerance"]
    except registry.UnknownNameError:
        return registry.DEFAULT_TOLERANCE


@dataclass(frozen=True)
class Agreement:
    """Agreement counts of one table against its published numbers."""

    table: str
    """Table id."""
    compared: int
    """Cells with both a published number and a result of ours."""
    within: int
    """Compared cells where ours agrees with the paper by the metric's tolerance (:func:`tolerance`)."""
    nontrivial: int | None
    """Compared cells where the paper reports more than :data:`NONTRIVIAL` %; None when the
    table's metric is not an accuracy."""
    nontrivial_within: int | None
    """Of those, the ones within :data:`TOLERANCE` points."""
    published: int
    """Published cells of the table (with or without a result of ours)."""
    rule: str = ""
    """The table metric's tolerance in words (:data:`TOLERANCE_RULES`)."""

    def sentence(self) -> str:
        """One line, the non-trivial count first: ``rc_table2: 31 of 60 cells where ...``."""
        every = (f"{self.within} of {self.compared} compared cells in all "
                 f"({self.published} published)")
        if self.nontrivial is None:
            return f"{self.table}: {every} agree with the paper ({self.rule})"
        return (f"{self.table}: {self.nontrivial_within} of {self.nontrivial} cells where the "
                f"paper reports more than {NONTRIVIAL:g} % are within {TOLERANCE:g} points; "
                f"{every}")


def is_accuracy(result: TableResult) -> bool:
    """Whether the table shows an accuracy in percent (the non-trivial count applies): a split
    table, higher is better, whose metric the registry marks an accuracy
    (:func:`locattn.registry.is_accuracy`)."""
    t = result.table
    accuracy = registry.is_accuracy(t.metric) if t.accuracy is None else t.accuracy
    return t.kind == "split" and accuracy and t.direction == "max"


#: The record key of the accuracy an ``epochs_or_accuracy`` table shows where the epoch count
#: never reached 100 % (Raffel & Ellis: a greyed cell).
GREYED_METRIC = "accuracy"


def tolerance(table: TableDef, column: str, paper_value: float, diff: float, *, greyed: bool = False) -> bool:
    """Whether ours (``paper_value + diff``) agrees with ``paper_value`` in ``column`` of
    ``table``, by its metric's registered tolerance (:data:`TOLERANCE_RULES`); ``greyed``: a
    Raffel & Ellis cell that shows an accuracy, not an epoch count. A column whose label is a
    number gives the target length a ``per_token`` tolerance scales with."""
    metric = GREYED_METRIC if table.kind == "epochs_or_accuracy" and greyed else table.metric
    label = next(c.label for c in table.columns if c.key == column)
    return metric_tolerance(metric, table).agrees(paper_value, diff,
                                           length=float(label) if label.isdigit() else None)


def cell_agreement(result: TableResult, paper: Mapping[tuple[str, str], PaperValue]) -> dict[tuple[str, str], tuple[bool, bool]]:
    """Per compared cell (variant, column key): (agrees by the metric's tolerance
    (:func:`tolerance`), non-trivial: an accuracy the paper reports above :data:`NONTRIVIAL` %).
    A Raffel & Ellis cell where one side reached 100 % and the other never did is compared, and
    disagrees. Cells without a result of ours, or without a published number, are absent."""
    out = {}
    accuracy = is_accuracy(result)
    for (row, col), p in paper.items():
        if (row, col) not in result.cells:
            continue
        cell = result.cell(row, col)
        if result.table.kind == "epochs_or_accuracy" and not cell.missing and cell.greyed != p.greyed:
            out[(row, col)] = (False, False)  # never reached the criterion on one side only
            continue
        d = paper_diff(result.table, result.stat, cell, p)
        if d is None:
            continue
        out[(row, col)] = (tolerance(result.table, col, p.value, d, greyed=p.greyed),
                           accuracy and p.value > NONTRIVIAL)
    return out


def agreement(result: TableResult, paper: Mapping[tuple[str, str], PaperValue]) -> Agreement:
    """Count agreement of ``result`` with ``paper`` (keyed by (variant, column key)), each cell
    by its metric's tolerance (:func:`cell_agreement`)."""
    cells = cell_agreement(result, paper).values()
    accuracy = is_accuracy(result)
    return Agreement(
        table=result.table.id, compared=len(cells), within=sum(ok for ok, _ in cells),
        nontrivial=sum(nt for _, nt in cells) if accuracy else None,
        nontrivial_within=sum(ok and nt for ok, nt in cells) if accuracy else None,
        published=len(paper), rule=metric_tolerance(result.table.metric, result.table).rule,
    )


def best_rows(result: TableResult, paper: Mapping[tuple[str, str], PaperValue]) -> list[tuple[str, str, str]]:
    """Per column with published numbers: (column key, the paper's best row, our best row)
    honouring the metric's direction ("" where a side has no number): the check of a table
    whose claim is an ordering."""
    t = result.table
    sign = 1.0 if t.direction == "min" else -1.0
    out = []
    for col in t.columns:
        theirs = {r: p.value for (r, c), p in paper.items() if c == col.key}
        ours = {r: (result.cell(r, col.key).mean if result.stat in ("mean", "mean_std")
                    else result.cell(r, col.key).median) for r in t.rows}
        ours = {r: v for r, v in ours.items() if v is not None}
        if theirs:
            out.append((col.key, min(theirs, key=lambda r: sign * theirs[r]),
                        min(ours, key=lambda r: sign * ours[r]) if ours else ""))
    return out


# ---------------------------------------------------------------------------------------------
# Success rates: is a disagreement seed luck, or a different success rate?

PAPER_SEEDS = 5
"""Seeds behind each published median of Ray Chowdhury & Caragea (and Dubois et al.)."""
ALPHA = 0.05
VERDICTS = ("reproduced", "not reproduced at this budget", "contradicted")


@dataclass(frozen=True)
class SuccessTest:
    """Our success count on one cell against the count the paper's median implies."""

    k: int
    """Our seeds that reached the threshold."""
    n: int
    """Our finished seeds."""
    low: float
    """Clopper-Pearson 95 % interval of our success rate, lower end."""
    high: float
    """... upper end."""
    paper_k: int
    """The paper's success count most favourable to agreement that its median allows: 3 of 5
    when the median reached the threshold (at least 3 seeds did), 2 of 5 when it did not."""
    paper_n: int
    p_value: float
    """One-sided Fisher exact test of ours against ``paper_k`` of ``paper_n``, in the direction
    of the disagreement (1.0 when ours lies on the paper's side)."""

    def text(self) -> str:
        return (f"{self.k}/{self.n} [{100 * self.low:.0f}–{100 * self.high:.0f} %] vs paper "
                f"{'≥' if self.paper_k > self.paper_n // 2 else '≤'}{self.paper_k}/{self.paper_n}, "
                f"p = {self.p_value:.3g}")


def clopper_pearson(k: int, n: int, alpha: float = ALPHA) -> tuple[float, float]:
    """Exact two-sided (1 - alpha) interval of a binomial rate k/n (n > 0)."""
    from scipy.stats import beta  # scipy only where statistics are asked for

    if not 0 <= k <= n or n <= 0:
        raise ValueError(f"need 0 <= k <= n and n > 0, got k={k}, n={n}")
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def success_test(values: list[float], paper_value: float, threshold: float = 90.0,
                 paper_seeds: int = PAPER_SEEDS) -> SuccessTest:
    """Test our per-seed ``values`` (%) against a published median ``paper_value`` (%).

    A seed succeeds when it reaches ``threshold``. The paper's median of ``paper_seeds`` seeds
    only bounds its success count: a median at or above the threshold means at least
    ceil(paper_seeds / 2) seeds succeeded, below it at most floor(paper_seeds / 2). The test
    takes the bound nearest to ours, so a small p-value is evidence of a different success
    rate whatever the paper's other seeds did.
    """
    from scipy.stats import fisher_exact  # scipy only where statistics are asked for

    n = len(values)
    k = sum(v >= threshold for v in values)
    low, high = clopper_pearson(k, n)
    paper_solved = paper_value >= threshold
    paper_k = (paper_seeds + 1) // 2 if paper_solved else paper_seeds // 2
    table = [[k, n - k], [paper_k, paper_seeds - paper_k]]
    if paper_solved and k / n < paper_k / paper_seeds:
        p = float(fisher_exact(table, alternative="less").pvalue)
    elif not paper_solved and k / n > paper_k / paper_seeds:
        p = float(fisher_exact(table, alternative="greater").pvalue)
    else:
        p = 1.0
    return SuccessTest(k=k, n=n, low=low, high=high, paper_k=paper_k, paper_n=paper_seeds,
                       p_value=p)


def verdict(diff: float, test: SuccessTest, *, paper_budget: bool) -> str:
    """The word a write-up may use for one cell (one of :data:`VERDICTS`).

    ``reproduced``: our median is within :data:`TOLERANCE` of the paper's. ``contradicted``:
    not, at the paper's budget, with at least :data:`PAPER_SEEDS` seeds, and a success-rate
    test below :data:`ALPHA`. Anything else is ``not reproduced at this budget``.
    """
    if abs(diff) <= TOLERANCE:
        return VERDICTS[0]
    if paper_budget and test.n >= PAPER_SEEDS and test.p_value < ALPHA:
        return VERDICTS[2]
    return VERDICTS[1]


# ---------------------------------------------------------------------------------------------
# Two arms of one study (an ablation against its control, one attender against another): is
# the difference larger than seed variance?


@dataclass(frozen=True)
class ArmTest:
    """Per-seed values of arm A against arm B on one split, over the seeds both have."""

    a_k: int
    """Seeds of A at or above the threshold."""
    b_k: int
    n: int
    """Seeds compared."""
    fisher_p: float
    """Two-sided Fisher exact test of the success counts."""
    wilcoxon_p: float
    """Two-sided Wilcoxon signed-rank test of the per-seed differences (the test the tables'
    ties use, reports.aggregate.wilcoxon_pair; 1.0 when every difference is zero)."""


def compare_arms(a: Mapping[int, float], b: Mapping[int, float], threshold: float = 90.0) -> ArmTest:
    """Test arm ``a``'s values (%, keyed by seed) against arm ``b``'s over their shared seeds:
    success counts at ``threshold`` (Fisher) and paired values (Wilcoxon), both two-sided."""
    from scipy.stats import fisher_exact  # scipy only where statistics are asked for

    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise ValueError(f"the arms share no seed (A: {sorted(a)}, B: {sorted(b)})")
    a_k = sum(a[s] >= threshold for s in seeds)
    b_k = sum(b[s] >= threshold for s in seeds)
    n = len(seeds)
    fisher = float(fisher_exact([[a_k, n - a_k], [b_k, n - b_k]]).pvalue)
    paired, _ = wilcoxon_pair({s: a[s] for s in seeds}, {s: b[s] for s in seeds})
    return ArmTest(a_k=a_k, b_k=b_k, n=n, fisher_p=fisher, wilcoxon_p=paired)
