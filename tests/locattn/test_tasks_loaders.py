"""Loading user-supplied files: Long Lookup Tables TSVs, SCAN, CFQ; malformed input."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from locattn.tasks import TaskConfig, encode_examples, load_task

DATA = Path(__file__).parents[1] / "data"


def test_lookup_tsv_loads_as_is():
    task = load_task(TaskConfig(name="lookup", data_dir=str(DATA / "lookup")))
    assert list(task.splits) == ["train", "dev", "heldout_inputs", "longer_seen_1"]
    assert task.test_splits == ["heldout_inputs", "longer_seen_1"]
    first = task.splits["train"][0]
    assert first.src == ("000", "t1", ".") and first.tgt == ("000", "110")
    assert first.attn == (0, 1, 2)  # eos step attends "."
    assert task.splits["train"][3].attn == (0, 1, 2, 3, 4)
    assert task.splits["heldout_inputs"][0].tgt == ("000", "110", "100")  # "<eos>" dropped
    assert task.splits["longer_seen_1"][0].attn is None  # two-column file
    assert task.vocab.itos[4:12] == ["000", "001", "010", "011", "100", "101", "110", "111"]
    batch = encode_examples(task.splits["train"], task.vocab)
    assert batch.attn[3].tolist() == [0, 1, 2, 3, 4]
    assert batch.attn[0].tolist() == [0, 1, 2, -1, -1]


def test_noisy_lookup_tsv_drops_the_bang_index_only_when_listed():
    task = load_task(TaskConfig(name="noisy_lookup", data_dir=str(DATA / "lookup_noisy")))
    assert task.splits["train"][0].attn == (0, 3, 4)
    # the paper's Table 2 style lists "!" (index 3) as well: it is removed
    assert task.splits["dev"][0].attn == (0, 4, 5, 6, 7)
    assert task.splits["heldout_tables"][0].attn == (0, 2, 3)
    assert "!" in task.vocab.stoi


def _copy_dir(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_malformed_lookup_line_names_file_and_line(tmp_path):
    d = _copy_dir(DATA / "lookup", tmp_path / "lk")
    with open(d / "validation.tsv", "a") as f:
        f.write("\n000 t2 .\n")  # line 3 (line 2 is blank): no target column
    with pytest.raises(ValueError, match=r"validation\.tsv:3: expected 'src<TAB>tgt"):
        load_task(TaskConfig(name="lookup", data_dir=str(d)))
    (d / "validation.tsv").write_text("000 t2 .\t000 100\t0 x 2\n")
    with pytest.raises(ValueError, match=r"validation\.tsv:1: attention column must be integers"):
        load_task(TaskConfig(name="lookup", data_dir=str(d)))
    (d / "validation.tsv").write_text("000 t2 .\t000 100\t0 1 2 3 4\n")
    with pytest.raises(ValueError, match=r"validation\.tsv:1: gold attention has 5 entries"):
        load_task(TaskConfig(name="lookup", data_dir=str(d)))
    (d / "validation.tsv").write_text("000 t2 .\t000 100\t0 1 7\n")
    with pytest.raises(ValueError, match=r"validation\.tsv:1: gold attention index 7"):
        load_task(TaskConfig(name="lookup", data_dir=str(d)))


def test_lookup_dir_missing_files(tmp_path):
    (tmp_path / "train.tsv").write_text("000 t1 .\t000 110\n")
    with pytest.raises(FileNotFoundError, match="validation.tsv"):
        load_task(TaskConfig(name="lookup", data_dir=str(tmp_path)))
    (tmp_path / "validation.tsv").write_text("000 t1 .\t000 110\n")
    with pytest.raises(FileNotFoundError, match="no test files"):
        load_task(TaskConfig(name="lookup", data_dir=str(tmp_path)))


def test_scan_original_format_and_carved_dev():
    task = load_task(TaskConfig(name="scan", data_dir=str(DATA / "scan"), dev_size=2))
    assert len(task.splits["train"]) == 3 and len(task.splits["dev"]) == 2
    assert len(task.splits["test"]) == 1 and len(task.splits["test"][0].tgt) == 24
    every = {e.src: e.tgt for s in ("train", "dev") for e in task.splits[s]}
    assert every[("turn", "opposite", "left")] == ("I_TURN_LEFT", "I_TURN_LEFT")
    assert every[("run", "after", "jump")] == ("I_JUMP", "I_RUN")
    again = load_task(TaskConfig(name="scan", data_dir=str(DATA / "scan"), dev_size=2))
    assert again.splits["dev"] == task.splits["dev"]  # seeded carve


def test_scan_tab_separated_with_dev_file():
    task = load_task(TaskConfig(name="scan", data_dir=str(DATA / "scan_tsv")))
    assert [len(task.splits[s]) for s in ("train", "dev", "test")] == [3, 1, 1]
    assert task.splits["test"][0].tgt == ("I_RUN", "I_RUN")


def test_scan_malformed_and_missing(tmp_path):
    d = _copy_dir(DATA / "scan", tmp_path / "scan")
    with open(d / "tasks_test_length.txt", "a") as f:
        f.write("IN: walk twice I_WALK I_WALK\n")
    with pytest.raises(ValueError, match=r"tasks_test_length\.txt:2: 'IN:' line without ' OUT:'"):
        load_task(TaskConfig(name="scan", data_dir=str(d), dev_size=1))
    (d / "tasks_test_length.txt").unlink()
    with pytest.raises(FileNotFoundError, match="tasks_test_length.txt"):
        load_task(TaskConfig(name="scan", data_dir=str(d), dev_size=1))


def test_cfq_jsonl_and_tsv():
    task = load_task(TaskConfig(name="cfq", data_dir=str(DATA / "cfq")))
    assert [len(task.splits[s]) for s in ("train", "dev", "test")] == [2, 1, 1]
    assert task.splits["train"][0].src == ("Who", "directed", "M0", "?")
    assert task.splits["train"][0].tgt[:3] == ("SELECT", "DISTINCT", "?x0")
    assert task.test_splits == ["test"]
    assert "ns:film.editor.film" not in task.vocab.stoi  # test-only token -> <unk>
    ids = task.vocab.encode(task.splits["test"][0].tgt)
    assert task.vocab.unk_id in ids
    assert task.decode_cap(5) >= 5


def test_cfq_absent_says_where_to_put_files(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_task(TaskConfig(name="cfq"))
    assert "train.tsv, dev.tsv and test.tsv" in str(err.value)
    (tmp_path / "train.jsonl").write_text('{"question": "a ?"}\n')
    (tmp_path / "dev.tsv").write_text("a\tb\n")
    (tmp_path / "test.tsv").write_text("a\tb\n")
    with pytest.raises(ValueError, match=r"train\.jsonl:1: expected a JSON object"):
        load_task(TaskConfig(name="cfq", data_dir=str(tmp_path)))
    (tmp_path / "test.tsv").unlink()
    with pytest.raises(FileNotFoundError, match="missing test file"):
        load_task(TaskConfig(name="cfq", data_dir=str(tmp_path)))


@pytest.mark.parametrize("task, src, stem", [("lookup", DATA / "lookup", "train.tsv"),
                                              ("scan", DATA / "scan_tsv", "train.tsv"),
                                              ("cfq", DATA / "cfq", "dev.tsv")])
def test_bad_data_files_name_the_file_and_line(tmp_path, task, src, stem):
    """#27 item 13: non-UTF-8 bytes, an empty file, a reserved token and an overlong line are
    each one ValueError naming the file (and line), raised while loading, before any trial."""
    d = _copy_dir(src, tmp_path / task)
    path = d / stem
    good = path.read_text().splitlines()[0]
    src_col, tgt_col = good.split("\t")[:2]
    cases = [
        (good.encode() + b"\n" + "caf\u00e9".encode("latin-1") + b"\t1\n",
         rf"{stem}:2: not UTF-8 text \(byte 0xe9 at column 4\)"),
        (b"", rf"{stem}: no examples \(the file is empty or blank\)"),
        (b"\n  \n", rf"{stem}: no examples"),
        (f"{src_col}\t{tgt_col.split()[0]} <pad> {tgt_col}\n".encode(),
         rf"{stem}:1: the target holds the reserved token '<pad>'"),
        (f"<sos> {src_col}\t{tgt_col}\n".encode(), rf"{stem}:1: the source holds the reserved token '<sos>'"),
        (f"{src_col}\t{tgt_col}\n".encode() + b"x " * 5_000_000 + b"\tx\n",
         rf"{stem}:2: line longer than 100,000 characters"),
        (f"{src_col}\t{tgt_col}\n{' '.join(['x'] * 2_001)}\tx\n".encode(),
         rf"{stem}:2: the source has 2,001 tokens; at most 2,000"),
    ]
    for content, needle in cases:
        path.write_bytes(content)
        with pytest.raises(ValueError, match=needle) as info:
            load_task(TaskConfig(name=task, data_dir=str(d)), use_cache=False)
        assert str(path) in str(info.value) and "\n" not in str(info.value)
