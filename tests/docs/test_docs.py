"""The docs site (mkdocs.yml, docs/) builds with warnings as errors, and its generated reference
pages come from the code (issue 42).

``mkdocs build --strict`` fails on a broken link, a missing page, a page left out of the nav and
a docstring mkdocstrings cannot read: it is in the ``readme`` tier (and ``slow``: about 20 s),
which ``.ci/run`` runs. The generators themselves are checked in the default tier.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from study import cli as study_cli

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "_hooks" / "reference.py"


def load_hook():
    spec = importlib.util.spec_from_file_location("docs_reference_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_has_every_subcommand_with_its_help() -> None:
    page = load_hook().cli_page()
    for sub in ("launch", "resume", "status", "runs", "ui", "migrate", "export", "import", "report"):
        assert f"### `study {sub}`" in page
    for cmd in ("locattn train", "locattn attention", "reports build", "reports list"):
        assert f"### `{cmd}`" in page
    assert "## `python -m locattn.offline`" in page
    # the page is --help verbatim: every option of `study launch` appears
    launch = next(a.choices["launch"] for a in study_cli.parser()._actions if isinstance(a.choices, dict))
    for action in launch._actions:
        for flag in action.option_strings:
            assert flag in page, flag


def test_the_spec_reference_lists_every_spec_key() -> None:
    from study.spec.checks import PROFILE_KEYS, SEARCH_KEYS, TOP_KEYS

    text = load_hook().spec_keys_markdown()
    for key in [*TOP_KEYS, *SEARCH_KEYS]:
        assert f"| `{key}` |" in text
    assert text.count("| yes |") == len(PROFILE_KEYS & set(TOP_KEYS))


def test_lists_after_a_paragraph_line_and_nested_by_two_spaces_render_as_lists() -> None:
    loosen = load_hook().loosen_lists
    assert loosen("Text:\n- a\n  - b\n- c") == "Text:\n\n- a\n    - b\n- c"
    assert loosen("```bash\nx\n- not a list\n```") == "```bash\nx\n- not a list\n```"


@pytest.mark.readme
@pytest.mark.slow
def test_the_docs_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="needs the docs extra: pip install -e '.[docs]'")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert "list_variants" in api and "build_reports" in api
