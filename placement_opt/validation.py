"""Input validation with precise errors: declared dataclass fields, and typed JSON readers.

An error always names the field that is wrong and why (scikit-learn style input validation).
Two tools share the same checks and messages:

* **Declared fields** (settings sections, solver options): a frozen dataclass declares each
  field with :func:`option` (default, bounds or choices, help); :func:`check_fields` checks a
  mapping of values against it -- exact JSON types from files, strings coerced from the
  command line's ``-O key=value`` -- and :func:`describe_fields` lists the declarations
  (``placeopt solvers NAME``). The field's annotation gives its type: ``bool``, ``int``,
  ``float``, ``str`` or ``tuple[T, ...]`` of one of those.
* **Readers** (``get_int``, ``get_number``, ...) used by the hand-written ``from_dict``
  constructors of the structured sections (cluster, models, profiles, workload).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import typing
from typing import Any, Iterable, Literal, Mapping, Optional, TypeVar

from placement_opt.errors import InputError

T = TypeVar("T")
#: what a checked key is called in errors: a settings "field", or a solver "option" (whose
#: name may also be spelt with "-" for "_", as on the command line)
Kind = Literal["field", "option"]


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


#: characters refused in JSON text: C0/C1 control characters (tab, newline and carriage return
#: are allowed in values, e.g. a description) and the invisible bidirectional-text controls that
#: can make a name display as another
_UNSAFE_IN_VALUES = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_IN_KEYS = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def reject_non_finite(value: Any, field: str = "") -> None:
    """Refuse NaN and Infinity anywhere in parsed JSON (Python's json accepts these literals),
    and control or bidirectional-override characters in any key or string."""
    stack = [(value, field)]
    while stack:  # iterative: deeply nested input must not overflow the Python stack
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise InputError(f"{item} is not a valid JSON number (NaN and Infinity are refused)", where)
        if isinstance(item, str):
            _refuse_unsafe_characters(item, where, _UNSAFE_IN_VALUES)
        elif isinstance(item, dict):
            for k in item:
                _refuse_unsafe_characters(str(k), where, _UNSAFE_IN_KEYS)
            stack.extend((v, _join(where, str(k))) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))


def _refuse_unsafe_characters(text: str, where: str, unsafe: "re.Pattern[str]") -> None:
    """Refuse ``text`` if it holds a character of ``unsafe`` (named by its code point)."""
    found = unsafe.search(text)
    if found:
        raise InputError(f"control character U+{ord(found.group()):04X} in {text[:40]!r} is refused", where)


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
    _check_bounds(value, where, minimum, exclusive_minimum, maximum, "g")
    return value


def get_int(d: dict, key: str, field: str, default: Any = None, *, minimum: int | None = None,
            maximum: int | None = None) -> int:
    """Read an integer (JSON integers only; 2.0 is refused to catch typos)."""
    where = _join(field, key)
    value = d.get(key, default)
    if value is None:
        raise InputError("missing required field", where)
    return as_int(value, where, minimum=minimum, maximum=maximum)


def as_int(value: Any, where: str, *, minimum: float | None = None, exclusive_minimum: float | None = None,
           maximum: float | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"expected an integer, got {type(value).__name__}", where)
    _check_bounds(value, where, minimum, exclusive_minimum, maximum, "")
    return value


def _check_bounds(value: float, where: str, minimum: float | None, exclusive_minimum: float | None,
                  maximum: float | None, fmt: str) -> None:
    """Refuse ``value`` outside the bounds; numbers in the message use format spec ``fmt``."""
    if minimum is not None and value < minimum:
        raise InputError(f"must be >= {minimum:{fmt}}, got {value:{fmt}}", where)
    if exclusive_minimum is not None and value <= exclusive_minimum:
        raise InputError(f"must be > {exclusive_minimum:{fmt}}, got {value:{fmt}}", where)
    if maximum is not None and value > maximum:
        raise InputError(f"must be <= {maximum:{fmt}}, got {value:{fmt}}", where)


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


# --- declared fields ------------------------------------------------------------------------

_DECLARATION = "placeopt.declaration"  #: metadata key of a field declared with option()
_SCALARS: tuple[type, ...] = (bool, int, float, str)


@dataclasses.dataclass(frozen=True)
class Declaration:
    """What a field accepts beyond its type -- bounds (numbers, or each number of a list) or
    choices (strings) -- and one line of help for ``placeopt solvers``."""

    minimum: Optional[float] = None
    exclusive_minimum: Optional[float] = None
    maximum: Optional[float] = None
    choices: Optional[tuple[str, ...]] = None
    help: str = ""

    def describe(self) -> str:
        """The constraint in words: ``>= 1``, ``0 .. 1``, ``> 0``, ``one of fast, full``; empty if none."""
        if self.choices is not None:
            return f"one of {', '.join(self.choices)}"
        if self.minimum is not None and self.maximum is not None:
            return f"{_bound(self.minimum)} .. {_bound(self.maximum)}"
        parts = [f"{sign} {_bound(value)}" for sign, value in
                 ((">=", self.minimum), (">", self.exclusive_minimum), ("<=", self.maximum)) if value is not None]
        return ", ".join(parts)


def _bound(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def option(default: T, *, minimum: Optional[float] = None, exclusive_minimum: Optional[float] = None,
           maximum: Optional[float] = None, choices: Optional[Iterable[str]] = None, help: str = "") -> T:
    """A dataclass field with its default and its declared constraints, checked by :func:`check_fields`.

    Use as ``beam: int = option(1, minimum=1, help="beam width")``; bounds apply to numbers
    (to each element of a ``tuple[int, ...]`` field), ``choices`` to strings.
    """
    declaration = Declaration(minimum, exclusive_minimum, maximum, None if choices is None else tuple(choices), help)
    return dataclasses.field(default=default, metadata={_DECLARATION: declaration})


@dataclasses.dataclass(frozen=True)
class DeclaredField:
    """One field of a dataclass as the checks see it: its name, its scalar type (of the
    elements when ``is_list``), its default (``dataclasses.MISSING``: required) and declaration."""

    name: str
    scalar: type
    is_list: bool
    default: Any
    declaration: Optional[Declaration]

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING

    @property
    def type_name(self) -> str:
        return f"list of {self.scalar.__name__}" if self.is_list else self.scalar.__name__

    def check(self, value: Any, where: str, from_text: bool) -> Any:
        """``value`` checked (and, ``from_text``, converted from a string) as this field's value."""
        if not self.is_list:
            return self._check_scalar(value, where, from_text)
        if from_text and isinstance(value, str):
            value = _split_list(value)
        if not isinstance(value, (list, tuple)):
            raise InputError(f"expected a list, got {type(value).__name__}", where)
        return tuple(self._check_scalar(v, f"{where}[{i}]", from_text) for i, v in enumerate(value))

    def _check_scalar(self, value: Any, where: str, from_text: bool) -> Any:
        if from_text and isinstance(value, str) and self.scalar is not str:
            value = _from_text(value, self.scalar, where)
        d = self.declaration or Declaration()
        if self.scalar is bool:
            if not isinstance(value, bool):
                raise InputError(f"expected true or false, got {type(value).__name__}", where)
            return value
        if self.scalar is int:
            return as_int(value, where, minimum=d.minimum, exclusive_minimum=d.exclusive_minimum, maximum=d.maximum)
        if self.scalar is float:
            return as_number(value, where, minimum=d.minimum, exclusive_minimum=d.exclusive_minimum, maximum=d.maximum)
        if not isinstance(value, str):
            raise InputError(f"expected a string, got {type(value).__name__}", where)
        if d.choices is not None and value not in d.choices:
            raise InputError(f"must be one of {', '.join(d.choices)}, got {value!r}", where)
        return value


def _from_text(text: str, scalar: type, where: str) -> Any:
    """A command-line string as a bool (true/false/1/0), an int or a float; ``nan`` and ``inf``
    convert here and are refused by the number check that follows, as in files."""
    if scalar is bool:
        word = text.strip().lower()
        if word not in ("true", "false", "1", "0"):
            raise InputError(f"expected true or false, got {text!r}", where)
        return word in ("true", "1")
    try:
        return scalar(text)
    except ValueError:
        raise InputError(f"expected {'an integer' if scalar is int else 'a number'}, got {text!r}", where) from None


def _split_list(text: str) -> list[str]:
    """``2,4``, ``[2, 4]`` or ``4`` as the strings of a list's elements (empty text: no element)."""
    inner = text.strip()
    if inner.startswith("[") and inner.endswith("]"):
        inner = inner[1:-1]
    return [part.strip() for part in inner.split(",") if part.strip()]


@functools.lru_cache(maxsize=None)
def declared_fields(cls: type) -> dict[str, DeclaredField]:
    """The fields of dataclass ``cls`` by name, typed from their annotations."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        scalar, is_list = _field_type(hints[f.name], f"{cls.__name__}.{f.name}")
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        out[f.name] = DeclaredField(f.name, scalar, is_list, default, f.metadata.get(_DECLARATION))
    return out


def _field_type(hint: Any, name: str) -> tuple[type, bool]:
    """(scalar type, is a list) of an annotation: ``bool``, ``int``, ``float``, ``str`` or a tuple of one."""
    if hint in _SCALARS:
        return hint, False
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] in _SCALARS:
        return args[0], True
    raise TypeError(f"{name}: a checked field is bool, int, float, str or tuple[T, ...] of one, not {hint}")


def check_fields(cls: type, values: Any, where: str, *, from_text: bool = False,
                 kind: Kind = "field") -> dict[str, Any]:
    """Check ``values`` against the fields of dataclass ``cls`` and return them by field name.

    Every key must name a field (``kind="option"``: ``-`` in a name reads as ``_``, the
    command-line spelling, and errors say "option"), every value must have the field's type
    and meet its declaration. Types are exact JSON types (``2.0`` is no integer, ``true`` no
    number, NaN and Infinity no numbers) unless ``from_text``: then strings are first converted
    to the field's type, as ``-O key=value`` gives them. Errors name ``where.key``.
    """
    if not isinstance(values, Mapping):
        raise InputError(f"expected an object, got {type(values).__name__}", where)
    fields = declared_fields(cls)
    names = {key: str(key).replace("-", "_") if kind == "option" else str(key) for key in values}
    _refuse_unknown([str(key) for key, name in names.items() if name not in fields], fields, where, kind)
    checked = {names[key]: fields[names[key]].check(value, _join(where, str(key)), from_text)
               for key, value in values.items()}
    for name, f in fields.items():
        if f.required and name not in checked:
            raise InputError("missing required field", _join(where, name))
    return checked


def _refuse_unknown(unknown: list[str], fields: Mapping[str, DeclaredField], where: str, kind: Kind) -> None:
    if not unknown:
        return
    allowed = ", ".join(sorted(fields)) or "none"
    others = f"; also unknown: {', '.join(unknown[1:])}" if len(unknown) > 1 else ""
    raise InputError(f"unknown {kind} (allowed: {allowed}){others}", _join(where, unknown[0]))


def parse_fields(cls: type[T], values: Any, where: str, *, from_text: bool = False, kind: Kind = "field") -> T:
    """An instance of dataclass ``cls`` from ``values`` checked by :func:`check_fields`
    (fields not given take their defaults)."""
    return cls(**check_fields(cls, values, where, from_text=from_text, kind=kind))


def describe_fields(cls: type) -> list[dict]:
    """Each field of dataclass ``cls`` as ``{name, type, default, constraint, help}``, the
    default as JSON spells it (a list for a tuple; None when the field is required)."""
    out = []
    for f in declared_fields(cls).values():
        d = f.declaration or Declaration()
        default = None if f.required else list(f.default) if f.is_list else f.default
        constraint = d.describe()
        out.append({"name": f.name, "type": f.type_name, "default": default,
                    "constraint": f"each {constraint}" if f.is_list and constraint else constraint, "help": d.help})
    return out
