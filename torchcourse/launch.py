"""Running a function in several processes, one per rank, from a notebook, a script or under torchrun.

    from torchcourse.launch import launch

    def worker(rank, world_size, steps):
        # the process group is already initialised here: use torch.distributed freely
        ...
        return something            # tensors, state_dicts, numbers: anything picklable

    results = launch(worker, 2, 100)  # [rank 0's return value, rank 1's]

Why not `torch.multiprocessing.spawn`? A spawned process is a fresh interpreter that imports the worker by name,
and a function defined in a notebook has no module to import it from. Two ways round that:
- fork: a forked process is a copy of the notebook's own process, so it has the function already. `launch` forks
  where the platform can and the machine has no accelerator (no CUDA GPU);
- a fresh process that receives the worker pickled by value (cloudpickle: a notebook's functions, and the notebook's
  objects they read, travel with it). Beside a CUDA GPU fork cannot be trusted: a child of a process that used CUDA
  cannot use it, and once this process has run any backward (on the CPU too: autograd then starts a thread per GPU)
  a forked child's backward fails. There `launch` starts the ranks from a fork server, a fresh process that imported
  torch once and never touches CUDA.
"""

import ctypes
import multiprocessing
import os
import pickle
import signal
import socket
import sys
import time
import traceback
import warnings
from multiprocessing.connection import wait

import torch
import torch.distributed as dist

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
# Times the ranks are started, on a fresh port, when one cannot join the process group: gloo's connections between
# ranks on one machine now and then fail under load ("Connection closed by peer", pytorch/pytorch#53270).
FORMING_TRIES = 3


def under_torchrun() -> bool:
    """True in a process started by torchrun (or any launcher that sets RANK, WORLD_SIZE and LOCAL_RANK)."""
    return all(name in os.environ for name in TORCHRUN_VARIABLES)


def choose_backend(world_size: int) -> str:
    """"nccl" when CUDA has a GPU for every rank, else "gloo" (every rank on the CPU)."""
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world_size else "gloo"


