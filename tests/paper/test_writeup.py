"""The write-up's numbers are the generator's: README.md's "What we found", results/README.md's
agreement summary and list of runs from uncommitted code, and docs/findings.md's counts and
cell table are the blocks `python results/analysis/writeup.py --write` writes from the
committed records; and the counts rest on the records as the rules say (cells pooled over the
records of one campaign, every table a record's runs fill, every accuracy metric)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ANALYSIS = ROOT / "results" / "analysis"


@pytest.fixture(scope="module")
def analysis():
    sys.path.insert(0, str(ANALYSIS))
    try:
        import agreement_summary
        import writeup

        yield agreement_summary, writeup
    finally:
        sys.path.remove(str(ANALYSIS))


def test_every_generated_block_of_the_write_up_is_the_generators_output(analysis) -> None:
    _, writeup = analysis
    assert writeup.check() == []
    for f in writeup.FILES:  # the files hold blocks, not only markers
        assert writeup.OPEN.search(f.read_text(encoding="utf-8")), f


def test_a_number_changed_by_hand_in_a_block_fails_the_check(tmp_path: Path, analysis) -> None:
    _, writeup = analysis
    made = {"count": "123 of 311", "table": "| a | 1 |\n| b | 2 |"}
    doc = tmp_path / "doc.md"
    doc.write_text("x <!-- generated:count -->123 of 311<!-- /generated --> y\n"
                   "<!-- generated:table -->\n| a | 1 |\n| b | 2 |\n<!-- /generated -->\n")
    assert writeup.check((doc,), made) == []
    doc.write_text(doc.read_text().replace("123 of 311", "126 of 311"))
    assert [line.split(": ", 1)[1] for line in writeup.check((doc,), made)] == [
        "block 'count' differs from `python results/analysis/writeup.py --write`"]
    new, differ = writeup.render(doc.read_text(), made, "doc.md")
    assert differ == ["count"] and "123 of 311" in new and " y\n" in new  # text outside is kept
    doc.write_text("<!-- generated:nope -->1<!-- /generated -->")
    with pytest.raises(SystemExit, match="unknown generated block 'nope'; valid: count, table"):
        writeup.check((doc,), made)
    doc.write_text("<!-- generated:count -->1")
    with pytest.raises(SystemExit, match="without its <!-- /generated -->"):
        writeup.check((doc,), made)
    doc.write_text("<!-- generated:count -->123 of 311<!-- /generated -->")
    assert writeup.check((doc,), {"count": "123 of 311", "other": "x"}) == [
        "no file holds the generated block 'other'"]


def test_seeds_split_over_records_are_judged_together(analysis) -> None:
    """Table 4's −Step 2 and −Step 3 on Reverse Copy at the paper's budget: seeds 0–4 in
    rc_table4-paper, 5–19 in rc_table4-gpu_seeds20, one campaign; judged on all 20 seeds, not on
    5–19 alone (which put −Step 3's median at 4.6 / 0 / 0, "agreeing" with the paper's 0s)."""
    agr, _ = analysis
    s = agr.summarise()
    cells = {j.key: j for j in s.judged["paper"]["rc_table4"]}
    step3 = [cells[("onestep_no_step3", f"reverse_copy:len{n}")] for n in (15, 30, 100)]
    assert all(j.records == ("rc_table4-paper", "rc_table4-gpu_seeds20") for j in step3)
    assert [j.cell.n for j in step3] == [20, 20, 20]
    assert [round(j.cell.median, 1) for j in step3] == [100.0, 99.9, 99.2] and not any(j.agrees for j in step3)
    assert step3[0].test().k == 11
    # Table 4's own records at the paper's budget (the OneStepAttn cells a Table 2 record fills aside)
    own = [j for j in cells.values() if set(j.records) <= set(agr.POOLED[0])]
    assert (sum(j.agrees for j in own), len(own)) == (23, 30)
    assert len([x for x in s.families["rc_table4"] if set(x.judged.records) <= set(agr.POOLED[0])]) == 7


def test_a_records_runs_fill_every_table_they_fall_in(analysis) -> None:
    """rc_table2-monospread's study.json names Table 2 and 9; its RMonoAttn runs are Table 7
    cells too, at 30 epochs on the full data: RMonoAttn Reverse ReCopy 100 / 100 / 100 against
    the paper's 0 / 0 / 0."""
    agr, _ = analysis
    assert agr.tables_filled("rc_table2-monospread") == ("rc_table2", "rc_table9", "rc_table7")
    assert agr.tables_filled("raffel_variable-quick") == ("raffel_variable",)  # variable lengths only
    best = {j.key: j for j in agr.summarise().judged["best"]["rc_table7"]}
    rr = [best[("rmono", f"reverse_recopy:len{n}")] for n in (15, 30, 100)]
    assert all(j.records == ("rc_table2-monospread",) for j in rr)
    assert [round(j.cell.median, 1) for j in rr] == [100.0, 100.0, 100.0] and not any(j.agrees for j in rr)


