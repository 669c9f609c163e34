"""The declarative field checks (placement_opt.validation.option / check_fields) and the JSON
reader (placement_opt.io.read_json) that every config, solver option and input file goes through."""

from __future__ import annotations

import dataclasses
import math
from typing import Tuple

import pytest

from placement_opt.errors import InputError
from placement_opt.io import parse_json, read_json
from placement_opt.settings import LLMConfig, SimulatorConfig
from placement_opt.solvers import get_solver_class, solver_names
from placement_opt.spaces import SearchSettings
from placement_opt.validation import (check_fields, declared_fields, describe_fields, option,
                                      parse_fields)


@dataclasses.dataclass(frozen=True)
class Knobs:
    count: int = option(2, minimum=1, maximum=8, help="how many")
    ratio: float = option(0.5, exclusive_minimum=0, maximum=1, help="a fraction")
    mode: str = option("fast", choices=("fast", "full"), help="how")
    name: str = option("", help="free text")
    verbose: bool = option(False, help="talk")
    sizes: Tuple[int, ...] = option((), minimum=1, help="sizes")


def error_of(values, **kw) -> InputError:
    with pytest.raises(InputError) as e:
        check_fields(Knobs, values, "knobs", **kw)
    return e.value


def test_defaults_and_exact_json_types():
    assert parse_fields(Knobs, {}, "knobs") == Knobs()
    got = parse_fields(Knobs, {"count": 3, "ratio": 1, "mode": "full", "verbose": True, "sizes": [2, 4]}, "knobs")
    assert got == Knobs(count=3, ratio=1.0, mode="full", verbose=True, sizes=(2, 4))
    assert isinstance(got.ratio, float)  # a JSON integer is a number
    assert check_fields(Knobs, {"count": 3}, "knobs") == {"count": 3}  # only the given values


@pytest.mark.parametrize("values, field, needle", [
    ({"count": 0}, "knobs.count", "must be >= 1, got 0"),
    ({"count": 9}, "knobs.count", "must be <= 8, got 9"),
    ({"ratio": 0}, "knobs.ratio", "must be > 0"),
    ({"ratio": 1.5}, "knobs.ratio", "must be <= 1"),
    ({"mode": "slow"}, "knobs.mode", "must be one of fast, full, got 'slow'"),
    ({"sizes": [2, 0]}, "knobs.sizes[1]", "must be >= 1, got 0"),
])
def test_bounds_and_choices(values, field, needle):
    e = error_of(values)
    assert e.field == field and needle in e.reason


@pytest.mark.parametrize("values, field, needle", [
    ({"count": 2.0}, "knobs.count", "expected an integer, got float"),  # 2.0 is refused to catch typos
    ({"count": True}, "knobs.count", "expected an integer, got bool"),  # bool is no int
    ({"count": "2"}, "knobs.count", "expected an integer, got str"),  # no coercion from JSON
    ({"ratio": False}, "knobs.ratio", "expected a number, got bool"),
    ({"verbose": 1}, "knobs.verbose", "expected true or false, got int"),
    ({"mode": 3}, "knobs.mode", "expected a string, got int"),
    ({"sizes": 4}, "knobs.sizes", "expected a list, got int"),
    ({"sizes": ["2"]}, "knobs.sizes[0]", "expected an integer, got str"),
])
def test_types_are_exact_from_json(values, field, needle):
    e = error_of(values)
    assert e.field == field and needle in e.reason


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused(value):
    e = error_of({"ratio": value})
    assert e.field == "knobs.ratio" and "finite" in e.reason
    e = error_of({"ratio": str(value)}, from_text=True)
    assert e.field == "knobs.ratio" and "finite" in e.reason


def test_strings_are_coerced_from_the_command_line():
    text = {"count": "3", "ratio": "0.25", "mode": "full", "name": "123", "verbose": "TRUE", "sizes": "[2, 4]"}
    assert parse_fields(Knobs, text, "-O", from_text=True) == Knobs(3, 0.25, "full", "123", True, (2, 4))
    for words, sizes in (("4", (4,)), ("2,4", (2, 4)), ("", ())):
        assert check_fields(Knobs, {"sizes": words}, "-O", from_text=True)["sizes"] == sizes
    for flag, expected in (("0", False), ("1", True), ("false", False)):
        assert check_fields(Knobs, {"verbose": flag}, "-O", from_text=True)["verbose"] is expected
    assert check_fields(Knobs, {"count": 5}, "-O", from_text=True) == {"count": 5}  # typed values pass too


