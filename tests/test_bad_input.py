"""Bad input through the CLI: one line on stderr naming file, field and reason; exit status 2.

Every case writes a broken file (or passes a broken option) and runs ``placeopt validate``,
``solve``, ``simulate`` or ``show`` in-process with click's CliRunner. A hypothesis fuzz test
mutates a valid instance and checks that the CLI never ends in a traceback, and the last
tests check that ``-o OUT`` is written atomically.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from inputs import GOOD, GOOD_PLACEMENT, mutated_documents
from placement_opt.cli.main import cli


def run_cli(args):
    return CliRunner().invoke(cli, args, catch_exceptions=True)


def assert_input_error(result, file: str, *needles: str):
    """Exit status 2, no traceback, exactly one stderr line naming the file and the needles."""
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("placeopt: error: "), line
    assert "Traceback" not in result.output
    assert file in line, line
    for needle in needles:
        assert needle in line, (needle, line)


def write(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def mutated(edit):
    d = copy.deepcopy(GOOD)
    edit(d)
    return d


# (case id, edit of the instance dict or raw text, expected substrings: field, reason)
INSTANCE_CASES = [
    ("malformed-json", '{"cluster": {"nodes": 1,', ["line 1", "malformed JSON"]),
    ("not-an-object", "[1, 2, 3]", ["expected an object"]),
    ("unknown-top-level-field", lambda d: d.update(colour="blue"), ["colour", "unknown field"]),
    ("unknown-nested-field", lambda d: d["cluster"]["gpu"].update(colour="blue"), ["cluster.gpu.colour",
                                                                                   "unknown field"]),
    ("missing-field", lambda d: d.pop("workload"), ["workload", "missing required field"]),
    ("missing-nested-field", lambda d: d["cluster"].pop("gpu"), ["cluster.gpu", "missing required field"]),
    ("wrong-type", lambda d: d["cluster"].update(nodes="2"), ["cluster.nodes", "expected an integer"]),
    ("wrong-type-bool", lambda d: d["workload"].update(duration_s=True), ["workload.duration_s",
                                                                          "expected a number"]),
    ("negative-rate", lambda d: d["workload"]["arrival"].update(rate=-1.0), ["workload.arrival.rate", ">= 0"]),
    ("zero-rate", lambda d: d["workload"]["arrival"].update(rate=0), ["workload.arrival.rate", "> 0"]),
    ("nan-rate", lambda d: d["workload"]["arrival"].update(rate=math.nan), ["workload.arrival.rate", "NaN"]),
    ("infinite-rate", lambda d: d["workload"]["arrival"].update(rate=math.inf), ["workload.arrival.rate",
                                                                                 "Infinity"]),
    ("nan-in-a-free-text-field", lambda d: d.update(name=math.nan), ["name", "NaN"]),
    ("absurd-request-count", lambda d: d["workload"]["arrival"].update(rate=1e12), ["workload",
                                                                                    "expected requests"]),
    ("vanishing-cv", lambda d: d["workload"].update(arrival={"process": "gamma", "rate": 3, "cv": 1e-300}),
     ["workload.arrival.cv", ">= 0.001"]),
    ("mmpp-switching-too-often", lambda d: d["workload"].update(
        arrival={"process": "mmpp", "rates": [1, 2], "switch_rates": [1e9, 1e9]}),
     ["workload.arrival.switch_rates", "state switches"]),
    ("per-model-process-of-unknown-model", lambda d: d["workload"].update(
        per_model={"model-z": {"process": "poisson", "rate": 1}}), ["workload.per_model.model-z", "no model named"]),
    ("zero-nodes", lambda d: d["cluster"].update(nodes=0), ["cluster.nodes", ">= 1"]),
    ("usable-over-memory", lambda d: d["cluster"]["gpu"].update(usable_memory_gb=17),
     ["cluster.gpu.usable_memory_gb", "exceeds"]),
    ("fits-nowhere", lambda d: d["profiles"]["bert-6.7b"]["derive"].update(weight_gb=100),
     ["models[model-a]", "fits nowhere"]),
    ("unknown-profile", lambda d: d["models"][0].update(profile="gpt-9"), ["models[0].profile",
                                                                          "no profile named 'gpt-9'"]),
    ("duplicate-model-names", lambda d: d["models"][1].update(name="model-a"), ["models[1].name", "duplicate"]),
    ("count-collides", lambda d: d["models"].extend([{"name": "x", "profile": "bert-6.7b", "count": 2},
                                                     {"name": "x-1", "profile": "bert-6.7b"}]),
     ["models[3].name", "duplicate model name 'x-1'"]),
    ("empty-models", lambda d: d.update(models=[]), ["models", "non-empty"]),
    ("slo-scale-and-seconds", lambda d: d["workload"].update(slo={"scale": 5, "seconds": 1}),
     ["workload.slo", "exactly one"]),
    ("negative-latency", lambda d: d["profiles"]["bert-6.7b"]["derive"].update(latency_s=-0.4),
     ["profiles.bert-6.7b.derive.latency_s", "> 0"]),
    ("bad-trace-path", lambda d: d.update(workload={"duration_s": 60, "trace": "missing.csv"}),
     ["workload.trace.path", "not found"]),
    ("unknown-solver", lambda d: d.update(solver={"name": "simulated-annealing"}), ["solver", "unknown solver"]),
    ("unknown-solver-option", lambda d: d["solver"].update(options={"colour": 1}),
     ["solver.options.colour", "unknown option"]),
    ("ill-typed-solver-option", lambda d: d["solver"].update(options={"group_size": "two"}),
     ["solver.options.group_size", "expected an integer"]),
    ("unknown-dispatch", lambda d: d.update(simulator={"dispatch": "random"}), ["simulator.dispatch",
                                                                               "must be one of"]),
    ("negative-seed", lambda d: d.update(seed=-1), ["seed", ">= 0"]),
]


@pytest.mark.parametrize("command", ["validate", "solve"])
@pytest.mark.parametrize("case", INSTANCE_CASES, ids=[c[0] for c in INSTANCE_CASES])
def test_bad_instance(tmp_path, case, command):
    name, edit, needles = case
    path = write(tmp_path, "instance.json", edit if isinstance(edit, str) else mutated(edit))
    assert_input_error(run_cli([command, path]), path, *needles)


def test_malformed_trace_row(tmp_path):
    write(tmp_path, "trace.csv", "arrival_s,model\n0.5,model-a\nsoon,model-b\n")
    path = write(tmp_path, "instance.json", mutated(lambda d: d.update(
        workload={"duration_s": 60, "trace": "trace.csv"})))
    assert_input_error(run_cli(["validate", path]), "trace.csv", "line 3", "malformed row")


def test_trace_with_one_token_column(tmp_path):
    write(tmp_path, "trace.csv", "arrival_s,model,prompt_tokens\n0.5,model-a,100\n")
    path = write(tmp_path, "instance.json", mutated(lambda d: d.update(
        workload={"duration_s": 60, "trace": "trace.csv"})))
    assert_input_error(run_cli(["validate", path]), "trace.csv", "prompt_tokens", "no output_tokens column")


def test_trace_with_unknown_model(tmp_path):
    write(tmp_path, "trace.csv", "arrival_s,model\n0.5,model-a\n0.7,model-z\n")
    path = write(tmp_path, "instance.json", mutated(lambda d: d.update(
        workload={"duration_s": 60, "trace": "trace.csv"})))
    assert_input_error(run_cli(["solve", path]), "trace.csv", "model", "'model-z'")


def test_too_many_refit_windows(tmp_path):
    write(tmp_path, "trace.csv", "arrival_s,model\n0.5,model-a\n")
    path = write(tmp_path, "instance.json", mutated(lambda d: d.update(
        workload={"duration_s": 60, "trace": {"path": "trace.csv", "refit_window_s": 1e-6}})))
    assert_input_error(run_cli(["validate", path]), path, "workload.trace.refit_window_s", "windows")


def test_absurd_trace_rate_scale(tmp_path):
    write(tmp_path, "trace.csv", "arrival_s,model\n0.5,model-a\n1.5,model-b\n")
    path = write(tmp_path, "instance.json", mutated(lambda d: d.update(
        workload={"duration_s": 60, "trace": {"path": "trace.csv", "rate_scale": 1e300}})))
    for command in (["validate", path], ["solve", path]):
        assert_input_error(run_cli(command), path, "workload.trace.rate_scale", "over the limit")


def test_missing_profile_file(tmp_path):
    path = write(tmp_path, "instance.json", mutated(lambda d: d["profiles"].update({"bert-6.7b": "nope.json"})))
    assert_input_error(run_cli(["validate", path]), path, "profiles.bert-6.7b", "cannot read")


def test_nan_literal_in_profile_file(tmp_path):
    write(tmp_path, "profile.json", '{"weight_gb": 2.0, "configs": [{"pp": 1, "tp": 1, '
                                    '"stage_latency_s": {"1": [NaN]}, "stage_weight_gb": [2.0]}]}')
    path = write(tmp_path, "instance.json", mutated(lambda d: d["profiles"].update({"bert-6.7b": "profile.json"})))
    assert_input_error(run_cli(["validate", path]), path, "profiles.bert-6.7b", "NaN")


def test_deeply_nested_json(tmp_path):
    deep = write(tmp_path, "deep.json", "[" * 100000 + "]" * 100000)
    assert_input_error(run_cli(["validate", deep]), deep, "nested too deeply")
    placement = write(tmp_path, "p.json", '{"groups": ' + "[" * 100000 + "]" * 100000 + "}")
    assert_input_error(run_cli(["show", placement]), placement, "nested too deeply")


def test_nan_in_a_profile_file_alone(tmp_path):
    path = write(tmp_path, "profile.json", '{"weight_gb": 2.0, "source": NaN, "configs": [{"pp": 1, "tp": 1, '
                                           '"stage_latency_s": {"1": [0.1]}, "stage_weight_gb": [2.0]}]}')
    assert_input_error(run_cli(["validate", path]), path, "source", "NaN")


@pytest.mark.parametrize("key,needle", [("\u00b2", "positive integers"),  # a digit to str.isdigit, not to int()
                                        ("01", "duplicate batch size 1")])  # "01" and "1" are both batch 1
def test_bad_batch_size_key_in_a_profile(tmp_path, key, needle):
    profile = {"weight_gb": 2.0, "configs": [{"pp": 1, "tp": 1, "stage_latency_s": {"1": [0.1], key: [0.2]},
                                              "stage_weight_gb": [2.0]}]}
    path = write(tmp_path, "profile.json", profile)
    assert_input_error(run_cli(["validate", path]), path, f"{path}: configs[0].stage_latency_s", needle)


def test_not_utf8_and_missing_file(tmp_path):
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert_input_error(run_cli(["validate", str(path)]), str(path), "malformed JSON")
    missing = str(tmp_path / "missing.json")
    assert_input_error(run_cli(["solve", missing]), missing, "cannot read file")


# (case id, edit of the placement dict or raw text, expected substrings)
PLACEMENT_CASES = [
    ("malformed-json", '{"groups": [', ["malformed JSON"]),
    ("unknown-model", lambda p: p["groups"][0].update(models=["model-z"]), ["groups[0].models",
                                                                          "no model named 'model-z'"]),
    ("over-memory", lambda p: p["groups"][0].update(models=["model-a", "model-b"]), ["groups[0].models",
                                                                                   "over the budget"]),
    ("device-out-of-range", lambda p: p["groups"][1].update(devices=[7]), ["groups[1].devices",
                                                                         "does not exist"]),
    ("device-twice", lambda p: p["groups"][1].update(devices=[0]), ["groups[1].devices", "two groups"]),
    ("devices-vs-config", lambda p: p["groups"][0].update(pp=2), ["groups[0].devices", "pp x tp"]),
    ("unprofiled-config", lambda p: p["groups"][0].update(devices=[0, 1], pp=1, tp=2, models=["model-a"]) or
     p["groups"].pop(1), ["groups[0].models", "no profile for pp=1 tp=2"]),
    ("unknown-field", lambda p: p["groups"][0].update(colour="red"), ["groups[0].colour", "unknown field"]),
    ("nan-in-metrics", lambda p: p.update(metrics={"slo_attainment": math.nan}), ["metrics.slo_attainment",
                                                                                  "NaN"]),
    ("newer-format", lambda p: p.update(format_version=99), ["format_version", "newer"]),
    ("windows-a-number", lambda p: p.update(windows=5), ["windows", "expected a list, got int"]),
    ("windows-an-object", lambda p: p.update(windows={"start_s": 0}), ["windows", "expected a list, got dict"]),
]


@pytest.mark.parametrize("case", PLACEMENT_CASES, ids=[c[0] for c in PLACEMENT_CASES])
def test_bad_placement(tmp_path, case):
    name, edit, needles = case
    instance = write(tmp_path, "instance.json", GOOD)
    if isinstance(edit, str):
        data = edit
    else:
        data = copy.deepcopy(GOOD_PLACEMENT)
        edit(data)
    placement = write(tmp_path, "placement.json", data)
    assert_input_error(run_cli(["simulate", instance, placement]), placement, *needles)


@pytest.mark.parametrize("args,needles", [
    (["--solver", "simulated-annealing"], ["solver", "unknown solver"]),
    (["--solver", "round-robin", "-O", "colour=1"], ["-O colour", "unknown option"]),
    (["-O", "beam"], ["--option", "KEY=VALUE"]),
    (["--time-limit", "nan"], ["--time-limit", "positive"]),
    (["--time-limit", "-1"], ["--time-limit", "positive"]),
    (["--seed", "-3"], ["--seed", ">= 0"]),
    # degrees and beam widths below 1 (were tracebacks or silently taken as 1)
    (["--solver", "round-robin", "-O", "tp=0"], ["-O tp", ">= 1"]),
    (["--solver", "round-robin", "-O", "tp=-1"], ["-O tp", ">= 1"]),
    (["--solver", "mp-equal", "-O", "tp=0"], ["-O tp", ">= 1"]),
    (["--solver", "alpaserve-greedy", "-O", "tp=0"], ["-O tp", ">= 1"]),
    (["--solver", "selective-replication", "-O", "beam=0"], ["-O beam", ">= 1"]),
    (["--solver", "clockwork++", "-O", "beam=0"], ["-O beam", ">= 1"]),
    (["--solver", "mp-greedy-2", "-O", "beam=-1"], ["-O beam", ">= 1"]),
    # non-finite numbers, refused as in instance files (nan ran; window_s=nan was a traceback)
    (["--solver", "alpaserve", "-O", "bucket_threshold=nan"], ["-O bucket_threshold", "finite"]),
    (["--solver", "clockwork++", "-O", "window_s=nan"], ["-O window_s", "finite"]),
])
def test_bad_solve_options(tmp_path, args, needles):
    path = write(tmp_path, "instance.json", GOOD)
    result = run_cli(["solve", path] + args)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("placeopt: error: ")
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.parametrize("gpus,options,needles", [
    (2, ["group_size=4"], ["solver.options.group_size", "exceeds the cluster's 2 GPUs"]),  # was an empty placement
    (4, ["group_size=4", "tp=3"], ["solver.options.tp", "does not divide group size 4"]),  # named field 'groups'
])
def test_round_robin_group_shape_errors(tmp_path, gpus, options, needles):
    """Errors that depend on the instance come after the `solving ...` progress line."""
    path = write(tmp_path, "instance.json", mutated(lambda d: d["cluster"].update(gpus_per_node=gpus)))
    result = run_cli(["solve", path, "--solver", "round-robin"] + [a for o in options for a in ("-O", o)])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"placeopt: error: {path}: ") and all(n in last for n in needles), last


@pytest.mark.parametrize("solver,option,needles", [
    ("alpaserve", "workers=-1", ["-O workers", ">= 0"]),  # was a ValueError traceback
    ("clockwork++", "workers=-1", ["-O workers", ">= 0"]),
    ("alpaserve", "refine=-1", ["-O refine", ">= 0"]),  # silently refined all but the last
])
def test_search_option_errors(tmp_path, solver, option, needles):
    """A bad -O value is the command line's fault: the error names the option, not the instance."""
    path = write(tmp_path, "instance.json", GOOD)
    result = run_cli(["solve", path, "--solver", solver, "-O", option, "-O", "progress=false"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("placeopt: error: -O ") and path not in last and all(n in last for n in needles), last


def test_a_single_group_size_is_a_list_of_one():
    """`-O group_sizes=4` is the list [4]; `2,4` and `[2, 4]` are lists of integers."""
    from placement_opt.solvers.alpaserve import AlpaServe
    from placement_opt.solvers.base import parse_options
    for text, sizes in (("4", (4,)), ("2,4", (2, 4)), ("[2, 4]", (2, 4))):
        assert parse_options(AlpaServe.Options, {"group_sizes": text}, "-O", from_text=True).group_sizes == sizes


def test_show_bad_placement(tmp_path):
    path = write(tmp_path, "placement.json", {"groups": [{"devices": [0], "pp": 1, "tp": 1}]})
    assert_input_error(run_cli(["show", path]), path, "groups[0].models", "missing required field")


def test_real_entry_point_prints_one_line(tmp_path):
    """The installed console entry point (not only CliRunner) exits 2 with one stderr line."""
    path = write(tmp_path, "instance.json", mutated(lambda d: d["workload"]["arrival"].update(rate=math.nan)))
    proc = subprocess.run([sys.executable, "-c", "from placement_opt.cli.main import main; main()", "validate",
                           path], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"placeopt: error: {path}: workload.arrival.rate: nan is not a valid "
                                                "JSON number (NaN and Infinity are refused)"]


# --- fuzzing -------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(data=mutated_documents(GOOD))
def test_fuzzed_instances_never_crash(tmp_path, data):
    path = write(tmp_path, "instance.json", data)
    result = run_cli(["validate", path])
    event(f"exit status {result.exit_code}")
    assert result.exit_code in (0, 2), (data, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), (data, result.exception)
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"placeopt: error: {path}"), (data, result.stderr)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(data=mutated_documents(GOOD_PLACEMENT))
def test_fuzzed_placements_never_crash(tmp_path, data):
    instance = write(tmp_path, "instance.json", GOOD)
    path = write(tmp_path, "placement.json", data)
    result = run_cli(["simulate", instance, path])
    event(f"exit status {result.exit_code}")
    assert result.exit_code in (0, 2), (data, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), (data, result.exception)
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"placeopt: error: {path}"), (data, result.stderr)


