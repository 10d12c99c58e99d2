"""The cost model's calibration table: seconds per 1,000 tokens per (device, task, variant
family), measured by ``benchmarks/bench_cost.py`` and committed as :data:`CALIBRATION_FILE`;
rows a table lacks are medians of the rows it has (:meth:`Calibration.rate`). Standard library only.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

#: The committed calibration table (``benchmarks/bench_cost.py --out`` rewrites it).
CALIBRATION_FILE = Path(__file__).with_name("cost_calibration.json")
#: Devices a plan prices. A device with no row in the table is printed as unmeasured.
DEVICES = {"cpu": "this CPU, one core per run", "h100": "one NVIDIA H100", "h200": "one NVIDIA H200"}


@dataclass(frozen=True, kw_only=True)
class Rate:
    """One calibration row: seconds of one thread per 1,000 tokens, and start-up per run."""

    device: str
    """``cpu`` (one core of the machine the bench ran on) or a GPU name (``h100``)."""
    task: str
    """Task key."""
    family: str
    """Variant family (:func:`study.cost.pricing.variant_family`)."""
    train: float
    """Training seconds per 1,000 training tokens (forward, backward, optimizer step)."""
    dev: float
    """Per-epoch scoring seconds per 1,000 dev tokens (Raffel: the held-out split), checkpoint
    included."""
    test: float
    """End-of-run seconds per 1,000 test tokens (greedy decoding of every test split)."""
    startup: float
    """Seconds before a run's first epoch: a fresh process's imports, the data, the model."""
    pack: int = 1
    """Runs trained at once when the row was measured. A GPU row (``benchmarks/bench_gpu.py
    --calibrate``) times K runs of one cell as one graphed pack: its rates are one run's share,
    the pack's wall seconds / K, so a run's price is per seed-epoch of a pack of K. CPU rows: 1
    (one thread, one run)."""
    path: str = "eager"
    """The ``RunConfig.train_path`` the row was timed on (``bench_cost.py --train-path``):
    ``eager``, ``compiled`` (seq2seq) or ``fused`` (regressors). A run on another path is priced
    by that path's rows where the table has them, else by the eager rows."""


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """The calibration table: its rows and how they were measured."""

    rates: tuple[Rate, ...]
    """One row per (device, task, family) measured."""
    study_startup: float = 0.0
    """Seconds a study spends before its first trial starts (Ray, the store, Tune)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Where the rows come from: command, machine, load average, date."""

    def devices(self) -> list[str]:
        """Devices with at least one row."""
        return sorted({r.device for r in self.rates})

    def rate(self, device: str, task: str, family: str, pack: int | None = None,
             path: str = "eager") -> tuple[Rate | None, str]:
        """The row for (device, task, family) and how it was found: ``measured``, ``task``
        (the task's median over its measured families), ``family`` (the family's median over
        tasks), or (None, ``unmeasured``) when the device has no row at all.

        Of a device measured at several pack sizes, the rows of the largest pack that is at
        most ``pack`` (any pack when None) are used; none that small: unmeasured. A ``path``
        other than eager is priced by that path's rows where :meth:`priced_path` finds them, else
        by the eager rows."""
        priced = self.priced_path(device, task, family, path)
        rows = [r for r in self.rates if r.device == device and r.path == priced
                and (pack is None or r.pack <= pack)]
        if rows:
            largest = max(r.pack for r in rows)
            rows = [r for r in rows if r.pack == largest]
        for r in rows:
            if r.task == task and r.family == family:
                return r, "measured"
        for how, match in (("task", [r for r in rows if r.task == task]),
                           ("family", [r for r in rows if r.family == family])):
            if match:
                return _median_rate(match, device, task, family), how
        return None, "unmeasured"


    def priced_path(self, device: str, task: str, family: str, path: str) -> str:
        """The train path whose rows price a run on ``path``: ``path`` itself when ``device`` has a
        row of that path for the run's task, else ``eager``. A path's gain depends on the
        task's lengths (``fused`` gains nothing at T0 = 50 and 2.4x over lengths 50-10,000), so
        another task's rows do not carry over."""
        if path != "eager" and any(r.device == device and r.path == path and r.task == task
                                   for r in self.rates):
            return path
        return "eager"


def _median_rate(rows: Sequence[Rate], device: str, task: str, family: str) -> Rate:
    return Rate(device=device, task=task, family=family, pack=rows[0].pack, path=rows[0].path,
                **{k: statistics.median(getattr(r, k) for r in rows)
                   for k in ("train", "dev", "test", "startup")})


def calibration_from_dict(body: dict[str, Any]) -> Calibration:
    """Parse the calibration JSON (``{"meta": ..., "study_startup": s, "rates": [...]}``)."""
    return Calibration(rates=tuple(Rate(**row) for row in body.get("rates", [])),
                       study_startup=float(body.get("study_startup", 0.0)),
                       meta=dict(body.get("meta") or {}))


def calibration_to_dict(cal: Calibration) -> dict[str, Any]:
    """Inverse of :func:`calibration_from_dict` (rows sorted, rates rounded to 4 digits)."""
    rows = sorted(cal.rates, key=lambda r: (r.device, r.task, r.family, r.pack, r.path != "eager", r.path))
    return {"meta": cal.meta, "study_startup": round(cal.study_startup, 2),
            "rates": [{"device": r.device, "task": r.task, "family": r.family,
                       **{k: float(f"{getattr(r, k):.4g}") for k in ("train", "dev", "test", "startup")},
                       **({"pack": r.pack} if r.pack != 1 else {}),
                       **({"path": r.path} if r.path != "eager" else {})}
                      for r in rows]}


def device_key(name: str) -> str:
    """The table's key for a device name: ``NVIDIA H100 80GB HBM3`` -> ``h100``, ``NVIDIA A100-SXM4-40GB``
    -> ``a100``; another name lower-cased with non-alphanumerics as ``-``."""
    m = re.search(r"\b([A-Z]{1,2}\d{2,4})\b", name.replace("-", " "))
    return m.group(1).lower() if m else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def merge_rates(cal: Calibration, rates: Sequence[Rate], meta: dict[str, Any] | None = None) -> Calibration:
    """``cal`` with ``rates`` added, each replacing the row of the same (device, task, family,
    pack, path); the other rows (other devices, other cells, other paths) are kept. ``meta``
    goes under the key of the rates' device in the table's meta, ``device/path`` for a path
    other than eager (one device and path per call)."""
    devices = {(r.device, r.path) for r in rates}
    if len(devices) > 1:
        raise ValueError(f"merge_rates takes the rows of one device and path, got {sorted(devices)}")
    keys = {(r.device, r.task, r.family, r.pack, r.path) for r in rates}
    kept = tuple(r for r in cal.rates if (r.device, r.task, r.family, r.pack, r.path) not in keys)
    new_meta = dict(cal.meta)
    if meta is not None and devices:
        device, path = devices.pop()
        new_meta[device if path == "eager" else f"{device}/{path}"] = dict(meta)
    return Calibration(rates=kept + tuple(rates), study_startup=cal.study_startup, meta=new_meta)


@lru_cache(maxsize=4)
def load_calibration(path: str | Path = CALIBRATION_FILE) -> Calibration:
    """The calibration table at ``path`` (the committed one by default); an empty table if the
    file is missing, so a plan still prints (with the flat fallback, and says so)."""
    try:
        return calibration_from_dict(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        return Calibration(rates=())
