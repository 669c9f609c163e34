"""LLM serving (MuxServe style): cost tables, the Eq. 3 throughput estimator, meshes and units.

* :mod:`.config` -- the instance's ``llm`` section (simulator policy, KV blocks, budgets);
* :mod:`.costtable` -- measured prefill/decode latency tables (and their interpolation);
* :mod:`.roofline` -- an analytic cost table from the architecture when nothing was measured;
* :mod:`.convert` -- conversion of MuxServe's profiling JSON into the package's table format;
* :mod:`.estimator` -- the paper's Eq. 3 throughput estimator of an LLM unit;
* :mod:`.meshes` -- mesh groups (per-node GPU splits) for the placement search;
* :mod:`.units` -- the LLMs of an instance as the solvers see them (rates, lengths, memory).
"""

from .config import LLMConfig, POLICIES
from .costtable import CostTable

__all__ = ["CostTable", "LLMConfig", "POLICIES"]
