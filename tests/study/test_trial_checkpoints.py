"""The Tune checkpoints of a trial: which one a restore continues from, and how a checkpoint
saved before solo and packed trials shared one skeleton (``study.trial.trainable.Trial``) is read.

Hand-built checkpoint directories in the layouts the trainable writes; the kill/resume tests in
test_study, the fault tests (tests/faults/) and test_packed cover the trainable writing and
reading them.
"""

from __future__ import annotations

import json
from pathlib import Path

from locattn.training.checkpoint import file_sha256
from study.trial.trainable import (RUN_SUBDIR, STATE_DIGEST, STATE_FILE, newest_checkpoint, read_complete, staged_runs,
                                   state_digest, upgrade_state)

KEYS = [(0, "k0"), (1, "k1"), (2, "k2")]


def write_checkpoint(path: Path, state: dict, models: dict[str, bytes]) -> Path:
    """A Tune checkpoint directory: ``models`` maps a path under run/ to a state.pt's bytes."""
    files = {}
    for rel, blob in models.items():
        target = path / RUN_SUBDIR / rel / "state.pt"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob)
        files[str(target.relative_to(path))] = [len(blob), file_sha256(target)]
    path.mkdir(parents=True, exist_ok=True)
    body = {**state, "files": files}
    (path / STATE_FILE).write_text(json.dumps({**body, STATE_DIGEST: state_digest(body)}))  # as staged
    return path


def legacy_solo(path: Path, seed_index: int, epoch: int) -> Path:
    history = [{"epoch": e, "dev_score": e / 10} for e in range(1, epoch + 1)]
    state = {"seed_index": seed_index, "epoch": epoch, "scores": {"0": 0.5}, "history": history}
    return write_checkpoint(path, state, {"": b"model" * 10} if epoch else {})


def test_a_legacy_solo_checkpoint_resumes_its_seed_at_its_epoch(tmp_path: Path) -> None:
    ckpt = legacy_solo(tmp_path / "checkpoint_000004", seed_index=1, epoch=4)
    found = json.loads((ckpt / STATE_FILE).read_text())
    state, sources = upgrade_state(found, ckpt, KEYS)
    assert state["done"] == ["k0"]
    assert state["scores"] == {"0": 0.5}
    assert set(state["replicas"]) == {"k1"}
    assert state["replicas"]["k1"]["epoch"] == 4
    assert [h["epoch"] for h in state["replicas"]["k1"]["history"]] == [1, 2, 3, 4]
    assert sources == {"k1": ckpt / RUN_SUBDIR}
    assert (sources["k1"] / "state.pt").is_file()
    assert staged_runs(ckpt) == {"": (4, ckpt / RUN_SUBDIR)}


def test_a_legacy_solo_checkpoint_between_seeds_or_after_the_last(tmp_path: Path) -> None:
    between = legacy_solo(tmp_path / "a", seed_index=2, epoch=0)
    state, sources = upgrade_state(json.loads((between / STATE_FILE).read_text()), between, KEYS)
    assert state["done"] == ["k0", "k1"] and state["replicas"] == {} and sources == {}
    after = legacy_solo(tmp_path / "b", seed_index=3, epoch=0)
    state, sources = upgrade_state(json.loads((after / STATE_FILE).read_text()), after, KEYS)
    assert state["done"] == ["k0", "k1", "k2"] and state["replicas"] == {} and sources == {}


def test_todays_layout_keeps_one_trainer_checkpoint_per_unfinished_seed(tmp_path: Path) -> None:
    replicas = {"k1": {"epoch": 3, "history": []}, "k2": {"epoch": 2, "history": []}}
    ckpt = write_checkpoint(tmp_path / "c", {"replicas": replicas, "done": ["k0"], "scores": {"0": 1.0}},
                            {"k1": b"one" * 9, "k2": b"two" * 9})
    state, sources = upgrade_state(json.loads((ckpt / STATE_FILE).read_text()), ckpt, KEYS)
    assert state["replicas"] == replicas and state["done"] == ["k0"]
    assert sources == {"k1": ckpt / RUN_SUBDIR / "k1", "k2": ckpt / RUN_SUBDIR / "k2"}
    assert staged_runs(ckpt) == {"k1": (3, ckpt / RUN_SUBDIR / "k1"), "k2": (2, ckpt / RUN_SUBDIR / "k2")}


def test_the_restore_continues_from_the_most_advanced_intact_checkpoint(tmp_path: Path) -> None:
    trial = tmp_path / "trial_x"
    legacy_solo(trial / "checkpoint_000001", seed_index=1, epoch=2)  # less progress: never chosen
    new = write_checkpoint(trial / "checkpoint_000002",
                           {"replicas": {"k1": {"epoch": 5, "history": []}}, "done": ["k0"], "scores": {}},
                           {"k1": b"x" * 40})
    restored = legacy_solo(tmp_path / "restored", seed_index=1, epoch=3)
    path, state = newest_checkpoint(restored, trial)
    assert path == new and state["replicas"]["k1"]["epoch"] == 5
    # A corrupted file (same size, other bytes) makes the newest unusable: the next one wins.
    blob = new / RUN_SUBDIR / "k1" / "state.pt"
    blob.write_bytes(b"y" * 40)
    assert staged_runs(new) == {}
    path, state = newest_checkpoint(restored, trial)
    assert path == restored and state["epoch"] == 3
    # More seeds finished beats more epochs of an unfinished one.
    done = legacy_solo(trial / "checkpoint_000003", seed_index=2, epoch=0)
    assert newest_checkpoint(restored, trial)[0] == done


