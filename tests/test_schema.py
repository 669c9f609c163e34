"""The shipped JSON Schemas (placement_opt/schema) describe what the loaders accept.

Every bundled file under instances/ validates against its schema (instances, placements,
profile files, architecture files), a placement written by a solver does too, and on fuzzed
instances the loader never accepts a document that the schema refuses.
"""

from __future__ import annotations

import copy
import glob
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings

from inputs import GOOD, mutated_documents
from placement_opt import InputError, instance_from_dict, load_instance, solve

jsonschema = pytest.importorskip("jsonschema")

ROOT = os.path.join(os.path.dirname(__file__), "..")
SCHEMA_DIR = os.path.join(ROOT, "placement_opt", "schema")


def load_schema(name: str) -> dict:
    with open(os.path.join(SCHEMA_DIR, f"{name}.schema.json")) as f:
        return json.load(f)


INSTANCE_SCHEMA = load_schema("instance")
PLACEMENT_SCHEMA = load_schema("placement")


def validator(schema: dict, definition: str | None = None):
    """A validator of the whole schema, or of one of its ``$defs``."""
    if definition is not None:
        schema = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": f"#/$defs/{definition}"}
    return jsonschema.Draft202012Validator(schema)


def errors(v, document) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(document)]


def test_schemas_are_valid_draft_2020_12():
    for schema in (INSTANCE_SCHEMA, PLACEMENT_SCHEMA):
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)


def bundled_files():
    return sorted(glob.glob(os.path.join(ROOT, "instances", "**", "*.json"), recursive=True))


def kind_of(document) -> str:
    if isinstance(document, dict) and "cluster" in document:
        return "instance"
    if isinstance(document, dict) and "groups" in document:
        return "placement"
    if isinstance(document, dict) and "configs" in document:
        return "profile"
    if isinstance(document, dict) and {"layers", "hidden", "heads"} <= set(document):
        return "architecture"
    return "other"


def test_bundled_files_exist():
    kinds = [kind_of(json.load(open(p))) for p in bundled_files()]
    assert kinds.count("instance") >= 2


@pytest.mark.parametrize("path", bundled_files(), ids=lambda p: os.path.relpath(p, os.path.join(ROOT, "instances")))
def test_bundled_file_validates(path):
    with open(path) as f:
        document = json.load(f)
    kind = kind_of(document)
    v = {"instance": validator(INSTANCE_SCHEMA), "placement": validator(PLACEMENT_SCHEMA),
         "profile": validator(INSTANCE_SCHEMA, "profile"),
         "architecture": validator(INSTANCE_SCHEMA, "architecture")}.get(kind)
    if v is None:
        pytest.skip(f"{path} is neither an instance, a placement, a profile nor an architecture")
    assert errors(v, document) == []


def test_solved_placement_validates():
    inst = load_instance(os.path.join(ROOT, "instances", "tiny", "two-models.json"))
    for name in ("round-robin", "selective-replication"):
        placement = solve(inst, solver=name)
        assert errors(validator(PLACEMENT_SCHEMA), json.loads(placement.to_json())) == []


def test_schema_refuses_what_the_loader_refuses():
    v = validator(INSTANCE_SCHEMA)
    assert errors(v, GOOD) == []
    for edit in (lambda d: d.update(colour=1), lambda d: d["cluster"].update(nodes=0),
                 lambda d: d["workload"]["arrival"].update(cv=2),  # poisson has no cv
                 lambda d: d["workload"]["arrival"].update(rates=[1, 2]),
                 lambda d: d["models"][0].update(slo_s=1, slo_scale=2),
                 lambda d: d["workload"].update(trace="t.csv"),
                 lambda d: d.update(solver={"name": "round-robin", "extra": 1})):
        bad = copy.deepcopy(GOOD)
        edit(bad)
        assert errors(v, bad), bad
        with pytest.raises(InputError):
            instance_from_dict(bad)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=mutated_documents(GOOD))
def test_loader_never_accepts_what_the_schema_refuses(document):
    try:
        instance_from_dict(document)
    except InputError:
        return
    assert errors(validator(INSTANCE_SCHEMA), document) == [], document
