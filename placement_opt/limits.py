"""Run-time limits shared by every layer: the memory budget, file-size caps, and the stop
request that Ctrl-C or SIGTERM leaves for the searches.

* **Memory**: a run's arrays grow with its requests; :func:`check_request_memory` refuses a
  workload whose estimated peak (bytes per request x requests, plus a fixed base) is over the
  budget *before* anything is allocated, so a typo in a rate is an input error, never a
  ``MemoryError``. The budget is :data:`DEFAULT_MEMORY_BYTES` (fits an 8 GB machine) unless
  the command line sets another (``--max-memory``).
* **Files**: :data:`MAX_FILE_BYTES` caps every file placeopt reads, so ``/dev/zero`` or a
  runaway file is refused after reading at most the cap.
* **Stop requests**: the CLI's SIGINT/SIGTERM handler records the signal here
  (:func:`note_stop_signal`) before raising ``KeyboardInterrupt``; loops that outlive one
  ``KeyboardInterrupt`` (a search that returns its best so far, then goes on to the next
  window) ask :func:`stop_requested` before starting more work.
* **Time limits**: ``--time-limit S`` promises the best placement found within S seconds of
  the command's start plus one simulation. :func:`process_start` is that start (the
  process's own, so interpreter start-up, imports and instance loading count), and
  :func:`search_seconds` the time a solver may still search: what is left of the limit, less
  room for the final simulation (:func:`final_simulation_seconds`).
"""

from __future__ import annotations

import os
import time
from typing import BinaryIO, Optional

from placement_opt.errors import InputError

GB = 1e9
#: default memory budget of a run: the whole process stays under 8 GB
DEFAULT_MEMORY_BYTES = 8 * GB
#: what the interpreter, numba and the loaded instance take before any request exists
BASE_MEMORY_BYTES = 1 * GB
#: peak bytes per request of a DNN run: generation (arrival, model, deadline and the draws
#: they come from), the simulator's per-request outputs and the evaluators' copies
DNN_BYTES_PER_REQUEST = 96
#: peak bytes per request of an LLM run: as DNN plus prompt and output lengths, per-request
#: first-token and finish times, and the mesh simulator's queues
LLM_BYTES_PER_REQUEST = 192
#: most tokens of one prompt or one output: token counts are int32 in the simulators
MAX_TOKENS = 2**31 - 1
#: most GPUs of a cluster, and most models of an instance (after ``count`` expansion): beyond
#: them set-up alone (one group shell per GPU, one profile per model) outlasts any time limit
MAX_GPUS = 65536
MAX_MODELS = 10000
#: most ADBS quota re-balancing rounds of one LLM simulation (horizon / rebalance period)
MAX_REBALANCES = 1e7
#: largest file placeopt reads (instances, placements, profiles, cost tables, traces)
MAX_FILE_BYTES = 256 * 1024 * 1024

_memory_budget = DEFAULT_MEMORY_BYTES
_stop_signal: Optional[int] = None


def set_memory_budget(n_bytes: float) -> None:
    """Set the memory budget of this process's runs (``--max-memory``)."""
    global _memory_budget
    _memory_budget = float(n_bytes)


def memory_budget() -> float:
    """The memory budget in bytes."""
    return _memory_budget


def check_request_memory(expected_requests: float, is_llm: bool, field: str) -> None:
    """Refuse a workload whose ``expected_requests`` would need more memory than the budget."""
    per_request = LLM_BYTES_PER_REQUEST if is_llm else DNN_BYTES_PER_REQUEST
    need = BASE_MEMORY_BYTES + per_request * expected_requests
    if need > _memory_budget:
        most = max(_memory_budget - BASE_MEMORY_BYTES, 0.0) / per_request
        raise InputError(f"{expected_requests:.3g} expected requests need about {need / GB:.1f} GB, over the memory "
                         f"budget of {_memory_budget / GB:g} GB (at most {most:.3g} requests; --max-memory raises "
                         "the budget)", field)


def read_capped(f: BinaryIO, path_field: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """At most ``limit`` bytes of open binary file ``f``; a longer file is an input error (the
    caller adds the file's name)."""
    raw = f.read(limit + 1)
    if len(raw) > limit:
        raise InputError(f"file larger than the limit of {limit // (1024 * 1024)} MiB", path_field)
    return raw


def note_stop_signal(signum: int) -> None:
    """Record that signal ``signum`` asked the run to stop (called by the CLI's handler)."""
    global _stop_signal
    _stop_signal = signum


def stop_requested() -> Optional[int]:
    """The signal that asked the run to stop, or None."""
    return _stop_signal


def clear_stop_request() -> None:
    """Forget a recorded stop signal (a new run in the same process, e.g. in tests)."""
    global _stop_signal
    _stop_signal = None


#: estimated seconds per request of the final simulation of a solve (DNN flow shop; LLM mesh
#: simulator), measured on the bundled instances with some margin (0.001 ms and 0.008 ms), and
#: per GPU of the final steps (the simulator's groups, the placement's JSON and its printout:
#: 2.5 s on 65536 GPUs)
DNN_SIMULATION_S_PER_REQUEST = 2e-6
LLM_SIMULATION_S_PER_REQUEST = 1.5e-5
FINAL_STEPS_S_PER_GPU = 4e-5
#: most of a time limit kept back for the final simulation; the search keeps the rest
MAX_SIMULATION_SHARE = 0.25
#: least share of a time limit a search gets even when start-up already used the limit
MIN_SEARCH_SHARE = 0.1


def _process_age_seconds() -> Optional[float]:
    """Seconds since this process started (Linux: /proc/self/stat's start time against
    /proc/uptime), or None where that is unknown."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat: start time in ticks
    except (OSError, ValueError, IndexError):
        return None
    return max(uptime - started, 0.0)


_age = _process_age_seconds()
#: time.perf_counter() value at which this process started (where unknown: when this module,
#: one of the first placeopt imports, was imported)
_PROCESS_START = time.perf_counter() - (_age if _age is not None else 0.0)


def process_start() -> float:
    """The ``time.perf_counter()`` value at which this process started: a command's
    ``--time-limit`` counts from it, so start-up and loading count against the limit."""
    return _PROCESS_START


def final_simulation_seconds(requests: int, gpus: int, is_llm: bool) -> float:
    """Estimated seconds of what follows a search: the simulation of its result on ``requests``
    requests and ``gpus`` GPUs, and writing the placement."""
    per_request = LLM_SIMULATION_S_PER_REQUEST if is_llm else DNN_SIMULATION_S_PER_REQUEST
    return requests * per_request + gpus * FINAL_STEPS_S_PER_GPU


def search_seconds(time_limit: float, counted_from: float, simulation_s: float) -> float:
    """Seconds a solver may search so that its run ends about ``time_limit`` seconds after
    ``counted_from`` (a ``time.perf_counter()`` value) with the final simulation (estimated at
    ``simulation_s``) done: the rest of the limit less the simulation, of which at most
    :data:`MAX_SIMULATION_SHARE` of the limit is kept back; at least :data:`MIN_SEARCH_SHARE`
    of the limit, so a search still gets a try when start-up used the limit up."""
    left = time_limit - (time.perf_counter() - counted_from)
    reserve = min(simulation_s, MAX_SIMULATION_SHARE * time_limit)
    return max(left - reserve, MIN_SEARCH_SHARE * time_limit)

