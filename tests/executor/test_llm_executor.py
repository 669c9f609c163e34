"""The LLM executor on CPUs with gloo: the decoder's maths, the paged cache, a whole run, failures.

* TP-2 logits (two gloo processes, each with its half of every matrix) equal the unsharded
  model's, for a prefill and for paged decode steps, with either decode attention (the
  gather path, and the Triton paged kernels run by Triton's interpreter on CPUs);
* decoding through the paged KV pool (blocks scattered over a shared pool, two LLMs
  interleaved) gives the same greedy tokens as recomputing the whole sequence each step,
  with either decode attention;
* ``placeopt execute`` of a tiny LLM instance (TP-2 mesh, and two 1-GPU meshes under fcfs)
  finishes every request with exactly its output length, writes the simulator's metrics
  JSON (same keys) beside the simulated one, and a per-request CSV, and no trial meets a
  prefill bucket the workers' start-up did not prepare (``cold_buckets``); its host probe
  measures a decode host time per LLM and the prediction made with them; ``--job-trace``
  lists every job with its launch and device times;
* a killed or hung worker, or Ctrl-C, stops the run with partial results, exit status 1
  (130 for Ctrl-C) and no process left behind.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from placement_opt import load_instance  # noqa: E402
from placement_opt.cli.main import cli  # noqa: E402
from placement_opt.executor.llm_run import read_trial_host  # noqa: E402
from placement_opt.placement import load_placement  # noqa: E402
from placement_opt.simulate.llm import simulate_llm  # noqa: E402
from placement_opt.model import Architecture  # noqa: E402

# these tests run the Triton kernels on CPU tensors: in Triton's interpreter (set before Triton is imported)
os.environ.setdefault("TRITON_INTERPRET", "1")
HAS_TRITON = importlib.util.find_spec("triton") is not None
ATTENTIONS = ["gather", pytest.param("paged", marks=pytest.mark.skipif(not HAS_TRITON, reason="needs triton"))]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "instances", "tiny", "llm-cpu.json")
TP2 = os.path.join(ROOT, "instances", "tiny", "llm-cpu-placement-tp2.json")
SPATIAL = os.path.join(ROOT, "instances", "tiny", "llm-cpu-placement-spatial.json")
ARCH = Architecture(layers=2, hidden=64, heads=4, kv_heads=2, vocab=97, ffn_ratio=2.0, gated_mlp=True,
                    tied_embeddings=False, learned_positions=False, dtype="fp32")


def _tp_rank_main(rank: int, init_method: str, out_dir: str, attention: str) -> None:
    """One rank of a TP-2 decoder: prefill two prompts, three paged decode steps; saves logits."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=2)
    torch.save(_run_decoder(ARCH, rank, 2, dist.group.WORLD, attention), os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def _run_decoder(arch, tp_rank, tp, group, attention="gather"):
    """Prefill logits and three decode steps' logits of a fixed prompt pair."""
    from placement_opt.executor.llm_kvcache import DecodeInputs, KVPool, LLMCache, PrefillInputs
    from placement_opt.llm_units import page_units
    from placement_opt.executor.llm_model import DecoderShard

    cpu = torch.device("cpu")
    model = DecoderShard(arch, 11, tp_rank, tp, group, cpu, torch.float32, attention)
    pool = KVPool(64, page_units([arch], tp), 4, arch.hidden // arch.heads, cpu, torch.float32)
    cache = LLMCache(pool, arch, tp)
    prompts = [[5, 6, 7, 8, 9, 10], [3, 2, 1]]
    for r, p in enumerate(prompts):
        cache.ensure(r, 4)
    ids = torch.zeros(2, 6, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, :len(p)] = torch.tensor(p)
    lens = [len(p) for p in prompts]
    logits = [model.prefill(ids, torch.tensor(lens), PrefillInputs.of(cache, [0, 1], lens))]
    seqs = [p + [int(t)] for p, t in zip(prompts, logits[0].argmax(-1))]
    for _ in range(3):
        inputs = DecodeInputs(cache, 2, 4)
        inputs.fill([0, 1], [s[-1] for s in seqs], [len(s) - 1 for s in seqs])
        step = model.decode(inputs.tokens, inputs.pos, inputs)
        logits.append(step)
        for s, t in zip(seqs, step.argmax(-1)):
            s.append(int(t))
    return torch.stack([torch.cat([x.flatten() for x in logits])])


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_tp2_logits_equal_unsharded(tmp_path, attention):
    import torch.multiprocessing as mp

    # the ranks meet through a file of this test's own (no TCP port to pick: under pytest-xdist
    # another test may be taking ports at the same moment)
    init_method = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_tp_rank_main, args=(init_method, str(tmp_path), attention), nprocs=2, join=True)
    full = _run_decoder(ARCH, 0, 1, None, "gather")  # the unsharded reference, gather path
    for rank in range(2):
        sharded = torch.load(tmp_path / f"rank{rank}.pt")
        assert torch.allclose(sharded, full, atol=1e-4, rtol=1e-4), (sharded - full).abs().max()


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_paged_decode_equals_full_recompute(attention):
    """Two LLMs share one pool; requests of both decode interleaved, blocks scattered (the
    second LLM has three query heads on one KV head: a group the paged kernel pads to 16)."""
    from placement_opt.executor.llm_kvcache import DecodeInputs, KVPool, LLMCache, PrefillInputs
    from placement_opt.llm_units import page_units
    from placement_opt.executor.llm_model import DecoderShard

    cpu = torch.device("cpu")
    other = Architecture(layers=3, hidden=48, heads=3, kv_heads=1, vocab=61, ffn_ratio=3.0, dtype="fp32")
    archs = [ARCH, other]
    models = [DecoderShard(a, 3 + k, 0, 1, None, cpu, torch.float32, attention) for k, a in enumerate(archs)]
    pool = KVPool(400, page_units(archs, 1), 2, 16, cpu, torch.float32)
    pool.free.reverse()  # hand pages out in a scrambled order
    caches = [LLMCache(pool, a, 1) for a in archs]
    seqs = {0: (0, [1, 2, 3, 4, 5]), 1: (1, [7, 8]), 2: (0, [9]), 3: (1, [4, 4, 4, 4, 4, 4, 4])}
    for r, (k, p) in seqs.items():
        caches[k].ensure(r, (len(p) + 2) // 2)
        logits = models[k].prefill(torch.tensor([p]), torch.tensor([len(p)]), PrefillInputs.of(caches[k], [r], [len(p)]))
        p.append(int(logits.argmax(-1)))
    for _ in range(9):
        for k in range(2):
            mine = [r for r, (kk, _) in seqs.items() if kk == k]
            for r in mine:
                caches[k].ensure(r, (len(seqs[r][1]) + 2) // 2)
            blocks = max((len(seqs[r][1]) + 1) // 2 for r in mine)
            inputs = DecodeInputs(caches[k], 4, blocks + 1)  # padded rows and blocks
            inputs.fill(mine, [seqs[r][1][-1] for r in mine], [len(seqs[r][1]) - 1 for r in mine])
            out = models[k].decode(inputs.tokens, inputs.pos, inputs)[:len(mine)].argmax(-1)
            for r, t in zip(mine, out.tolist()):
                seqs[r][1].append(t)
    for r, (k, s) in seqs.items():
        n_prompt = {0: 5, 1: 2, 2: 1, 3: 7}[r]
        ref = s[:n_prompt]
        while len(ref) < len(s):
            ref.append(int(models[k].forward_full(torch.tensor([ref]))[0, -1].argmax()))
        assert ref == s, f"request {r}: paged {s} recomputed {ref}"


def _execute(placement, out, *extra):
    r = CliRunner().invoke(cli, ["execute", TINY, placement, "--backend", "gloo", "-o", str(out), "--json", *extra])
    assert r.exit_code == 0, r.output
    assert "execute " in r.stderr and "meshes done" in r.stderr  # the progress bar of the replay
    return json.loads(r.stdout)


@pytest.mark.parametrize("placement,policy", [(TP2, "adbs"), (SPATIAL, "fcfs")])
def test_execute_tiny_llm_instance(tmp_path, placement, policy):
    [summary] = _execute(placement, tmp_path / "o", "--policy", policy)
    assert summary["status"] == "complete" and summary["policy"] == policy and summary["op_channel"] == "pipe"
    assert {info["op_channel"] for info in summary["worker_info"].values()} == {"pipe"}
    assert summary["device_names"] == ["cpu"] and summary["tables_match_device"] is None  # no GPU to compare
    assert summary["sm_partitioning"] == ["cpu-serial"]
    measured, simulated = summary["measured"], summary["simulated"]
    assert set(measured) == set(simulated) and measured["requests"] == simulated["requests"] > 5
    assert measured["finished"] == measured["requests"]
    assert json.loads((tmp_path / "o" / "metrics.json").read_text()) == measured
    rows = list(csv.DictReader(open(tmp_path / "o" / "requests.csv")))
    assert len(rows) == measured["requests"]
    for row in rows:
        times = [float(x) for x in row["token_times_s"].split()]
        assert len(times) == int(row["output_tokens"])  # exactly its output length
        assert times == sorted(times) and float(row["first_token_s"]) == pytest.approx(times[0], abs=1e-5)
        assert float(row["arrival_s"]) <= times[0] and float(row["finish_s"]) == pytest.approx(times[-1], abs=1e-5)
    assert summary["errors"]["throughput_err"] is not None
    # the trial's wall-clock window (Unix seconds), for reading a GPU log beside it
    began, ended = summary["trial_wall_s"]
    assert 1.7e9 < began < ended and ended - began >= summary["duration_s"]
    # the host probe ran first on the same workers: a decode host time per LLM of every mesh
    # (None, the calibrated one kept, where a busy machine ran an LLM's probe steps past its slot
    # into the next LLM's: the reading itself is checked exactly in tests/llm/test_host_probe.py),
    # and the prediction made again with them beside the calibrated one
    probe = summary["host_probe"]
    assert sorted(probe) == sorted(summary["pool_pages"])
    readings = [h for v in probe.values() for h in v["decode_host_s"]]
    assert len(readings) == sum(len(g.models) for g in load_placement(placement).groups if g.models), probe
    assert all(h is None or isinstance(h, float) for h in readings) and any(isinstance(h, float) for h in readings), probe
    # an LLM alone on its mesh has no next LLM's slot to run into
    assert all(isinstance(h, float) for v in probe.values() if len(v["models"]) == 1 for h in v["decode_host_s"]), probe
    assert set(summary["simulated_with_probe"]) == set(simulated)
    assert summary["simulated_with_probe"]["requests"] == measured["requests"]
    # the trial's own steps read the same way where a mesh runs one job at a time (each LLM of
    # the spatial placement alone on its mesh), and the prediction made again with them
    in_run = summary.get("host_in_run", {})
    whole = [str(g) for g, v in probe.items() if all(s >= 1.0 for s in summary["measured"]["groups"][int(g)].get(
        "sm_share", [1.0]))]
    assert sorted(in_run) == sorted(whole) and (placement != SPATIAL or whole == ["0", "1"])
    for g, v in in_run.items():
        assert v["models"] == probe[g]["models"] and any(isinstance(h, float) for h in v["decode_host_s"])
    if in_run:  # the same reading off requests.csv, and the simulator's prediction with it
        inst, pl = load_instance(TINY), load_placement(placement)
        req = inst.requests()
        again = read_trial_host(inst, pl, req, policy, [[float(t) for t in r["token_times_s"].split()] for r in rows],
                                [int(r["preemptions"]) > 0 for r in rows])
        assert sorted(again) == sorted(int(g) for g in in_run)
        for g, v in again.items():
            assert v["decode_host_s"] == pytest.approx(in_run[str(g)]["decode_host_s"], abs=2e-5)
        host = {int(g): v["decode_host_s"] for g, v in in_run.items()}
        assert summary["simulated_with_in_run_host"] == simulate_llm(inst, pl, policy=policy, decode_host=host)
        assert summary["simulated_with_in_run_host"] != simulated
        assert set(summary["errors_with_in_run_host"]) == set(summary["errors"])
    # start-up planned every prefill bucket the replay met (on GPUs: captured them before it)
    assert summary["cold_buckets"] and all(v == [] for v in summary["cold_buckets"].values())
    assert all(info["warmup"]["prefill_buckets"] > 0 for info in summary["worker_info"].values())
    assert not (tmp_path / "o" / "jobs.csv").exists()  # the job trace is off by default


def test_the_gloo_operation_channel_runs_the_same_jobs(tmp_path):
    """``--op-channel gloo`` (the engine's earlier broadcast, the baseline of op_channel_ab.py)
    drives the TP-2 mesh's follower too: every request (of the first 2 s) gets exactly its output
    length, and the summary names the channel."""
    [summary] = _execute(TP2, tmp_path / "o", "--no-host-probe", "--op-channel", "gloo", "--duration", "2")
    assert summary["status"] == "complete" and summary["op_channel"] == "gloo"
    assert {info["op_channel"] for info in summary["worker_info"].values()} == {"gloo"}  # what each rank ran
    assert summary["measured"]["finished"] == summary["measured"]["requests"] > 5
    rows = list(csv.DictReader(open(tmp_path / "o" / "requests.csv")))
    assert all(len(r["token_times_s"].split()) == int(r["output_tokens"]) for r in rows)
    r = CliRunner().invoke(cli, ["execute", TINY, TP2, "--backend", "gloo", "-o", str(tmp_path / "x"),
                                 "--op-channel", "tcp"])
    assert r.exit_code == 2 and "--op-channel" in r.output


def test_a_fault_in_the_in_run_reading_keeps_the_measurements(tmp_path, monkeypatch):
    """The in-run reading is a second prediction: if it fails, the trial's measured files are
    written all the same and the summary says what failed (a trial of the first 2 s of arrivals,
    requests of both LLMs)."""
    import placement_opt.executor.llm_run as llm_run

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(llm_run, "read_trial_host", broken)
    [summary] = _execute(SPATIAL, tmp_path / "o", "--policy", "fcfs", "--no-host-probe", "--duration", "2")
    assert summary["status"] == "complete" and summary["host_reading_error"] == "RuntimeError: boom"
    assert "host_in_run" not in summary and summary["measured"]["finished"] == summary["measured"]["requests"]
    for name in ("metrics.json", "simulated.json", "requests.csv", "summary.json", "trials.json"):
        assert (tmp_path / "o" / name).exists()


def test_job_trace_lists_every_job(tmp_path):
    """``--job-trace``: jobs.csv holds every job of every mesh, one token per request each
    (prefills and decode steps together give every request its output length), with the
    host's launch before its return and before the leader saw the job done; on CPUs a job
    runs inside its launch, so its device times are the launch's. simulated-jobs.csv is the
    simulator's timeline of the same requests, consistent with its first-token times."""
    [summary] = _execute(SPATIAL, tmp_path / "o", "--policy", "fcfs", "--job-trace")
    jobs = list(csv.DictReader(open(tmp_path / "o" / "jobs.csv")))
    requests = list(csv.DictReader(open(tmp_path / "o" / "requests.csv")))
    assert summary["measured"]["finished"] == len(requests) and not any(int(r["preemptions"]) for r in requests)
    assert list(jobs[0]) == ["group", "llm", "kind", "requests", "longest_context", "context_tokens", "launch_s",
                             "launched_s", "device_start_s", "device_end_s", "seen_s"]
    for j in jobs:  # every request's context at least 1 and at most the longest
        assert int(j["requests"]) <= int(j["context_tokens"]) <= int(j["requests"]) * int(j["longest_context"])
    order = [(int(j["group"]), float(j["launch_s"])) for j in jobs]
    assert order == sorted(order)  # by group and launch
    assert {j["group"] for j in jobs} == {"0", "1"} and {j["kind"] for j in jobs} == {"prefill", "decode"}
    for llm in {r["model"] for r in requests}:
        mine = [r for r in requests if r["model"] == llm]
        served = [j for j in jobs if j["llm"] == llm]
        assert sum(int(j["requests"]) for j in served if j["kind"] == "prefill") == len(mine)
        assert sum(int(j["requests"]) for j in served) == sum(int(r["output_tokens"]) for r in mine)
    for j in jobs:
        launch, launched, seen = float(j["launch_s"]), float(j["launched_s"]), float(j["seen_s"])
        assert 0 < launch <= launched <= seen
        assert (float(j["device_start_s"]), float(j["device_end_s"])) == (launch, launched)
    # beside it the simulator's own timeline of the same requests: the same jobs' columns, every
    # request's simulated first token the collection of one of its LLM's simulated prefills
    simulated = list(csv.DictReader(open(tmp_path / "o" / "simulated-jobs.csv")))
    assert list(simulated[0]) == list(jobs[0])
    for llm in {r["model"] for r in requests}:
        mine = [r for r in requests if r["model"] == llm]
        served = [j for j in simulated if j["llm"] == llm]
        assert sum(int(j["requests"]) for j in served) == sum(int(r["output_tokens"]) for r in mine)
        collected = {j["seen_s"] for j in served if j["kind"] == "prefill"}
        assert all(r["simulated_first_token_s"] in collected for r in mine)
    for j in simulated:
        times = [float(j[c]) for c in ("launch_s", "launched_s", "device_start_s", "device_end_s", "seen_s")]
        assert times[0] <= times[1] and times[0] <= times[2] <= times[3] <= times[4]


def test_policy_trials_share_workers(tmp_path):
    """Three policies on one set of workers: one subfolder each, every request served each
    time, the host probe's reading (taken once, before the trials) beside each; benchmarks/llm_fidelity.py
    reads such results and prints its summary line."""
    out = tmp_path / "results" / "tiny-muxserve"
    summaries = _execute(TP2, out, "--policy", "adbs,round-robin,fcfs", "--duration", "2")
    assert [s["policy"] for s in summaries] == ["adbs", "round-robin", "fcfs"]
    for s in summaries:
        assert s["status"] == "complete" and s["measured"]["finished"] == s["measured"]["requests"] > 0
        assert s["host_probe"] and s["simulated_with_probe"]["requests"] == s["measured"]["requests"]
        assert (out / s["policy"] / "requests.csv").exists()
        assert all(v == [] for v in s["cold_buckets"].values())
    assert len(json.loads((out / "trials.json").read_text())) == 3
    report = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "llm_fidelity.py"), "--results",
                             str(tmp_path / "results")], capture_output=True, text=True, check=True).stdout
    lines = report.strip().splitlines()
    assert any(line.startswith("tiny policies: measured ") for line in lines)
    last = dict(item.split("=") for item in lines[-1].split())
    assert list(last) == ["max_throughput_err", "max_llm_err", "max_ttft_err", "max_attain_pp", "ranking_ok",
                          "decode_roofline"]
    assert float(last["max_throughput_err"]) >= 0 and last["ranking_ok"] in ("0", "1")


# ---------------------------------------------------------------- failures


@pytest.fixture()
def long_instance(tmp_path):
    """The tiny instance with 60 s of arrivals: long enough to break it mid-run."""
    data = json.loads(open(TINY).read())
    data["workload"]["duration_s"] = 60
    path = tmp_path / "long.json"
    path.write_text(json.dumps(data))
    return str(path)


class _Controller:
    """`placeopt execute` in a subprocess, its stderr collected line by line."""

    def __init__(self, instance, out, *extra):
        cmd = [sys.executable, "-m", "placement_opt.cli.main", "execute", instance, TP2, "--backend", "gloo",
               "-o", str(out), *extra]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.lines: list = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()

    def wait_for(self, text, timeout=90.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for line in list(self.lines):
                if text in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not seen; stderr: {''.join(self.lines)}")

    def pids(self):
        return [int(x) for x in self.wait_for("pids").split("pids", 1)[1].split()]

    def finish(self, timeout=40):
        start = time.monotonic()
        code = self.proc.wait(timeout=timeout)
        time.sleep(0.2)
        return code, time.monotonic() - start, "".join(self.lines)


def _gone(pids, timeout=10.0):
    """Whether every pid has exited (zombies count as gone)."""
    end = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < end:
        still = []
        for pid in alive:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().split(")")[-1].split()[0] != "Z":
                        still.append(pid)
            except (ProcessLookupError, FileNotFoundError):
                pass
        alive = still
        if alive:
            time.sleep(0.1)
    for pid in alive:  # never leave one behind, then fail
        os.kill(pid, signal.SIGKILL)
    return not alive


@pytest.mark.parametrize("how", ["kill", "hang", "ctrl-c"])
def test_llm_run_stops_cleanly(long_instance, tmp_path, how):
    """A worker killed or stopped (hung), or Ctrl-C, 2 s into the replay (requests finished by then).
    No host probe: it runs before the replay, and test_execute_tiny_llm_instance runs it."""
    c = _Controller(long_instance, tmp_path / "o", "--hang-timeout", "3", "--no-host-probe")
    pids = c.pids()
    c.wait_for("replaying")
    time.sleep(2.0)
    if how == "kill":
        os.kill(pids[1], signal.SIGKILL)  # the follower
    elif how == "hang":
        os.kill(pids[0], signal.SIGSTOP)  # the leader: alive, silent
    else:
        c.proc.send_signal(signal.SIGINT)
    code, waited, err = c.finish()
    assert _gone(pids)
    assert waited < 20
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    if how == "ctrl-c":
        assert code == 130 and summary["status"] == "interrupted"
    else:
        assert code == 1 and "partial results saved" in err
        assert ("died" if how == "kill" else "a worker hangs") in err
        assert summary["status"].startswith("failed")
    assert summary["measured"]["finished"] > 0
    assert "host_in_run" not in summary  # read only off a complete trial


def test_interrupt_after_the_last_trial_keeps_every_trial(tmp_path, monkeypatch):
    """Ctrl-C while the workers shut down after the last trial (where a run's time cap can land):
    every trial stays saved as complete, the index is written, the message says so, exit 130.
    Trials of the first 2 s of arrivals (requests of both LLMs) keep it short."""
    from placement_opt.executor import llm_run

    def interrupted(self, timeout):
        raise KeyboardInterrupt

    monkeypatch.setattr(llm_run._Run, "stop", interrupted)
    out = tmp_path / "o"
    r = CliRunner().invoke(cli, ["execute", TINY, SPATIAL, "--backend", "gloo", "-o", str(out),
                                 "--policy", "adbs,fcfs", "--no-host-probe", "--duration", "2"])
    assert r.exit_code == 130, r.output
    assert f"interrupted (SIGINT) after saving the trials so far in {out}" in r.stderr
    rows = json.loads((out / "trials.json").read_text())
    assert [x["policy"] for x in rows] == ["adbs", "fcfs"] and all(x["status"] == "complete" for x in rows)
    for policy in ("adbs", "fcfs"):
        assert json.loads((out / policy / "summary.json").read_text())["status"] == "complete"


def test_eager_prefills_never_use_cudnn_attention():
    """An eager prefill's attention is limited to FlashAttention, the memory-efficient and the
    math kernels on GPUs (cuDNN plans every new sequence length: 60-100 ms of host time an
    eager prefill, docs/fidelity-llm.md); every backend named exists in this torch; on CPUs
    nothing is limited."""
    from torch.nn.attention import SDPBackend

    from placement_opt.executor.llm_engine import EAGER_SDPA_BACKENDS, eager_attention

    assert all(hasattr(SDPBackend, b) for b in EAGER_SDPA_BACKENDS) and "CUDNN_ATTENTION" not in EAGER_SDPA_BACKENDS
    q = torch.randn(1, 4, 6, 8)
    expected = torch.nn.functional.scaled_dot_product_attention(q, q[:, :2], q[:, :2], is_causal=True, enable_gqa=True)
    assert torch.backends.cuda.cudnn_sdp_enabled()
    with eager_attention(torch.device("cuda")):  # the GPU context (entering it needs no GPU)
        assert not torch.backends.cuda.cudnn_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled() and torch.backends.cuda.math_sdp_enabled()
        out = torch.nn.functional.scaled_dot_product_attention(q, q[:, :2], q[:, :2], is_causal=True, enable_gqa=True)
    assert torch.equal(out, expected) and torch.backends.cuda.cudnn_sdp_enabled()  # restored after
    with eager_attention(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled()  # CPUs: nothing limited


def test_op_channel_keeps_order_and_ends_on_a_gone_leader():
    """The leader's operations reach each follower in the order sent (a spinning and a blocking
    follower alike), the send does not wait for the reader, and a follower whose leader is gone
    gets EOF (it exits) instead of waiting forever."""
    from multiprocessing import Pipe

    from placement_opt.executor.llm_worker import PipeChannel

    pipes = [Pipe(duplex=False) for _ in range(2)]
    leader = PipeChannel(out=tuple(send for _, send in pipes))
    followers = [PipeChannel(into=recv, spin_s=spin) for (recv, _), spin in zip(pipes, (0.01, 0.0))]
    batches = [[("launch", k), ("finish", "decode", k)] for k in range(50)] + [[("stop",)]]
    for ops in batches:
        leader.send(ops)
    for f in followers:
        assert [f.receive() for _ in batches] == batches
    for _, send in pipes:
        send.close()
    for f in followers:
        with pytest.raises(EOFError):
            f.receive()
    # the follower's loop turns that into an error that names its leader (its report to the controller)
    from placement_opt.executor.llm_worker import _follow

    recv, send = Pipe(duplex=False)
    send.send([("stop",)])
    _follow(None, PipeChannel(into=recv), 4)  # a stop ends the trial
    send.close()
    with pytest.raises(RuntimeError, match=r"leader \(rank 4\) is gone"):
        _follow(None, PipeChannel(into=recv), 4)


def test_a_follower_that_lags_its_leader_is_a_hang(monkeypatch):
    """With pipes a follower may still be applying operations when its leader has reported the
    mesh's totals; one that has not ended the trial ``hang_timeout_s`` later stops the run as a
    hang (the heartbeat, the leader's, has stopped by then)."""
    from types import SimpleNamespace

    from placement_opt.executor.controller import ExecutorConfig, ExecutorError
    from placement_opt.executor.llm_run import _Run

    run = _Run.__new__(_Run)  # no processes: only the bookkeeping check() reads
    run.specs = [SimpleNamespace(rank=0, group=0), SimpleNamespace(rank=1, group=0), SimpleNamespace(rank=2, group=1)]
    run.config = ExecutorConfig(hang_timeout_s=3.0)
    run.procs, run.errors, run.done = [], {}, set()
    run.begin([SimpleNamespace(group=0, requests=[]), SimpleNamespace(group=1, requests=[])], 0)
    now = time.monotonic()
    run.beat = {0: now, 1: now}
    run.mesh_totals, run.totals_at, run.trial_done = {0: {}}, {0: now - 1.0}, {0}
    run.check(True)  # within the timeout: waits
    run.totals_at[0] = now - 4.0
    with pytest.raises(ExecutorError, match=r"rank\(s\) \[1\] of mesh 0 have not ended the trial 3 s after its leader"):
        run.check(True)
    run.trial_done.add(1)
    run.check(True)


def test_tables_device_tells_a_run_on_another_gpu():
    """The executor compares the GPU the cost tables were measured on (their ``gpu`` label) with
    the workers' GPUs: the 4-GPU set's H100 tables match an H100 and not an H200 (whose steps
    ran 5-9% faster than those tables); CPUs and names without a GPU model tell nothing."""
    from placement_opt.executor.llm_run import tables_device

    inst = load_instance(os.path.join(ROOT, "instances", "fidelity-llm", "gpu4", "measured", "poisson.json"))

    def match(*names):
        return tables_device(inst, {i: {"device_name": n} for i, n in enumerate(names)})["tables_match_device"]

    assert match("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3") is True
    assert match("NVIDIA H200") is False and match("NVIDIA H100 80GB HBM3", "NVIDIA H200") is False
    assert match("cpu") is None and match("NVIDIA GH200 480GB") is None
    assert tables_device(inst, {0: {"device_name": "NVIDIA H200"}})["tables_gpu"] == ["H100-80GB"]
