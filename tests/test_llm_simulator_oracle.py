"""The Numba LLM mesh kernel and ``simulate_llm`` against the plain-Python oracle (tests/llm_oracle.py).

Why: the mesh kernel packs every queue of the MuxServe rules into flat buffers and
counters, where an off-by-one or a stale pointer changes results without failing any
invariant test. The oracle restates the rules with one deque/list per queue, so agreement
on many random cases is evidence that the kernel implements the rules it documents.

What:

* the kernel alone (``simulate_mesh``): hypothesis draws small meshes (1-4 LLMs, up to 40
  requests with tied arrivals, random SM shares and latency tables, sometimes dyadic times
  so that events coincide with each other, with bin edges and with re-balancing), with KV
  pools small enough for preemption and drops, for every policy (adbs, round-robin, fcfs,
  temporal). Every output must be bit-identical: first-token and finish times, preemption
  counts, SM/KV time bins, KiB x seconds per LLM, peaks and the stop time. Each policy's run
  also asserts that its cases exercised preemption, drops, SM hold-back, prefill limits and,
  for adbs, quota-limited admission and re-balancing that moved quota.
* ``simulate_llm``: small LLM instances (tiny architectures with inline cost tables, tight
  GPU memory) with placements of 2-3 meshes, LLMs hosted by several meshes; the oracle
  splits the requests, sizes pools and resamples the cost tables itself. The kernel's
  per-mesh inputs and outputs (captured by a spy) and the final metrics dict must agree
  exactly.
* targeted cases: preemption with recompute, dropping only the request larger than the
  pool, a re-balancing that changes the outcome, and the decode round-robin order (xfail,
  strict: the kernel's one known deviation from its documented rule, see the oracle's
  docstring; the other tests compare against the oracle run in the kernel's order).

The SLO of each request and the request-level aggregation (``request_slo_seconds``,
``llm_metrics``) are the simulator's own on both sides, so the metrics comparison checks
the per-mesh figures and the plumbing of ``simulate_llm``, not those two functions.

Size: 4 x 250 mesh cases and 4 x 100 ``simulate_llm`` cases (about 2 000 meshes); about
12 s on 2 cores once Numba's cache is warm (plus about 7 s to compile it cold).
"""

from __future__ import annotations

import importlib
import random
from collections import Counter
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_oracle import POLICIES, oracle_llm, oracle_mesh

from placement_opt import Group, Placement, instance_from_dict
from placement_opt.model import Architecture
from placement_opt.workload import Requests

# ---- the code under test: the one place to update when the modules move
from placement_opt.simulate.meshsim import (ADBS, FCFS, ROUND_ROBIN, LatencyTables, MeshLLMs, MeshRequests,
                                            MeshSettings, mesh_outputs, simulate_mesh)
from placement_opt.llm_units import llm_config, llm_specs
# simulate_llm, llm_metrics, request_slo_seconds, UTILISATION_BINS, and the simulate_mesh it calls
# (a module object: the name placement_opt.simulate is shadowed by the simulate function)
llm_simulator = importlib.import_module("placement_opt.simulate.llm")

POLICY_CODE = {"adbs": ADBS, "round-robin": ROUND_ROBIN, "fcfs": FCFS, "temporal": FCFS}
# The kernel offers decodes in plain round robin (it used to move its pointer inside a pass and
# skip LLMs; the oracle can still reproduce that order with decode_pointer="kernel").
KERNEL_ORDER = "intended"


def same_bits(a, b) -> bool:
    """Bit-for-bit equality of two float sequences (0.0 and -0.0 differ, NaN equals NaN)."""
    return np.asarray(a, dtype=np.float64).tobytes() == np.asarray(b, dtype=np.float64).tobytes()


# ---------------------------------------------------------------- one mesh: kernel vs oracle