def test_the_fallback_ignores_tunes_snapshot_and_directory_names(tmp_path: Path) -> None:
    """#27 item 3, the race made on purpose: a restore from an older snapshot makes Tune reuse
    the names of newer checkpoints, so names, the snapshot's pick and progress disagree. The
    choice is the most advanced checkpoint whose files verify, whatever Tune hands over."""
    trial = tmp_path / "tune" / "trial_a"

    def stage(name: str, epoch: int, *, with_model: bool = True) -> Path:
        state = {"replicas": {"k1": {"epoch": epoch, "history": [{"epoch": e, "dev_loss": 1.0}
                                                                 for e in range(1, epoch + 1)]}},
                 "done": ["k0"], "scores": {}}
        return write_checkpoint(trial / name, state, {"k1": bytes([epoch]) * 64} if with_model else {})

    # Tune's snapshot named checkpoint_000002 (epoch 4); the driver after it wrote epochs 5..23
    # from index 3 on, over names that held epochs of an earlier attempt.
    snapshot = stage("checkpoint_000002", 4)
    for index, epoch in enumerate(range(14, 24), start=13):
        stage(f"checkpoint_{index:06d}", epoch)
    stage("checkpoint_000099", 25, with_model=False)  # a state without its model files
    stale = stage("checkpoint_000050", 30)
    (stale / RUN_SUBDIR / "k1" / "state.pt").write_bytes(b"\0" * 64)  # corrupt, same size
    newest = trial / "checkpoint_000022"
    blob = bytearray((newest / RUN_SUBDIR / "k1" / "state.pt").read_bytes())
    blob[:8] = bytes(8)
    (newest / RUN_SUBDIR / "k1" / "state.pt").write_bytes(bytes(blob))
    # The trial's own directory is unknown (no Tune context) or known: the same choice.
    for own in (None, trial):
        notices: list[str] = []
        path, state = newest_checkpoint(snapshot, own, notices)
        assert path == trial / "checkpoint_000021" and state["replicas"]["k1"]["epoch"] == 22
        # #27 item 11: each fallback is a line for the driver to print (workers' output is lost).
        assert sorted(n.split("/tune/trial_a/")[1].split("/")[0] for n in notices) == [
            "checkpoint_000022", "checkpoint_000050"]
    # #27 item 4: a same-size digit edit of the state file (its history) is caught too.
    text = (trial / "checkpoint_000021" / STATE_FILE).read_text()
    edited = text.replace('"dev_loss": 1.0', '"dev_loss": 2.0', 5)
    assert len(edited) == len(text) and edited != text
    (trial / "checkpoint_000021" / STATE_FILE).write_text(edited)
    assert read_complete(trial / "checkpoint_000021") is None
    path, state = newest_checkpoint(snapshot, trial)
    assert path == trial / "checkpoint_000020" and state["replicas"]["k1"]["epoch"] == 21


def test_a_state_stripped_of_its_own_checksum_is_corrupt(tmp_path: Path) -> None:
    """#27 item 4: deleting the state's ``sha256`` key must not let an edit of its history
    through: a state whose files carry digests but which has none of its own is refused (with
    a notice) and the restore falls back; a state from before checksums (sizes only) is read."""
    trial = tmp_path / "trial_s"

    def history(epoch: int, loss: float = 1.0) -> dict:
        return {"replicas": {"k1": {"epoch": epoch, "history": [{"epoch": e, "dev_loss": loss}
                                                                for e in range(1, epoch + 1)]}},
                "done": ["k0"], "scores": {}}

    older = write_checkpoint(trial / "checkpoint_000001", history(3), {"k1": b"a" * 32})
    newest = write_checkpoint(trial / "checkpoint_000002", history(4), {"k1": b"b" * 32})
    body = json.loads((newest / STATE_FILE).read_text())
    del body[STATE_DIGEST]
    body["replicas"]["k1"]["history"][0]["dev_loss"] = 2.0  # the edit the seal would have caught
    (newest / STATE_FILE).write_text(json.dumps(body))
    notices: list[str] = []
    assert read_complete(newest, notices) is None
    assert notices == [f"trial checkpoint file {newest / STATE_FILE} is corrupt (no checksum of its own); "
                       "falling back to an older checkpoint"]
    path, state = newest_checkpoint(None, trial)
    assert path == older and state["replicas"]["k1"]["epoch"] == 3
    # A state from before checksums (file sizes only, no seal) is still read, unverified.
    legacy = tmp_path / "trial_l" / "checkpoint_000001"
    (legacy / RUN_SUBDIR / "k1").mkdir(parents=True)
    (legacy / RUN_SUBDIR / "k1" / "state.pt").write_bytes(b"c" * 16)
    (legacy / STATE_FILE).write_text(json.dumps({**history(2), "files": {f"{RUN_SUBDIR}/k1/state.pt": 16}}))
    assert read_complete(legacy)["replicas"]["k1"]["epoch"] == 2
    # Not a JSON object: unusable, not an exception.
    (legacy / STATE_FILE).write_text("[1, 2]")
    assert read_complete(legacy) is None
