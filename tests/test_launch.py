"""The launcher notebook 06 uses: results, errors, timeouts and interrupts, with no process left behind."""

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch
import torch.distributed as dist

from torchcourse.launch import free_port, launch, to_cpu


def child_pids() -> set[int]:
    """PIDs of this process's children that are still alive (zombies, exited but not reaped, included)."""
    children = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():  # fields[1] is the parent's PID
                children.add(int(entry))
    return children


@pytest.fixture
def no_children_left():
    """Fails the test if it leaves a child process behind."""
    before = child_pids()
    yield
    import multiprocessing
    assert not multiprocessing.active_children()
    assert child_pids() - before == set(), "launch left child processes behind"


def describe(rank, world_size, value):
    return {"rank": rank, "world_size": world_size, "value": value, "threads": torch.get_num_threads(),
            "backend": dist.get_backend(), "port": os.environ["MASTER_PORT"], "pid": os.getpid()}


def all_reduce_sum(rank, world_size):
    t = torch.tensor([rank + 1.0, 10.0 * rank])
    dist.all_reduce(t)
    return t


def fail_on(rank, world_size, bad_rank):
    if rank == bad_rank:
        raise ValueError(f"planted error on rank {rank}")
    time.sleep(60)  # the other ranks would wait for a minute: launch must stop them
    return rank


def sleep(rank, world_size, seconds):
    time.sleep(seconds)
    return rank


def exit_silently(rank, world_size):
    if rank == 1:
        os._exit(3)
    return rank


def unpicklable(rank, world_size):
    return lambda: rank


def test_results_come_back_in_rank_order(no_children_left):
    results = launch(describe, 3, "x")
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert all(r["world_size"] == 3 and r["value"] == "x" and r["backend"] == "gloo" for r in results)
    assert all(r["threads"] == 1 for r in results), "one thread per rank on the CPU"
    assert len({r["port"] for r in results}) == 1 and len({r["pid"] for r in results}) == 3
    assert "MASTER_PORT" not in os.environ or os.environ["MASTER_PORT"] != results[0]["port"]


def test_the_worker_runs_once_per_rank_when_a_rank_fails_to_join_after_the_others_formed_the_group(
        monkeypatch, tmp_path, no_children_left):
    """Gloo on one machine under load: a rank may fail to join ("Connection closed by peer", pytorch/pytorch#53270)
    after the others formed the group. The worker starts only once every rank has joined, so starting the ranks again
    runs it once per rank; a group that never forms is reported, with the rank's traceback, after FORMING_TRIES."""
    from torchcourse import launch as launcher
    real = dist.init_process_group

    def flaky(*args, **kwargs):  # rank 1's first try joins, then fails, as gloo's did
        real(*args, **kwargs)
        if os.environ["RANK"] == "1" and not (tmp_path / "failed").exists():
            (tmp_path / "failed").write_text(os.environ["MASTER_PORT"])
            waited = time.monotonic() + 1.0  # long enough for the others to run the worker, were they not held back
            while time.monotonic() < waited and len((tmp_path / "ran").read_text().split()) < 2:
                time.sleep(0.01)
            raise RuntimeError("Gloo connectFullMesh failed with [...] Connection closed by peer (simulated)")

    def counted(rank, world_size, value):
        with open(tmp_path / "ran", "a") as f:
            f.write(f"{rank}\n")
        return describe(rank, world_size, value)

    (tmp_path / "ran").touch()
    monkeypatch.setattr(dist, "init_process_group", flaky)
    results = launch(counted, 3, "x", start_method="fork")
    assert [r["rank"] for r in results] == [0, 1, 2] and results[0]["port"] != (tmp_path / "failed").read_text()
    assert sorted((tmp_path / "ran").read_text().split()) == ["0", "1", "2"], "the worker ran more than once a rank"

    def never(*args, **kwargs):
        with open(tmp_path / "tries", "a") as f:
            f.write(os.environ["RANK"] + "\n")
        raise RuntimeError("simulated: this group never forms")

    monkeypatch.setattr(dist, "init_process_group", never)
    with pytest.raises(RuntimeError, match=r"(?s)could not join the process group \(3 tries\).*never forms"):
        launch(describe, 1, "x", start_method="fork")
    assert (tmp_path / "tries").read_text().split() == ["0"] * launcher.FORMING_TRIES


