"""Hygiene shared by every test module."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import sys
import threading
import warnings
from pathlib import Path

import pytest

# The suite runs from worktrees with uncommitted code by design: every launch and resume (in this
# process and in the drivers it starts) takes --allow-dirty (study.driver.launch.ALLOW_DIRTY_ENV).
# tests/e2e/test_record_trust.py unsets it to test the refusal itself.
os.environ["LOCATTN_ALLOW_DIRTY"] = "1"


def pytest_configure(config: pytest.Config) -> None:
    """Give Ray's token authentication its token before pytest-xdist's workers start.

    A private local Ray (``study.driver.process.init_ray``) runs with token authentication, and when
    ``~/.ray/auth_token`` is missing the first ``ray.init`` writes it, truncating then writing.
    Two workers starting their Rays at once (``python -m pytest -n 2``) then raced: one GCS read
    the empty file and aborted ("Token authentication is enabled but Ray couldn't find an
    authentication token"), and every later ``ray.init`` in that worker failed with it (41
    errors in one run on a fresh machine). The controller writes the file once, atomically, as
    Ray would (256 random bits, hex), and never replaces one that exists."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    token = Path.home() / ".ray" / "auth_token"
    if token.exists():
        return
    token.parent.mkdir(parents=True, exist_ok=True)
    tmp = token.with_name(f".auth_token.{os.getpid()}")
    tmp.write_text(secrets.token_hex(32))
    tmp.chmod(0o600)
    os.replace(tmp, token)


@pytest.fixture(autouse=True)
def _ray_auth_mode_as_before():
    """Put ``RAY_AUTH_MODE`` back after each test. ``study launch|resume`` run in-process (the
    CLI tests: dry runs, refusals) set it to ``token`` in this process's environment for the
    private Ray they would start; a later test's ``init_ray`` in the same pytest process then
    started a GCS its driver could not authenticate to ("InvalidAuthToken"), and every test of
    the module errored (24 in the default tier: test_study, test_offline, test_exhibits, ...)."""
    before = os.environ.get("RAY_AUTH_MODE")
    yield
    if before is None:
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        os.environ["RAY_AUTH_MODE"] = before


_CHECKOUT_MLRUNS = Path(__file__).resolve().parents[1] / "mlruns"


@pytest.fixture(autouse=True)
def _nothing_written_into_the_checkout(request: pytest.FixtureRequest):
    """A store without an artifact location puts its artifacts (a dirty tree's code.diff) in
    ``./mlruns`` of the working directory: from a test run in the checkout, into the checkout,
    where they can be committed by mistake. Whatever a test leaves there is removed and named
    in a warning, so the culprit shows in the summary and the tree stays clean."""
    before = _CHECKOUT_MLRUNS.exists()
    yield
    if not before and _CHECKOUT_MLRUNS.exists():
        shutil.rmtree(_CHECKOUT_MLRUNS, ignore_errors=True)
        warnings.warn(f"{request.node.nodeid} wrote {_CHECKOUT_MLRUNS} (removed): give its store an "
                      "artifact location or monkeypatch.chdir(tmp_path)", stacklevel=1)


