"""``benchmarks/golden.py``'s comparison: placements and counts exactly, numbers to a relative
1e-9, so another numpy or numba release's rounding (the last digits of a sum taken in another
order) is not reported as a change of behaviour while a real change is."""

from __future__ import annotations

from llm.helpers import load_benchmark


def test_rounding_is_not_a_difference_but_a_change_is():
    golden = load_benchmark("golden")
    stored = {"metrics": {"latency_mean_s": 0.1341048647799846, "requests": 120, "attainment": 0.98},
              "groups": [{"devices": [0, 1], "models": ["bert-1"]}]}
    rounded = {"metrics": {"latency_mean_s": 0.13410486477998448, "requests": 120, "attainment": 0.98},
               "groups": [{"devices": [0, 1], "models": ["bert-1"]}]}
    out: list = []
    golden._diff("task", stored, rounded, out)
    assert out == []
    changed = {"metrics": {"latency_mean_s": 0.1341049, "requests": 121, "attainment": 0.98},
               "groups": [{"devices": [0, 2], "models": ["bert-1"]}], "new_key": 1}
    golden._diff("task", stored, changed, out)
    assert out == ["task.groups[0].devices[1]: 1 -> 2", "task.metrics.latency_mean_s: 0.1341048647799846 -> 0.1341049",
                   "task.metrics.requests: 120 -> 121", "task.new_key: new"]
    out = []
    golden._diff("flag", {"ok": True, "x": float("nan")}, {"ok": False, "x": float("nan")}, out)
    assert out == ["flag.ok: true -> false", "flag.x: NaN -> NaN"]  # flags exactly; a NaN is always reported