def run_kernel(case):
    """``simulate_mesh`` on a case given as plain lists (the oracle's arguments)."""
    (arrival, llm, prompt, output, shares, P, D, lgrid, kvu, rate, pool, block, max_batch, token_budget,
     policy, period, frac, horizon, n_bins) = case
    n, K = len(arrival), len(shares)
    out = mesh_outputs(n, K, n_bins)
    kernel_shares = [1.0] * K if policy == "temporal" else shares
    requests = MeshRequests(arrival=np.array(arrival, dtype=np.float64), llm=np.array(llm, dtype=np.int64),
                            prompt=np.array(prompt, dtype=np.int64), output=np.array(output, dtype=np.int64))
    llms = MeshLLMs(share=np.array(kernel_shares, dtype=np.float64), kv_kib=np.array(kvu, dtype=np.int64),
                    rate=np.array(rate, dtype=np.float64))
    tables = LatencyTables(prefill=np.array(P, dtype=np.float64), decode=np.array(D, dtype=np.float64),
                           lgrid=np.array(lgrid, dtype=np.float64))
    settings = MeshSettings(policy=POLICY_CODE[policy], pool=pool, block=block, max_batch=max_batch,
                            token_budget=token_budget, period=period, frac=frac, horizon=horizon)
    stop = simulate_mesh(requests, llms, tables, settings, out)
    return dict(first=out.first, finish=out.finish, preempts=out.preempt_count, sm_bins=out.sm_bins,
                kv_bins=out.kv_bins, kv_llm_time=out.kv_llm_time, peak=out.peak, stop=stop)


def assert_mesh_outputs_equal(got, res):
    """The kernel's outputs (``got``, arrays) equal the oracle's ``MeshResult`` bit for bit."""
    assert same_bits(got["finish"], res.finish), "finish times differ"
    assert same_bits(got["first"], res.first), "first-token times differ"
    assert got["preempts"].tolist() == res.preempts, "preemption counts differ"
    assert same_bits(got["sm_bins"], res.sm_bins), "SM bins differ"
    assert same_bits(got["kv_bins"], res.kv_bins), "KV bins differ"
    assert same_bits(got["kv_llm_time"], res.kv_llm_time), "KV time per LLM differs"
    assert same_bits(got["peak"], [res.peak_kv, res.peak_sm]), "peaks differ"
    assert same_bits([got["stop"]], [res.stop]), "stop times differ"


def check_mesh_case(case):
    res = oracle_mesh(*case, decode_pointer=KERNEL_ORDER)
    assert_mesh_outputs_equal(run_kernel(case), res)
    return res


# Exact values make ties common: equal arrivals, jobs ending together, ends on bin edges.
DYADIC = [0.0625, 0.125, 0.25, 0.5]
gap = st.one_of(st.sampled_from([0.0, 0.0, 0.125, 0.25, 0.1]), st.floats(0.0, 0.6))
share = st.one_of(st.sampled_from([0.25, 0.3, 0.5, 0.6, 1.0]), st.floats(0.05, 1.0))


@st.composite
def mesh_cases(draw, policy):
    K = draw(st.integers(1, 4))
    n = draw(st.integers(0, 40))
    arrival, t = [], 0.0
    for _ in range(n):
        t += draw(gap)
        arrival.append(t)
    llm = draw(st.lists(st.integers(0, K - 1), min_size=n, max_size=n))
    prompt = draw(st.lists(st.integers(1, 80), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    shares = draw(st.lists(share, min_size=K, max_size=K))
    max_batch = draw(st.integers(1, 8))
    lgrid = sorted(float(x) for x in draw(st.sets(st.sampled_from([1, 8, 16, 32, 64, 128]), min_size=1, max_size=4)))
    # Latency tables from a seed (drawing hundreds of floats through hypothesis is slow):
    # random, so some rows fall with length (the extrapolation clamp), or all dyadic.
    rng = random.Random(draw(st.integers(0, 2 ** 32 - 1)))
    dyadic = draw(st.booleans())

    def latency(lo, hi):
        return rng.choice(DYADIC) if dyadic else rng.uniform(lo, hi)

    P = [[[latency(0.01, 0.3) for _ in lgrid] for _ in range(max_batch + 1)] for _ in range(K)]
    D = [[[latency(0.005, 0.1) for _ in lgrid] for _ in range(max_batch + 1)] for _ in range(K)]
    kvu = draw(st.lists(st.integers(1, 3), min_size=K, max_size=K))
    rate = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 7.5]), min_size=K, max_size=K))
    pool = draw(st.integers(8, 800))  # KiB: a few requests' worth, so blocks run out
    block = draw(st.sampled_from([1, 2, 4, 16]))
    token_budget = draw(st.sampled_from([8, 32, 100, 4096]))
    period = draw(st.sampled_from([0.05, 0.25, 1.0, 5.0]))
    frac = draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
    horizon = draw(st.sampled_from([2.0, 4.0, 30.0, 1000.0]))
    n_bins = draw(st.sampled_from([1, 3, 32, 60]))
    return (arrival, llm, prompt, output, shares, P, D, lgrid, kvu, rate, pool, block, max_batch, token_budget,
            policy, period, frac, horizon, n_bins)