@pytest.mark.parametrize("values, field, needle", [
    ({"count": "two"}, "-O.count", "expected an integer, got 'two'"),
    ({"count": "2.0"}, "-O.count", "expected an integer, got '2.0'"),
    ({"count": "0"}, "-O.count", "must be >= 1, got 0"),  # coerced values meet the same bounds
    ({"ratio": "half"}, "-O.ratio", "expected a number, got 'half'"),
    ({"verbose": "yes"}, "-O.verbose", "expected true or false, got 'yes'"),
    ({"sizes": "2,x"}, "-O.sizes[1]", "expected an integer, got 'x'"),
])
def test_bad_command_line_strings(values, field, needle):
    with pytest.raises(InputError) as e:
        check_fields(Knobs, values, "-O", from_text=True)
    assert e.value.field == field and needle in e.value.reason


def test_unknown_keys_are_listed():
    e = error_of({"colour": 1, "count": 2, "size": 3})
    assert e.field == "knobs.colour"
    assert e.reason == ("unknown field (allowed: count, mode, name, ratio, sizes, verbose); "
                        "also unknown: size")
    with pytest.raises(InputError, match=r"unknown option \(allowed: count"):
        check_fields(Knobs, {"colour": 1}, "solver.options", kind="option")
    e = error_of([1, 2])
    assert e.field == "knobs" and e.reason == "expected an object, got list"


def test_options_accept_the_command_line_spelling_of_names():
    assert check_fields(Knobs, {"count": 3}, "o", kind="option") == {"count": 3}
    with pytest.raises(InputError) as e:  # a field's JSON name is exact
        check_fields(SearchSettings, {"max-buckets": 2}, "s")
    assert e.value.field == "s.max-buckets"
    assert check_fields(SearchSettings, {"max-buckets": 2}, "s", kind="option") == {"max_buckets": 2}


def test_required_fields():
    @dataclasses.dataclass(frozen=True)
    class Needs:
        size: int

    assert parse_fields(Needs, {"size": 2}, "n") == Needs(2)
    with pytest.raises(InputError, match="missing required field") as e:
        parse_fields(Needs, {}, "n")
    assert e.value.field == "n.size"


def test_unsupported_field_types_are_a_programming_error():
    @dataclasses.dataclass(frozen=True)
    class Odd:
        table: dict = dataclasses.field(default_factory=dict)

    with pytest.raises(TypeError, match="Odd.table"):
        declared_fields(Odd)


def test_describe_fields():
    rows = {r["name"]: r for r in describe_fields(Knobs)}
    assert rows["count"] == {"name": "count", "type": "int", "default": 2, "constraint": "1 .. 8", "help": "how many"}
    assert rows["ratio"]["constraint"] == "> 0, <= 1"
    assert rows["mode"]["constraint"] == "one of fast, full"
    assert rows["name"]["constraint"] == ""
    assert rows["sizes"]["type"] == "list of int" and rows["sizes"]["default"] == []
    assert rows["sizes"]["constraint"] == "each >= 1"


@pytest.mark.parametrize("name", solver_names())
def test_every_solver_option_is_declared(name):
    """Each field of each registered solver's Options has a declaration with help, so the
    checks and `placeopt solvers NAME` cover it; and the defaults pass their own checks."""
    options = get_solver_class(name).Options
    for f in declared_fields(options).values():
        assert f.declaration is not None and f.declaration.help, f"{name}: option {f.name} is not declared"
    defaults = {f.name: getattr(options(), f.name) for f in dataclasses.fields(options)}
    assert parse_fields(options, defaults, "solver.options", kind="option") == options()


@pytest.mark.parametrize("settings", [SimulatorConfig, LLMConfig, SearchSettings])
def test_settings_are_declared(settings):
    for f in declared_fields(settings).values():
        assert f.declaration is not None and f.declaration.help, f"{settings.__name__}.{f.name}"
    assert parse_fields(settings, dataclasses.asdict(settings()), "s") == settings()


def test_alpaserve_options_extend_the_search_settings():
    """SearchSettings' fields are declared once; the alpaserve options are them plus the search's own."""
    alpaserve = [f.name for f in dataclasses.fields(get_solver_class("alpaserve").Options)]
    settings = [f.name for f in dataclasses.fields(SearchSettings)]
    assert alpaserve[:len(settings)] == settings
    assert isinstance(get_solver_class("alpaserve")().options, SearchSettings)


# --- the JSON reader ----------------------------------------------------------------------------

