"""The kernel of one grading: started through sandbox.py, reached over ipc sockets in a runtime folder of its own."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from functools import cache
from pathlib import Path
from queue import Empty

import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from traitlets import Bool, Float, Integer, List, Unicode, default

from . import limits, processes, sandbox
from .relay import Relay

# What every kernel of the course imports: a warm parent imports it once (ipykernel and torch always, warm.py).
# torch.distributed.tensor, with the sympy it loads: 0.8 s, which torch.testing.assert_close and gradcheck pay on their
# first call in every kernel (the grader's first check calls them); torch._dynamo, which the first Adam or AdamW made
# in a kernel imports (0.46 s); ipywidgets (0.36 s: 04's setup imports it). pyplot picks its backend when first used.
WARM_MODULES = ("numpy", "torch._dynamo", "ipywidgets", "torch.distributed", "torch.distributed.tensor",
                "torch.distributed.fsdp", "torch.distributed.checkpoint", "torch.nn.parallel", "torch.profiler",
                "torch.utils.data", "matplotlib", "matplotlib.font_manager", "matplotlib.pyplot", "torchcourse.check",
                "torchcourse.data", "torchcourse.device", "torchcourse.launch", "torchcourse.seed",
                "torchcourse.testing", "torchcourse.timing", "torchcourse.values")
SANDBOX = Path(__file__).with_name("sandbox.py")
# What the kernel may know of the grader's environment; everything else (passwords, tokens, paths) stays out.
PASSED_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NBGRADER_EXECUTION", "CUDA_VISIBLE_DEVICES")
# What the kernel is told besides: ipykernel takes a kernel without a parent for one started by hand (`ipython kernel`)
# and prints "Ctrl-C will not work" into every log. In the sandbox its parent is PID 1 of its namespace, which ipykernel
# knows never goes away: it does not poll it (nor did it before, told nothing). The grader interrupts it by message.
KERNEL_ENV = ("JPY_PARENT_PID=1",)
UNFENCED_WARNING = ("UNFENCED: this kernel runs without the sandbox (--unfenced); student code can read, change and "
                    "signal everything the grader's user can")
# in a kernel's cgroup besides the kernel's own: bwrap's two, or a warm kernel's PID 1 (warm.py)
SANDBOX_OWN_PROCESSES, WARM_OWN_PROCESSES = 2, 1


class SandboxUnavailable(RuntimeError):
    """bwrap cannot start a sandbox on this machine; the message says why and what to do."""


@cache
def sandbox_check(bwrap: str = "bwrap") -> tuple[str | None, str | None]:
    """Why a sandbox cannot start here, and why one started afresh gets bwrap's own user namespace (sandbox.py --plain:
    its private folders capped in size, not in files); each None where it does not. Asked once per process."""
    result = subprocess.run([sys.executable, str(SANDBOX), "--check", "--bwrap", bwrap], capture_output=True, text=True)
    said = result.stdout.strip()
    return ((result.stderr.strip() or f"exit code {result.returncode}") if result.returncode else None,
            said.removeprefix("plain: ") if said.startswith("plain: ") else None)


def sandbox_problem(bwrap: str = "bwrap") -> str | None:
    """Why a sandbox cannot start here, or None."""
    return sandbox_check(bwrap)[0]


def require_sandbox(bwrap: str = "bwrap") -> None:
    """Raise SandboxUnavailable, with what the instructor can do, where bwrap cannot start."""
    problem = sandbox_problem(bwrap)
    if problem:
        raise SandboxUnavailable(
            f"student code cannot be sandboxed on this machine: {problem}. Install bubblewrap (Debian, Ubuntu: "
            "apt install bubblewrap), or grade without a sandbox, knowing that student code then runs with your "
            "permissions: --unfenced (make grade ARGS=--unfenced), or SandboxedKernelManager.unfenced = True")


def passed_env() -> list[str]:
    """NAME=VALUE of the kernel's environment besides the sandbox's own: the grader's that it may know, and ours."""
    return [*(f"{name}={os.environ[name]}" for name in PASSED_ENV if name in os.environ), *KERNEL_ENV]


def not_folders(paths: list[str]) -> list[str]:
    """The paths that are not folders (read_only must name folders that exist)."""
    return [p for p in paths if not os.path.isdir(p)]


