"""Regenerate every committed result file from the committed records, in the order that makes
them consistent: each record's tables (results/manifest.json names them and the options:
``--table``, ``--compare``, ``--solved``), each campaign's tables (results/campaigns/<name>.yaml:
its records read as one, into results/campaigns/<name>/, with ``--compare --solved 90``), then
every results/analysis/*.md from the command on its first line, then the write-up's generated
blocks (results/analysis/writeup.py).

    python results/analysis/regenerate.py            # rewrite what differs, name each file
    python results/analysis/regenerate.py --check    # exit 1 naming each file that differs
    python results/analysis/regenerate.py --manifest # also add to the manifest every table a
                                                     # record's runs fill (agreement_summary.py)

``tests/paper/test_results.py`` checks the first two steps byte for byte, ``tests/paper/test_writeup.py``
the third. Nothing is written under ``--check``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import agreement_summary as agr  # results/analysis/, beside this script
import writeup
from made_by import MADE_BY
from reports.build import build_reports

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
MANIFEST = RESULTS / "manifest.json"


def manifest_with_filled_tables(manifest: dict) -> dict:
    """``manifest`` with each record's ``tables`` holding every judged table its runs fill
    (agreement_summary.tables_filled) after the ones it names, and ``files`` to match."""
    out = {}
    for record, entry in manifest.items():
        study = agr.study_json(record)["resolved"].get("tables", [])
        named = list(entry.get("tables") or study)
        extra = [t for t in agr.tables_filled(record) if t not in named]
        if not extra:
            out[record] = entry
            continue
        tables = named + extra
        files = sorted(set(entry["files"]) | {f"{t}.{ext}" for t in extra for ext in ("csv", "md", "tex")})
        out[record] = {"tables": tables, **{k: v for k, v in entry.items() if k not in ("tables", "files")},
                       "files": files}
    return out


def tables(manifest: dict, check: bool) -> list[Path]:
    """Rebuild every record's tables into results/<record>/; the files that differ."""
    differ = []
    for record, entry in manifest.items():
        with tempfile.TemporaryDirectory() as tmp:
            written = build_reports(RESULTS / "record" / record, study=record, tables=entry.get("tables"),
                                    formats=("md", "latex", "csv"), out_dir=Path(tmp),
                                    compare=entry["compare"], solved_at=entry.get("solved"))
            if sorted(p.name for p in written) != sorted(entry["files"]):
                raise SystemExit(f"results/manifest.json: {record} lists {sorted(entry['files'])}, "
                                 f"the build writes {sorted(p.name for p in written)}")
            for path in written:
                committed = RESULTS / record / path.name
                if not committed.exists() or committed.read_bytes() != path.read_bytes():
                    differ.append(committed)
                    if not check:
                        committed.parent.mkdir(parents=True, exist_ok=True)
                        committed.write_bytes(path.read_bytes())
    return differ


def campaign_tables(check: bool) -> list[Path]:
    """Rebuild each campaign file's tables (results/campaigns/<name>.yaml, its records read as
    one) into results/campaigns/<name>/; the files that differ."""
    differ = []
    for path in sorted((RESULTS / "campaigns").glob("*.yaml")):
        with tempfile.TemporaryDirectory() as tmp:
            for out in build_reports(path, formats=("md", "latex", "csv"), out_dir=Path(tmp),
                                     compare=True, solved_at=90):
                committed = path.with_suffix("") / out.name
                if not committed.exists() or committed.read_bytes() != out.read_bytes():
                    differ.append(committed)
                    if not check:
                        committed.parent.mkdir(parents=True, exist_ok=True)
                        committed.write_bytes(out.read_bytes())
    return differ


def analyses(check: bool) -> list[Path]:
    """Rerun every results/analysis/*.md from its made-by line; the files that differ."""
    differ = []
    prefix, suffix = f"<!-- {MADE_BY}python results/analysis/", " -->"
    for committed in sorted((RESULTS / "analysis").glob("*.md")):
        head = committed.read_text(encoding="utf-8").splitlines()[0]
        if not (head.startswith(prefix) and head.endswith(suffix)):
            raise SystemExit(f"{committed}: its first line names no command ({head!r})")
        script, *args = head[len(prefix):-len(suffix)].split()
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / committed.name
            done = subprocess.run([sys.executable, str(RESULTS / "analysis" / script), *args, "--out", str(out)],
                                  cwd=ROOT, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{committed}: {script} failed: {done.stderr.strip().splitlines()[-1:]}")
            if out.read_bytes() != committed.read_bytes():
                differ.append(committed)
                if not check:
                    committed.write_bytes(out.read_bytes())
    return differ


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()), allow_abbrev=False)
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each file that differs")
    ap.add_argument("--manifest", action="store_true",
                    help="first add every table a record's runs fill to results/manifest.json")
    args = ap.parse_args(argv)
    manifest = json.loads(MANIFEST.read_text())
    if args.manifest:
        new = manifest_with_filled_tables(manifest)
        if new != manifest:
            if args.check:
                print("results/manifest.json: a record's runs fill tables it does not list", file=sys.stderr)
                return 1
            MANIFEST.write_text(json.dumps(new, indent=1) + "\n")
            manifest = new
    differ = tables(manifest, args.check) + campaign_tables(args.check) + analyses(args.check)

    if args.check:
        problems = [f"{p.relative_to(ROOT)} differs from a rebuild" for p in differ] + writeup.check()
        for line in problems:
            print(line, file=sys.stderr)
        return 1 if problems else 0
    for p in differ + writeup.write():
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