MESH_EXAMPLES = 250  # per policy
# Features each policy's cases must have exercised, in at least this many cases (about a
# third of the least seen in trial runs; keys are the oracle's MeshResult.stats).
REQUIRED = {"preemptions": 30, "drops": 25, "held_sms": 8, "budget_limited": 20, "batch_limited": 12,
            "pool_limited": 5, "unfinished": 25}
REQUIRED_ADBS = {"quota_limited": 8, "over_quota_alone": 35, "rebalances": 60, "quota_moves": 20}


@pytest.mark.parametrize("policy", POLICIES)
def test_mesh_kernel_matches_oracle(policy):
    seen = Counter()

    @settings(max_examples=MESH_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True,
              database=None)
    @given(mesh_cases(policy))
    def check(case):
        res = check_mesh_case(case)
        seen.update(key for key, count in res.stats.items() if count)
        seen["cases"] += 1

    check()
    print(f"mesh kernel, {policy}: {dict(seen)}")  # shown by pytest -rP
    required = dict(REQUIRED, **(REQUIRED_ADBS if policy == "adbs" else {}))
    missing = {k: seen[k] for k, least in required.items() if seen[k] < least}
    assert not missing, f"{policy}: too few cases exercised {missing} (of {seen['cases']}: {dict(seen)})"


def small_case(policy="adbs", **kw):
    """A hand-sized mesh: 2 LLMs, constant latencies (prefill 0.1 s, decode 0.05 s)."""
    K = kw.pop("K", 2)
    max_batch = kw.pop("max_batch", 4)
    lgrid = [1.0, 1000.0]
    args = dict(arrival=[0.0, 0.0, 0.1, 0.2], llm=[0, 1, 0, 1], prompt=[20, 20, 20, 20], output=[8, 8, 8, 8],
                shares=[0.5] * K, P=[[[0.1, 0.1]] * (max_batch + 1)] * K, D=[[[0.05, 0.05]] * (max_batch + 1)] * K,
                lgrid=lgrid, kvu=[1] * K, rate=[1.0] * K, pool=1000, block=4, max_batch=max_batch, token_budget=4096,
                policy=policy, period=5.0, frac=0.5, horizon=100.0, n_bins=10)
    args.update(kw)
    return tuple(args.values())


def test_preemption_recomputes_and_matches():
    """Two LLMs whose contexts outgrow a 64 KiB pool: decodes preempt, prefills recompute."""
    for policy in POLICIES:
        res = check_mesh_case(small_case(policy, pool=64, output=[30, 30, 30, 30]))
        assert sum(res.preempts) > 0 and res.stats["preemptions"] > 0
        assert all(f > 0 for f in res.finish), "preempted requests come back and finish"


def test_drop_only_the_request_larger_than_the_pool():
    for policy in POLICIES:
        res = check_mesh_case(small_case(policy, pool=40, prompt=[20, 60, 20, 20]))
        assert res.finish[1] == -2.0 and all(f > 0 for i, f in enumerate(res.finish) if i != 1)


def test_rebalancing_moves_quota_and_changes_the_outcome():
    """ADBS: LLM 1 has the larger rate and so most of the quota, but LLM 0 brings the load;
    re-balancing every 0.25 s hands LLM 1's unused quota to LLM 0, which then admits more."""
    kw = dict(arrival=[0.0] * 12, llm=[0] * 12, prompt=[24] * 12, output=[20] * 12, rate=[1.0, 9.0],
              pool=400, max_batch=8, period=0.25)
    moved = check_mesh_case(small_case("adbs", frac=0.5, **kw))
    fixed = check_mesh_case(small_case("adbs", frac=0.0, **kw))
    assert moved.stats["quota_moves"] > 0 and fixed.stats["quota_moves"] == 0
    assert moved.stats["quota_limited"] > 0 and fixed.stats["quota_limited"] > 0
    assert moved.finish != fixed.finish