def process_context() -> zmq.asyncio.Context:
    """This process's one zmq context, for its kernels' clients and managers: never terminated when a kernel ends,
    which would wait for its I/O thread to stop (about 3 ms, twice a grading); its sockets are closed as they were."""
    context = zmq.asyncio.Context.instance()  # pyzmq makes a forked process one of its own
    # a client connects before the kernel has made its sockets, and by default tries again only every 100 ms
    context.setsockopt(zmq.RECONNECT_IVL, 5)
    return context


class ReadyClient(AsyncKernelClient):
    """jupyter_client's kernel client, ready as soon as its kernel is: its own wait kept listening 0.2 s after the
    kernel's first answer (and 0.2 s more whenever IOPub had not yet joined), a third of a grading's fixed cost. The
    kernel_info reply it became ready with answers the next kernel_info request, which nbconvert's execute step makes
    first thing (a round trip less: `kernel_info`, `kept_reply`)."""

    ready_reply: dict | None = None  # the kernel_info reply the client became ready with, until it is asked for

    async def _async_wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:  # as jupyter_client's: a kernel_info reply on shell, and IOPub connected (its busy/idle arrive)
            self.kernel_info()
            try:
                reply = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply":
                try:
                    await self.iopub_channel.get_msg(timeout=0.02)
                    self._handle_kernel_info_reply(reply)
                    self.ready_reply = reply
                    break
                except Empty:
                    pass
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")
        # What is left on IOPub answers kernel_info requests (their status): the executor drops what is not its own.

    wait_for_ready = _async_wait_for_ready  # jupyter_client binds its own function to this name

    def kernel_info(self) -> str:
        """A kernel_info request's id: the one the client became ready with while its reply is kept, else a new one."""
        if self.ready_reply is not None:
            return self.ready_reply["parent_header"]["msg_id"]
        return super().kernel_info()

    def kept_reply(self, msg_id: str) -> dict | None:
        """The kept kernel_info reply (once) if it answers request `msg_id`, else None."""
        if self.ready_reply is None or self.ready_reply["parent_header"].get("msg_id") != msg_id:
            return None
        reply, self.ready_reply = self.ready_reply, None
        return reply

    def start_channels(self, *args, **kw) -> None:
        # Without the heartbeat's thread, which pings the kernel every few seconds and is joined at the end (5 ms a
        # grading): a client its manager made asks the manager whether the kernel lives (the warm parent's report).
        super().start_channels(*args, **{**kw, "hb": False})

    def _context_default(self) -> zmq.asyncio.Context:
        return process_context()


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel in a bubblewrap sandbox (see sandbox.py), with limits on memory, processes and scratch space."""

    memory_gib = Float(4.0, help="GiB of memory a kernel may use (data, not address space)").tag(config=True)
    processes = Integer(256, help="processes and threads a kernel may run at once").tag(config=True)
    scratch_mib = Integer(512, help="MiB of each private folder (home with the working folder, /tmp, /dev/shm), "
                                    "and of any one file").tag(config=True)
    scratch_inodes = Integer(10_000, help="files and folders each private folder may hold: each costs the machine "
                                          "about 1 kB of kernel memory, which no size in MiB counts").tag(config=True)
    read_only = List(Unicode(), help="folders the kernel may read, besides the Python environment; relative paths "
                                     "mean the course folder").tag(config=True)
    unfenced = Bool(False, help="start kernels without the sandbox, only with the limits: for machines where "
                                "bubblewrap cannot run; student code can then reach all the grader can").tag(config=True)
    bwrap = Unicode("bwrap", help="the bubblewrap command (Debian's package `bubblewrap`)").tag(config=True)
    fork_warm = Bool(True, help="in `make grade`, fork each hand-in's kernel from a warm parent per grading slot, "
                                "which has imported torch (milliseconds, where a fresh kernel takes seconds); False: "
                                "start each kernel afresh").tag(config=True)
    warm_modules = List(Unicode(), list(WARM_MODULES), help="what a warm parent imports besides ipykernel and torch: "
                                                             "what every kernel of the course imports").tag(config=True)
    warm = Unicode("", help="the socket of this grading slot's warm parent (warm.py), set by the grader for each "
                            "grading: the kernel is forked from it; empty: a kernel started afresh").tag(config=True)

    cgroup: limits.Cgroup | None = None  # this kernel's, where the machine offers cgroups (limits.py)
    checks_setup: dict | None = None  # the set-up of the grader's checks (integrity.setup_parts), for a forked kernel
    relay: Relay | None = None  # the kernel's own stdout and stderr, on their way to the grading's log

    @default("client_factory")
    def _ready_client(self):
        return ReadyClient

    @default("context")
    def _process_context(self):
        return process_context()

    @property
    def checks_set_up(self) -> bool:
        """Whether this kernel ran checks_setup as it started: one forked from a warm parent does (warm.set_up)."""
        return bool(self.checks_setup) and isinstance(self.provisioner, WarmProvisioner)

    @default("transport")
    def _ipc(self):
        return "ipc"  # a sandboxed kernel has no network: its sockets are files in its runtime folder

    @default("connection_file")
    def _short_connection_file(self):
        # A folder of its own (mode 0700) for the connection file and sockets (k-ipc-N)
        if self.warm:  # beside the warm parent's socket, in the folder its sandbox binds (WarmParents keeps it short)
            folder = tempfile.mkdtemp(prefix="k-", dir=os.path.join(os.path.dirname(self.warm), "kernels"))
        else:
            folder = processes.socket_folder("autograder-kernel-", below=len("k-ipc-65535"))
        return os.path.join(folder, "k.json")

    @default("ip")
    def _socket_prefix(self):
        return os.path.splitext(self.connection_file)[0] + "-ipc"

    def environment_read_only(self) -> list[str]:
        """The Python environment (its packages and interpreter) and the configured folders, which must exist.

        `make grade` hands down absolute paths (config.load); plain `nbgrader autograde` runs in the course folder."""
        folders = [os.path.abspath(p) for p in self.read_only]
        missing = not_folders(folders)
        if missing:
            raise ValueError(f"SandboxedKernelManager.read_only names {', '.join(missing)}: not a folder")
        return [sys.prefix, sys.base_prefix, sys.exec_prefix, *folders]

    def format_kernel_cmd(self, extra_arguments=None):
        if self.unfenced:
            self.log.warning(UNFENCED_WARNING)
        else:
            require_sandbox(self.bwrap)
        self.kernel_spec.interrupt_mode = "message"  # a signal would stop bwrap, not the kernel inside
        plain = not self.unfenced and sandbox_check(self.bwrap)[1] is not None
        return [*self.sandbox_command(os.path.dirname(self.connection_file)),
                *[f"--cgroup={folder}" for folder in (self.cgroup.folders() if self.cgroup else [])],
                *(["--plain"] if plain else []), "--", *super().format_kernel_cmd(extra_arguments)]

    def sandbox_command(self, runtime: str) -> list[str]:
        """sandbox.py with this manager's settings, for a kernel (or a warm parent) whose runtime folder is `runtime`."""
        return [sys.executable, str(SANDBOX), f"--bwrap={self.bwrap}", f"--runtime={runtime}",
                f"--memory={int(self.memory_gib * 2**30)}", f"--processes={self.processes}",
                f"--scratch={self.scratch_mib << 20}", f"--inodes={self.scratch_inodes}",
                *[f"--read-only={p}" for p in self.environment_read_only()],
                *[f"--env={pair}" for pair in passed_env()], *(["--unfenced"] if self.unfenced else [])]

    def limits_in_force(self) -> str:
        """What bounds this kernel, and what counts it, for the grading's log."""
        backend = limits.chosen()
        if self.cgroup is not None:
            memory = f"memory {self.memory_gib:g} GiB ({backend}, shared memory counted)"
        else:
            why = "its cgroup could not be made" if backend.version else str(backend)
            memory = f"memory {self.memory_gib:g} GiB of data alone (RLIMIT_DATA; shared memory not counted: {why})"
        processes = "cgroup pids and RLIMIT_NPROC" if self.cgroup and backend.counts("pids") else "RLIMIT_NPROC"
        if self.unfenced:
            folders = f"no private folders (unfenced), files of at most {self.scratch_mib} MiB"
        elif (plain := sandbox_check(self.bwrap)[1]) is not None and not isinstance(self.provisioner, WarmProvisioner):
            folders = f"private folders {self.scratch_mib} MiB each, files in them not capped ({plain})"
        else:
            folders = f"private folders {self.scratch_mib} MiB and {self.scratch_inodes} files each"
        return f"{memory}, processes {self.processes} ({processes}), {folders}"

    def new_cgroup(self) -> limits.Cgroup | None:
        """This kernel's cgroup (None where the machine offers none, or it could not be made: the log says so)."""
        backend = limits.chosen()
        if not backend.version:
            return None
        extra = 0 if self.unfenced else WARM_OWN_PROCESSES if isinstance(self.provisioner, WarmProvisioner) \
            else SANDBOX_OWN_PROCESSES
        try:
            return backend.create(memory=int(self.memory_gib * 2**30), processes=self.processes + extra)
        except limits.CgroupError as error:
            self.log.warning("autograder: this kernel has no cgroup: %s", error.strerror)
            return None

    def out_of_memory(self) -> bool:
        """Whether the kernel's cgroup saw a process killed for want of memory within its limit (a MemoryError is
        raised where a process asks for more than its limit of data; memory shared or held in files, the cgroup
        counts, and kills the kernel at its limit)."""
        return self.cgroup is not None and self.cgroup.out_of_memory()

    def withhold_kernel_output(self) -> None:
        """From now on the kernel's own stdout and stderr reach the log as a count of bytes alone: to be called when
        the first hidden test cell starts, after which the kernel may know hidden tests."""
        if self.relay is not None:
            self.relay.withhold()

    async def _async_pre_start_kernel(self, **kw):
        """A kernel forked from the slot's warm parent where there is one and it answers; else started afresh, saying
        why in the grading's log."""
        self.kernel_id = self.kernel_id or kw.pop("kernel_id", str(uuid.uuid4()))
        self.checks_setup = kw.pop("checks_setup", None)  # not for a kernel started afresh's Popen
        if self.provisioner is None and self.warm:
            if os.path.exists(self.warm):
                self.provisioner = WarmProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self)
            else:
                self.log.warning("autograder: this kernel starts afresh: the slot's warm parent is gone")
        self.cgroup = self.new_cgroup()
        self.log.info("autograder: limits: %s", self.limits_in_force())
        try:
            kernel_cmd, kw = await super()._async_pre_start_kernel(**kw)
        except BaseException:
            self.drop_cgroup()
            raise
        self.relay = Relay()
        return kernel_cmd, {**kw, "stdout": self.relay.write_end, "stderr": self.relay.write_end}

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        try:
            await super()._async_launch_kernel(kernel_cmd, **kw)
        except BaseException:
            self.drop_cgroup()
            raise
        finally:
            self.relay.given()  # the kernel has its copy (or none): its output ends when it does

    def drop_cgroup(self) -> None:
        """The kernel's cgroup removed (now, or once its processes are gone), its peak memory said in the log."""
        if self.cgroup is not None and not self.cgroup.removed:
            peak = self.cgroup.peak()
            if peak is not None:
                self.log.info("autograder: the kernel's memory at its peak: %.0f MiB (its cgroup's count)",
                              peak / 2**20)
            self.cgroup.remove()

    def processes_inside(self) -> int:
        """How many processes run in the sandbox besides the kernel (and bwrap's own init), torchcourse.launch's fork
        server and resource tracker not counted (beside a GPU, and in 06's lesson on start methods)."""
        process = getattr(self.provisioner, "process", None)
        if process is None or process.poll() is not None:
            return 0
        if isinstance(process, WarmKernel):
            return process.count(uncounted=processes.LAUNCH_HELPERS)
        below = processes.running(processes.descendants(process.pid))
        helpers = processes.launch_helpers(below)  # torchcourse.launch's, beside a GPU
        return max(0, len(below) - len(helpers) - (1 if self.unfenced else 2))

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        # jupyter_client looks every 100 ms whether a kernel told to stop has: a killed kernel is gone in milliseconds
        await super()._async_wait(pollinterval=min(pollinterval, 0.005))

    async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
        # jupyter_client's, without the 10 ms its decorator (in_pending_state) sleeps after it "so that tests can
        # capture the state": a grading shuts its kernel down once, and waits for nothing after it
        await AsyncKernelManager._async_shutdown_kernel.__wrapped__(self, now=now, restart=restart)

    shutdown_kernel = _async_shutdown_kernel

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart:
            shutil.rmtree(os.path.dirname(self.connection_file), ignore_errors=True)
        self.drop_cgroup()  # a restarted kernel gets a new one

    cleanup_resources = _async_cleanup_resources


