"""The SMs an LLM of a given SM share runs on: the rule the executor partitions a GPU by, which
the cost tables interpolate along.

The executor gives an LLM of share ``s`` the share's SMs rounded *down* to the partition granule
(green contexts are made of groups of a whole number of granules; :mod:`executor.llm_greenctx`),
at least one granule: on an H200 (132 SMs, granule 8) a share of 0.3 runs on 32 SMs, 0.24 of the
GPU. A cost table measured that way (its ``sm_partition``) is looked up by those SM counts, so a
share between its measured ones is placed where its real SMs lie.
"""

from __future__ import annotations

import math
from typing import Tuple


def sm_granularity(capability: Tuple[int, int]) -> int:
    """SMs a green-context group is a multiple of: 8 from compute capability 9.0, 2 before."""
    return 8 if capability[0] >= 9 else 2


def share_sms(share: float, total_sms: int, granule: int) -> int:
    """SMs the executor gives a share of a GPU of ``total_sms``: a share of 1 every SM (no
    partition), a smaller one its SMs rounded down to ``granule`` (so shares summing to at most 1
    fit side by side), at least one granule."""
    if share >= 1.0:
        return total_sms
    return min(total_sms, max(granule, granule * math.floor(share * total_sms / granule + 1e-9)))
