"""Every task loads through its registry entry, the built-ins included: ``load_task`` calls the
loader the entry names, and each built-in family registers its own loader."""

from __future__ import annotations

import pytest

from locattn import registry
from locattn.tasks import config as task_config
from locattn.tasks import load as task_load
from locattn.tasks.config import TaskConfig


def test_each_builtin_task_registers_its_family_loader():
    targets = {name: registry.get("task", name).target for name in task_config.TASK_KEYS}
    assert targets == task_config.TASK_LOADERS
    assert {t.partition(":")[2] for t in targets.values()} == {
        "load_algorithmic", "load_lookup", "load_scan", "load_cfq", "load_raffel"}
    for name, target in targets.items():  # each one resolves to a loader of that name
        assert registry.get("task", name).load() is getattr(task_load, target.partition(":")[2])


@pytest.mark.parametrize("name, loader", [("dedupe", "load_algorithmic"),
                                          ("raffel_add", "load_raffel")])
def test_load_task_calls_the_loader_its_entry_names(monkeypatch, tmp_path, name, loader):
    calls = []
    real = getattr(task_load, loader)

    def spy(cfg, *, cache_dir, use_cache):
        calls.append(cfg.name)
        return real(cfg, cache_dir=cache_dir, use_cache=use_cache)

    monkeypatch.setattr(task_load, loader, spy)  # the entry's lazy "module:attr" resolves to it
    cfg = TaskConfig(name=name, train_size=20, dev_size=4, test_size=4, test_lengths=(15,))
    data = task_load.load_task(cfg, cache_dir=tmp_path)
    assert calls == [name] and data.name == name
    assert task_load.load_builtin(cfg, cache_dir=tmp_path, use_cache=True).splits.keys() == data.splits.keys()