# --- atomic output ----------------------------------------------------------------------------

def test_output_is_written_atomically(tmp_path, monkeypatch):
    """-o writes through a temporary file in the same folder and renames it over OUT."""
    instance = write(tmp_path, "instance.json", GOOD)
    out = tmp_path / "placement.json"
    replaced = []
    real_replace = os.replace

    def spy(src, dst):
        replaced.append((os.path.dirname(os.fspath(src)), os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    result = run_cli(["solve", instance, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert replaced == [(str(tmp_path), str(out))]
    assert json.loads(out.read_text())["groups"]
    assert sorted(os.listdir(tmp_path)) == ["instance.json", "placement.json"]  # no temporary file left
    umask = os.umask(0o077)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would make it, not mkstemp's 0600


def test_output_dash_writes_only_the_placement_to_stdout(tmp_path):
    """`-o -` used to append the human table (or, with --json, a second copy) after the JSON."""
    instance = write(tmp_path, "instance.json", GOOD)
    for extra in ([], ["--json"]):
        result = run_cli(["solve", instance, "-o", "-"] + extra)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["groups"]


def test_failing_run_leaves_existing_output_untouched(tmp_path):
    out = tmp_path / "placement.json"
    out.write_text("previous result\n")
    bad = write(tmp_path, "instance.json", mutated(lambda d: d["solver"].update(options={"colour": 1})))
    assert_input_error(run_cli(["solve", bad, "-o", str(out)]), bad, "solver.options.colour")
    good = write(tmp_path, "good.json", GOOD)
    assert_input_error(run_cli(["solve", good, "--solver", "nope", "-o", str(out)]), good, "unknown solver")
    assert out.read_text() == "previous result\n"
    assert sorted(os.listdir(tmp_path)) == ["good.json", "instance.json", "placement.json"]


def test_interrupted_write_leaves_existing_output_untouched(tmp_path, monkeypatch):
    """If writing fails half-way, OUT keeps its old content and no temporary file is left."""
    from placement_opt import io as pio
    out = tmp_path / "placement.json"
    out.write_text("previous result\n")

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pio.os, "replace", failing_replace)
    with pytest.raises(OSError):
        pio.atomic_write_json(str(out), {"groups": []})
    assert out.read_text() == "previous result\n"
    assert os.listdir(tmp_path) == ["placement.json"]


def test_unwritable_output_is_an_input_error(tmp_path, monkeypatch):
    instance = write(tmp_path, "instance.json", GOOD)
    missing = str(tmp_path / "no-such-folder" / "p.json")
    assert_input_error(run_cli(["solve", instance, "-o", missing]), missing, "--output", "does not exist")
    assert_input_error(run_cli(["solve", instance, "-o", str(tmp_path)]), str(tmp_path), "--output",
                       "is a directory")
    from placement_opt import io as pio

    def disk_full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pio.os, "replace", disk_full)
    out = str(tmp_path / "p.json")
    result = run_cli(["solve", instance, "-o", out])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    last = result.stderr.strip().splitlines()[-1]
    assert last == f"placeopt: error: {out}: --output: cannot write: No space left on device"
    assert sorted(os.listdir(tmp_path)) == ["instance.json"]


csv_cells = st.one_of(st.sampled_from(["0", "0.5", "-1", "1e30", "inf", "nan", "", "model-a", "model-b", "x", "3"]),
                      st.text(max_size=4))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(header=st.lists(st.sampled_from(["arrival_s", "model", "prompt_tokens", "output_tokens", "junk"]),
                       min_size=1, max_size=4),
       rows=st.lists(st.lists(csv_cells, max_size=5), max_size=6),
       raw=st.one_of(st.just(b""), st.binary(max_size=8)))
def test_fuzzed_traces_never_crash(tmp_path, header, rows, raw):
    text = ",".join(header) + "\n" + "\n".join(",".join(r) for r in rows) + "\n"
    (tmp_path / "trace.csv").write_bytes(text.encode("utf-8", "surrogatepass") + raw)
    path = write(tmp_path, "instance.json", mutated(lambda d: d.update(
        workload={"duration_s": 60, "trace": "trace.csv"})))
    result = run_cli(["validate", path])
    event(f"exit status {result.exit_code}")
    assert result.exit_code in (0, 2), (text, raw, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), (text, raw, result.exception)
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("placeopt: error: "), result.stderr


def test_every_cli_option_has_help_text():
    import importlib
    import pkgutil

    import click

    import placement_opt.cli as pkg
    missing = []
    for info in pkgutil.iter_modules(pkg.__path__):
        module = importlib.import_module(f"placement_opt.cli.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, click.Command):
                missing += [(obj.name, p.opts) for p in obj.params if isinstance(p, click.Option) and not p.help]
    assert not missing