def test_decode_offers_follow_round_robin():
    """Three LLMs at share 0.5, one request each (prefill 0.05 s, decode step 0.1 s). Prefills
    run one at a time (LLM 0, 1, 2); LLM 0 decodes at 0.05-0.15. At 0.15 all three have a
    token to decode, SMs for two, and the decode pointer after LLM 0: round robin offers
    LLM 1, then LLM 2 (both finish at 0.25), and LLM 0 waits. (The kernel used to offer LLM 1,
    then LLM 0, so LLM 2's request finished a step later, at 0.35: the oracle's "kernel" order.)"""
    case = small_case("round-robin", K=3, arrival=[0.0] * 3, llm=[0, 1, 2], prompt=[10] * 3, output=[4, 2, 2],
                      rate=[1.0] * 3, P=[[[0.05, 0.05]] * 5] * 3, D=[[[0.1, 0.1]] * 5] * 3)
    got = run_kernel(case)
    intended = oracle_mesh(*case, decode_pointer="intended")
    assert intended.finish[1:] == [0.25, 0.25]
    assert_mesh_outputs_equal(got, intended)
    assert oracle_mesh(*case, decode_pointer="kernel").finish[2] == 0.35  # the old order differs here


# ---------------------------------------------------------------- simulate_llm: several meshes

# Tiny architectures: (layers, hidden, heads) with 512, 1152 and 2560 B of KV per token (1, 2, 3 KiB).
ARCHS = [(2, 64, 4), (3, 96, 4), (5, 128, 4)]
LAYOUTS = [(1, 1), (2, 2), (1, 3), (2, 1, 1), (1, 1, 1), (1, 1, 2)]  # mesh sizes on a 4-GPU node


def cost_table(rng, model):
    """An inline cost table: every mesh size of LAYOUTS as a TP degree (a lookup never falls back
    to another degree), 1-3 SM shares, small batch and length grids (ms), measured on SM partitions
    of an H200 or A100 (lookups by the SMs a share is rounded to) or not."""
    tps = {}
    for tp in (1, 2, 3, 4):
        sm = rng.choice([[1.0], [0.5, 1.0], [0.3, 0.6, 1.0]])
        batch = rng.choice([[1], [1, 4], [1, 2, 8]])
        seq = rng.choice([[16], [8, 64], [16, 32, 128]])
        tps[str(tp)] = {"sm_share": sm, "batch": batch, "seq_len": seq,
                        "prefill_ms": [[[rng.uniform(5, 120) for _ in seq] for _ in batch] for _ in sm],
                        "decode_ms": [[[rng.uniform(2, 40) for _ in seq] for _ in batch] for _ in sm]}
    out = {"format": "placeopt-llm-cost-table", "model": model, "tp": tps}
    partition = rng.choice([None, {"sms": 132, "granule": 8}, {"sms": 108, "granule": 2}])
    if partition is not None:
        out["sm_partition"] = partition
    return out


