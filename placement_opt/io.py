"""Atomic file output: write to a temporary file beside the target, then rename."""

from __future__ import annotations

import json
import os
import tempfile


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never half."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=directory)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes it 0600; give it the mode open() would
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    """The process umask (read by setting a strict one for an instant, then restoring it)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def atomic_write_json(path: str, data) -> None:
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
