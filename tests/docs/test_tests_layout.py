"""The layout docs/reference/tests.md gives for tests/: every test file in a folder that the page's
table names (a package's or a cross-package tier's), none directly in tests/, no ``__init__.py``
(a package tests/study/ would shadow the real ``study`` on pytest's sys.path), and no two test
files of one name (pytest imports each by its file name; MOVED_TO_SLOW names a check by it)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
PAGE = ROOT / "docs" / "reference" / "tests.md"


def _documented_folders() -> set[str]:
    """The folders in the page's "Where a test lives" table: ``| `tests/<name>/` | ... |``."""
    return set(re.findall(r"^\| `tests/([a-z0-9_]+)/` \|", PAGE.read_text(), flags=re.M))


def misplaced(tests: Path, folders: set[str]) -> list[str]:
    """The test files under ``tests`` that are not directly in one of ``folders``."""
    return [str(p.relative_to(tests.parent)) for p in sorted(tests.rglob("test_*.py"))
            if p.parent.parent != tests or p.parent.name not in folders]


def test_every_test_file_is_in_a_documented_folder() -> None:
    folders = _documented_folders()
    assert {"locattn", "study", "record", "reports"} <= folders, folders
    found = misplaced(TESTS, folders)
    assert not found, (f"test files outside the folders of {PAGE.relative_to(ROOT)} "
                       f"({', '.join(sorted(folders))}): {found}")


def test_the_placement_check_flags_a_flat_a_nested_and_an_undocumented_place(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    for rel in ("study/test_a.py", "test_flat.py", "study/deep/test_deep.py", "misc/test_misc.py"):
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text("")
    assert misplaced(tests, {"study"}) == ["tests/misc/test_misc.py", "tests/study/deep/test_deep.py",
                                           "tests/test_flat.py"]


def test_every_documented_folder_holds_tests() -> None:
    empty = sorted(f for f in _documented_folders() if not any((TESTS / f).glob("test_*.py")))
    assert not empty, f"folders the page names that hold no test file: {empty}"


def test_no_init_file_and_no_two_test_files_of_one_name() -> None:
    inits = sorted(str(p.relative_to(ROOT)) for p in TESTS.rglob("__init__.py"))
    assert not inits, f"__init__.py under tests/ (the folders stay namespace folders): {inits}"
    names = Counter(p.name for p in TESTS.rglob("*.py") if p.name != "conftest.py")
    twice = sorted(n for n, c in names.items() if c > 1)
    assert not twice, f"file names used twice under tests/: {twice}"
