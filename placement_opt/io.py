"""File input and output: the one JSON reader, and atomic writes.

:func:`read_json` reads every JSON file placeopt takes (instances, placements, profiles, cost
tables, architectures, workloads) and refuses what Python's ``json`` would let through or
turn into a traceback: unreadable files, malformed JSON, text that is not UTF-8, nesting too
deep to parse, NaN and Infinity, keys given twice in one object, control and
bidirectional-override characters in keys and strings, and files over the size cap
(``limits.MAX_FILE_BYTES``). Output goes to a temporary file beside the target, then is
renamed over it, so readers see the old file or the new one, never half.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable, Optional

from placement_opt.errors import InputError
from placement_opt.limits import read_capped
from placement_opt.validation import reject_non_finite


def read_json(path: str, field: str = "", *, referenced: bool = False,
              precheck: Optional[Callable[[Any], None]] = None) -> Any:
    """The parsed JSON document of file ``path``.

    Errors name ``path`` as the file and the position (``line L column C``) or the JSON path
    of a NaN as the field. A ``referenced`` document (a file named inside another, such as an
    instance's profile) is reported at ``field`` of the referencing file instead, with ``path``
    and the position in the reason; the caller's file is added by its own error handling.
    ``precheck`` as for :func:`parse_json`.
    """
    return read_json_bytes(path, field, referenced=referenced, precheck=precheck)[0]


def read_json_bytes(path: str, field: str = "", *, referenced: bool = False,
                    precheck: Optional[Callable[[Any], None]] = None) -> tuple[Any, bytes]:
    """:func:`read_json` and the file's bytes (e.g. for a digest of exactly what was read);
    ``precheck`` as for :func:`parse_json`."""
    try:
        with open(path, "rb") as f:
            raw = read_capped(f, "")
    except OSError as e:
        raise _read_error(f"cannot read file: {e.strerror}", "", path, field, referenced) from None
    except InputError as e:  # over the size cap
        raise _read_error(e.reason, "", path, field, referenced) from None
    try:
        data = parse_json(raw, field, lambda reason, position: _read_error(reason, position, path, field, referenced),
                          precheck)
    except InputError as e:  # a NaN's error names its JSON path; the file is added here
        raise (e if referenced else e.with_file(path)) from None
    return data, raw


def parse_json(text: str | bytes, field: str = "",
               error: Callable[[str, str], InputError] = InputError,
               precheck: Optional[Callable[[Any], None]] = None) -> Any:
    """Parsed JSON text, with NaN and Infinity refused at their JSON path under ``field``.

    ``precheck`` sees the document right after parsing, before the walk over every value
    (seconds on a document of a million objects): cheap size checks refuse a huge document
    there, at once.

    Bytes must be UTF-8 (a leading byte-order mark is allowed, as in trace files). Malformed
    JSON, other bytes and nesting too deep to parse raise ``error(reason, position)``: by
    default an :class:`InputError` whose field is the position (``line L column C``)."""
    try:
        data = json.loads(text.decode("utf-8-sig") if isinstance(text, bytes) else text,
                          object_pairs_hook=_object_of_unique_keys)
    except DuplicateKey as e:
        raise error(f"malformed JSON: key {e.key!r} appears twice in one object", "") from None
    except json.JSONDecodeError as e:
        raise error(f"malformed JSON: {e.msg}", f"line {e.lineno} column {e.colno}") from None
    except UnicodeDecodeError:
        raise error("malformed JSON: not UTF-8 text", "") from None
    except RecursionError:
        raise error("malformed JSON: nested too deeply", "") from None
    if precheck is not None:
        precheck(data)
    reject_non_finite(data, field)
    return data


class DuplicateKey(Exception):
    """A JSON object names ``key`` twice (Python's json would keep the last silently)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _object_of_unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict; a key given twice raises :class:`DuplicateKey`."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def _read_error(reason: str, position: str, path: str, field: str, referenced: bool) -> InputError:
    """The error of reading ``path``: at ``position`` of that file, or, for a ``referenced``
    document, at ``field`` of the file that names it."""
    if not referenced:
        return InputError(reason, position, path)
    return InputError(f"{reason} (in {path}{' at ' + position if position else ''})", field)


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never half."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=directory)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes it 0600; give it the mode open() would
        with os.fdopen(fd, "wb") as f:
            f.write(data)
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


def atomic_write_json(path: str, data: Any) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically (see :func:`atomic_write_text`)."""
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
