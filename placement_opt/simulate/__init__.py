"""Simulators: the flow-shop DNN simulator (AlpaServe) and the LLM simulator (MuxServe).

:func:`simulate` scores a placement on an instance's workload and returns its metrics.
"""

from __future__ import annotations

from typing import Optional

from placement_opt.feasibility import check_placement
from placement_opt.instance import Instance
from placement_opt.placement import Placement
from placement_opt.settings import SimulatorConfig
from placement_opt.simulate.llm import simulate_llm
from placement_opt.simulate.flowshop import FlowShopResult, run_groups, run_tables, run_windows, simulate_dnn
from placement_opt.simulate.metrics import serving_metrics
from placement_opt.simulate.tables import HostTables, build_tables
from placement_opt.workload import Workload


def simulate(instance: Instance, placement: Placement, workload: Optional[Workload] = None,
             seed: Optional[int] = None) -> dict:
    """Simulate ``placement`` on the instance's workload (or ``workload``) and return metrics."""
    check_placement(placement, instance)
    requests = None if workload is None and seed is None else instance.requests(workload, seed)
    if instance.is_llm:
        return simulate_llm(instance, placement, requests)
    return simulate_dnn(instance, placement, requests)


__all__ = ["FlowShopResult", "HostTables", "SimulatorConfig", "build_tables", "run_groups", "run_tables",
           "run_windows", "serving_metrics", "simulate", "simulate_dnn"]
