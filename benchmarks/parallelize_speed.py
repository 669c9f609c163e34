"""Speed of the auto-parallelization passes (targets from issue 3).

* DP: the inter-op table for K=96 units over 64 GPUs, every submesh width tp in 1/2/4/8
  (64/tp stages at most), after JIT; baseline: the same recurrence in pure Python.
* ILP: one transformer layer (hidden 4096) on an 8-GPU mesh, cost tables + CP-SAT solve,
  not memoised; baseline: PuLP + HiGHS on the same problem.
* Configs: every (pp, tp) of a 6.7B model on 1..16 GPUs, cold (caches cleared) and from
  the memo.

Last line: ``dp_ms=<t> ilp_ms=<t> configs_per_s=<n>``. Targets: dp < 20 ms, ilp < 1000 ms,
cold configs < 5 s.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from placement_opt import Architecture, Cluster, GPUSpec, Link
from placement_opt.parallel import api
from placement_opt.costs.calibration import calibration_for
from placement_opt.costs.costmodel import CommModel
from placement_opt.parallel.graph import transformer_layer
from placement_opt.parallel.interop import stage_dp
from placement_opt.parallel.intraop import build_problem, solve
from placement_opt.profile import parallel_configs

V100 = GPUSpec(name="V100-16GB", memory_bytes=16e9, usable_memory_bytes=13.96e9, peak_fp16_flops=125e12,
               memory_bandwidth=900e9)
CLUSTER = Cluster(nodes=8, gpus_per_node=8, gpu=V100, intra_node_link=Link(150e9, 5e-6),
                  inter_node_link=Link(12.5e9, 2e-5))
BERT_6_7B = Architecture(layers=32, hidden=4096, heads=32)


def _median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _python_dp(lat, mem, send, budget, max_stages):
    k = len(lat)
    pl = [0.0]
    pm = [0.0]
    for j in range(k):
        pl.append(pl[-1] + lat[j])
        pm.append(pm[-1] + mem[j])
    cost = [[float("inf")] * (k + 1) for _ in range(max_stages + 1)]
    cost[0][0] = 0.0
    for s in range(1, max_stages + 1):
        for end in range(s, k + 1):
            extra = send[s - 1] if end < k else 0.0
            best = float("inf")
            for start in range(end - 1, s - 2, -1):
                if pm[end] - pm[start] > budget:
                    break
                best = min(best, max(cost[s - 1][start], pl[end] - pl[start] + extra))
            cost[s][end] = best
    return cost


def bench_dp():
    rng = np.random.default_rng(0)
    k = 96
    lat = rng.uniform(1e-3, 3e-3, k)
    mem = rng.uniform(0.1e9, 0.3e9, k)
    send = np.full(64, 1e-4)
    budget = 13.96e9

    def run_all():
        for tp in (1, 2, 4, 8):
            stage_dp(lat / tp, mem / tp, lat / tp, mem / tp, send, budget, 64 // tp)
    run_all()  # JIT (or load from the cache)
    dp = _median_time(run_all, 20)
    py = _median_time(lambda: [_python_dp(list(lat / tp), list(mem / tp), list(send), budget, 64 // tp)
                               for tp in (1, 2, 4, 8)], 3)
    return dp, py


def bench_ilp():
    calib = calibration_for(V100)
    comm = CommModel.for_group(CLUSTER, 8, calib)
    layer = transformer_layer(BERT_6_7B)

    def run(solver):
        return solve(build_problem(layer, 8, V100, comm, calib, BERT_6_7B.seq_len), None, solver)
    run("cp-sat")
    run("highs")
    return _median_time(lambda: run("cp-sat"), 10), _median_time(lambda: run("highs"), 10)


def bench_configs():
    for fn in (api._parallelize_memo, api._unit_costs, api._profile_configs):
        fn.cache_clear()
    configs = [(pp, tp) for n in (1, 2, 4, 8, 16) for pp, tp in parallel_configs(n, 8)]
    t = time.perf_counter()
    for pp, tp in configs:
        api.parallelize(BERT_6_7B, CLUSTER, pp * tp, pp, tp)
    cold = time.perf_counter() - t
    t = time.perf_counter()
    for pp, tp in configs:
        api.parallelize(BERT_6_7B, CLUSTER, pp * tp, pp, tp)
    warm = time.perf_counter() - t
    return len(configs), cold, warm


def main():
    dp, py = bench_dp()
    print(f"DP K=96 over 64 GPUs, tp 1/2/4/8: {dp * 1e3:.3f} ms (pure Python {py * 1e3:.1f} ms, "
          f"speedup {py / dp:.0f}x; target < 20 ms: {'ok' if dp < 0.02 else 'MISSED'})")
    ilp, highs = bench_ilp()
    print(f"transformer-layer ILP on 8 GPUs: CP-SAT {ilp * 1e3:.2f} ms, HiGHS {highs * 1e3:.2f} ms "
          f"(CP-SAT/HiGHS {ilp / highs:.2f}; target < 1000 ms: {'ok' if ilp < 1.0 else 'MISSED'})")
    n, cold, warm = bench_configs()
    print(f"all {n} configs of a 6.7B model on 1-16 GPUs: cold {cold:.3f} s, memo {warm * 1e3:.3f} ms "
          f"(cold/memo {cold / max(warm, 1e-9):.0f}x; target cold < 5 s: {'ok' if cold < 5 else 'MISSED'})")
    print(f"dp_ms={dp * 1e3:.3f} ilp_ms={ilp * 1e3:.2f} configs_per_s={n / cold:.1f}")


if __name__ == "__main__":
    main()
