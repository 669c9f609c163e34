"""Running the suite on two cores with pytest-xdist (the README's test command:
``python -m pytest -q -n 2 --dist loadgroup tests``).

The tests that :data:`ONE_AT_A_TIME` names run one after another in a single worker while the
other worker runs the rest, one test at a time as a worker frees. Each of them either keeps
several processes busy (the executor's workers, torch.distributed ranks, profiling processes,
a process pool, Ray) or holds a subprocess to a wall-clock bound (a hang timeout, a time
limit, a signal, the LLM host probe's slots, which assume the steps run within 3 x their
calibrated time): two of them side by side on two cores stretch each other past those bounds.
Beside one of them, the other worker's test keeps at most about one core busy.

pytest-xdist's ``--dist loadgroup`` groups the tests of an ``xdist_group`` mark through a suffix
of their node ids, which pytest 9.2's structured node ids no longer take (pytest-xdist issue
1386, open for 3.8.0): the marks would be ignored without a word. So the group is named here, by
node id, and the scheduler below (loadgroup's own, which also keeps any ``xdist_group`` mark
that does reach it) puts the tests it names in one work unit. Without ``--dist loadgroup`` (a
serial run, or another ``--dist``) nothing changes.
"""

from __future__ import annotations

import pytest

#: node ids, or their beginnings (a file's tests), of the tests that run one at a time
ONE_AT_A_TIME = (
    # the executor's workers and profiling processes (gloo), hang timeouts of 2-3 s, the host probe
    "tests/executor/test_execute.py::",
    "tests/executor/test_llm_executor.py::",
    "tests/executor/test_llm_profile.py::",
    "tests/executor/test_llm_tp2_set.py::",
    "tests/executor/test_profile_cmd.py::",
    "tests/executor/test_robustness.py::",
    "tests/executor/test_llm_warmup.py::test_tp2_ranks_warm_the_same_buckets_and_serve_the_tp1_tokens",
    # a process pool of 2 workers and a Ray cluster of 2 CPUs
    "tests/search/test_backends.py::",
    # subprocesses held to fixed wall-clock bounds (signals, time limits, "within seconds")
    "tests/hostile/test_hostile_cli.py::",
    "tests/search/test_alpaserve_time_limit.py::",
)

#: the work unit of :data:`ONE_AT_A_TIME`
GROUP = "one-at-a-time"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with :data:`ONE_AT_A_TIME` as one group (pytest-xdist's own
    scheduler for any other ``--dist``)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class OneAtATime(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(ONE_AT_A_TIME):
                return GROUP
            return super()._split_scope(nodeid)

    return OneAtATime(config, log)
