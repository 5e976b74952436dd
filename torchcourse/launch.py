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

How the ranks meet, so that the worker runs once on every rank and nothing waits for ever:
- this process binds the rendezvous store (torch's TCPStore) on a port the system picks, after it started the ranks
  (none inherits the store's thread), and sends them its port: no two launches can race for a port;
- each rank joins the process group through it, passes a barrier with the others and says so; only when every rank
  has does this process tell them to start the worker. A rank that cannot join (gloo's connections on one machine now
  and then fail under load, pytorch/pytorch#53270, sometimes after the other ranks formed the group) is seen before
  any worker has run, so every rank can be started again;
- every wait has a deadline shorter than a grader's cell limit (forming the group, each collective), a rank that dies
  is seen at once, and the error names the rank, the operation it waited in and where the other ranks were.
"""

import ctypes
import faulthandler
import linecache
import multiprocessing
import os
import pickle
import re
import shutil
import signal
import socket
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
import warnings
from datetime import timedelta
from multiprocessing.connection import wait

import torch
import torch.distributed as dist

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
# Times the ranks are started, with a fresh store, when one cannot join the process group: gloo's connections between
# ranks on one machine now and then fail under load ("Connection closed by peer", pytorch/pytorch#53270). The worker
# has run on no rank then (it starts only once every rank has joined), so starting again repeats nothing.
FORMING_TRIES = 3
# Seconds for every rank to join the process group and pass its first barrier. It takes 0.1-0.3 s on a quiet 2-core
# machine and a few seconds on a loaded one: a rank that has not joined after 30 s is stuck (a lost connection), and
# the ranks are started again. Three tries of it stay within a grader's 120 s cell limit.
FORMATION_TIMEOUT_S = 30.0
# Seconds a rank waits in one collective (all_reduce, barrier, FSDP's gathers, a DCP save's exchanges) for the other
# ranks to join it. The course's ranks reach each collective within a second of each other, a slow laptop's within
# ten; past 60 s the rank waits for one that will never come. Shorter than a grader's 120 s cell limit, so the
# notebook shows which rank waited in what, rather than being stopped at the limit with nothing said.
COLLECTIVE_TIMEOUT_S = 60.0
# Asks a rank where it is: faulthandler writes its Python stacks into a file (no such signal on Windows: not asked).
STACK_SIGNAL = getattr(signal, "SIGUSR1", None)
START = b"start"  # this process's word to every rank, once all have joined the group: run the worker
# Where code that is not the notebook's or the user's lives: the standard library and the installed packages.
LIBRARIES = tuple({sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
TORCH_DISTRIBUTED = os.path.dirname(dist.__file__)
TIMED_OUT = re.compile(r"timed? ?out", re.IGNORECASE)  # gloo's "Timed out waiting", the store's "wait timeout"


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
           num_threads: int | None = None, start_method: str | None = None,
           formation_timeout: float = FORMATION_TIMEOUT_S, collective_timeout: float = COLLECTIVE_TIMEOUT_S) -> list:
    """Run `worker(rank, world_size, *args)` in `world_size` processes; return their results in rank order.

    The contract: `launch` initialises the process group in every process before it calls the worker and destroys
    it afterwards, so the worker must not call `init_process_group` itself. Each process gets `MASTER_ADDR`,
    `MASTER_PORT` (the store's, bound here), `RANK`, `WORLD_SIZE` and `LOCAL_RANK` in its environment. The worker
    starts on a rank only once every rank has joined the group, and it runs once on each.

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
    - timeout: seconds for the whole launch, forming the group included.
    - formation_timeout: seconds for every rank to join the group (FORMATION_TIMEOUT_S); collective_timeout: seconds
      a rank waits in one collective for the others (COLLECTIVE_TIMEOUT_S).
    - The results travel back pickled, with every tensor moved to the CPU first.

    Failures: an exception in a worker is raised here as a RuntimeError that names the rank and quotes the remote
    traceback; the other ranks are then terminated. A rank that waited past `collective_timeout` in a collective is
    reported with the operation and where the other ranks were; a rank that dies without a result (killed, crashed)
    is reported at once, with where the others were. A rank that cannot join the process group within
    `formation_timeout` has every rank started again (none has run the worker), FORMING_TRIES times in all. Past
    `timeout` a TimeoutError says where each rank was. On any exit (an error, a timeout, a KeyboardInterrupt from
    the notebook's stop button) every child is terminated, killed if it must be, and joined: no process is left
    behind.

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
    ranks = _Ranks(context, task, world_size, backend, num_threads, collective_timeout)
    deadline = time.monotonic() + timeout
    for attempt in range(1, FORMING_TRIES + 1):
        try:
            return ranks.run(deadline, timeout, formation_timeout)
        except _Unformed as unformed:
            if attempt == FORMING_TRIES:
                kind = TimeoutError if unformed.timed_out else RuntimeError
                raise kind(f"{unformed} ({FORMING_TRIES} tries){unformed.details}") from None


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
    """Some rank could not join the process group: the worker has run on no rank, and all can be started again."""

    def __init__(self, message: str, details: str = "", timed_out: bool = False):
        super().__init__(message)
        self.details, self.timed_out = details, timed_out


class _Ranks:
    """One launch's ranks, tried up to FORMING_TRIES times: started, formed into a group, told to start, collected."""

    def __init__(self, context, task, world_size: int, backend: str, num_threads: int | None,
                 collective_timeout: float):
        self.context, self.task, self.world_size = context, task, world_size
        self.backend, self.num_threads, self.collective_timeout = backend, num_threads, collective_timeout
        self.processes, self.connections, self.folder = [], [], ""

    def run(self, deadline: float, timeout: float, formation_timeout: float) -> list:
        """One try: start the ranks, form the group (or raise _Unformed), start the worker on all; the results."""
        self.processes, self.connections, finished, store = [], [], False, None
        self.folder = tempfile.mkdtemp(prefix="torchcourse-launch-")  # where a rank writes its stacks when asked
        try:
            for rank in range(self.world_size):
                self._start(rank)
            # Bound here on a port the system picks, and held until the ranks are done: no other process can take
            # it in between. Made after the ranks are forked, so that none of them inherits the store's thread.
            store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                  timeout=timedelta(seconds=self.collective_timeout))
            self._tell(pickle.dumps(store.port))
            formed_by = time.monotonic() + formation_timeout
            if formed_by < deadline:  # the formation's deadline comes first: past it, every rank starts again
                self._gather("formed", formed_by, self._unformed_after(formation_timeout))
            else:
                self._gather("formed", deadline, self._late(timeout, "joined the process group"))
            self._tell(START)
            results = self._gather("ok", deadline, self._late(timeout, "finished"))
            finished = True
            return [results[rank] for rank in range(self.world_size)]
        finally:
            _stop(self.processes, grace=3.0 if finished else 0.0)
            for connection in self.connections:
                connection.close()
            del store  # its thread ends here, before a next try forks
            shutil.rmtree(self.folder, ignore_errors=True)

    def _start(self, rank: int):
        ours, theirs = self.context.Pipe(duplex=True)
        process = self.context.Process(
            target=_child, name=f"rank-{rank}",
            args=(self.task, rank, self.world_size, self.backend, self.num_threads, self.collective_timeout, theirs,
                  self._stack_file(rank)))
        with warnings.catch_warnings():  # Python 3.12+ warns about fork in any process with threads (Jupyter's)
            warnings.filterwarnings("ignore", message=".*use of fork\\(\\) may lead to deadlocks", category=DeprecationWarning)
            process.start()
        theirs.close()  # the child holds its own copy; closing ours lets us see the child's end of file
        self.processes.append(process)
        self.connections.append(ours)

    def _stack_file(self, rank: int) -> str:
        return os.path.join(self.folder, f"rank-{rank}")

    def _tell(self, message: bytes):
        """Send every rank the same message; a rank that has died is left to `_gather` to report."""
        for connection in self.connections:
            try:
                connection.send_bytes(message)
            except OSError:
                pass

    def _unformed_after(self, formation_timeout: float):
        """The error for ranks that had not joined the group by the formation's deadline: the ranks start again."""
        return lambda ranks, where: _Unformed(f"ranks {ranks} of {self.world_size} had not joined the process group "
                                              f"after {formation_timeout:g} s", where, timed_out=True)

    def _late(self, timeout: float, done: str):
        """The error for ranks that had not `done` by launch's own deadline."""
        return lambda ranks, where: TimeoutError(f"launch: ranks {ranks} of {self.world_size} had not {done} after "
                                                 f"{timeout:g} s; all ranks were stopped{where}")

    def _gather(self, stage: str, deadline: float, late) -> dict:
        """Every rank's message of `stage` ("formed", then "ok" with the result). Raises at a rank's failure or death,
        or at the deadline `late(ranks, where they were)`."""
        got, pending = {}, set(range(self.world_size))
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise late(sorted(pending), self._where(pending))
            # Short slices, so that a KeyboardInterrupt is handled at once even when the signal reached another thread.
            ready = wait([self.connections[r] for r in pending] + [self.processes[r].sentinel for r in pending],
                         timeout=min(left, 0.2))
            for rank in sorted(pending):
                message = self._message(rank, ready)
                if message is None:
                    continue
                status, value = message
                if status == "died":
                    raise self._died(rank, stage, pending - {rank}, {})
                if status == "unformed":
                    raise _Unformed(f"rank {rank} of {self.world_size} could not join the process group",
                                    f"; its traceback:\n\n{value['traceback']}")
                if status == "error":
                    raise self._failed(rank, stage, value, pending - {rank})
                got[rank] = value
                pending.discard(rank)
        return got

    def _message(self, rank: int, ready: list):
        """What the rank said, if `ready` shows it said something: (status, value), ("died", None), or None."""
        connection, process = self.connections[rank], self.processes[rank]
        if connection in ready or (process.sentinel in ready and connection.poll()):
            try:
                return pickle.loads(connection.recv_bytes())
            except EOFError:  # closed without a message: the process died
                return "died", None
        return ("died", None) if process.sentinel in ready else None

    def _died(self, rank: int, stage: str, others: set, failures: dict) -> Exception:
        process = self.processes[rank]
        process.join(timeout=5)
        code = process.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            how = f"killed by {signal.Signals(-code).name}" if -code in signal.valid_signals() else how
        if stage == "formed":
            return _Unformed(f"rank {rank} of {self.world_size} died while joining the process group ({how})")
        # The others fail within a moment of the death ("Connection closed by peer"): where they failed is where they
        # waited for the dead rank.
        failures, silent = dict(failures), [self.connections[r] for r in others if r not in failures]
        if silent:
            wait(silent, timeout=0.5)
        for other in sorted(others - set(failures)):
            if self.connections[other].poll():
                status, value = self._message(other, [self.connections[other]])
                if status in ("error", "unformed"):
                    failures[other] = value
        return RuntimeError(f"rank {rank} of {self.world_size} died without returning a result ({how})"
                            f"{self._where(others, failures)}")

    def _failed(self, rank: int, stage: str, failure: dict, others: set) -> Exception:
        """The error for a rank's exception, or for another rank's death where that death is what the rank met."""
        # A rank that dies mid-collective makes the others fail at once ("Connection closed by peer"): the death,
        # seen within a moment, is the cause to report.
        if others:
            wait([self.processes[r].sentinel for r in others], timeout=0.1)
        ready = [self.processes[r].sentinel for r in others if not self.processes[r].is_alive()]
        dead = [r for r in sorted(others) if self._message(r, ready) == ("died", None)]
        if dead:
            return self._died(dead[0], stage, others - {dead[0]} | {rank}, {rank: failure})
        if not failure["timed_out"]:
            return RuntimeError(f"rank {rank} of {self.world_size} failed; its traceback:\n\n{failure['traceback']}")
        return RuntimeError(f"rank {rank} of {self.world_size} waited {self.collective_timeout:g} s "
                            f"{_describe(failure['frames'])} for ranks that never joined it{self._where(others)}; "
                            f"its traceback:\n\n{failure['traceback']}")

    def _where(self, ranks, failures: dict | None = None) -> str:
        """'; rank r was in OPERATION, at `code` (line n of function)' for each of `ranks` that failed (`failures`) or
        still runs (asked for its stack)."""
        failures = failures or {}
        stacks = {rank: failure["frames"] for rank, failure in failures.items()}
        stacks.update(self._stacks([rank for rank in ranks if rank not in stacks]))
        return "".join(f"; rank {rank} was {_describe(stacks[rank])}" for rank in sorted(stacks) if rank in ranks)

    def _stacks(self, ranks: list) -> dict:
        """The main thread's stack (outermost frame first) of each rank of `ranks` still running, as faulthandler
        writes it on STACK_SIGNAL; a rank that has not answered within 2 s is left out."""
        asked = []
        for rank in ranks if STACK_SIGNAL else ():
            try:
                os.kill(self.processes[rank].pid, STACK_SIGNAL)
                asked.append(rank)
            except (ProcessLookupError, TypeError):  # gone, or never started (pid None)
                pass
        stacks, seen, until = {}, {}, time.monotonic() + 2.0
        while asked and time.monotonic() < until:
            time.sleep(0.05)
            for rank in list(asked):
                try:
                    with open(self._stack_file(rank)) as f:
                        text = f.read()
                except FileNotFoundError:  # asked before it could answer
                    continue
                if text == seen.get(rank) and _main_stack(text):  # written in full: the same twice, 50 ms apart
                    stacks[rank] = _main_stack(text)
                    asked.remove(rank)
                seen[rank] = text
        return stacks


def _main_stack(text: str) -> list:
    """The main thread's frames, outermost first, from a stack file: the main thread's id on the first line, then
    faulthandler's dump of every thread (innermost frame first)."""
    header, _, dump = text.partition("\n")
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump):
        thread = re.match(r"(?:Current thread|Thread) (0x[0-9a-f]+)", block)
        if thread and header and int(thread.group(1), 16) == int(header, 16):
            frames = re.findall(r'^  File "(.*)", line (\d+) in (.*)$', block, flags=re.M)
            return [(file, int(line), name) for file, line, name in reversed(frames)]
    return []


def _describe(frames: list) -> str:
    """Where a stack (outermost frame first) is, in words: 'in OPERATION, at `code` (line n of function)', with the
    innermost torch.distributed function it is in and the innermost line of the user's code (not a library's)."""
    calls = [i for i, (file, _, name) in enumerate(frames) if file == __file__ and name == "_child"]
    frames = frames[calls[-1] + 1:] if calls else frames  # a forked rank's stack goes on into its parent's frames
    ops = [name for file, _, name in frames if file.startswith(TORCH_DISTRIBUTED) and not name.startswith("_")
           and name != "wrapper"]  # c10d_logger's decorator around every collective
    own = [(file, line, name) for file, line, name in frames if not file.startswith(LIBRARIES) and file != __file__]
    parts = [f"in {ops[-1]}"] if ops else []
    if own:
        file, line, name = own[-1]
        code = linecache.getline(file, line).strip()
        parts.append(f"at `{code}` (line {line} of {name})" if code else f"at line {line} of {name}")
    return ", ".join(parts) or (f"in {frames[-1][2]}" if frames else "somewhere unknown")


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


def _child(task, rank, world_size, backend, num_threads, collective_timeout, connection, stack_file):
    """One rank: join the group through the launching process's store, wait for its word to start, run the worker
    once, send back the result or the error. `task` is (worker, args), or those pickled by `_pickled` where the rank
    is not a fork of the launching process. Every message is (status, value): ("formed", None), then ("ok", result);
    ("unformed", failure) where the group could not be joined, ("error", failure) where anything else failed."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles the stop button and then stops us
    _answer_where(stack_file)
    os.environ.update(MASTER_ADDR="127.0.0.1", RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    status = "error"
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
        port = pickle.loads(_heard(connection))
        os.environ["MASTER_PORT"] = str(port)
        status = "unformed"
        _form(backend, rank, world_size, port, collective_timeout)
        connection.send_bytes(pickle.dumps(("formed", None)))
        status = "error"
        _heard(connection)  # START: every rank has joined
        payload = pickle.dumps(("ok", to_cpu(worker(rank, world_size, *args))))
    except BaseException as error:
        payload = pickle.dumps((status, _failure(error)))
    try:
        connection.send_bytes(payload)  # before leaving the group, which may be slow or fail: it waits for no one
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # the launching process has what it needs, or is stopping every rank
        pass


def _heard(connection) -> bytes:
    """The launching process's next word. Its end closed means that it is stopping every rank: leave quietly."""
    try:
        return connection.recv_bytes()
    except EOFError:
        os._exit(0)


def _form(backend, rank, world_size, port, collective_timeout):
    """Join the process group through the launching process's store, then meet every other rank at a barrier."""
    timeout = timedelta(seconds=collective_timeout)  # for each store operation and each collective
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    # Gloo can return from init_process_group on some ranks while another's connections failed (pytorch/pytorch#53270):
    # a barrier proves that every rank reaches the others, before any runs the worker.
    dist.barrier(device_ids=[rank] if backend == "nccl" else None)


def _answer_where(path: str):
    """Have faulthandler write this process's Python stacks into `path` when the launching process asks
    (STACK_SIGNAL). The first line names the main thread: the one that runs the worker."""
    if STACK_SIGNAL:
        file = open(path, "w")
        file.write(f"{threading.get_ident():#x}\n")
        file.flush()
        faulthandler.register(STACK_SIGNAL, file=file, all_threads=True)  # keeps the file open with it


def _failure(error: BaseException) -> dict:
    """What the launching process needs of a rank's exception: its traceback, its frames, and whether it timed out."""
    return {"traceback": traceback.format_exc(),
            "frames": [(frame.filename, frame.lineno, frame.name)
                       for frame in traceback.extract_tb(error.__traceback__)],
            "timed_out": isinstance(error, (RuntimeError, TimeoutError)) and TIMED_OUT.search(str(error)) is not None}


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
