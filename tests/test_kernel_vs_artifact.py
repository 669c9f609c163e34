"""``benchmarks/kernel_vs_artifact.py``: our kernel beside the AlpaServe artifact's on one case.

The artifact's files are not part of this repository; the run against them is tested when
they are present (``.artifact/mms``, or the directory in ``PLACEOPT_ARTIFACT_DIR``), see the
script's docstring for how to fetch them. The table conversion and the input errors are
tested always.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "kernel_vs_artifact.py")
ARTIFACT = os.environ.get("PLACEOPT_ARTIFACT_DIR", os.path.join(ROOT, ".artifact", "mms"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import kernel_vs_artifact  # noqa: E402


def test_the_artifact_layout_holds_our_tables_numbers():
    case = kernel_vs_artifact.shared_case(20.0)
    tables = case.tables
    _, _, _, m_id2g_id, num_stages, stage_latency = case.artifact_inputs
    assert list(num_stages) == [4] * 16
    for m in range(case.n_models):
        hosts = range(tables.host_ptr[m], tables.host_ptr[m + 1])
        groups = [int(tables.host_group[h]) for h in hosts]
        assert list(m_id2g_id[m, :len(groups)]) == groups == sorted(groups)
        assert (m_id2g_id[m, len(groups):] == -1).all()
        for h, g in zip(hosts, groups):
            off = int(tables.host_lat_ptr[h])
            # float32 in the artifact's table, the same value as float64 in ours
            assert np.array_equal(stage_latency[m, g].astype(np.float64), tables.lat[off:off + 4])
    arrival, model, deadline = case.requests
    slos = case.artifact_inputs[2]
    assert slos.dtype == np.float32 and np.array_equal(deadline, arrival + slos.astype(np.float64))


def test_missing_artifact_files_are_a_one_line_error(tmp_path):
    proc = subprocess.run([sys.executable, SCRIPT, "--artifact", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "missing alpa_serve/__init__.py" in proc.stderr


@pytest.mark.skipif(not os.path.isfile(os.path.join(ARTIFACT, kernel_vs_artifact.KERNEL_FILE)),
                    reason="the AlpaServe artifact's files are not here (see benchmarks/kernel_vs_artifact.py)")
def test_same_decisions_as_the_artifacts_kernel(tmp_path):
    out = tmp_path / "kva.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--artifact", ARTIFACT, "--seconds", "500", "--repeat", "1",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    check = report["decisions"]
    assert check["same_decisions"] and check["requests_admitted_differently"] == 0
    # some requests are rejected, so the comparison covers both decisions
    assert 0 < check["admitted_artifact"] < report["requests"]
    assert proc.stdout.strip().splitlines()[-1].startswith("artifact_requests_per_s=")