def test_read_json_errors_name_file_and_position(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"a": 1,\n "b": }')
    with pytest.raises(InputError) as e:
        read_json(str(path))
    assert (e.value.file, e.value.field) == (str(path), "line 2 column 7")
    assert e.value.reason.startswith("malformed JSON: ")
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(InputError, match="not UTF-8 text"):
        read_json(str(path))
    path.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(InputError, match="nested too deeply"):
        read_json(str(path))
    path.write_text('{"a": [1, NaN]}')
    with pytest.raises(InputError) as e:
        read_json(str(path))
    assert (e.value.file, e.value.field) == (str(path), "a[1]") and "NaN and Infinity are refused" in e.value.reason
    with pytest.raises(InputError, match="cannot read file") as e:
        read_json(str(tmp_path / "missing.json"))
    assert e.value.file == str(tmp_path / "missing.json")


def test_read_json_of_a_referenced_file(tmp_path):
    """A file named inside another is reported at the referencing field, its path in the reason."""
    path = tmp_path / "profile.json"
    path.write_text('{"a": }')
    with pytest.raises(InputError) as e:
        read_json(str(path), "profiles.p", referenced=True)
    assert e.value.file is None and e.value.field == "profiles.p"
    assert e.value.reason == f"malformed JSON: Expecting value (in {path} at line 1 column 7)"
    path.write_text('{"a": Infinity}')
    with pytest.raises(InputError) as e:
        read_json(str(path), "profiles.p", referenced=True)
    assert e.value.file is None and e.value.field == "profiles.p.a"


def test_read_json_accepts_utf8_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}')
    assert read_json(str(path)) == {"a": 1}
    assert parse_json('{"b": 2}') == {"b": 2}


def test_parse_json_of_text():
    with pytest.raises(InputError) as e:
        parse_json('{"metrics": {"x": -Infinity}}')
    assert e.value.field == "metrics.x" and e.value.file is None
    with pytest.raises(InputError) as e:
        parse_json('{"groups": [')
    assert e.value.field == "line 1 column 13" and e.value.reason.startswith("malformed JSON")


# --- the listing ----------------------------------------------------------------------------

def test_placeopt_solvers_lists_the_declared_options():
    import json

    from click.testing import CliRunner

    from placement_opt.cli.main import cli
    plain = CliRunner().invoke(cli, ["solvers"])
    assert plain.exit_code == 0 and plain.output.startswith("solver ") and "round-robin" in plain.output
    one = CliRunner().invoke(cli, ["solvers", "alpaserve"])
    assert one.exit_code == 0, one.output
    assert "option" in one.output and "one of fast, full" in one.output and "each >= 1" in one.output
    listed = json.loads(CliRunner().invoke(cli, ["solvers", "--json"]).output)
    by_name = {s["name"]: s for s in listed}
    assert set(by_name) == set(solver_names())
    assert by_name["round-robin"]["options"][1] == {"name": "tp", "type": "int", "default": 1, "constraint": ">= 1",
                                                    "help": "tensor-parallel degree inside a group (pp = group_size / tp)"}
    assert [o["name"] for o in by_name["spatial"]["options"]] == ["rules"]  # issue 12: every LLM solver
    assert "one of placeopt, muxserve" in CliRunner().invoke(cli, ["solvers", "spatial"]).output
    unknown = CliRunner().invoke(cli, ["solvers", "nosuch"])
    assert unknown.exit_code == 2 and "unknown solver 'nosuch'" in unknown.stderr


def test_an_instance_load_checks_the_model_count_once(monkeypatch):
    """``load_instance`` checks the model count in the reader's precheck only (it ran three times:
    the precheck, ``instance_from_dict`` and the models' loader); ``instance_from_dict`` once too;
    and an instance over the limit is still refused."""
    import json
    import os

    import placement_opt.instance as instance_module

    calls = []
    real = instance_module._check_model_count
    monkeypatch.setattr(instance_module, "_check_model_count", lambda items: calls.append(1) or real(items))
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "instances", "tiny",
                        "two-models.json")
    inst = instance_module.load_instance(path)
    assert len(calls) == 1 and len(inst.models) > 0
    with open(path) as f:
        data = json.load(f)
    calls.clear()
    instance_module.instance_from_dict(data, base_dir=os.path.dirname(path))
    assert len(calls) == 1
    data["models"] = [dict(data["models"][0], count=10001)]
    with pytest.raises(InputError, match="10001 models after count expansion"):
        instance_module.instance_from_dict(data, base_dir=os.path.dirname(path))
