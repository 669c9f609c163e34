"""Progress displays on stderr: a bar with count, total and ETA (tqdm), and notes for slow
set-up steps.

On a terminal a :class:`ProgressBar` redraws one line in place; elsewhere (a log file, CI) it
prints the same text as a new line at most every ``every_s`` seconds, so logs stay readable.
Nothing here computes what it shows: callers pass the numbers (a solver passes the score of
the placement it would return if stopped now, see ``solvers/backends.py``).
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from types import TracebackType
from typing import IO, Iterator, Optional

from tqdm import tqdm

#: seconds a silent step may take before it says what it is doing
SLOW_STEP_S = 1.0


class ProgressBar:
    """``label: 40%|####      | 4/10 [00:03<00:05, 1.2task/s, best 0.9809]`` on stderr.

    ``total`` None: the count and rate without a percentage or ETA. ``enabled`` False: prints
    nothing (the solvers' ``progress=false`` option, sweep workers).
    """

    def __init__(self, label: str, total: Optional[int] = None, unit: str = "it", enabled: bool = True,
                 every_s: float = 1.0, stream: Optional[IO[str]] = None) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.enabled = enabled
        self.every_s = every_s
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.perf_counter()
        self.last = -float("inf")
        self.count = 0
        self.postfix = ""
        self.closed = False
        self.bar: Optional[tqdm] = None
        if enabled and _is_terminal(self.stream):
            self.bar = tqdm(total=total, desc=label, unit=unit, file=self.stream, leave=True, dynamic_ncols=True,
                            mininterval=0.2)

    def due(self) -> bool:
        """Whether the next :meth:`update` would be shown (lets callers skip computing its numbers)."""
        return self.enabled and not self.closed and time.perf_counter() - self.last >= self.every_s

    def update(self, count: int, total: Optional[int] = None, postfix: Optional[str] = None, force: bool = False) -> None:
        """Set the count done (and the total, when it became known, and the text after the rate)."""
        if not self.enabled or self.closed:
            return
        self.count = count
        if total is not None:
            self.total = total
        if postfix is not None:
            self.postfix = postfix
        if not force and not self.due():
            return
        self.last = time.perf_counter()
        self._show()

    def close(self, postfix: Optional[str] = None, count: Optional[int] = None) -> None:
        """Show the final count (and ``postfix``) once more and end the line."""
        if not self.enabled or self.closed:
            return
        if count is not None:
            self.count = count
        if postfix is not None:
            self.postfix = postfix
        self._show()
        if self.bar is not None:
            self.bar.close()
        self.closed = True

    def text(self) -> str:
        """The current line, as tqdm formats it."""
        return tqdm.format_meter(self.count, self.total, time.perf_counter() - self.start, unit=self.unit,
                                 prefix=self.label, postfix=self.postfix or None)

    def _show(self) -> None:
        if self.bar is not None:
            if self.total is not None and self.bar.total != self.total:
                self.bar.total = self.total
            self.bar.n = self.count
            self.bar.set_postfix_str(self.postfix, refresh=False)
            self.bar.refresh()
        else:
            print(self.text(), file=self.stream, flush=True)

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, kind: Optional[type], value: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close()


def _is_terminal(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@contextmanager
def slow_step(what: str, stream: Optional[IO[str]] = None, after_s: float = SLOW_STEP_S,
              enabled: bool = True) -> Iterator[None]:
    """Say ``placeopt: WHAT ...`` on stderr if the block is still running after ``after_s``
    seconds (and how long it took when it ends), so a long silent set-up explains itself."""
    if not enabled:
        yield
        return
    out = stream if stream is not None else sys.stderr
    start = time.perf_counter()
    said = threading.Event()

    def announce() -> None:
        said.set()
        print(f"placeopt: {what} ...", file=out, flush=True)

    timer = threading.Timer(after_s, announce)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()  # an announcement under way ends before the closing line
        if said.is_set():
            print(f"placeopt: {what}: done in {time.perf_counter() - start:.1f} s", file=out, flush=True)
