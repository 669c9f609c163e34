"""The ``placeopt`` command's stop signals while it is still starting.

Kept apart from :mod:`placement_opt.limits` and importing only ``os`` and ``signal`` (both
loaded with the interpreter), so that the handlers are in place before any slow import
(``typing``, NumPy, Numba) can be interrupted with a ``KeyboardInterrupt`` traceback.
"""

import os
import signal


def exit_on_stop_signal_during_startup() -> None:
    """Until the ``placeopt`` command installs its own stop handlers (its imports take a second
    or more on a loaded machine), a SIGINT or SIGTERM ends the process at once with the
    documented one-line message and exit status 128 + the signal, not a ``KeyboardInterrupt``
    traceback from inside an import. Nothing has been written yet, so nothing is lost."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _exit_during_startup)


def _exit_during_startup(signum: int, _frame: object) -> None:
    os.write(2, f"placeopt: interrupted ({signal.Signals(signum).name}) nothing written\n".encode())
    os._exit(128 + signum)