def test_a_rank_stuck_joining_the_group_has_every_rank_started_again_after_the_formation_deadline(
        monkeypatch, tmp_path, no_children_left):
    """A rank that never finishes joining (a lost connection) holds no one for longer than formation_timeout: the
    ranks start again, and the worker runs once per rank; a group that never forms says which rank was where."""
    real = dist.init_process_group

    def stuck_once(*args, **kwargs):
        if os.environ["RANK"] == "1" and not (tmp_path / "stuck").exists():
            (tmp_path / "stuck").touch()
            time.sleep(60)
        return real(*args, **kwargs)

    def counted(rank, world_size):
        with open(tmp_path / "ran", "a") as f:
            f.write(f"{rank}\n")
        return rank

    monkeypatch.setattr(dist, "init_process_group", stuck_once)
    start = time.monotonic()
    assert launch(counted, 2, formation_timeout=2.0) == [0, 1]  # 0.1-0.3 s to form here, a second under heavy load
    assert sorted((tmp_path / "ran").read_text().split()) == ["0", "1"]
    assert time.monotonic() - start < 30, "held back by the stuck rank for 2 s, not launch's 2 minutes"

    def stuck(*args, **kwargs):
        if os.environ["RANK"] == "1":
            time.sleep(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(dist, "init_process_group", stuck)
    with pytest.raises(TimeoutError, match=r"ranks \[0, 1\] of 2 had not joined the process group after 2 s "
                                           r"\(3 tries\); rank 0 was .*; "  # in init_process_group, waiting for rank 1
                                           r"rank 1 was at `time.sleep\(60\)` \(line \d+ of stuck\)"):
        launch(counted, 2, formation_timeout=2.0)


def one_rank_never_calls_all_reduce(rank, world_size):
    if rank == 1:
        time.sleep(60)
    dist.all_reduce(torch.ones(2))


def test_a_rank_left_waiting_in_a_collective_raises_within_the_deadline_naming_the_rank_and_the_operation(
        no_children_left):
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 0 of 2 waited 1 s in all_reduce, at "
                                           r"`dist.all_reduce\(torch.ones\(2\)\)` \(line \d+ of "
                                           r"one_rank_never_calls_all_reduce\) for ranks that never joined it; "
                                           r"rank 1 was at `time.sleep\(60\)`") as info:
        launch(one_rank_never_calls_all_reduce, 2, collective_timeout=1.0)
    assert "Timed out" in str(info.value), "gloo's own message, in rank 0's traceback"
    assert time.monotonic() - start < 20, "the rank that waits is stopped at the deadline, not at launch's timeout"


def dies_during_all_reduce(rank, world_size):
    if rank == 1:
        time.sleep(0.5)  # rank 0 is in the all_reduce by now
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(2))


def test_a_rank_that_dies_mid_collective_is_seen_at_once_with_where_the_others_waited(no_children_left):
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 1 of 2 died without returning a result \(killed by SIGKILL\); "
                                           r"rank 0 was in all_reduce, at `dist.all_reduce"):
        launch(dies_during_all_reduce, 2)  # the collective deadline is a minute: this must not wait for it
    assert time.monotonic() - start < 20


def test_all_reduce_sums_over_ranks(no_children_left):
    results = launch(all_reduce_sum, 2)
    for t in results:
        assert torch.equal(t, torch.tensor([3.0, 10.0]))


def test_tensors_and_state_dicts_come_back_on_the_cpu(no_children_left):
    def state(rank, world_size):
        torch.manual_seed(0)
        return torch.nn.Linear(3, 2).state_dict()
    (got,) = launch(state, 1)
    torch.manual_seed(0)
    want = torch.nn.Linear(3, 2).state_dict()
    assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
    nested = to_cpu({"a": [torch.ones(2, requires_grad=True) * 2, (torch.zeros(1), 3)], "b": "text"})
    assert not nested["a"][0].requires_grad and nested["a"][1][1] == 3 and nested["b"] == "text"


def test_a_worker_error_is_raised_with_its_rank_and_remote_traceback(no_children_left):
    start = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        launch(fail_on, 2, 1)
    message = str(info.value)
    assert "rank 1 of 2" in message
    assert "planted error on rank 1" in message and "Traceback" in message and "in fail_on" in message
    assert time.monotonic() - start < 10, "the sleeping rank 0 must be terminated, not waited for"


def test_a_rank_that_dies_without_a_result_is_reported(no_children_left):
    with pytest.raises(RuntimeError, match="rank 1 of 2 died .*exit code 3"):
        launch(exit_silently, 2)


def test_an_unpicklable_result_is_reported_as_that_ranks_error(no_children_left):
    with pytest.raises(RuntimeError, match="rank 0 of 1 failed(.|\n)*pickle"):
        launch(unpicklable, 1)