@st.composite
def llm_cases(draw, policy):
    rng = random.Random(draw(st.integers(0, 2 ** 32 - 1)))
    n_models = draw(st.integers(2, 3))
    names = [f"llm-{i}" for i in range(n_models)]
    archs = [draw(st.sampled_from(ARCHS)) for _ in names]
    # The policy: given to simulate_llm, or the instance's llm.policy, or (temporal) the placement's
    # scheduling; an explicit or placement policy overrides a different llm.policy.
    how = draw(st.sampled_from(["explicit", "instance", "placement"] if policy == "temporal" else
                               ["explicit", "instance"]))
    llm = {"policy": policy if how == "instance" else draw(st.sampled_from(POLICIES)),
           "kv_block_tokens": draw(st.sampled_from([1, 4, 16])),
           "max_batch": draw(st.integers(1, 6)), "prefill_token_budget": draw(st.sampled_from([16, 64, 4096])),
           "rebalance_period_s": draw(st.sampled_from([0.05, 0.2, 1.0, 5.0])),
           "rebalance_fraction": draw(st.sampled_from([0.0, 0.5, 1.0])),
           "kv_reserve_fraction": draw(st.sampled_from([0.0, 0.05, 0.3])), "runtime_reserve_gb": 0.0,
           "drain_s": draw(st.sampled_from([0.0, 2.0, 30.0])), "prompt_tokens": 8.0, "output_tokens": 4.0}
    layout = draw(st.sampled_from(LAYOUTS))
    groups, dev = [], 0
    for size in layout:
        hosted = draw(st.lists(st.sampled_from(names), unique=True, min_size=1, max_size=n_models))
        shares = None if draw(st.booleans()) else tuple(draw(share) for _ in hosted)
        groups.append(Group(devices=tuple(range(dev, dev + size)), pp=1, tp=size, models=tuple(hosted),
                            sm_share=shares))
        dev += size
    # GPU memory: enough for the weights and a drawn KV pool on the tightest mesh (the others get more)
    weights = {}
    kv = {}
    for name, (layers, hidden, heads) in zip(names, archs):
        a = Architecture.from_dict({"layers": layers, "hidden": hidden, "heads": heads, "vocab": 64,
                                    "ffn_ratio": 1.0}, "architecture")
        weights[name], kv[name] = a.weight_bytes(), a.kv_bytes_per_token()
    pool_kib = draw(st.sampled_from([16, 40, 100, 250, 1000]))  # KiB on the tightest mesh
    reserve = llm["kv_reserve_fraction"]
    per_gpu = max((sum(weights[m] for m in g.models) + sum(kv[m] * 12 for m in g.models) + pool_kib * 1024)
                  / (g.n_gpus * (1.0 - reserve)) for g in groups)
    per_gpu = max(per_gpu, max(weights.values()) / 4)  # an LLM hosted nowhere must still fit the cluster
    data = {
        "cluster": {"nodes": 1, "gpus_per_node": 4,
                    "gpu": {"name": "tiny", "memory_gb": 1.0, "usable_memory_gb": per_gpu * 1.001 / 1e9}},
        "cost_tables": {name: cost_table(rng, name) for name in names},
        "models": [{"name": name, "family": "llm", "cost_table": name,
                    "architecture": {"layers": a[0], "hidden": a[1], "heads": a[2], "vocab": 64, "ffn_ratio": 1.0}}
                   for name, a in zip(names, archs)],
        "workload": {"duration_s": 4.0, "per_model": {name: {"process": "poisson", "rate": draw(
            st.sampled_from([0.5, 1.0, 4.0]))} for name in names}, "slo": {"scale": 4.0}},
        "llm": llm,
    }
    inst = instance_from_dict(data)
    n = draw(st.integers(0, 50))
    arrival, t = [], 0.0
    for _ in range(n):
        t += draw(gap)
        arrival.append(t)
    model = draw(st.lists(st.integers(0, n_models - 1), min_size=n, max_size=n))
    prompt = draw(st.lists(st.integers(1, 80), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 20), min_size=n, max_size=n))
    duration = draw(st.sampled_from([2.0, 5.0, 10.0]))
    req = Requests(np.array(arrival, dtype=np.float64), np.array(model, dtype=np.int32),
                   np.array(arrival, dtype=np.float64) + 10.0, duration,
                   np.array(prompt, dtype=np.int64), np.array(output, dtype=np.int64))
    placement = Placement(groups=tuple(groups), scheduling="temporal" if how == "placement" else None)
    return inst, placement, req, policy if how == "explicit" else None


@contextmanager
def spy_on_kernel():
    """Record every ``simulate_mesh`` call of ``simulate_llm``: its arguments and return value
    (the output arrays are read after the call)."""
    calls = []
    real = llm_simulator.simulate_mesh

    def spy(*args):
        stop = real(*args)
        calls.append((args, stop))
        return stop

    llm_simulator.simulate_mesh = spy
    try:
        yield calls
    finally:
        llm_simulator.simulate_mesh = real


def oracle_metrics(inst, placement, req, policy, res):
    """``simulate_llm``'s metrics from the oracle's per-request results: the per-mesh figures
    are restated here (numpy sums, as simulate_llm takes them, for identical rounding) and the
    request-level aggregation is the simulator's own ``llm_metrics``."""
    cfg = llm_config(inst)
    specs = llm_specs(inst)
    horizon = req.duration_s + cfg.drain_s
    n_bins = llm_simulator.UTILISATION_BINS
    bin_w = horizon / n_bins
    kv_share = [0.0] * len(specs)
    groups = []
    for g, mesh, pool, shares, pool_bytes in zip(placement.groups, res.meshes, res.pools_kib, res.shares,
                                                 res.pools_bytes):
        if mesh is None:
            groups.append({"models": [], "sm_utilisation": 0.0, "kv_utilisation": 0.0})
            continue
        span = max(mesh.stop, 1e-9)
        for k, m in enumerate(g.models):
            kv_share[inst.model_names.index(m)] += mesh.kv_llm_time[k] / (span * pool)
        groups.append({
            "models": list(g.models), "sm_share": shares, "kv_pool_gb": round(pool_bytes / 1e9, 3),
            "kv_peak_utilisation": mesh.peak_kv / pool, "sm_peak": mesh.peak_sm,
            "sm_utilisation": float(np.sum(mesh.sm_bins) / span),
            "kv_utilisation": float(np.sum(mesh.kv_bins) / (span * pool)),
            "sm_utilisation_series": [round(x / bin_w, 4) for x in mesh.sm_bins],
            "kv_utilisation_series": [round(x / (bin_w * pool), 4) for x in mesh.kv_bins],
            "preemptions": sum(mesh.preempts),
        })
    policy = policy or placement.scheduling or cfg.policy
    prompt, output = req.prompt_tokens.astype(np.int64), req.output_tokens.astype(np.int64)
    slo = llm_simulator.request_slo_seconds(inst, specs, req, prompt, output)
    run = llm_simulator.LLMRun(first=np.array(res.first), finish=np.array(res.finish),
                               preempt=np.array(res.preempts, dtype=np.int64), stop=res.stop, group_metrics=groups,
                               kv_share=np.array(kv_share))
    return llm_simulator.llm_metrics(specs, req, output, slo, placement.groups, run, policy)


