"""The 2-GPU LLM fidelity set (instances/fidelity-llm/tp2) and run_gpu.sh's phases for it.

* the committed instance and its four placements are what make_instances.py says: spatial
  (one LLM per GPU, TP 1), muxserve (the solver's choice), temporal and colocated (one TP-2
  mesh of both GPUs, one job at a time / SM shares 0.5), and the simulator runs each;
* a CPU dry run of ``run_gpu.sh profile2 measured2 tp2 pack`` on a tiny copy of the set
  (the same names, meshes and placements; tiny architectures, short requests; gloo): the
  TP-1 and TP-2 tables are profiled and merged into one table per model, the measured
  instance points at them, every placement (TP-2 meshes, temporal scheduling included) runs
  every request to completion with no prefill bucket met cold, and the tarball holds it all.

What only the GPUs can check: NCCL inside the captured graphs of a TP-2 mesh, green contexts
on two GPUs, the two TP-1 profiles side by side, and the times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SET = os.path.join(ROOT, "instances", "fidelity-llm", "tp2")
PLACEMENTS = ("spatial", "muxserve", "temporal", "colocated")
TINY = {"llm-7b": {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "vocab": 128},
        "llm-8b": {"layers": 2, "hidden": 96, "heads": 6, "kv_heads": 2, "vocab": 160}}


def _placement(name):
    from placement_opt.placement import load_placement

    return load_placement(os.path.join(SET, f"poisson-{name}.placement.json"))


def test_the_committed_set_is_what_make_instances_says():
    from placement_opt import load_instance, simulate

    inst = load_instance(os.path.join(SET, "poisson.json"))
    assert inst.model_names == ["llm-7b", "llm-8b"] and inst.cluster.gpus_per_node == 2
    shapes = {n: [(g.devices, g.tp, g.models, g.sm_share) for g in _placement(n).groups] for n in PLACEMENTS}
    assert shapes["spatial"] == [((0,), 1, ("llm-7b",), (1.0,)), ((1,), 1, ("llm-8b",), (1.0,))]
    assert shapes["temporal"] == [((0, 1), 2, ("llm-7b", "llm-8b"), (1.0, 1.0))]
    assert _placement("temporal").scheduling == "temporal"
    assert shapes["colocated"] == [((0, 1), 2, ("llm-7b", "llm-8b"), (0.5, 0.5))]
    assert _placement("muxserve").provenance["solver"] == "muxserve"
    for name in PLACEMENTS:
        m = simulate(inst, _placement(name))
        assert m["requests"] > 150 and m["finished"] > 0


def _tiny_copy(dst):
    """The set with tiny architectures and short requests (same names, meshes, placements)."""
    os.makedirs(dst)
    with open(os.path.join(SET, "poisson.json")) as f:
        doc = json.load(f)
    for m in doc["models"]:
        m["architecture"].update(TINY[m["name"]], dtype="fp16")
    doc["workload"]["duration_s"] = 2
    doc["workload"]["lengths"].update(prompt_tokens=24, output_tokens=8, max_prompt_tokens=80, max_output_tokens=16)
    doc["llm"].update(drain_s=20, runtime_reserve_gb=0, kv_block_tokens=4, max_batch=8)
    doc["cluster"]["gpu"]["usable_memory_gb"] = 0.004
    with open(os.path.join(dst, "poisson.json"), "w") as f:
        json.dump(doc, f)
    for name in PLACEMENTS:
        with open(os.path.join(SET, f"poisson-{name}.placement.json")) as f:
            p = json.load(f)
        p.pop("metrics", None)  # the real instance's numbers
        with open(os.path.join(dst, f"poisson-{name}.placement.json"), "w") as f:
            json.dump(p, f)


def test_run_gpu_sh_tp2_phases_dry_run_on_cpu(tmp_path):
    pytest.importorskip("torch")
    tp2, tables, results, out = (tmp_path / x for x in ("tp2", "tables", "results", "out"))
    _tiny_copy(str(tp2))
    env = dict(os.environ, BACKEND="gloo", SHARES2="1", REPEATS="1", TP2=str(tp2), TABLES2=str(tables),
               RESULTS=str(results), OUT=str(out), PROFILE_GRID="--batch-sizes 1,2 --seq-lens 16,64",
               DEADLINE_S="400", RUN_CAP_S="120", PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    r = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "fidelity", "llm", "run_gpu.sh"), "profile2",
                        "measured2", "tp2", "pack"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    for model in TINY:
        table = json.loads((tables / f"{model}.json").read_text())
        assert sorted(table["tp"]) == ["1", "2"]  # the TP-1 and TP-2 profiles, merged
    measured = json.loads((tp2 / "measured" / "poisson.json").read_text())
    assert measured["cost_tables"] == {m: os.path.relpath(tables / f"{m}.json", tp2 / "measured") for m in TINY}
    for name in PLACEMENTS:
        summary = json.loads((results / f"tp2-poisson-{name}" / "summary.json").read_text())
        assert summary["status"] == "complete", (name, r.stdout)
        assert summary["measured"]["finished"] == summary["measured"]["requests"] > 0
        assert all(v == [] for v in summary["cold_buckets"].values())
        assert summary["workers"] == sum(len(g.devices) for g in _placement(name).groups if g.models)
    [tarball] = list(out.glob("llm-fidelity-*.tar.gz"))
    names = tarfile.open(tarball).getnames()
    assert any(n.endswith("tp2-poisson-temporal/summary.json") for n in names)
    assert any(n.endswith("measured/poisson.json") for n in names)
