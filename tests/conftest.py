"""Hygiene shared by every test module."""

from __future__ import annotations

import signal
import sys
import threading

import pytest

#: The signals a study driver takes over (study.driver.hold_signals, Interrupt).
HELD = (signal.SIGINT, signal.SIGTERM)


@pytest.fixture(autouse=True)
def restore_signal_handlers():
    """Put back the SIGINT/SIGTERM handlers a test found: a test that runs ``study.cli.main``
    in-process (``launch``, ``resume``) calls ``hold_signals``, which would otherwise leave
    Ctrl-C swallowed for the rest of the pytest run, and later tests would see its handlers.
    A signal such a hold remembered (``study.driver.early_signals``) is forgotten too: a later
    in-process launch would take it as its own and stop before its trials."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.getsignal(sig) for sig in HELD}
    yield
    for sig, handler in before.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
    driver = sys.modules.get("study.driver")  # (not imported here: most tests never load it)
    if driver is not None:
        driver.early_signals.clear()
