"""LLM hardware rules (issue 12): every violation listed, rule sets, no cost-table fallback,
and every LLM solver's placement keeps the rules on random instances."""

import json
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement_opt import load_instance
from placement_opt.errors import InputError
from placement_opt.feasibility import check_placement
from placement_opt.instance import instance_from_dict
from placement_opt.llm_rules import llm_rule_violations
from placement_opt.placement import Group, Placement
from placement_opt.solvers import llm_baselines, muxserve  # noqa: F401  (registration)
from placement_opt.solvers.base import make_solver

from .helpers import MUX, SMALL

CHAT = os.path.join(MUX, "chatlmsys-500.json")
LLM_SOLVERS = ("muxserve", "spatial", "temporal", "greedy-memory")


def test_a_cost_table_never_falls_back_to_another_degree():
    inst = load_instance(CHAT)
    table = inst.llm_cost_tables[inst.model_index("llm-08-30b")]
    assert table.tp_degrees == (2, 4)
    with pytest.raises(InputError, match="no tp=8"):
        table.table_for(8)


def test_every_violation_is_listed_with_its_group_and_reason():
    inst = load_instance(CHAT)
    bad = Placement(groups=(Group(devices=tuple(range(8)), pp=1, tp=8, models=("llm-08-30b",), sm_share=(1.0,)),
                            Group(devices=(8,), pp=1, tp=1, models=("llm-00-13b", "llm-01-13b"),
                                  sm_share=(0.5, 0.555))))
    found = [str(v) for v in llm_rule_violations(bad, inst)]
    assert "groups[0]: llm-08-30b: tp=8 does not divide 52 heads" in found
    assert any(v.startswith("groups[0]: llm-08-30b: its cost table 'llama-30b' has no tp=8") for v in found)
    assert any(v.startswith("groups[1].sm_share: share 1 (0.555) is not a positive multiple of 0.01") for v in found)
    assert any(v.startswith("groups[1].sm_share: shares sum to 1.055") for v in found)
    with pytest.raises(InputError, match="tp=8 does not divide 52 heads"):
        check_placement(bad, inst)


def test_the_muxserve_rule_set_is_stricter_on_memory_and_coarser_on_shares():
    inst = load_instance(CHAT)
    two_13b = Group(devices=(0,), pp=1, tp=1, models=("llm-00-13b", "llm-01-13b"), sm_share=(0.6, 0.6))
    mine = Placement(groups=(two_13b,))
    theirs = Placement(groups=(two_13b,), provenance={"rules": "muxserve"})
    assert not [v for v in llm_rule_violations(mine, inst) if v.field.endswith(".models")]
    memory = [v.reason for v in llm_rule_violations(theirs, inst) if v.field.endswith(".models")]
    assert any("exceed the muxserve cap of 43.2 GB" in r for r in memory)
    # 120 % of decode shares is allowed under muxserve rules, 125 % is not, and 0.25 is off the grid
    mesh = Group(devices=tuple(range(4)), pp=1, tp=4, models=("llm-03-7b", "llm-06-7b"), sm_share=(0.6, 0.6))
    assert llm_rule_violations(Placement(groups=(mesh,), provenance={"rules": "muxserve"}), inst) == []
    off = Group(devices=tuple(range(4)), pp=1, tp=4, models=("llm-03-7b", "llm-06-7b"), sm_share=(0.25, 1.0))
    reasons = [v.reason for v in llm_rule_violations(Placement(groups=(off,), provenance={"rules": "muxserve"}), inst)]
    assert any("not a positive multiple of 0.1" in r for r in reasons)
    assert any("shares sum to 1.25, over the muxserve limit of 1.2" in r for r in reasons)
    with pytest.raises(InputError, match="provenance.rules"):
        llm_rule_violations(Placement(groups=(mesh,), provenance={"rules": "nope"}), inst)


def test_near_ties_are_decided_by_the_declared_objective_and_reported():
    inst = load_instance(CHAT)
    search = make_solver("muxserve").solve(inst).provenance["search"]
    assert search["tied_groups"] > 1
    assert search["decided_by"] in ("headroom", "gpus", "enumeration order")
    assert search["tie_break"].startswith("headroom, then gpus")
    by_gpus = make_solver("muxserve", {"tie_break": "gpus"}).solve(inst)
    assert by_gpus.provenance["search"]["tie_break"].startswith("gpus, then headroom")
    used = sum(g.n_gpus for g in by_gpus.groups)
    assert used <= sum(g.n_gpus for g in make_solver("muxserve").solve(inst).groups)
    exact = make_solver("muxserve", {"tie_tolerance": 0.0}).solve(inst).provenance["search"]
    assert exact["tied_groups"] < search["tied_groups"]


def random_llm_instance(seed: int) -> dict:
    """A random LLM instance from ChatLMSYS's LLMs: 2-8 of them, random rates, 1-2 nodes of 4 or 8 GPUs."""
    rng = random.Random(seed)
    with open(CHAT) as f:
        data = json.load(f)
    models = rng.sample(data["models"], rng.randint(2, 8))
    nodes, gpn = rng.choice([(1, 4), (1, 8), (2, 4), (2, 8)])
    rates = {m["name"]: round(rng.uniform(0.2, 12.0), 2) for m in models}
    data.update(name=f"random-{seed}", models=models)
    data["cluster"] = dict(data["cluster"], nodes=nodes, gpus_per_node=gpn)
    data["workload"] = {"duration_s": 20.0, "per_model": {n: {"process": "poisson", "rate": r}
                                                          for n, r in rates.items()},
                        "lengths": {"distribution": "fixed", "prompt_tokens": 100.0, "output_tokens": 200.0},
                        "slo": {"scale": 8.0}}
    return data


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), rules=st.sampled_from(["placeopt", "muxserve"]))
def test_every_llm_solver_keeps_the_rules_on_random_instances(seed, rules):
    inst = instance_from_dict(random_llm_instance(seed), base_dir=MUX)
    for solver in LLM_SOLVERS:
        try:
            placement = make_solver(solver, {"rules": rules}).solve(inst)
        except InputError as e:  # no placement exists under the rules (e.g. too few GPUs)
            assert e.field == "models" or e.field.startswith("models["), e.one_line()
            continue
        assert placement.provenance["rules"] == rules
        assert llm_rule_violations(placement, inst) == [], (solver, rules)
        check_placement(placement, inst)


def test_small_instance_solves_under_both_rule_sets():
    inst = load_instance(SMALL)
    for rules in ("placeopt", "muxserve"):
        for solver in LLM_SOLVERS:
            placement = make_solver(solver, {"rules": rules}).solve(inst)
            assert llm_rule_violations(placement, inst) == []
