"""A mistyped flag on any of the three command lines: one line naming the sub-command, the
closest valid option and all of them; exit 2; nothing run."""

from __future__ import annotations

import pytest

from locattn.cli import main as locattn_main
from reports.cli import main as reports_main
from study.cli import main as study_main
from tests.locattn.test_cli import run_main


@pytest.mark.parametrize(
    "main, argv, prefix, hint, valid",
    [
        (study_main, ["launch", "ablations/rc_table2.yaml", "--profiles", "smoke"],
         "study launch: error: unrecognized arguments: --profiles smoke", "did you mean --profile?",
         "--dry-run"),
        (study_main, ["launch", "ablations/rc_table2.yaml", "--dryrun", "--maxconcurrent", "2"],
         "study launch: error: unrecognized arguments:",
         "did you mean --dry-run for --dryrun, --max-concurrent for --maxconcurrent?", "--only"),
        (study_main, ["resume", "some-study", "--adress", "auto"],
         "study resume: error: unrecognized arguments: --adress auto", "did you mean --address?",
         "--progress-seconds"),
        (reports_main, ["build", "studies/x", "--tabel", "rc_table2"],
         "reports build: error: unrecognized arguments: --tabel rc_table2",
         "did you mean --table?", "--strict"),
        (locattn_main, ["train", "--task", "copy", "--variant", "onestep", "--seeed", "1"],
         "locattn train: error: unrecognized arguments: --seeed 1", "did you mean --seed?",
         "--variant"),
    ],
)
def test_mistyped_flag_names_subcommand_closest_option_and_all_options(
    capsys, main, argv, prefix, hint, valid
) -> None:
    code, out, err = run_main(argv, capsys, main)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(prefix), lines[0]
    assert hint in lines[0] and "valid options:" in lines[0] and valid in lines[0]


def test_unknown_flag_without_a_close_match_lists_the_options_only(capsys) -> None:
    code, _, err = run_main(["status", "s", "--zzzzzz"], capsys, study_main)
    assert code == 2
    assert err.startswith("study status: error: unrecognized arguments: --zzzzzz; valid options: ")
    assert "did you mean" not in err and "--root" in err
