"""Where the executor's processes meet: a torch.distributed init method no other run can take.

Picking a free TCP port and handing it to the workers leaves a gap: the port is released
before rank 0's store binds it, and any process on the host may take it in between (two runs
started at once, a test suite on several workers), so the workers fail to start. A FileStore
in a fresh private folder has no such gap: nothing else knows the path. It serves gloo and
NCCL alike (the store only bootstraps the process group) on one host, which is all the
executor runs on.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Iterator


@contextlib.contextmanager
def rendezvous() -> Iterator[str]:
    """Yield a ``file://`` init method for one process group and remove its folder on exit.

    Hold the context while the group's processes live: the store file must outlive every
    rank's start, and a file left from an earlier group must never be reused (torch's
    FileStore reads what is already in it).
    """
    folder = tempfile.mkdtemp(prefix="placeopt-rendezvous-")
    try:
        yield "file://" + os.path.join(folder, "store")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
