"""The executor's rendezvous: a private FileStore path, removed after, that torch.distributed joins."""
import os

import pytest

from placement_opt.executor.rendezvous import rendezvous


def _path(init: str) -> str:
    assert init.startswith("file://")
    return init[len("file://"):]


def test_each_group_gets_a_fresh_private_store_removed_on_exit():
    with rendezvous() as a, rendezvous() as b:
        assert a != b
        for init in (a, b):
            folder = os.path.dirname(_path(init))
            assert os.path.isdir(folder) and not os.path.exists(_path(init))
            assert os.stat(folder).st_mode & 0o077 == 0  # only this user can reach it
    assert not os.path.exists(os.path.dirname(_path(a)))
    assert not os.path.exists(os.path.dirname(_path(b)))


def test_the_folder_is_removed_when_the_run_fails():
    with pytest.raises(RuntimeError):
        with rendezvous() as init:
            open(_path(init), "w").close()  # what a rank's FileStore leaves
            raise RuntimeError("a worker died")
    assert not os.path.exists(os.path.dirname(_path(init)))


def _all_reduce(rank: int, init: str, out) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    out.put((rank, float(t.item())))
    dist.destroy_process_group()


def test_two_gloo_ranks_meet_through_it():
    torch_mp = pytest.importorskip("torch.multiprocessing")
    ctx = torch_mp.get_context("spawn")
    out = ctx.Queue()
    with rendezvous() as init:
        procs = [ctx.Process(target=_all_reduce, args=(r, init, out), daemon=True) for r in range(2)]
        for p in procs:
            p.start()
        try:
            got = sorted(out.get(timeout=120) for _ in procs)
        finally:  # a rank that never met the other waits in init_process_group: stop it
            for p in procs:
                p.join(30)
                if p.is_alive():
                    p.kill()
                    p.join(5)
    assert got == [(0, 3.0), (1, 3.0)]
    assert all(p.exitcode == 0 for p in procs)
