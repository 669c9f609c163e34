"""Input errors that the CLI reports as one line and exit status 2.

Every validation failure in placeopt raises :class:`InputError`, which names the
file, the field (a dotted JSON path such as ``models[3].profile``) and the reason.
The CLI turns it into ``placeopt: error: FILE: FIELD: REASON`` without a traceback.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: a malformed file, an unknown field or an impossible value."""

    def __init__(self, reason: str, field: str = "", file: str | None = None):
        self.reason = reason
        self.field = field
        self.file = file
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [p for p in (self.file, self.field) if p]
        return ": ".join(parts + [self.reason])

    def with_file(self, file: str) -> "InputError":
        """Return a copy that names ``file`` (kept if already set)."""
        return InputError(self.reason, self.field, self.file or file)

    def under(self, prefix: str) -> "InputError":
        """Return a copy whose field is prefixed with ``prefix`` (e.g. ``models[2]``)."""
        field = f"{prefix}.{self.field}" if self.field else prefix
        if self.field.startswith("["):
            field = f"{prefix}{self.field}"
        return InputError(self.reason, field, self.file)