class WarmKernel:
    """The kernel forked by a warm parent (warm.py), as jupyter_client's provisioner sees a process (Popen's methods):
    one connection to the parent, which reports when the kernel ends and kills it when told, or when we close."""

    stdin = stdout = stderr = None

    def __init__(self, path: str, order: dict, fds: list[int]):
        self.connection = socket.socket(socket.AF_UNIX)
        self.connection.connect(path)
        socket.send_fds(self.connection, [json.dumps(order).encode() + b"\n"], fds)
        self.buffer = b""
        self.returncode: int | None = None
        self.pid = self.answer("started")
        if self.pid is None:
            raise ConnectionError("the warm parent did not fork a kernel")

    def answer(self, key: str, block: bool = True):
        """The parent's next answer to `key` (an exit report read on the way is kept); None: nothing yet, or the
        parent is gone (and its children with it)."""
        while True:
            if b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                message = json.loads(line)
                if "exit" in message:
                    self.returncode = message["exit"]
                if key in message:
                    return message[key]
                continue
            try:
                chunk = self.connection.recv(65536, 0 if block else socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            except OSError:
                chunk = b""
            if not chunk:
                if self.returncode is None:
                    self.returncode = 128 + 9
                return None
            self.buffer += chunk

    def poll(self) -> int | None:
        if self.returncode is None:
            self.answer("exit", block=False)
        return self.returncode

    def wait(self, timeout=None) -> int:
        while self.returncode is None:
            self.answer("exit")
        return self.returncode

    def count(self, uncounted: tuple[str, ...] = ()) -> int:
        """The processes running beside the kernel, those whose command line starts with one of `uncounted` left out."""
        try:
            self.connection.sendall(json.dumps({"count": True, "uncounted": list(uncounted)}).encode() + b"\n")
            return self.answer("count") or 0
        except OSError:
            return 0

    def send_signal(self, signum: int) -> None:
        self.kill()  # an interrupt goes as a message (interrupt_mode); any signal we send means: stop it

    def kill(self) -> None:
        try:
            self.connection.sendall(b'{"kill": true}\n')
        except OSError:
            pass

    terminate = kill


class WarmProvisioner(LocalProvisioner):
    """Launch a kernel by asking the slot's warm parent for a fork, with this grading's files, limits and output."""

    async def launch_kernel(self, cmd: list[str], **kwargs) -> dict:
        km = self.parent
        runtime = os.path.dirname(km.connection_file)
        if os.geteuid() == 0:
            sandbox.hand_over(runtime)
        _, beside = sandbox.files_beside(kwargs.get("cwd"))
        files, fds = [name for name, _ in beside], [fd for _, fd in beside]
        arguments = cmd[cmd.index("ipykernel_launcher") + 1:] if "ipykernel_launcher" in cmd else ["-f", km.connection_file]
        cgroups = [os.open(path, os.O_WRONLY) for path in (km.cgroup.procs if km.cgroup else [])]
        order = {"connection_file": km.connection_file, "argv": arguments, "runtime": os.path.realpath(runtime),
                 "runtime_root": os.path.realpath(os.path.dirname(km.warm)), "home": sandbox.HOME,
                 "work": sandbox.WORK, "files": files, "memory": int(km.memory_gib * 2**30),
                 "processes": km.processes, "scratch": km.scratch_mib << 20, "inodes": km.scratch_inodes,
                 "cgroups": len(cgroups), "setup": km.checks_setup,
                 "env": sandbox.environment(passed_env(), sandbox.HOME, "/tmp")}
        try:
            if len(fds) > 250:  # what one message may carry
                raise ValueError("more than 250 files beside the notebook")
            self.process = WarmKernel(km.warm, order, [kwargs["stdout"], kwargs["stderr"], *cgroups, *fds])
        finally:
            for fd in cgroups + fds:
                os.close(fd)
        self.pid, self.pgid = self.process.pid, None
        self.cwd = kwargs.get("cwd")
        km.log.info("autograder: kernel forked from the slot's warm parent")
        return self.connection_info

    async def kill(self, restart: bool = False) -> None:
        """Tell the parent to end the kernel's namespace, and go on: its teardown (about 50 ms: the kernel's memory
        given back) need not hold up the grading, whose outputs are in, and the parent waits for it before it forks
        the slot's next kernel (warm.py's wait_for_killed)."""
        if self.process is not None:
            self.process.kill()
            self.process = None  # jupyter_client then has no kernel left to wait for


class WarmUnavailable(RuntimeError):
    """No warm parent here; the message says why (kernels then start afresh)."""


class WarmParent:
    """One grading slot's warm parent (warm.py, in the sandbox sandbox.py --warm makes), in `folder` with its socket."""

    def __init__(self, folder: Path, config):
        km = SandboxedKernelManager(config=config)
        if not km.fork_warm:
            raise WarmUnavailable("SandboxedKernelManager.fork_warm is False")
        if km.unfenced:
            raise WarmUnavailable("kernels run unfenced")
        if any(d.startswith("nvidia") for d in os.listdir("/dev")):
            raise WarmUnavailable("this machine has an NVIDIA GPU: a kernel forked from a parent cannot be trusted to "
                                  "use CUDA, so each starts afresh")
        require_sandbox(km.bwrap)
        self.folder = Path(folder)
        (self.folder / "kernels").mkdir(parents=True)
        self.socket = str(self.folder / "socket")
        self.log = self.folder / "parent.log"
        command = [*km.sandbox_command(str(self.folder)), "--warm", self.socket, "--", *km.warm_modules]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)

    def ready(self) -> "WarmParent":
        """Wait until it listens (it imports torch: seconds); WarmUnavailable saying why it cannot."""
        if self.process.stdout.readline().strip() != b"ready":
            self.process.wait()
            said = self.log.read_text(errors="replace").strip().splitlines()
            raise WarmUnavailable(f"the warm parent did not start ({said[-1] if said else f'exit code {self.process.returncode}'})")
        return self

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        processes.kill(processes.descendants(self.process.pid))  # the sandbox bwrap made, the parent and its kernels
        self.process.kill()  # bwrap, collected through Popen, which then knows it ended (killed and collected by PID,
        self.process.wait()  # a later poll() could collect a new child given the same PID)