def test_every_accuracy_metric_is_counted(analysis) -> None:
    """raffel_variable's metric is named ``accuracy``: its 4 cells are accuracy cells."""
    agr, _ = analysis
    from reports.tables import TABLES

    assert agr.is_accuracy_metric(TABLES["raffel_variable"]) and not agr.is_accuracy_metric(TABLES["rc_table9"])
    s = agr.summarise()
    assert s.counts["raffel_variable"]["quick"].nt == 4
    assert (s.total("quick").nt_within, s.total("quick").nt) == (123, 311)


def test_the_verdict_words_are_decided_in_one_place(analysis) -> None:
    """Below the paper's budget, or in no Holm family, a disagreement is never "contradicted";
    at the paper's budget it is when its Holm p is below 0.05."""
    agr, _ = analysis
    from reports.agreement import VERDICTS, success_test

    t = success_test([100.0] * 10, 0.0)
    assert t.p_value < 0.05
    assert agr.verdict_word(99.0, t, paper_budget=True, holm_p=None) == VERDICTS[1]
    assert agr.verdict_word(99.0, t, paper_budget=False, holm_p=0.01) == VERDICTS[1]
    assert agr.verdict_word(99.0, t, paper_budget=True, holm_p=0.2) == VERDICTS[1]
    assert agr.verdict_word(99.0, t, paper_budget=True, holm_p=0.01) == VERDICTS[2]
    assert agr.verdict_word(5.0, t, paper_budget=True, holm_p=0.01) == VERDICTS[0]
    # success_rates.py's files use the same words: no Holm family there, so never "contradicted"
    for f in ANALYSIS.glob("success_rates-*.md"):
        assert "| contradicted |" not in f.read_text(encoding="utf-8"), f


def test_writeup_check_is_one_line_per_block_and_exit_1(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ANALYSIS / "writeup.py"), "--print", "nope"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("writeup.py: unknown block 'nope'; valid: ")
    assert "Traceback" not in done.stderr


def test_an_independent_recount_from_the_committed_csvs_gives_the_generators_numbers(analysis) -> None:
    """results/analysis/recount.py reads only the committed CSVs (and the records' study.json
    budgets): its counts per table and column, and its Holm family sizes, are the summary's."""
    agr, _ = analysis
    import recount

    counts, families = recount.recount()
    s = agr.summarise()
    assert counts == {t: {k: (c.nt_within, c.nt, c.within, c.compared) for k, c in cols.items()}
                      for t, cols in s.counts.items()}
    assert families == {t: len(f) for t, f in s.families.items()}


def test_a_campaign_merges_its_records_by_run_identity(analysis) -> None:
    """A campaign's records are read as one: runs two records hold equal are taken once (a
    record with itself is itself), and every seed names the record it came from."""
    agr, _ = analysis
    alone = agr.merged(agr.Campaign(("rc_table7-gpu",)), "rc_table7")
    twice = agr.merged(agr.Campaign(("rc_table7-gpu", "rc_table7-gpu")), "rc_table7")
    assert {k: c.seeds for k, c in twice.result.cells.items()} == {k: c.seeds for k, c in alone.result.cells.items()}
    pooled = agr.merged(agr.Campaign(("rc_table7-gpu", "rc_table7-gpu_seeds20")), "rc_table7")
    seen = pooled.origin[("mix_onestep", "copy:len15")]
    assert sorted(seen) == list(range(10))
    assert {s for s, r in seen.items() if r == "rc_table7-gpu_seeds20"} == set(range(5, 10))
    assert pooled.dirty[("mix_onestep", "copy:len15")] == set(range(5))  # seeds 0-4 ran uncommitted code


CAMPAIGN_FILES = sorted((ROOT / "results" / "campaigns").glob("*.yaml"))


@pytest.mark.parametrize("campaign", CAMPAIGN_FILES, ids=[p.stem for p in CAMPAIGN_FILES])
def test_committed_campaign_tables_regenerate_byte_for_byte(campaign: Path, tmp_path: Path) -> None:
    """results/campaigns/<name>/ is `reports build <name>.yaml --compare --solved 90` (its
    records read as one), as results/analysis/regenerate.py writes it."""
    from reports.build import build_reports

    written = build_reports(campaign, formats=("md", "latex", "csv"), out_dir=tmp_path, compare=True,
                            solved_at=90)
    folder = campaign.with_suffix("")
    assert sorted(p.name for p in written) == sorted(p.name for p in folder.iterdir())
    for path in written:
        assert (folder / path.name).read_bytes() == path.read_bytes(), f"{folder / path.name} differs"