def check_llm_case(inst, placement, req, policy):
    res = oracle_llm(inst, placement, req, policy, specs=llm_specs(inst), config=llm_config(inst),
                     decode_pointer=KERNEL_ORDER)
    with spy_on_kernel() as calls:
        got = llm_simulator.simulate_llm(inst, placement, req, policy)
    hosting = [gi for gi, g in enumerate(placement.groups) if g.models]
    assert len(calls) == len(hosting)
    for gi, ((requests, llms, tables, cfg, out), stop) in zip(hosting, calls):
        # the kernel's inputs, as the oracle derives them (requests, tables, pool, settings) ...
        mine = res.mesh_args[gi]
        assert [a.tolist() for a in requests] == list(mine[:4]), "the mesh's requests differ"
        assert len(llms.share) == len(mine[4]) and same_bits(llms.share, mine[4]), "SM shares differ"
        assert same_bits(tables.lgrid, mine[7]), "length grids differ"
        assert same_bits(tables.prefill, mine[5]) and same_bits(tables.decode, mine[6]), "latency tables differ"
        assert llms.kv_kib.tolist() == mine[8] and same_bits(llms.rate, mine[9]), "KiB per token or rates differ"
        assert (cfg.pool, cfg.block, cfg.max_batch, cfg.token_budget) == mine[10:14], \
            "pool, block, max_batch or token budget differ"
        assert cfg.policy == POLICY_CODE[mine[14]]
        assert same_bits([cfg.period, cfg.frac, cfg.horizon, len(out.sm_bins)], mine[15:19])
        # ... and its outputs
        assert_mesh_outputs_equal(dict(first=out.first, finish=out.finish, preempts=out.preempt_count,
                                       sm_bins=out.sm_bins, kv_bins=out.kv_bins, kv_llm_time=out.kv_llm_time,
                                       peak=out.peak, stop=stop), res.meshes[gi])
    assert got == oracle_metrics(inst, placement, req, policy, res)
    return res


LLM_EXAMPLES = 100  # per policy


@pytest.mark.parametrize("policy", POLICIES)
def test_simulate_llm_matches_oracle_on_several_meshes(policy):
    seen = Counter()

    @settings(max_examples=LLM_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True,
              database=None)
    @given(llm_cases(policy))
    def check(case):
        res = check_llm_case(*case)
        seen["cases"] += 1
        assert res.policy == policy
        meshes = [m for m in res.meshes if m is not None]
        seen["meshes"] += len(meshes)
        if len(meshes) >= 2:
            seen["several meshes"] += 1
        if any(len(hosts) > 1 for hosts in res.hosts.values()):
            seen["LLM on several meshes"] += 1
        for key in ("preemptions", "drops", "quota_moves", "held_sms"):
            if any(m.stats[key] for m in meshes):
                seen[key] += 1

    check()
    print(f"simulate_llm, {policy}: {dict(seen)}")  # shown by pytest -rP
    assert seen["several meshes"] == seen["cases"] >= LLM_EXAMPLES // 2  # every layout has 2-3 meshes
    required = {"LLM on several meshes": 30, "preemptions": 4, "drops": 7,
                "held_sms": 4}
    if policy == "adbs":
        required["quota_moves"] = 3
    missing = {k: seen[k] for k, least in required.items() if seen[k] < least}
    assert not missing, f"{policy}: too few cases exercised {missing} (of {dict(seen)})"
