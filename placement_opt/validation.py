"""Small helpers that read typed values out of parsed JSON with precise errors.

They are used by every ``from_dict`` constructor so that an error always names the
field that is wrong and why (scikit-learn style input validation).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from placement_opt.errors import InputError


def check_keys(d: Any, field: str, required: Iterable[str], optional: Iterable[str] = ()) -> dict:
    """Require ``d`` to be an object with exactly the allowed keys."""
    if not isinstance(d, dict):
        raise InputError(f"expected an object, got {type(d).__name__}", field)
    required = tuple(required)
    allowed = set(required) | set(optional)
    for key in d:
        if key not in allowed:
            where = f"{field}.{key}" if field else key
            raise InputError(f"unknown field (allowed: {', '.join(sorted(allowed))})", where)
    for key in required:
        if key not in d:
            where = f"{field}.{key}" if field else key
            raise InputError("missing required field", where)
    return d


def reject_non_finite(value: Any, field: str = "") -> None:
    """Refuse NaN and Infinity anywhere in parsed JSON (Python's json accepts these literals)."""
    stack = [(value, field)]
    while stack:  # iterative: deeply nested input must not overflow the Python stack
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise InputError(f"{item} is not a valid JSON number (NaN and Infinity are refused)", where)
        if isinstance(item, dict):
            stack.extend((v, _join(where, str(k))) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))


def _join(field: str, key: str) -> str:
    return f"{field}.{key}" if field else key


def get_number(d: dict, key: str, field: str, default: Any = None, *, minimum: float | None = None,
               exclusive_minimum: float | None = None, maximum: float | None = None) -> float:
    """Read a finite real number, with optional bounds."""
    where = _join(field, key)
    value = d.get(key, default)
    if value is None:
        raise InputError("missing required field", where)
    return as_number(value, where, minimum=minimum, exclusive_minimum=exclusive_minimum, maximum=maximum)


def as_number(value: Any, where: str, *, minimum: float | None = None,
              exclusive_minimum: float | None = None, maximum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"expected a number, got {type(value).__name__}", where)
    value = float(value)
    if not math.isfinite(value):
        raise InputError(f"must be finite, got {value}", where)
    if minimum is not None and value < minimum:
        raise InputError(f"must be >= {minimum:g}, got {value:g}", where)
    if exclusive_minimum is not None and value <= exclusive_minimum:
        raise InputError(f"must be > {exclusive_minimum:g}, got {value:g}", where)
    if maximum is not None and value > maximum:
        raise InputError(f"must be <= {maximum:g}, got {value:g}", where)
    return value


def get_int(d: dict, key: str, field: str, default: Any = None, *, minimum: int | None = None,
            maximum: int | None = None) -> int:
    """Read an integer (JSON integers only; 2.0 is refused to catch typos)."""
    where = _join(field, key)
    value = d.get(key, default)
    if value is None:
        raise InputError("missing required field", where)
    return as_int(value, where, minimum=minimum, maximum=maximum)


def as_int(value: Any, where: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"expected an integer, got {type(value).__name__}", where)
    if minimum is not None and value < minimum:
        raise InputError(f"must be >= {minimum}, got {value}", where)
    if maximum is not None and value > maximum:
        raise InputError(f"must be <= {maximum}, got {value}", where)
    return value


def get_str(d: dict, key: str, field: str, default: Any = None, *, choices: Iterable[str] | None = None) -> str:
    where = _join(field, key)
    value = d.get(key, default)
    if value is None:
        raise InputError("missing required field", where)
    if not isinstance(value, str):
        raise InputError(f"expected a string, got {type(value).__name__}", where)
    if not value:
        raise InputError("must not be empty", where)
    if choices is not None:
        choices = tuple(choices)
        if value not in choices:
            raise InputError(f"must be one of {', '.join(choices)}, got {value!r}", where)
    return value


def get_list(d: dict, key: str, field: str, default: Any = None, *, nonempty: bool = True) -> list:
    where = _join(field, key)
    value = d.get(key, default)
    if value is None:
        raise InputError("missing required field", where)
    if not isinstance(value, list):
        raise InputError(f"expected a list, got {type(value).__name__}", where)
    if nonempty and not value:
        raise InputError("must not be empty", where)
    return value