def test_timeout_raises_and_stops_every_rank_saying_where_each_was(no_children_left):
    start = time.monotonic()
    # Formation takes 0.1-0.3 s, but here a rank's first connection now and then waits 5 s for a reverse DNS lookup of
    # the loopback address (torch's socket code names its peer; the resolver's timeout): the deadline may pass then.
    with pytest.raises(TimeoutError, match=r"ranks \[0, 1\] of 2 had not (finished|joined the process group) after "
                                           r"3 s; all ranks were stopped; rank 0 was .*; rank 1 was ") as info:
        launch(sleep, 2, 60, timeout=3.0)
    if "had not finished" in str(info.value):
        assert re.search(r"rank 0 was at `time.sleep\(seconds\)` \(line \d+ of sleep\)", str(info.value))
    assert time.monotonic() - start < 10


STOPPED = """import time
from torchcourse.launch import launch
def sleep(rank, world_size):
    time.sleep(60)
print("launching", flush=True)
launch(sleep, 2)
"""


def test_keyboard_interrupt_leaves_no_child_behind():
    """The notebook's stop button: SIGINT to the process that launched (as ipykernel's interrupt is), while its ranks
    run. A process of its own, so that no handler an earlier test left in this one stands in for Python's."""
    launcher = subprocess.Popen([sys.executable, "-c", STOPPED], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    try:
        assert launcher.stdout.readline().strip() == "launching"
        deadline = time.monotonic() + 60
        while len(psutil.Process(launcher.pid).children()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # the ranks are running
        ranks = psutil.Process(launcher.pid).children(recursive=True)
        start = time.monotonic()
        launcher.send_signal(signal.SIGINT)
        _, said = launcher.communicate(timeout=30)
        assert time.monotonic() - start < 10 and "KeyboardInterrupt" in said, said[-2000:]
        assert not [r.pid for r in ranks if r.is_running() and r.status() != psutil.STATUS_ZOMBIE]
    finally:
        launcher.kill()
        launcher.wait()


def test_under_torchrun_the_worker_runs_in_this_process(monkeypatch, no_children_left):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    threads = torch.get_num_threads()
    (result,) = launch(describe, 1, 7)
    assert result["pid"] == os.getpid() and result["rank"] == 0 and result["value"] == 7
    assert torch.get_num_threads() == threads, "torchrun sets the threads; launch leaves them alone"
    assert not dist.is_initialized(), "the process group is destroyed afterwards"
    with pytest.raises(ValueError, match="WORLD_SIZE=1"):
        launch(describe, 2, 7)


def test_forked_ranks_refuse_more_than_one_thread():
    with pytest.raises(ValueError, match="one thread"):
        launch(describe, 1, 0, num_threads=2, start_method="fork")


def test_nccl_ranks_are_refused_once_cuda_spoiled_fork(monkeypatch, no_children_left):
    from torchcourse.launch import _cuda_spoils_fork
    if not torch.cuda.is_available():  # beside a GPU, pytest's own collection has asked CUDA (skipif) already
        assert not _cuda_spoils_fork()
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)  # what a child sees after the parent used CUDA
    assert _cuda_spoils_fork()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="CUDA is already initialised(.|\n)*fork server"):
        launch(describe, 2, 0, backend="nccl", start_method="fork")


def records_all_reduces(rank, world_size):
    """Two all-reduces under AllReduceRecorder, one blocking and one asynchronous, waited on; what was recorded."""
    from torchcourse.testing import AllReduceRecorder
    real = dist.all_reduce
    with AllReduceRecorder() as recorder:
        recorder.during = "first"
        blocking = torch.ones(3)
        dist.all_reduce(blocking)
        recorder.during = "second"
        pending = torch.ones(5)
        handle = dist.all_reduce(pending, dist.ReduceOp.SUM, None, True)  # async_op given by position
        not_yet = dict(recorder.calls[-1])
        handle.wait()
    return {"calls": recorder.calls, "before wait": not_yet, "sums": [blocking, pending],
            "restored": dist.all_reduce is real, "completed": handle.is_completed()}


def test_the_all_reduce_recorder_sees_each_call_its_async_op_and_its_wait(no_children_left):
    for result in launch(records_all_reduces, 2):
        assert result["calls"] == [
            {"elements": 3, "during": "first", "async_op": False, "waited": False},
            {"elements": 5, "during": "second", "async_op": True, "waited": True}]
        assert result["before wait"]["waited"] is False, "waited turns True at wait(), not before"
        assert [t.tolist() for t in result["sums"]] == [[2.0] * 3, [2.0] * 5], "the calls still all-reduce"
        assert result["restored"] and result["completed"], "dist.all_reduce is put back; the handle is the real one's"