def rank_device(rank: int) -> torch.device:
    """The device a rank should use inside a process group: its own GPU with NCCL, the CPU with gloo."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", rank))  # the rank on this machine (torchrun, launch set it)
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def to_cpu(obj):
    """`obj` with every tensor inside dicts, lists and tuples detached and copied to the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return type(obj)((k, to_cpu(v)) for k, v in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return type(obj)(*(to_cpu(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def default_start_method() -> str:
    """"fork" where the platform has it and the machine has no accelerator; beside one "forkserver"; else "spawn".
    TORCHCOURSE_START_METHOD, where set, names it instead (to take a GPU machine's way on a CPU, say)."""
    methods = multiprocessing.get_all_start_methods()
    if os.environ.get("TORCHCOURSE_START_METHOD") in methods:
        return os.environ["TORCHCOURSE_START_METHOD"]
    # autograd starts a thread per device of every accelerator (a CUDA GPU; Apple's MPS by the same code, not seen here)
    if "fork" in methods and not torch.accelerator.is_available():
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def launch(worker, world_size: int, *args, timeout: float = 120.0, backend: str | None = None,
           num_threads: int | None = None, start_method: str | None = None) -> list:
    """Run `worker(rank, world_size, *args)` in `world_size` processes; return their results in rank order.

    The contract: `launch` initialises the process group in every process before it calls the worker and destroys
    it afterwards, so the worker must not call `init_process_group` itself. Each process gets `MASTER_ADDR`,
    `MASTER_PORT` (one free port, chosen here), `RANK`, `WORLD_SIZE` and `LOCAL_RANK` in its environment.

    - backend: None picks "nccl" when there is a CUDA GPU per rank (rank r then runs on `cuda:r`, see
      `rank_device`), else "gloo" with every rank on the CPU.
    - num_threads: torch threads per process. None means 1 with gloo: the ranks share the CPU's cores, and more
      threads than cores makes every rank wait for the others. Forked ranks always run with 1 (torch's OpenMP
      thread pool cannot restart in a forked child: it hangs); otherwise, with NCCL, None keeps torch's default.
    - start_method: None means `default_start_method()`: "fork" where the platform has it and the machine has no
      accelerator (Linux, macOS, Colab on a CPU), "forkserver" beside a GPU, else "spawn". Forked ranks share what
      the process holds; the others receive the worker and the arguments pickled with cloudpickle, which carries a
      function defined in a notebook by value with the notebook's objects it reads, but not changes made to
      imported modules (set those inside the worker).
    - The results travel back pickled, with every tensor moved to the CPU first.

    Failures: an exception in a worker is raised here as a RuntimeError that names the rank and quotes the remote
    traceback; the other ranks are then terminated. A rank that dies without a result (killed, crashed) is
    reported the same way. A rank that cannot join the process group (the worker has not run) has all the ranks
    started again on a fresh port, FORMING_TRIES times in all. Past `timeout` seconds a TimeoutError is raised. On any exit (an error, a timeout,
    a KeyboardInterrupt from the notebook's stop button) every child is terminated, killed if it must be, and
    joined: no process is left behind.

    Under torchrun (RANK, WORLD_SIZE and LOCAL_RANK set), this process is already one rank of the job:
    the worker runs here, once, for this rank, and the list holds only this rank's result: `[result]`.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if under_torchrun():
        return [_run_in_this_process(worker, world_size, args, backend)]

    start_method = start_method or default_start_method()
    backend = backend or choose_backend(world_size)
    if start_method == "fork" and backend == "nccl" and _cuda_spoils_fork():
        raise RuntimeError(
            "CUDA is already initialised in this process, and a forked child cannot initialise it again, so the "
            "ranks cannot use the GPUs. Leave start_method to launch (it then starts the ranks from a fork server "
            "that never touched CUDA), or pass backend='gloo' to run every rank on the CPU, or put the worker in a "
            ".py file and run it with torchrun.")
    if start_method == "fork":
        task = (worker, args)
    else:
        task = _pickled(worker, args, start_method)
    if start_method == "fork" and num_threads not in (None, 1):
        raise ValueError(
            f"num_threads={num_threads}: forked ranks run with one thread each. GNU OpenMP, which torch's CPU "
            "kernels use, hangs when a process forked from one that already ran parallel work starts threads "
            "again. For several threads per rank, put the worker in a .py file and use start_method='spawn' "
            "or torchrun (set OMP_NUM_THREADS).")
    if num_threads is None and (start_method == "fork" or backend == "gloo"):
        num_threads = 1

    # DistributedDataParallel's constructor imports torch._dynamo, which takes seconds; imported once here (or by
    # the fork server), every forked rank inherits it instead of paying for it again.
    context = multiprocessing.get_context(start_method)
    if start_method == "fork":
        import torch._dynamo  # noqa: F401
    elif start_method == "forkserver":
        context.set_forkserver_preload([__name__, "torch._dynamo"])
    for attempt in range(FORMING_TRIES):
        try:
            return _run_ranks(context, task, world_size, backend, num_threads, timeout)
        except _Unformed:
            if attempt == FORMING_TRIES - 1:
                raise


def _run_ranks(context, task, world_size, backend, num_threads, timeout) -> list:
    """Start the ranks on a free port, collect their results, and leave no rank running."""
    port = free_port()
    processes, readers, finished = [], [], False
    try:
        for rank in range(world_size):
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(target=_child, name=f"rank-{rank}",
                                      args=(task, rank, world_size, backend, port, num_threads, writer))
            with warnings.catch_warnings():  # Python 3.12+ warns about fork in any process with threads (Jupyter's)
                warnings.filterwarnings("ignore", message=".*use of fork\\(\\) may lead to deadlocks", category=DeprecationWarning)
                process.start()
            writer.close()  # the child holds its own copy; closing ours lets us see the child's end of file
            processes.append(process)
            readers.append(reader)
        results = _collect(processes, readers, world_size, timeout)
        finished = True
        return results
    finally:
        _stop(processes, grace=3.0 if finished else 0.0)
        for reader in readers:
            reader.close()


def _pickled(worker, args, start_method) -> bytes:
    """The worker and its arguments, pickled by cloudpickle for ranks that are not forks of this process."""
    import cloudpickle
    try:
        return cloudpickle.dumps((worker, args))
    except Exception as error:
        raise RuntimeError(
            f"launch starts the ranks with {start_method!r} here, so the worker and its arguments travel pickled "
            f"(cloudpickle), and they cannot be: {type(error).__name__}: {error}. Let the worker build what cannot "
            "be pickled (an open file, a DataLoader's iterator, a lock) itself.") from error


def _cuda_spoils_fork() -> bool:
    """True if a child forked now could not use CUDA: CUDA is initialised here, or torch marked fork as unsafe."""
    if torch.cuda.is_initialized():
        return True
    # torch registers a fork handler once this process has asked the CUDA runtime anything (is_available() without
    # PYTORCH_NVML_BASED_CUDA_CHECK=1 does); children forked after that refuse CUDA. Ask a throwaway child.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*use of fork\\(\\) may lead to deadlocks", category=DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) != 0


class _Unformed(RuntimeError):
    """A rank could not join the process group: the worker has not run anywhere, and the ranks can be started again."""


def _collect(processes, readers, world_size, timeout):
    """Wait for every rank's message; raise on the first failure, on a silent death, or at the deadline."""
    deadline = time.monotonic() + timeout
    results, pending = {}, dict(enumerate(readers))
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"launch: ranks {sorted(pending)} of {world_size} had not finished after {timeout:g} s; "
                               "all ranks were stopped")
        # Short slices, so that a KeyboardInterrupt is handled at once even when the signal reached another thread.
        ready = wait(list(pending.values()) + [processes[r].sentinel for r in pending], timeout=min(left, 0.2))
        for rank, reader in list(pending.items()):
            if reader in ready or (processes[rank].sentinel in ready and reader.poll()):
                try:
                    status, value = pickle.loads(reader.recv_bytes())
                except EOFError:  # closed without a message: the process died
                    processes[rank].join(timeout=5)
                    raise RuntimeError(f"rank {rank} of {world_size} died without returning a result "
                                       f"(exit code {processes[rank].exitcode})") from None
                if status == "error":
                    raise RuntimeError(f"rank {rank} of {world_size} failed; its traceback:\n\n{value}") from None
                if status == "unformed":
                    raise _Unformed(f"rank {rank} of {world_size} could not join the process group ({FORMING_TRIES} "
                                    f"tries); its traceback:\n\n{value}") from None
                results[rank] = value
                del pending[rank]
            elif processes[rank].sentinel in ready:
                processes[rank].join(timeout=5)
                raise RuntimeError(f"rank {rank} of {world_size} died without returning a result "
                                   f"(exit code {processes[rank].exitcode})") from None
    return [results[rank] for rank in range(world_size)]


def _stop(processes, grace: float = 3.0):
    """Give children `grace` seconds to exit, then terminate (SIGTERM), kill (SIGKILL) and join whatever is left."""
    deadline = time.monotonic() + grace
    for process in processes:  # ranks that sent their result are destroying their process group and exiting
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=1.0)
        if process.is_alive():
            process.kill()
            process.join()


def _die_with_parent():
    """Linux: have the kernel kill this child if its parent dies (a kernel restarted with SIGKILL, say)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _child(task, rank, world_size, backend, port, num_threads, writer):
    """One rank: set up the environment and the process group, run the worker, send back the result or the error.
    `task` is (worker, args), or those pickled by `_pickled` where the rank is not a fork of the launching process."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles the stop button and then stops us
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    try:
        worker, args = pickle.loads(task) if isinstance(task, bytes) else task
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        if backend == "nccl":
            torch.cuda.set_device(rank)
        elif torch.cuda._is_in_bad_fork():
            # Forked from a process that used CUDA: CUDA cannot start here, yet torch.cuda.is_available() would still
            # say True (the device count is remembered from the parent), and code that asks it before touching CUDA
            # (torch.distributed.checkpoint's file writer does) would fail. This rank runs on the CPU: say so.
            torch.cuda.is_available = lambda: False
        try:
            dist.init_process_group(backend, rank=rank, world_size=world_size)
        except Exception:
            writer.send_bytes(pickle.dumps(("unformed", traceback.format_exc())))
            writer.close()
            return
        try:
            message = ("ok", to_cpu(worker(rank, world_size, *args)))
        finally:
            dist.destroy_process_group()
        payload = pickle.dumps(message)
    except BaseException:
        payload = pickle.dumps(("error", traceback.format_exc()))
    writer.send_bytes(payload)
    writer.close()


def _run_in_this_process(worker, world_size, args, backend):
    """Under torchrun: this process is one rank; run the worker here for it."""
    rank, size, local_rank = (int(os.environ[name]) for name in TORCHRUN_VARIABLES)
    if size != world_size:
        raise ValueError(f"launch(..., world_size={world_size}) under torchrun, which started WORLD_SIZE={size} "
                         "processes: make them agree (torchrun --nproc_per_node)")
    if dist.is_initialized():  # the script set the group up itself: leave it as it is
        return worker(rank, size, *args)
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend, rank=rank, world_size=size)
    try:
        return worker(rank, size, *args)
    finally:
        dist.destroy_process_group()
