"""Running the suite on two cores with pytest-xdist (the README's test command:
``python -m pytest -q -n 2 --dist loadgroup tests``).

The tests that :data:`ONE_AT_A_TIME` names run one after another in a single worker while the
other worker runs the rest, one test at a time as a worker frees. Each of them either keeps
several processes busy (the executor's workers, torch.distributed ranks, profiling processes,
a process pool, Ray) or holds a subprocess to a wall-clock bound (a hang timeout, a time
limit, a signal, the LLM host probe's slots, which assume the steps run within 3 x their
calibrated time): two of them side by side on two cores stretch each other past those bounds.
Beside one of them, the other worker's test keeps at most about one core busy.

The tests that :data:`ALONE` names (some of :data:`ONE_AT_A_TIME`) run with the other worker
idle: their assertions read the pace the machine gives the executor's processes (the tiny DNN
instance's measured SLO attainment, the LLM host probe's slots), and even one busy core beside
them broke that on CI (attainment 0.40 measured against 1.0 simulated). The workers share a
readers-writer lock (``flock`` on files in a directory the controller makes for the run): a test
of ALONE holds it exclusively, every other test shares it; a turnstile lock in front keeps the
other worker's next tests from overtaking a test of ALONE that waits for it.

pytest-xdist's ``--dist loadgroup`` groups the tests of an ``xdist_group`` mark through a suffix
of their node ids, which pytest 9.2's structured node ids no longer take (pytest-xdist issue
1386, open for 3.8.0): the marks would be ignored without a word. So the group is named here, by
node id, and the scheduler below (loadgroup's own, which also keeps any ``xdist_group`` mark
that does reach it) puts the tests it names in one work unit. Without ``--dist loadgroup`` (a
serial run, or another ``--dist``) the group is not formed; without ``-n`` nothing is locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile

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

#: node ids, or their beginnings, of the tests of :data:`ONE_AT_A_TIME` that run with the other
#: worker idle: they measure the pace of the executor's processes
ALONE = (
    "tests/executor/test_execute.py::",
    "tests/executor/test_llm_executor.py::",
)

#: the work unit of :data:`ONE_AT_A_TIME`
GROUP = "one-at-a-time"

#: the environment variable that hands the lock directory from the controller to its workers
LOCK_DIR_ENV = "PLACEOPT_TEST_LOCK_DIR"

#: where the controller keeps the lock directory's path, to remove it when the run ends
_LOCK_DIR_KEY = pytest.StashKey[str]()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """The controller of an xdist run makes the lock directory; the workers it starts inherit
    its path through the environment."""
    if _is_worker(config) or not config.pluginmanager.hasplugin("xdist"):
        return
    if not config.getoption("numprocesses", None):
        return
    lock_dir = tempfile.mkdtemp(prefix="placeopt-tests-")
    os.environ[LOCK_DIR_ENV] = lock_dir
    config.stash[_LOCK_DIR_KEY] = lock_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    lock_dir = config.stash.get(_LOCK_DIR_KEY, None)
    if lock_dir is not None:
        os.environ.pop(LOCK_DIR_ENV, None)
        shutil.rmtree(lock_dir, ignore_errors=True)


@contextlib.contextmanager
def _locked(path: str, operation: int):
    with open(path, "a") as f:  # opened close-on-exec: the test's subprocesses do not hold it
        fcntl.flock(f, operation)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """Holds the run's lock over the test's setup, call and teardown: exclusively for a test of
    :data:`ALONE`, shared for any other (nothing in a serial run)."""
    lock_dir = os.environ.get(LOCK_DIR_ENV)
    if not _is_worker(item.config) or not lock_dir:
        return (yield)
    turnstile, tests = os.path.join(lock_dir, "turnstile"), os.path.join(lock_dir, "tests")
    if item.nodeid.startswith(ALONE):
        with _locked(turnstile, fcntl.LOCK_EX), _locked(tests, fcntl.LOCK_EX):
            return (yield)
    with _locked(turnstile, fcntl.LOCK_EX):
        pass  # waits while a test of ALONE waits for the lock or holds it
    with _locked(tests, fcntl.LOCK_SH):
        return (yield)


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