#: Checks moved from the default tier to the ``slow`` tier, so that the README's test
#: command (``python -m pytest -n auto``) stays near 10 minutes on a 2-core machine. ``.ci/run``
#: runs them (``-m "slow or ..."``). Each was among the slowest 40 of ``--durations`` (seconds
#: under a load of 5-10, beside other test runs); node ids, a parametrized test by its name.
MOVED_TO_SLOW = {
    "test_compiled.py::test_compiled_batch_equals_eager_within_rounding": 193,
    "test_one_line_errors.py::test_a_local_ray_that_cannot_start_is_one_line_and_the_study_resumes": 147,
    "test_study_cli.py::test_a_real_launch_names_runs_by_what_differs_and_prints_no_token_line": 110,
    "test_researcher_loop.py::test_a_real_study_nests_its_seeds_under_a_cell_run_with_their_medians": 83,
    "test_untrusted_checkpoints.py::test_corrupt_and_crafted_checkpoints_never_fail_or_run_code": 72,
    "test_graphed.py::test_a_shrinking_pack_that_keeps_its_size_trains_its_live_replicas_to_the_bit": 120,
    "test_resume.py::test_sigkill_during_epoch_3_then_resume_equals_uninterrupted": 54,
    "test_reports_e2e.py::test_rest_reader_matches_sql": 46,
    "test_graphed.py::test_graphed_packs_of_seeds_by_learning_rates_equal_graphed_solo_runs": 45,
    "test_driver_faults.py::test_credentials_are_never_saved_or_printed": 44,
    "test_gpu_profile.py::test_a_gpu_profile_on_a_machine_without_a_gpu_stops_before_any_trial": 33,
    "test_researcher_loop.py::test_ui_of_a_moved_study_serves_its_own_store_prints_the_url_when_ready_and_stops_on_ctrl_c": 32,
    "test_migrate.py::test_a_launch_writes_the_format_and_a_format_0_study_migrates_and_resumes": 30,
    "test_cli_exit.py::test_program_keeps_mains_status_and_its_output": 50,
    "test_store_faults.py::test_read_only_root_is_one_line": 26,
    "test_packed_decode.py::test_packed_greedy_scoring_equals_solo_scoring": 24,
    "test_graphed.py::test_an_interrupted_graphed_pack_resumes_exactly": 24,
    # every spec's smoke study through the real launcher: 17 studies (the README's own smoke
    # study runs in the readme tier, and test_study.py launches real studies by default)
    "test_ablations.py::test_smoke_profile_runs": 0,
    # Moved in a second round: the default tier took 13 min 21 s alone on the machine (load 1-2,
    # 1,430 tests) and 12 min 39 s in CI; these were its slowest 20 but one (the plain
    # kill-and-resume study, test_study.py::test_kill_driver_then_resume, stays in the default tier).
    "test_launch_packs.py::test_an_ablation_pack_is_one_trial_killed_resumed_equal_to_solo_runs": 102,
    "test_study.py::test_packed_seeds_killed_resumed_equal_sequential_seeds": 82,
    "test_study.py::test_packed_learning_rates_by_seeds_killed_resumed_equal_unpacked_runs": 80,
    "test_plugins_study.py::test_a_spec_plugin_outside_the_repo_trains_and_a_resume_trusts_only_what_it_is_told": 72,
    # the three share one module fixture that launches three smoke studies (46 s)
    "test_exhibits.py::test_rc_table10_from_the_store": 46,
    "test_exhibits.py::test_dubois_fig9_from_the_store": 0,
    "test_exhibits.py::test_dubois_interp_from_the_store": 0,
    "test_plugins_study.py::test_plugin_attenders_declared_packable_train_packed_through_study_launch": 41,
    "test_plugins_study.py::test_the_worked_example_installs_lists_trains_and_reports": 40,
    "test_offline.py::test_a_deadline_stops_at_an_epoch_and_study_resume_continues_there": 39,
    "test_study.py::test_nan_trial_is_recorded_failed_while_others_finish": 29,
    "test_ui_screenshot.py::test_study_ui_opens_a_row_per_cell_with_its_medians_in_the_metric_columns": 27,
    "test_set_overrides.py::test_a_resume_set_of_operational_fields_keeps_the_finished_runs": 25,
    "test_study.py::test_ui_serves_the_study_on_loopback": 24,
    "test_study.py::test_a_time_limited_slice_says_how_to_resume_at_its_concurrency": 23,
    "test_study.py::test_optuna_sees_only_complete_results_and_resume_keeps_state": 22,
    "test_study_slices.py::test_eta_weights_cells_by_cost": 29,
}


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the checks of :data:`MOVED_TO_SLOW` ``slow``."""
    for item in items:
        module = item.nodeid.split("/")[-1]
        if module.split("[")[0] in MOVED_TO_SLOW:
            item.add_marker(pytest.mark.slow)


#: The signals a study driver takes over (study.driver.signals.hold_signals, Interrupt).
HELD = (signal.SIGINT, signal.SIGTERM)


@pytest.fixture(autouse=True)
def restore_signal_handlers():
    """Put back the SIGINT/SIGTERM handlers a test found: a test that runs ``study.cli.main``
    in-process (``launch``, ``resume``) calls ``hold_signals``, which would otherwise leave
    Ctrl-C swallowed for the rest of the pytest run, and later tests would see its handlers.
    A signal such a hold remembered (``study.driver.signals.early_signals``) is forgotten too: a later
    in-process launch would take it as its own and stop before its trials."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.getsignal(sig) for sig in HELD}
    yield
    for sig, handler in before.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
    driver = sys.modules.get("study.driver.signals")  # (not imported here: most tests never load it)
    if driver is not None:
        driver.early_signals.clear()
