"""Code comments and docstrings say what and why, not when or where else.

History rots in code: an issue number, a date, a commit hash or a session's anecdote means
nothing to the next reader, and a "§4g" or a ``docs/...md`` path breaks silently when the page
is renumbered or moved. History belongs in commit messages, facts in the docs. A paper's section
or equation is a source and stays, written "sec. 5.1" or "eq. 14" so that "§" always means a
reference to the project's own pages.

The scan reads every comment (:mod:`tokenize`) and every bare string statement, i.e. every
module, class, function and attribute docstring (:mod:`ast`), of the Python files under
:data:`ROOTS`. String literals that are values (an error message that names a doc page) are
behaviour, not commentary, and are not scanned.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: Folders whose Python files are scanned.
ROOTS = ("locattn", "study", "record", "reports", "benchmarks", "examples")

#: What must not appear in a comment or docstring, by name.
PATTERNS: dict[str, re.Pattern[str]] = {
    # "issue 43", "issues 41 and 42", "PR 7", "#41" (not "&#41;" or a hex colour's "#222fff")
    "issue number": re.compile(r"\b(?:issues?|PRs?|pull requests?)\s+#?\d+\b|(?<![\w&#])#\d+\b",
                               re.IGNORECASE),
    # 2026-11-29 (a year and month alone, as JSON Schema's "draft 2020-12", is a version)
    "ISO date": re.compile(r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b"),
    # "as before d4de51b", "since commit 7d36462": a commit only the log can explain
    "commit hash": re.compile(
        r"\b(?:commit|before|since|after|until|in|from|of)\s+`{0,2}"
        r"(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
    # a section of the project's own pages ("docs/performance.md §4g", "REFERENCE §3")
    "section sign": re.compile("§"),
    # a doc page by path, or the out-of-tree reference notes
    "doc path": re.compile(r"\bdocs/[\w./-]*\.md\b|\bREFERENCE\.md\b|\bREFERENCE\s+(?:§|sec)"),
    # a test by its folder: tests/ is regrouped now and then; a test file's name is unique
    # across tests/ and stays (``test_graphed.py``, checked by test_cited_test_files_exist)
    "test path": re.compile(r"\btests/\w[\w./]*"),
}

#: A test file named in a comment or docstring (by its name alone, unique across tests/).
CITED_TEST = re.compile(r"(?<![\w./])(test_\w+\.py)\b")

#: (file relative to the repository, pattern name): the exceptions, each with its reason.
ALLOWED: dict[tuple[str, str], str] = {}


def commentary(source: str) -> list[tuple[int, str, str]]:
    """(line, ``comment`` or ``docstring``, text) of every comment and bare string statement
    in ``source`` (Python text)."""
    out: list[tuple[int, str, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], "comment", tok.string.lstrip("#")))
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            out.append((node.lineno, "docstring", node.value.value))
    return out


def problems(source: str, where: str = "<snippet>") -> list[str]:
    """One line per pattern match in ``source``'s comments and docstrings:
    ``where:line: kind: pattern name: 'excerpt'``."""
    found: list[str] = []
    if not any(pattern.search(source) for pattern in PATTERNS.values()):
        return found  # nothing anywhere in the text: no need to tokenize it
    for line, kind, text in commentary(source):
        for name, pattern in PATTERNS.items():
            if (where, name) in ALLOWED:
                continue
            for m in pattern.finditer(text):
                excerpt = " ".join(text[max(0, m.start() - 40):m.end() + 30].split())
                found.append(f"{where}:{line}: {kind}: {name}: {excerpt!r}")
    return found


def scanned_files() -> list[Path]:
    """The Python files under :data:`ROOTS`, sorted."""
    return sorted(p for root in ROOTS for p in (REPO / root).rglob("*.py"))


def test_no_history_in_comments_or_docstrings():
    files = scanned_files()
    assert len(files) > 100, f"scanned only {len(files)} files under {ROOTS}: wrong root?"
    found = [line for p in files
             for line in problems(p.read_text(encoding="utf-8"), str(p.relative_to(REPO)))]
    assert not found, ("history or doc references in code comments/docstrings (say the fact in "
                       "the comment's own words; history goes in the commit message):\n"
                       + "\n".join(found))


def test_cited_test_files_exist():
    tests = {p.name for p in (REPO / "tests").rglob("test_*.py")}
    sources = {p: p.read_text(encoding="utf-8") for p in scanned_files()}
    missing = [f"{p.relative_to(REPO)}:{line}: {m.group(1)}"
               for p, source in sources.items() if CITED_TEST.search(source)
               for line, _, text in commentary(source)
               for m in CITED_TEST.finditer(text) if m.group(1) not in tests]
    assert not missing, "comments/docstrings name test files that tests/ does not hold:\n" + (
        "\n".join(missing))


def test_allowlist_entries_are_still_needed():
    for (path, name), why in ALLOWED.items():
        source = (REPO / path).read_text(encoding="utf-8")
        hits = [text for _, _, text in commentary(source) if PATTERNS[name].search(text)]
        assert hits, f"ALLOWED[{path!r}, {name!r}] ({why}) matches nothing: remove it"


BAD_SNIPPET = '''\
"""Module docstring from issue 43."""
X = 1  # measured on 2026-11-29
#: see docs/performance.md for the numbers


class C:
    """Cached, as before d4de51b."""

    y = 2
    """Attribute docstring citing REFERENCE §3."""


def f():
    # fixes #41
    """Function docstring; tests/locattn/test_graphed.py checks it."""
'''


def test_scanner_catches_each_pattern():
    found = problems(BAD_SNIPPET)
    by_name = {name: [f for f in found if f": {name}: " in f] for name in PATTERNS}
    assert {name for name, hits in by_name.items() if hits} == set(PATTERNS), found
    lines = {int(f.split(":")[1]) for f in found}
    # module docstring, a trailing comment, a "#:" comment, a class and an attribute docstring,
    # a comment inside a function and its docstring
    assert lines == {1, 2, 3, 7, 10, 14, 15}, found
    assert sum(": issue number: " in f for f in found) == 2  # "issue 43" and "#41"
    assert sum(": doc path: " in f for f in found) == 2  # docs/performance.md, REFERENCE §3


def test_scanner_leaves_sources_and_values_alone():
    clean = '''\
"""Location attention (Dubois et al. 2020, sec. 5.1; Ray Chowdhury & Caragea, eqs. 10, 13)."""
SCHEMA = "https://json-schema.org/draft/2020-12/schema"  # JSON Schema draft 2020-12
HINT = "see docs/howto/gpu.md, issue 12, 2026-11-29, §4"
COLOUR = "#222"  # an HTML entity &#41; is no issue
REVISION = "dc11669786a5"  # alembic head ``dc11669786a5``
LIMIT = 3  # cfg.test_limit; test_graphed.py checks it
'''
    assert problems(clean) == []
    assert [m.group(1) for m in CITED_TEST.finditer(clean)] == ["test_graphed.py"]
