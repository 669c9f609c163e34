"""Sharded models (column/row-parallel TP, pipeline stages, gloo) compute what the unsharded one does."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from placement_opt.errors import InputError  # noqa: E402
from placement_opt.executor.network import check_supported  # noqa: E402
from placement_opt.executor.selfcheck import reference_forward, sharded_forward  # noqa: E402
from placement_opt.model import Architecture  # noqa: E402


def test_tp2_pp2_equals_unsharded():
    # grouped-query attention (2 KV heads) exercises the K/V split as well
    arch = Architecture(layers=3, hidden=64, heads=4, kv_heads=2, seq_len=16, vocab=97, dtype="fp32")
    ref = reference_forward(arch, seed=5)
    out = sharded_forward(arch, pp=2, tp=2, seed=5)
    assert out.shape == (1, 16, 64)
    assert np.abs(ref).max() > 0.1  # a real signal, not zeros
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    # a different seed gives different weights, so the comparison is not vacuous
    assert np.abs(reference_forward(arch, seed=6) - ref).max() > 1e-2


def test_unsupported_architectures_are_input_errors():
    with pytest.raises(InputError, match="moe_experts"):
        check_supported(Architecture(layers=2, hidden=64, heads=4, moe_experts=4), 1, "models[x].architecture")
    with pytest.raises(InputError, match="tensor-parallel degree 8"):
        check_supported(Architecture(layers=2, hidden=64, heads=4), 8, "models[x].architecture")


def test_four_stage_pipeline_equals_unsharded():
    """Every rank stays until all are done (rank 0 hosts the rendezvous store: leaving after
    its own stage broke the later ranks' connection)."""
    arch = Architecture(layers=4, hidden=32, heads=4, seq_len=8, vocab=61, dtype="fp32")
    out = sharded_forward(arch, pp=4, tp=1, seed=3)
    np.testing.assert_allclose(out, reference_forward(arch, seed=3), rtol=1e-4, atol=1e-4)


def test_a_failing_rank_reports_its_whole_traceback():
    from placement_opt.executor.controller import ExecutorError
    arch = Architecture(layers=2, hidden=30, heads=3, seq_len=8, vocab=61, dtype="fp32")  # 3 heads over tp=2
    with pytest.raises(ExecutorError) as info:
        sharded_forward(arch, pp=1, tp=2, seed=0, timeout_s=60)
    message = str(info.value)
    assert "check process rank" in message and "Traceback (most recent call last)" in message
    assert len(message.splitlines()) > 3  # the whole traceback, not its last line
