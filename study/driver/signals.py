"""The driver's signals: Ctrl-C and SIGTERM from the driver's start until Ray is shut down
(:class:`Interrupt`), a signal that came before (:func:`hold_signals`), and ``--time-limit``'s
deadline (:func:`deadline`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

from study.plan import slices

if TYPE_CHECKING:
    from ray.tune import ResultGrid, Tuner


def deadline(time_limit: float | None) -> tuple[float, float] | None:
    """(limit, monotonic time at which to stop) for a ``--time-limit`` from now, or None."""
    if time_limit is None:
        return None
    return time_limit, time.monotonic() + slices.stop_after(time_limit)


def limit_text(seconds: float) -> str:
    """``9m``, ``1h30m``, ``45s``: a duration as ``--time-limit`` takes it."""
    h, rem = divmod(int(round(seconds)), 3600)
    m, sec = divmod(rem, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (sec, "s")) if v) or "0s"


#: SIGINT/SIGTERM numbers a launch or resume received before its driver's :class:`Interrupt`
#: took over (:func:`hold_signals`); the driver then stops before the trials start.
early_signals: list[int] = []


def hold_signals() -> None:
    """Until a driver's :class:`Interrupt` takes over, remember a SIGINT or SIGTERM instead of
    raising: a ``KeyboardInterrupt`` inside an import (torch, numpy, Ray: the first seconds
    of ``study launch``) left modules half-built and ended in a ``RecursionError`` traceback."""
    for sig in Interrupt.SIGNALS:
        signal.signal(sig, lambda signum, frame: early_signals.append(signum))


class Interrupt:
    """Ctrl-C (SIGINT) or SIGTERM (a plain ``kill``, a scheduler or service manager stopping
    the driver), from the moment the driver starts its study until Ray is shut down.

    The first one sets ``event`` and says so in one line: during ``fit`` (:meth:`fit`) it also
    asks Tune to stop gracefully (its SIGUSR1 handler saves the experiment state); before it
    (the store opening, Ray starting: the first seconds of a launch) the driver skips the fit.
    Either way the study reports itself interrupted (exit status 130) and stays resumable. A
    second one during ``fit`` stops it at once (``KeyboardInterrupt`` inside :meth:`fit`);
    outside ``fit`` nothing is interrupted half-way (a ``KeyboardInterrupt`` inside
    ``ray.init`` aborted Ray's C++ core, exit -6): the study is stopping already.

    With a ``deadline`` (:func:`deadline`, ``--time-limit``), a timer asks for the same graceful
    stop at the deadline (a SIGTERM to this process while ``fit`` runs, or only ``event`` before
    it) and sets ``timed_out``: the study exits with :data:`study.plan.slices.EXIT_TIME_LIMIT`."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, name: str, out: TextIO, deadline: tuple[float, float] | None = None) -> None:
        self.name = name
        self.out = out
        self.event = threading.Event()
        self.previous: dict[int, Any] = {}
        self.deadline = deadline
        self.timed_out = False
        self.fitting = False
        self.fitted = False
        self.timer: threading.Timer | None = None
        if deadline is not None:
            self.timer = threading.Timer(max(0.0, deadline[1] - time.monotonic()), self._time_up)
            self.timer.daemon = True
            self.timer.start()

    def cancel(self) -> None:
        """Stop the deadline's timer (the driver is done)."""
        if self.timer is not None:
            self.timer.cancel()

    def _time_up(self) -> None:
        if self.event.is_set():
            return
        self.timed_out = True
        if self.fitting:
            os.kill(os.getpid(), signal.SIGTERM)  # handled by _handle, in the main thread
        else:
            self.event.set()
            print(f"[study {self.name}] time limit {limit_text(self.deadline[0])} reached before the "
                  "trials started", file=self.out, flush=True)

    def _handle(self, signum: int, frame: Any) -> None:
        again = self.event.is_set()
        self.event.set()
        if again and self.fitting:
            raise KeyboardInterrupt  # caught in fit()
        if again and not self.fitting:
            return  # (already stopping; said once)
        if self.timed_out and not again:
            print(f"[study {self.name}] time limit {limit_text(self.deadline[0])} nearly reached: "
                  "stopping the trials and saving state", file=self.out, flush=True)
        elif not self.fitting:
            when = "after the trials" if self.fitted else "before the trials started"
            print(f"[study {self.name}] interrupted ({signal.Signals(signum).name}) {when}: stopping",
                  file=self.out, flush=True)
            return
        else:
            print(f"[study {self.name}] interrupted ({signal.Signals(signum).name}): stopping the trials and "
                  "saving state (Ctrl-C again to stop at once)", file=self.out, flush=True)
        tune_handler = signal.getsignal(signal.SIGUSR1)
        if callable(tune_handler):
            tune_handler(signal.SIGUSR1, frame)  # Tune's graceful stop
            self.install()  # (Tune's handler reinstalled the previous SIGINT one)

    def fit(self, tuner: Tuner) -> ResultGrid | None:
        """``tuner.fit()`` unless the study is already stopping; None when it did not run or a
        second signal stopped it at once (Tune's state as of its last snapshot)."""
        if self.event.is_set():  # (a signal or a --time-limit spent before the fit)
            return None
        self.fitting = True
        try:
            return tuner.fit()
        except KeyboardInterrupt:
            self.event.set()
            return None
        finally:
            self.fitting = False
            self.fitted = True

    def install(self) -> "Interrupt":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                before = signal.signal(sig, self._handle)
                self.previous.setdefault(sig, before)
            if early_signals and not self.event.is_set():  # (one that came before, see hold_signals)
                self._handle(early_signals[0], None)
        return self

    def uninstall(self) -> None:
        self.fitting = False
        self.cancel()
        for sig, handler in self.previous.items():
            if handler is not None:
                signal.signal(sig, handler)
        self.previous = {}

    def __enter__(self) -> "Interrupt":
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()