class WarmParents:
    """`count` grading slots' warm parents, started together in the background (`ready` waits for them). A parent per
    slot, though one could fork for all: each parent's sandbox is a user namespace of its own, where the process limit
    counts its kernels only, so that a fork bomb in one slot leaves a kernel graded beside it its whole limit. Where
    there can be none, each kernel starts afresh, which is said once on stderr."""

    def __init__(self, count: int, config):
        self.slots: list[WarmParent | None] = [None] * count
        # the deepest socket below: slot-K/kernels/k-XXXXXXXX/k-ipc-NNNNN
        self.folder = Path(processes.socket_folder("autograder-slots-", below=len("slot-99/kernels/k-12345678/k-ipc-65535")))
        try:
            self.slots = [WarmParent(self.folder / f"slot-{k}", config) for k in range(count)]
        except WarmUnavailable as why:
            self.unavailable(why)

    def ready(self) -> "WarmParents":
        try:
            for slot in self.slots:
                if slot is not None:
                    slot.ready()
        except WarmUnavailable as why:
            self.unavailable(why)
        return self

    def unavailable(self, why) -> None:
        for slot in self.slots:
            if slot is not None:
                slot.stop()
        self.slots = [None] * len(self.slots)
        print(f"kernels start afresh for each hand-in: {why}", file=sys.stderr)

    def socket_of(self, slot: int) -> str:
        """The socket a grading in `slot` forks its kernel through ("": its kernel starts afresh)."""
        parent = self.slots[slot]
        return parent.socket if parent is not None and parent.alive() else ""

    def pids(self) -> set[int]:
        return {slot.process.pid for slot in self.slots if slot is not None}

    def close(self) -> None:
        for slot in self.slots:
            if slot is not None:
                slot.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
