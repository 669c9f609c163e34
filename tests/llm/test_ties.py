"""The declared near-tie choice of the mesh-group search (issue 12, item 3): the headroom ladder
discriminates where one scale saturates, oversubscribed SM shares are fitted before the
headroom is estimated, and the temporal baseline is searched with its own scheduling's estimate."""

import os
from dataclasses import replace

import numpy as np
import pytest

from placement_opt import load_instance
from placement_opt.errors import InputError
from placement_opt.llm_units import llm_config, llm_specs, mesh_memory
from placement_opt.settings import rule_set
from placement_opt.simulate.llm import simulate_llm
from placement_opt.solvers import llm_baselines, muxserve  # noqa: F401  (registration)
from placement_opt.solvers.base import make_solver, parse_options
from placement_opt.solvers.llm_estimator import Headroom, build_tables
from placement_opt.solvers.mesh_greedy import FREE_MEMORY, GAIN
from placement_opt.solvers.muxserve import MeshSearchOptions, search_mesh_groups

from .helpers import MUX, SMALL


def _tables(path: str, full_share: bool = False, serial_decode: bool = False):
    inst = load_instance(path)
    specs = llm_specs(inst)
    memory = mesh_memory(inst, rule_set("placeopt"))
    return specs, build_tables(specs, inst.cluster, llm_config(inst).max_batch, memory, full_share=full_share,
                               serial_decode=serial_decode)


def test_the_ladder_decides_where_the_first_scale_saturates():
    """ChatLMSYS 500's temporal search: at 1.5 x the rates the best tied groups estimate the
    same, so a later scale of the ladder decides, and the chosen group is lexicographically
    best over the whole ladder among the tied groups."""
    inst = load_instance(os.path.join(MUX, "chatlmsys-500.json"))
    search = search_mesh_groups(inst, GAIN, full_share=True, serial_decode=True)
    ties = search.ties
    assert ties["decided_by"] == "headroom" and ties["decided_at_scale"] > ties["headroom_scales"][0]
    tied = search.ranked[:ties["tied_groups"]]
    best = tuple(round(x, 6) for x in tied[0].headroom)
    assert all(tuple(round(x, 6) for x in r.headroom) <= best for r in tied)
    assert ties["headroom_rps"] == [round(x, 6) for x in tied[0].headroom]
    assert 1 < ties["distinct_tied"] <= ties["tied_groups"]


def test_headroom_fits_oversubscribed_shares_to_the_mesh():
    """Four LLMs whose candidate shares oversubscribe one 4-GPU mesh: fitting the shares lowers
    the headroom; a lone LLM (its share fits) is estimated the same either way."""
    specs, tables = _tables(SMALL)
    t = int(np.flatnonzero(tables.tps == 4)[0])
    members = [0, 1, 2, 3]
    assert tables.share[members, t].sum() > 1.0
    fitted = Headroom(tables, specs, (1.5, 3.0), fit_shares=True)
    raw = Headroom(tables, specs, (1.5, 3.0), fit_shares=False)
    assert fitted.of_unit(members, t)[1] < raw.of_unit(members, t)[1]
    assert fitted.of_unit([1], t) == raw.of_unit([1], t)
    # each rung is the Eq. 3 estimate of the unit at that multiple of the rates
    at_1_5 = replace(tables, rate=tables.rate * 1.5).estimate([0, 1], t)[0]
    at_3 = replace(tables, rate=tables.rate * 3.0).estimate([0, 1], t)[0]
    assert raw.of_unit([0, 1], t) == (at_1_5, at_3)


def test_serialised_decode_steps_cost_colocated_llms_and_nothing_alone():
    """Temporal multiplexing runs one job at a time: colocated LLMs estimate less with serial
    decode steps; an LLM alone on its mesh estimates the same."""
    specs, overlapped = _tables(SMALL, full_share=True)
    _, serial = _tables(SMALL, full_share=True, serial_decode=True)
    assert serial.estimate([1], 0)[0] == overlapped.estimate([1], 0)[0]
    both_serial, tpt, _ = serial.estimate([0, 1], 0)
    both_overlapped, _, _ = overlapped.estimate([0, 1], 0)
    assert both_serial < both_overlapped
    assert np.all(tpt <= serial.rate[[0, 1]] + 1e-12)


def test_temporal_is_not_weakened_by_the_tie_break():
    """The simulated throughput of the temporal baseline on ChatLMSYS 1600 is at least its value
    before issue 12 (10.47 req/s, rate-weighted) and the placement spreads its busiest LLMs
    instead of packing 5-7 LLMs on 8-GPU meshes (issue 12's first tie-break gave 4.64)."""
    inst = load_instance(os.path.join(MUX, "chatlmsys-1600.json"))
    pl = make_solver("temporal").solve(inst)
    assert pl.scheduling == "temporal"
    assert max(len(g.models) for g in pl.groups) <= 4
    assert simulate_llm(inst, pl)["throughput_weighted_rps"] >= 10.47


def test_greedy_memory_avoids_oversubscribed_meshes_among_ties():
    """Synthetic alpha 1.7: hundreds of groups tie on the estimate; fitted shares make the
    headroom prefer placements whose meshes the simulator can run, 10.4 req/s against the
    7.55 of issue 12's first tie-break."""
    inst = load_instance(os.path.join(MUX, "synthetic-a1.7.json"))
    search = search_mesh_groups(inst, FREE_MEMORY)
    assert search.ties["tied_groups"] > 100 and search.ties["decided_by"] == "headroom"
    pl = make_solver("greedy-memory").solve(inst)
    assert simulate_llm(inst, pl)["throughput_weighted_rps"] > 10.0


def test_headroom_scales_is_a_declared_option():
    opts = parse_options(MeshSearchOptions, {"headroom_scales": "2,4"}, from_text=True)
    assert opts.headroom_scales == (2.0, 4.0)
    pl = make_solver("muxserve", {"headroom_scales": (2.0, 4.0)}).solve(load_instance(SMALL))
    assert pl.provenance["search"]["headroom_scales"] == [2.0, 4.0]
    assert "2, 4 x the rates" in pl.provenance["search"]["tie_break"]
    with pytest.raises(InputError, match="headroom_scales"):
        parse_options(MeshSearchOptions, {"headroom_scales": "1,2"}, from_text=True)


def test_float_noise_at_one_scale_never_outweighs_the_next():
    """Two groups whose estimates at 1.5 x differ by float noise (the same units summed in
    another order) share a class there, so 2 x decides; real differences keep their order."""
    from placement_opt.solvers.muxserve import _noise_classes
    noisy = np.array([45.7675815, 45.7675815 + 4e-14, 45.0, 44.99])
    assert _noise_classes(noisy).tolist() == [0, 0, 1, 2]
    assert _noise_classes(np.array([1.0, 3.0, 2.0])).tolist() == [2, 0, 1]


def test_no_headroom_scales_leaves_the_choice_to_gpus():
    inst = load_instance(os.path.join(MUX, "chatlmsys-500.json"))
    search = make_solver("muxserve", {"headroom_scales": ()}).solve(inst).provenance["search"]
    assert search["headroom_rps"] == [] and search["decided_by"] in ("gpus", "enumeration order")
    assert "never decides" in search["tie_break"]
