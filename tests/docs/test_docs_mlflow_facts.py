"""What docs/howto/mlflow-ui.md says the MLflow UI cannot do, checked against the installed
MLflow, so that an upgrade that adds a switch fails here and the page (and ``study ui``'s saved
view) can use it.

- No setting turns the Assistant panel off: the UI opens it on the first load from a loopback
  host name and keeps its state in the browser's local storage; MLflow's environment variables
  about the assistant only govern remote use and its sandbox.
- The runs page reads the search facets that ``study report --html``'s cell links carry.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

mlflow = pytest.importorskip("mlflow")

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
PAGE = ROOT / "docs" / "howto" / "mlflow-ui.md"


def _ui_code() -> str:
    files = sorted(BUNDLE.glob("*.js"))
    assert files, f"no UI bundle under {BUNDLE}"
    return "\n".join(f.read_text(errors="replace") for f in files)


def test_the_assistant_panel_has_no_off_switch_as_the_how_to_says() -> None:
    from mlflow import environment_variables as env

    assistant = sorted(n for n in dir(env) if n.startswith("MLFLOW_") and "ASSISTANT" in n)
    assert assistant == ["MLFLOW_ASSISTANT_SANDBOX_CLI_IMAGE", "MLFLOW_ENABLE_ASSISTANT_SANDBOX",
                         "MLFLOW_ENABLE_REMOTE_ASSISTANT"], assistant
    code = _ui_code()
    assert 'key:"mlflow.assistant.panelOpen"' in code
    assert 'key:"mlflow.assistant.fab.autoOpenedOnFirstLoad"' in code
    assert '"localhost"===e||"127.0.0.1"===e||"::1"===e' in code
    text = PAGE.read_text()
    assert "`mlflow.assistant.panelOpen`" in text and "MLFLOW_ENABLE_REMOTE_ASSISTANT" in text


def test_the_url_facets_a_cell_link_uses_are_the_ui_s_own() -> None:
    # reports.html.cell_url's searchFilter, orderByKey and orderByAsc: the facets the runs page
    # reads from its URL (tests/study/test_ui_screenshot.py opens such a link in a real server's UI)
    facets = re.search(r'\["searchFilter","orderByKey","orderByAsc",[^\]]*\]', _ui_code())
    assert facets, "the runs page's URL facets moved"
    assert "--html" in PAGE.read_text()
