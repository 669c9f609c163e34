"""A dead or hung worker, or Ctrl-C, stops the controller: results saved, non-zero exit, no orphans."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from placement_opt.cli.main import cli  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "instances", "tiny", "executor-cpu.json")


@pytest.fixture(scope="module")
def placement(tmp_path_factory):
    path = tmp_path_factory.mktemp("plc") / "p.json"
    r = CliRunner().invoke(cli, ["solve", TINY, "-o", str(path)])
    assert r.exit_code == 0, r.output
    return str(path)


class Controller:
    """`placeopt execute` in a subprocess whose stderr is collected line by line."""

    def __init__(self, placement, out, *extra):
        cmd = [sys.executable, "-m", "placement_opt.cli.main", "execute", TINY, placement, "--backend", "gloo",
               "-o", str(out), *extra]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.lines = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, text, timeout=60.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for line in list(self.lines):
                if text in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not seen; stderr: {''.join(self.lines)}")

    def worker_pids(self):
        line = self.wait_for("pids")
        return [int(x) for x in line.split("pids", 1)[1].split()]

    def finish(self, timeout):
        start = time.monotonic()
        code = self.proc.wait(timeout=timeout)
        return code, time.monotonic() - start, "".join(self.lines)


def _gone(pids, timeout=10.0):
    end = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < end:
        still = []
        for pid in alive:
            try:
                os.kill(pid, 0)
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().split(")")[-1].split()[0] != "Z":
                        still.append(pid)
            except (ProcessLookupError, FileNotFoundError):
                pass
        alive = still
        if alive:
            time.sleep(0.1)
    return not alive


def test_killed_worker_stops_the_run(placement, tmp_path):
    c = Controller(placement, tmp_path / "o", "--hang-timeout", "20")
    pids = c.worker_pids()
    c.wait_for("replaying")
    time.sleep(1.0)
    os.kill(pids[1], signal.SIGKILL)
    code, waited, err = c.finish(timeout=30)
    assert code == 1
    assert "died" in err and "partial results saved" in err
    assert waited < 15
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["status"].startswith("failed") and summary["measured"]["requests"] > 0
    assert _gone(pids)


def test_hung_worker_is_detected(placement, tmp_path):
    c = Controller(placement, tmp_path / "o", "--hang-timeout", "2")
    pids = c.worker_pids()
    c.wait_for("replaying")
    time.sleep(0.5)
    os.kill(pids[0], signal.SIGSTOP)  # alive but making no progress
    code, waited, err = c.finish(timeout=30)
    gone = _gone(pids)
    if not gone:  # do not leave a stopped process behind, then fail
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert gone
    assert code == 1 and "no progress" in err and "a worker hangs" in err
    assert waited < 15
    assert (tmp_path / "o" / "requests.csv").exists()


def test_ctrl_c_saves_and_exits(placement, tmp_path):
    c = Controller(placement, tmp_path / "o")
    pids = c.worker_pids()
    c.wait_for("replaying")
    time.sleep(0.5)
    c.proc.send_signal(signal.SIGINT)
    code, waited, err = c.finish(timeout=30)
    assert code == 130 and "interrupted" in err
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["status"] == "interrupted"
    assert _gone(pids)


def test_full_command_pipe_does_not_block_the_controller():
    """A worker that stops reading fills its command pipe; the controller keeps watching instead of blocking."""
    import multiprocessing

    from placement_opt.executor.controller import ExecutorError, _Workers

    reader, writer = multiprocessing.Pipe(duplex=False)
    workers = object.__new__(_Workers)
    workers.commands = [writer]
    workers.specs = []
    workers.describe = lambda r: f"worker {r}"
    calls = []

    def wait():
        calls.append(1)
        if len(calls) > 3:
            raise ExecutorError("no progress")

    with pytest.raises(ExecutorError, match="no progress"):
        for _ in range(100000):  # far more than any pipe buffer holds
            workers.send([0], ("x" * 200, 1), wait)
    assert len(calls) == 4
    reader.close()
    writer.close()


def _spawned_children(parent, timeout=60.0, count=2):
    """Pids of the multiprocessing-spawned children of ``parent`` (not its resource tracker)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().split(")")[-1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            if ppid == parent and b"spawn_main" in cmdline:
                found.append(int(entry))
        if len(found) >= count:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no {count} profiling processes appeared")


def test_profiler_processes_die_with_a_killed_parent(tmp_path):
    """SIGKILL of `placeopt profile` leaves no profiling process behind (they used to run on)."""
    arch = tmp_path / "arch.json"
    arch.write_text(json.dumps({"layers": 2, "hidden": 64, "heads": 4, "seq_len": 16, "vocab": 50}))
    cmd = [sys.executable, "-m", "placement_opt.cli.main", "profile", str(arch), "--name", "t", "--backend", "gloo",
           "--configs", "1x2", "--repeats", "100000000", "-o", str(tmp_path / "p.json")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        children = _spawned_children(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    try:
        assert _gone(children)
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
