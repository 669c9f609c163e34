"""The 2-GPU and 4-GPU LLM fidelity sets (instances/fidelity-llm/tp2, gpu4) and run_gpu.sh's phases for them.

* the committed instances and their placements are what make_instances.py says: on two GPUs
  spatial (one LLM per GPU, TP 1), muxserve (the solver's choice), temporal and colocated (one
  TP-2 mesh of both GPUs, one job at a time / SM shares 0.5); on four GPUs spatial, muxserve (a
  TP-2 mesh of the two small LLMs at shares 0.5, the large ones on a GPU each), temporal
  (muxserve's meshes, one job at a time) and temporal4 (one TP-4 mesh of all four, one job at a
  time); the simulator runs each;
* a CPU dry run of ``run_gpu.sh profile2 measured2 tp2 pack`` on a tiny copy of the 2-GPU set, and
  of ``profile4 measured2 tp2 pack`` with the TP-4 placement on one of the 4-GPU set
  (the same names, meshes and placements; tiny architectures, short requests; gloo): the
  TP-1 and TP-2 tables (TP-4 on the 4-GPU copy) are profiled and merged into one table per
  model, the measured instance points at them, the placements whose meshes no other test runs
  (muxserve's TP-1 mesh of both LLMs beside an idle GPU, temporal's TP-2 mesh one job at a time,
  temporal4's TP-4 mesh) run every request to completion with no prefill bucket met cold, and the
  tarball holds it all. Spatial's and colocated's meshes (TP-1 meshes of one LLM each, a TP-2 mesh
  of both at shares 0.5) are the tiny instance's spatial and tp2 placements, which
  test_llm_executor.py runs.

What only the GPUs can check: NCCL inside the captured graphs of a TP-2 mesh, green contexts
on two GPUs, the TP-1 (and on four GPUs the TP-2) profiles side by side, and the times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETS = {"tp2": ("spatial", "muxserve", "temporal", "colocated"),
        "gpu4": ("spatial", "muxserve", "temporal", "temporal4")}
#: the phases and placements of the CPU dry run, to keep the suite short: on two GPUs the placements
#: whose meshes no other test runs (each `placeopt execute` costs ~11 s of fresh workers here), on
#: four only what the 2-GPU set lacks (the TP-4 profiles and the TP-4 mesh)
DRY_RUN = {"tp2": (("profile2", "measured2", "tp2", "pack"), ("muxserve", "temporal")),
           "gpu4": (("profile4", "measured2", "tp2", "pack"), ("temporal4",))}
#: head size 16 (one KV pool), heads, KV heads and FFN width divisible by 4 (a TP-4 mesh)
TINY = {"llm-1b": {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "vocab": 96},
        "llm-3b": {"layers": 3, "hidden": 192, "heads": 12, "kv_heads": 4, "vocab": 112},
        "llm-7b": {"layers": 2, "hidden": 128, "heads": 8, "kv_heads": 8, "vocab": 128},
        "llm-8b": {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "vocab": 160}}


def _set(name):
    return os.path.join(ROOT, "instances", "fidelity-llm", name)


def _placement(set_name, name):
    from placement_opt.placement import load_placement

    return load_placement(os.path.join(_set(set_name), f"poisson-{name}.placement.json"))


def _shapes(set_name):
    return {n: [(g.devices, g.tp, g.models, g.sm_share) for g in _placement(set_name, n).groups]
            for n in SETS[set_name]}


def _simulates_each(set_name, min_requests):
    from placement_opt import load_instance, simulate

    inst = load_instance(os.path.join(_set(set_name), "poisson.json"))
    for name in SETS[set_name]:
        m = simulate(inst, _placement(set_name, name))
        assert m["requests"] > min_requests and m["finished"] > 0
    return inst


def test_the_committed_2gpu_set_is_what_make_instances_says():
    inst = _simulates_each("tp2", 150)
    assert inst.model_names == ["llm-7b", "llm-8b"] and inst.cluster.gpus_per_node == 2
    shapes = _shapes("tp2")
    assert shapes["spatial"] == [((0,), 1, ("llm-7b",), (1.0,)), ((1,), 1, ("llm-8b",), (1.0,))]
    assert shapes["temporal"] == [((0, 1), 2, ("llm-7b", "llm-8b"), (1.0, 1.0))]
    assert _placement("tp2", "temporal").scheduling == "temporal"
    assert shapes["colocated"] == [((0, 1), 2, ("llm-7b", "llm-8b"), (0.5, 0.5))]
    assert _placement("tp2", "muxserve").provenance["solver"] == "muxserve"


def test_the_committed_4gpu_set_is_what_make_instances_says():
    inst = _simulates_each("gpu4", 500)
    assert inst.model_names == ["llm-1b", "llm-3b", "llm-7b", "llm-8b"] and inst.cluster.gpus_per_node == 4
    shapes = _shapes("gpu4")
    assert shapes["spatial"] == [((i,), 1, (m,), (1.0,)) for i, m in enumerate(inst.model_names)]
    mux = [((0, 1), 2, ("llm-1b", "llm-3b"), (0.5, 0.5)), ((2,), 1, ("llm-7b",), (1.0,)),
           ((3,), 1, ("llm-8b",), (1.0,))]
    assert shapes["muxserve"] == mux
    assert _placement("gpu4", "muxserve").provenance["solver"] == "muxserve"
    assert shapes["temporal"] == [(d, tp, ms, (1.0,) * len(ms)) for d, tp, ms, _ in mux]
    assert shapes["temporal4"] == [((0, 1, 2, 3), 4, tuple(inst.model_names), (1.0,) * 4)]
    assert _placement("gpu4", "temporal").scheduling == _placement("gpu4", "temporal4").scheduling == "temporal"


def _tiny_copy(set_name, dst):
    """The set with tiny architectures and short requests (same names, meshes, placements)."""
    os.makedirs(dst)
    with open(os.path.join(_set(set_name), "poisson.json")) as f:
        doc = json.load(f)
    for m in doc["models"]:
        m["architecture"].update(TINY[m["name"]], dtype="fp16")
    doc["workload"]["duration_s"] = 2
    doc["workload"]["lengths"].update(prompt_tokens=24, output_tokens=8, max_prompt_tokens=80, max_output_tokens=16)
    doc["llm"].update(drain_s=20, runtime_reserve_gb=0, kv_block_tokens=4, max_batch=8)
    doc["cluster"]["gpu"]["usable_memory_gb"] = 0.004
    with open(os.path.join(dst, "poisson.json"), "w") as f:
        json.dump(doc, f)
    for name in SETS[set_name]:
        with open(os.path.join(_set(set_name), f"poisson-{name}.placement.json")) as f:
            p = json.load(f)
        p.pop("metrics", None)  # the real instance's numbers
        with open(os.path.join(dst, f"poisson-{name}.placement.json"), "w") as f:
            json.dump(p, f)


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_run_gpu_sh_set_phases_dry_run_on_cpu(tmp_path, set_name):
    pytest.importorskip("torch")
    tp2, tables, results, out = (tmp_path / x for x in (set_name, "tables", "results", "out"))
    _tiny_copy(set_name, str(tp2))
    models = [m["name"] for m in json.loads((tp2 / "poisson.json").read_text())["models"]]
    phases, placements = DRY_RUN[set_name]
    # a fake nvidia-smi starts the script's GPU log beside the phases: profile2's wait for its profiles
    # once waited for the log too, forever (here, with no GPU, the wait after its serial profiles)
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho '0, 1980, 2619, 120.5, 41, 0, 0x0000000000000000'\n")
    fake.chmod(0o755)
    env = dict(os.environ, BACKEND="gloo", SHARES2="1", MODELS2=" ".join(models), PLACEMENTS2=" ".join(placements),
               REPEATS="1", TP2=str(tp2), TABLES2=str(tables),
               RESULTS=str(results), OUT=str(out), PROFILE_GRID="--batch-sizes 1,2 --seq-lens 16,64",
               DEADLINE_S="400", RUN_CAP_S="120", HOST_PROBE="0",  # the probe: test_llm_executor.py
               PATH=os.pathsep.join([os.path.dirname(sys.executable), str(fake.parent), os.environ["PATH"]]))
    r = subprocess.run(["bash", os.path.join(ROOT, "benchmarks", "fidelity", "llm", "run_gpu.sh"), *phases],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (results / "gpu-log.csv").read_text().count("1980") >= 1  # the log ran beside the phases
    for model in models:
        table = json.loads((tables / f"{model}.json").read_text())
        # the TP-1 and TP-2 profiles merged; on four GPUs the TP-4 ones
        assert sorted(table["tp"]) == (["4"] if set_name == "gpu4" else ["1", "2"])
    measured = json.loads((tp2 / "measured" / "poisson.json").read_text())
    assert measured["cost_tables"] == {m: os.path.relpath(tables / f"{m}.json", tp2 / "measured") for m in models}
    for name in placements:
        summary = json.loads((results / f"{set_name}-poisson-{name}" / "summary.json").read_text())
        assert summary["status"] == "complete", (name, r.stdout)
        assert summary["measured"]["finished"] == summary["measured"]["requests"] > 0
        assert all(v == [] for v in summary["cold_buckets"].values())
        assert summary["workers"] == sum(len(g.devices) for g in _placement(set_name, name).groups if g.models)
    [tarball] = list(out.glob("llm-fidelity-*.tar.gz"))
    names = tarfile.open(tarball).getnames()
    assert any(n.endswith(f"{set_name}-poisson-{placements[-1]}/summary.json") for n in names)
    assert any(n.endswith("measured/poisson.json") for n in names)


def test_run_gpu_require_stops_on_another_card(tmp_path):
    """``run_gpu.sh require`` (first phase) stops with exit 3 before anything else runs where a
    GPU's name lacks ``GPU_MODEL`` (a lent H200 for the H100 tables), goes on where all have it,
    and wants ``GPU_MODEL`` set (exit 2). A fake ``nvidia-smi`` names the GPUs."""
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "BACKEND": "gloo", "OUT": str(tmp_path / "o"),
           "RESULTS": str(tmp_path / "r"), "TABLES": str(tmp_path / "t")}
    script = os.path.join(ROOT, "benchmarks", "fidelity", "llm", "run_gpu.sh")

    def run(names, **extra):
        fake.write_text("#!/bin/sh\n" + "".join(f"echo '{n}'\n" for n in names))
        fake.chmod(0o755)
        return subprocess.run(["bash", script, "require", "setup"], capture_output=True, text=True, cwd=ROOT,
                              env={**env, **extra}, timeout=60)

    r = run(["NVIDIA H200", "NVIDIA H200"], GPU_MODEL="H100")
    assert r.returncode == 3 and "GPUs are NVIDIA H200" in r.stdout and "not H100: stopping" in r.stdout
    assert "=== setup" not in r.stdout  # nothing after it ran
    r = run(["NVIDIA H100 80GB HBM3", "NVIDIA H200"], GPU_MODEL="H100")
    assert r.returncode == 3
    r = run(["NVIDIA H200"])
    assert r.returncode == 2 and "set GPU_MODEL" in r.stdout
    fake.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3'\necho 'NVIDIA H100 80GB HBM3'\n")
    r = subprocess.run(["bash", script, "require"], capture_output=True, text=True, cwd=ROOT,
                       env={**env, "GPU_MODEL": "H100"}, timeout=60)
    assert r.returncode == 0 and "require: 2 x H100" in r.stdout
