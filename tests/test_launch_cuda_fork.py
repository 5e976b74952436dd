"""Ranks beside a CUDA GPU (torchcourse/launch.py). A child forked from a process that used CUDA cannot use it, and
on a GPU machine a child forked after any backward cannot run one (autograd's thread per GPU): seen on an H100, where
every launch after the notebook's first backward failed. So there `launch` starts the ranks from a fork server, the
worker carried by value (cloudpickle); CPU machines keep fork. Ranks forked on request still report no CUDA."""

import multiprocessing
import os
import sys
import textwrap
import threading
import time
import types

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from torchcourse.launch import default_start_method, launch


def cuda_seen(rank, world_size):
    return torch.cuda.is_available()


def backward_on_the_best_device(rank, world_size):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    w = torch.ones(3, device=device, requires_grad=True)
    (w * (rank + 1)).sum().backward()
    return device, w.grad.tolist()


def test_ranks_start_from_a_fork_server_beside_a_gpu_and_are_forked_elsewhere(monkeypatch):
    monkeypatch.delenv("TORCHCOURSE_START_METHOD", raising=False)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    assert default_start_method() == "fork"
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)  # a CUDA GPU (or Apple's MPS)
    assert default_start_method() == "forkserver"
    monkeypatch.setenv("TORCHCOURSE_START_METHOD", "spawn")  # to take another machine's way (tests, a CPU)
    assert default_start_method() == "spawn"


def test_a_notebooks_worker_travels_by_value_to_ranks_that_are_not_forks(monkeypatch, fork_server):
    main = types.ModuleType("__main__")  # a notebook's __main__: no file a fresh process could import it from
    monkeypatch.setitem(sys.modules, "__main__", main)
    exec(textwrap.dedent("""
        import os, torch
        import torch.nn.functional as F
        DATA = torch.arange(4.0)
        def worker(rank, world_size, k):
            w = torch.zeros(4, requires_grad=True)
            (DATA @ w).backward()
            return {"parent": os.getppid(), "grad": w.grad.tolist(), "k": k, "module change": hasattr(F, "_changed")}
        """), main.__dict__)
    monkeypatch.setattr(F, "_changed", True, raising=False)
    for method in ("forkserver", "spawn"):
        results = launch(main.worker, 2, 5, start_method=method, backend="gloo", timeout=120)
        assert [r["grad"] for r in results] == [[0.0, 1.0, 2.0, 3.0]] * 2, method
        assert [r["k"] for r in results] == [5, 5]
        assert not any(r["module change"] for r in results), "a change to an imported module does not travel"
        if method == "forkserver":
            assert {r["parent"] for r in results} != {os.getpid()}, "the fork server's children, not this process's"
    assert not multiprocessing.active_children()


def one_rank_never_calls_all_reduce(rank, world_size):
    if rank == 1:
        time.sleep(60)
    dist.all_reduce(torch.ones(2))


def test_ranks_from_a_fork_server_that_hang_in_a_collective_say_where_within_the_deadline(fork_server):
    """The GPU machine's way: ranks that are not forks of this process join the group through this process's store,
    and a rank left waiting in a collective is reported at the deadline with where the other rank was."""
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 0 of 2 waited 1 s in all_reduce, at `dist.all_reduce\(torch.ones"
                                           r"\(2\)\)` \(line \d+ of one_rank_never_calls_all_reduce\) for ranks that "
                                           r"never joined it; rank 1 was at `time.sleep\(60\)`"):
        launch(one_rank_never_calls_all_reduce, 2, start_method="forkserver", backend="gloo", collective_timeout=1.0)
    assert time.monotonic() - start < 60  # the fork server's start (seconds: it imports torch) included
    assert not multiprocessing.active_children()


def test_a_worker_that_cannot_be_pickled_is_refused_before_any_rank_starts():
    lock = threading.Lock()
    with pytest.raises(RuntimeError, match="cloudpickle(.|\n)*cannot be"):
        launch(cuda_seen, 2, lock, start_method="forkserver")
    assert not multiprocessing.active_children()


def test_a_gloo_rank_forked_from_a_cuda_process_reports_no_cuda(monkeypatch):
    # As in a child of a process that used CUDA: torch marks the fork as bad, and the device count that
    # is_available() reads is remembered from the parent, so it would still say True.
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert launch(cuda_seen, 2, backend="gloo", start_method="fork", timeout=60) == [False, False]


def test_a_gloo_rank_forked_from_a_process_without_cuda_is_left_alone(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine whose parent never used CUDA
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: False)  # (on a real one, collection asked CUDA already)
    assert launch(cuda_seen, 2, backend="gloo", start_method="fork", timeout=60) == [True, True]


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ["06_ddp", "07_checkpointing"])
def test_the_notebooks_that_launch_run_with_ranks_from_a_fork_server(monkeypatch, assignment):
    """The GPU machine's way, taken on this CPU: every cell of the notebooks whose lessons and tests launch ranks runs
    with the worker carried by value (a test that changed a module for the ranks failed so on an H100)."""
    from course import execute, source_path
    monkeypatch.setenv("TORCHCOURSE_START_METHOD", "forkserver")
    execute(source_path(assignment), timeout=300)  # raises at the first failing cell


# Last in this file: it initialises CUDA in the test process, which the forks above must not inherit.
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (make gpu-check runs it there)")
def test_beside_a_gpu_ranks_run_cuda_and_backward_after_this_process_used_both(fork_server):
    w = torch.ones(3, device="cuda", requires_grad=True)
    (2 * w).sum().backward()  # CUDA initialised here, and autograd's thread for the GPU started
    assert launch(backward_on_the_best_device, 2, backend="gloo", timeout=120) == [
        ("cuda", [1.0, 1.0, 1.0]), ("cuda", [2.0, 2.0, 2.0])]
