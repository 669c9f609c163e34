"""The simulator kernels' loops run without Numba's reference counting.

Numba counts references to arrays with atomic operations; its pruning pass removes them
from straight-line code but not from every shape of inlined helper (see the speed rules in
:mod:`placement_opt.simulate.kernels`). A reference count left in a kernel's loop runs once
per request and costs up to 1.7x, with no other symptom, so this test compiles the kernels
afresh (cached code cannot be inspected) and checks that no block of their optimised LLVM
IR that lies on a loop counts references.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from numba import njit

from placement_opt.simulate import kernels

_LABEL = re.compile(r"^([A-Za-z0-9_.$\"-]+):")
_TARGETS = re.compile(r"label %([A-Za-z0-9_.$\"-]+)")


def _blocks(ir: str, name: str) -> dict[str, str]:
    """The basic blocks (label -> text) of the compiled function ``name`` in a module's IR."""
    # the compiled function itself, not its CPython wrapper (_ZN7cpython...)
    start = re.search(r'^define [^\n]*@"?_ZN(?!7cpython)\w*?\d+' + name + "B", ir, re.M)
    assert start, f"{name} not found in the IR"
    body = ir[start.start():]
    body = body[body.index("{\n") + 2:body.index("\n}\n")]
    blocks: dict[str, str] = {}
    label = "entry"
    for line in body.splitlines():
        found = _LABEL.match(line)
        if found:
            label = found.group(1)
        blocks[label] = blocks.get(label, "") + line + "\n"
    return blocks


def _on_loops(blocks: dict[str, str]) -> set[str]:
    """The blocks that can reach themselves through the control-flow graph."""
    succ = {b: set(_TARGETS.findall(text)) for b, text in blocks.items()}  # "; preds = %x" has no "label"
    looping = set()
    for b in blocks:
        seen, todo = set(), list(succ[b])
        while todo:
            x = todo.pop()
            if x == b:
                looping.add(b)
                break
            if x not in seen and x in succ:
                seen.add(x)
                todo.extend(succ[x])
    return looping


def _refcounts_on_loops(dispatcher, name: str) -> dict[str, int]:
    (ir,) = dispatcher.inspect_llvm().values()
    blocks = _blocks(ir, name)
    loops = _on_loops(blocks)
    assert loops, f"no loop found in {name}: the test no longer sees the kernel's IR"
    counts = {b: blocks[b].count("@NRT_incref") + blocks[b].count("@NRT_decref") for b in loops}
    return {b: n for b, n in counts.items() if n}


def _inputs():
    """A tiny valid problem: one model on one single-stage group, batch sizes 1 and 2."""
    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    requests = (np.array([0.0, 0.1, 0.2]), np.zeros(3, dtype=np.int32), np.array([1.0, 1.0, 1.0]))
    hosts = kernels.HostTables(host_ptr=i64(0, 1), host_group=i64(0), host_model=i64(0), host_lat_ptr=i64(0),
                               lat=np.array([0.1, 0.15]), stage_ptr=i64(0, 1), group_host_ptr=i64(0, 1),
                               group_hosts=i64(0), batch_sizes=i64(1, 2))
    out = (np.empty(3), np.empty(3, dtype=np.int64), np.ones(3, dtype=np.int64), np.zeros(1), np.zeros(1))
    return requests, hosts, out


@pytest.mark.parametrize("policy", [kernels.EARLIEST, kernels.SHORTEST_QUEUE])
def test_flow_shop_loop_counts_no_references(policy):
    run = njit(kernels.run_flow_shop.py_func)  # a fresh, uncached compilation
    requests, hosts, out = _inputs()
    assert run(requests, tuple(hosts), out, 0.0, policy) == 3
    assert _refcounts_on_loops(run, "run_flow_shop") == {}


@pytest.mark.parametrize("policy", [kernels.EARLIEST, kernels.SHORTEST_QUEUE])
def test_attainment_kernel_loop_counts_no_references(policy):
    run = njit(kernels.accept_flow_shop.py_func)
    requests, hosts, out = _inputs()
    counts = np.zeros(1, dtype=np.int64)
    assert run(requests, tuple(hosts), out[3], out[4], counts, 0.0, policy) == 3
    assert counts.tolist() == [3]
    assert _refcounts_on_loops(run, "accept_flow_shop") == {}


def test_earliest_attainment_loop_counts_no_references():
    """The earliest-dispatch path of accept_flow_shop is a function of its own (its loop is not
    in accept_flow_shop's IR)."""
    run = njit(kernels._accept_earliest.py_func)
    requests, hosts, out = _inputs()
    counts = np.zeros(1, dtype=np.int64)
    assert run(requests, hosts, out[3], out[4], counts, 0.0, 3) == 3
    assert counts.tolist() == [3]
    assert _refcounts_on_loops(run, "_accept_earliest") == {}


def test_batching_loop_counts_no_references():
    serve = njit(kernels._serve_batches.py_func)
    requests, hosts, out = _inputs()
    queues = kernels.ModelQueues(np.arange(3), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    assert serve(requests, hosts, queues, out, 0.0) == 3
    assert _refcounts_on_loops(serve, "_serve_batches") == {}
    start = njit(kernels._earliest_start.py_func)
    start(hosts, queues, requests[0], out[4])
    assert _refcounts_on_loops(start, "_earliest_start") == {}
