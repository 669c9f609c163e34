"""Workloads: arrival processes, traces, and their vectorised request arrays."""

from placement_opt.workload.generate import Requests, generate_requests, model_processes
from placement_opt.workload.processes import gamma_arrivals, mmpp_arrivals, mmpp_mean_rate, poisson_arrivals, power_law_split
from placement_opt.workload.spec import ArrivalProcess, LengthSpec, SLOSpec, TraceSpec, Workload
from placement_opt.workload.trace import Trace, fit_gamma, read_trace, refit_arrivals

__all__ = [
    "ArrivalProcess", "LengthSpec", "Requests", "SLOSpec", "Trace", "TraceSpec", "Workload",
    "fit_gamma", "gamma_arrivals", "generate_requests", "mmpp_arrivals", "mmpp_mean_rate",
    "model_processes", "poisson_arrivals", "power_law_split", "read_trace", "refit_arrivals",
]
