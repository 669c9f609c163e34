"""The controller's dispatcher makes exactly the simulator's decisions (no torch needed)."""

import numpy as np
import pytest

from placement_opt import instance_from_dict
from placement_opt.errors import InputError
from placement_opt.executor.dispatch import Dispatcher
from placement_opt.placement import Group
from placement_opt.simulate.flowshop import run_groups
from placement_opt.settings import SimulatorConfig


def _instance(dispatch, process=None):
    return instance_from_dict({
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu": {"name": "g", "memory_gb": 16}},
        "profiles": {"p": {"derive": {"latency_s": 0.05, "weight_gb": 2.0, "max_gpus": 4, "layers": 8}}},
        "models": [{"name": "a", "profile": "p"}, {"name": "b", "profile": "p"}, {"name": "c", "profile": "p"}],
        "workload": {"duration_s": 60, "arrival": process or {"process": "gamma", "rate": 45, "cv": 3},
                     "slo": {"scale": 4}},
        "simulator": {"dispatch": dispatch, "overhead_s": 0.003, "stage_overhead_factor": 0.01},
    })


GROUPS = (Group(devices=(0, 1), pp=2, tp=1, models=("a", "b", "c")), Group(devices=(2,), models=("a", "b")),
          Group(devices=(3,), models=("a", "c")))


@pytest.mark.parametrize("dispatch", ["earliest", "shortest_queue"])
def test_dispatcher_admits_what_the_simulator_admits(dispatch):
    inst = _instance(dispatch)
    req = inst.requests()
    res = run_groups(inst, GROUPS, req)
    d = Dispatcher(inst, GROUPS)
    groups, finish = [], []
    for i in range(len(req)):
        dec = d.decide(int(req.model[i]), float(req.arrival[i]), float(req.deadline[i]))
        groups.append(dec.group)
        finish.append(dec.finish)
        if dec.admitted:
            assert len(dec.stage_ends) == GROUPS[dec.group].pp
    assert 0 < (res.finish >= 0).sum() < len(req)  # some rejected, some served: the rule matters
    np.testing.assert_array_equal(np.array(groups), res.group)
    np.testing.assert_allclose(np.array(finish), res.finish, rtol=0, atol=1e-12)


def test_dispatcher_refuses_batching():
    inst = _instance("earliest")
    with pytest.raises(InputError, match="one request at a time"):
        Dispatcher(inst, GROUPS, SimulatorConfig(batching=True))
