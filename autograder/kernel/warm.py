"""A warm kernel: a sandboxed parent that has imported what every kernel imports, forking a fresh kernel per hand-in;
and the launcher of a kernel started afresh, which readies its sandbox as a forked kernel's is readied.

    python autograder/kernel/warm.py LIMITS SOCKET [MODULE]...     (started by sandbox.py --warm, in its bubblewrap sandbox)
    python autograder/kernel/warm.py --launch LIMITS -- KERNEL...   (started by sandbox.py, in its bubblewrap sandbox)

LIMITS: JSON, the sandbox's limits (memory, processes, scratch: bytes of each private folder and of a file, inodes:
files and folders in each private folder, home, capable: whether this process holds the capabilities of the sandbox's
user namespace). Either way it first caps bwrap's private folders in files (bwrap's --tmpfs takes a size alone) and
forbids new user namespaces in the sandbox's (a kernel exploit's reach stays as small as it is).

The parent imports ipykernel, torch and MODULE... once, starts no thread, touches no CUDA, runs no student code, and
listens on SOCKET. For each connection it forks a child, PID 1 of a PID namespace of its own, that forks that hand-in's
kernel and moves itself and the kernel into the kernel's cgroups before the kernel answers anything, in namespaces of
its own: mounts (a fresh /tmp, /dev/shm and home with the working folder, capped in size and files; the root and /dev
read-only; every other hand-in's runtime folder, and the parent's socket, hidden), PIDs (a fresh /proc: no process of
the parent's or another hand-in's is visible or signalled), network (loopback only, its own ports) and SysV IPC. The
kernel becomes the sandbox's user without capabilities, with the limits, and runs ipykernel; the child collects
orphans until it ends.
Forking takes milliseconds where a fresh interpreter takes seconds to import torch (FACTS.md); a child that ends,
however it ends, leaves the parent as it was, because the parent never runs what a child runs.

The protocol, one JSON line each way: the grader sends its order (order["setup"]: the set-up of its checks, which the
kernel runs as it starts, `set_up`) with descriptors (SCM_RIGHTS: the kernel's stdout and stderr, the cgroup.procs
files of its cgroups (order["cgroups"] of them), then the files beside the notebook); the parent answers
{"started": pid}, then {"exit": code} when the kernel ended (128 + N for a signal, as bwrap reports it) and every
process of its namespace is gone. The grader may send {"count": true, "uncounted": [PREFIX...]} (answer
{"count": n}: the processes running beside the kernel, but those whose command line starts with a PREFIX) and
{"kill": true}; closing the connection kills the kernel too.

Run as a script (not -m), like sandbox.py: nothing of the grader is imported. Linux only.
"""

import ctypes
import fcntl
import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import time
import types

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWIPC = 0x20000, 0x20000000, 0x40000000, 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 4, 24, 38, 47
UID = 1000  # the sandbox's user, as sandbox.py makes it
# What ipykernel imports while it starts a kernel (its debugger loads debugpy: 0.1 s; IPython's history, sqlite3; its
# event loop, tornado's asyncio). Not matplotlib_inline's backend: imported where there is no IPython shell yet, it
# would not hook itself into the kernel's.
KERNEL_MODULES = ("ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell", "ipykernel.debugger",
                  "IPython.core.completerlib", "IPython.core.debugger", "IPython.core.oinspect",
                  "IPython.extensions.storemagic", "sqlite3", "tornado.platform.asyncio")
PROC_COVERED = ("sys", "sysrq-trigger", "irq", "bus")  # read-only in a fresh /proc, as bwrap makes its own
# A hand-in's runtime root holds only the folders above its runtime folder's mount point
RUNTIME_ROOT = "size=1m,nr_inodes=8,mode=0755"


def check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def mount(source, target: str, kind, flags: int, data: str | None = None) -> None:
    encode = (lambda s: s.encode() if s else None)
    check(libc.mount(encode(source), target.encode(), encode(kind), flags, encode(data)), f"mount {target}")


def loopback_up() -> None:
    """A new network namespace has its loopback interface down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", 0x1 | 0x8 | 0x40))  # SIOCSIFFLAGS: UP, LOOPBACK, RUNNING


def bound_below(folders: tuple[str, ...], skip: str) -> list[tuple[str, int, int]]:
    """The folders bound below `folders` (a course, its Python environment under /tmp, say), outside `skip`: their
    paths, a descriptor of each and their flags (read-only, ...), shallowest first."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            path = fields[4].encode().decode("unicode_escape")  # \040 for a space
            if any(path.startswith(folder + "/") for folder in folders) and not (path + "/").startswith(skip + "/"):
                options = fields[5].split(",")
                flags = sum(flag for name, flag in (("ro", MS_RDONLY), ("nosuid", MS_NOSUID), ("nodev", MS_NODEV),
                                                    ("noexec", MS_NOEXEC)) if name in options)
                found.append((path, flags))
    return [(path, os.open(path, os.O_PATH), flags) for path, flags in sorted(found, key=lambda p: p[0].count("/"))]


def scratch(order: dict) -> tuple[str, ...]:
    """The private folders: /tmp, /dev/shm and the home (which holds the working folder)."""
    return ("/tmp", "/dev/shm", order["home"])


def scratch_options(order: dict) -> str:
    """A private folder's tmpfs options: its size, and its number of files and folders, each of which costs the
    machine about 1 kB of kernel memory that no size counts (a tmpfs's default allows half the machine's pages)."""
    return f"size={order['scratch']},nr_inodes={order['inodes']}"


def cap_scratch(order: dict) -> None:
    """bwrap's private folders, mounted with a size alone, capped in files too."""
    for path in scratch(order):
        mount(None, path, None, MS_REMOUNT | MS_NOSUID | MS_NODEV, scratch_options(order))


def no_user_namespaces() -> None:
    """No process of the sandbox's user namespace, which every kernel of it is in, may make another (what bwrap's
    --disable-userns does in a namespace bwrap made): a kernel exploit's reach stays as small as it is. Where this
    /proc does not let it (a bubblewrap that covers /proc/sys), said on stderr: the kernel's log."""
    try:
        with open("/proc/sys/user/max_user_namespaces", "w") as f:
            f.write("0")
    except OSError as error:
        print(f"autograder: kernels may make user namespaces here ({error})", file=sys.stderr, flush=True)


def read_only_root() -> None:
    """The root and /dev read-only: bwrap's tmpfs, uncapped, are writable by an ordinary grader's sandbox user."""
    for path in ("/", "/dev"):
        mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)


def private_folders(order: dict, files: list[int]) -> None:
    """This hand-in's mounts: fresh scratch folders, its runtime folder alone, read-only root and /dev."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mine = os.open(order["runtime"], os.O_RDONLY | os.O_DIRECTORY)  # before a fresh /tmp may hide it
    below = bound_below(scratch(order), order["runtime_root"])
    for path in scratch(order):
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"{scratch_options(order)},mode=1777")
    for path, fd, flags in below:  # bound again where the fresh folders hid them, as they were
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND)
        if flags:
            mount(None, path, None, MS_REMOUNT | MS_BIND | flags)
        os.close(fd)
    work = order["work"]
    os.makedirs(work, mode=0o777, exist_ok=True)
    os.chmod(work, 0o777)
    for relative, fd in zip(order["files"], files):  # the files nbgrader put beside the notebook
        path = os.path.normpath(os.path.join(work, relative))
        if not path.startswith(work + "/"):
            continue
        os.makedirs(os.path.dirname(path), mode=0o777, exist_ok=True)
        with open(path, "wb") as target:  # the grader has checked the sizes; the limit on files holds besides
            while chunk := os.read(fd, 1 << 20):
                target.write(chunk)
        os.chmod(path, 0o666)
    # the runtime root holds every hand-in's sockets and the parent's: only this hand-in's own stays visible
    os.makedirs(order["runtime_root"], exist_ok=True)
    mount("tmpfs", order["runtime_root"], "tmpfs", MS_NOSUID | MS_NODEV, RUNTIME_ROOT)
    os.makedirs(order["runtime"], exist_ok=True)
    mount(f"/proc/self/fd/{mine}", order["runtime"], None, MS_BIND)
    os.close(mine)
    read_only_root()


def fresh_proc() -> None:
    """A /proc of this PID namespace, its writable corners read-only."""
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in PROC_COVERED:
        path = f"/proc/{name}"
        if os.path.exists(path):
            mount(path, path, None, MS_BIND | MS_REC)
            mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def become_student(order: dict) -> None:
    """The sandbox's user, with no capability left and none to gain, and the limits."""
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    try:
        os.setgroups([])
    except PermissionError:  # a grader that is not root: its namespace maps one user and denies setgroups
        pass
    os.setresgid(UID, UID, UID)
    os.setresuid(UID, UID, UID)
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    check(libc.capset(header, bytes(24)), "capset")  # none effective, permitted or inheritable
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own /proc files readable to itself again
    for limit, value in ((resource.RLIMIT_DATA, order["memory"]), (resource.RLIMIT_NPROC, order["processes"]),
                         (resource.RLIMIT_FSIZE, order["scratch"]), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))


def run_kernel(order: dict, stdout: int, stderr: int, joined: int) -> None:
    """Become the kernel: as `python -m ipykernel_launcher -f CONNECTION_FILE` would, started in the working folder;
    answering nothing until `joined` (a pipe from the namespace's PID 1) says it is in its cgroups."""
    os.setsid()
    null = os.open("/dev/null", os.O_RDONLY)
    for fd, target in ((null, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
    os.closerange(3, joined)
    os.closerange(joined + 1, 1 << 16)
    become_student(order)
    os.chdir(order["work"])
    os.environ.clear()
    os.environ.update(order["env"])
    import random
    random.seed()  # a fresh interpreter's generators differ in each kernel; inherited ones would not
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    del sys.path[0]  # this script's folder
    sys.argv = ["ipykernel_launcher", *order["argv"]]  # -f CONNECTION_FILE and nbclient's own (an in-memory history)
    from ipykernel import ipkernel, kernelapp
    app = kernelapp.IPKernelApp.instance()  # as kernelapp.launch_new_instance() does, with one step between
    ipkernel.sys = ListedModules(sys, LISTED)
    try:
        app.initialize()
    finally:
        ipkernel.sys = sys
    if "ipywidgets" in sys.modules:  # the parent imported it before there was a kernel to register its comm targets with
        sys.modules["ipywidgets"].register_comm_target()
    if order.get("setup"):
        set_up(app.shell, order["setup"])
    if os.read(joined, 1) != b"1":  # PID 1 could not move it into its cgroups, and is gone: so is the namespace
        os._exit(1)
    os.close(joined)
    app.start()


def set_up(shell, setup: dict) -> None:
    """The grader's set-up of its checks (integrity.setup_parts: in_kernel/start.py's code, the check's, the modules to
    import), run before the kernel answers anything, as its set-up cell runs in a kernel started afresh: no cell for
    IPython to read twice, store and answer, and the code as the parent compiled it before it forked (`compile_once`: 3
    ms a kernel). Where it fails, the kernel starts without it, and the grader's first check, which finds nothing set
    up, says so."""
    try:
        namespace = {}
        exec(COMPILED[setup["start"]], namespace)
        namespace["start"](shell, COMPILED[setup["check"]], setup["modules"])
    except BaseException as error:  # on the kernel's stderr: the grading's log
        os.write(2, f"autograder warm kernel: the checks' set-up failed: {type(error).__name__}: {error}\n".encode())


COMPILED: dict = {}  # source -> code, of the grader's set-up, compiled by the parent (compile_once)


def compile_once(setup) -> None:
    """The set-up's code (an order's "setup"), compiled by the parent before it forks the order's kernel: once for
    every kernel of the batch. Code that does not compile is left out: the kernel's set-up then says so."""
    for part in ("start", "check"):
        source = setup.get(part) if isinstance(setup, dict) else None
        if isinstance(source, str) and source not in COMPILED:
            try:
                COMPILED[source] = compile(source, "<autograder>", "exec")
            except (SyntaxError, ValueError):
                pass


class ListedModules:
    """`sys` as ipykernel's kernel module reads it while the kernel is made, its `modules` those the parent loaded, as
    the parent listed them. IPythonKernel lists every loaded module's file (for its debugger, which a grading never
    starts): in a forked kernel, touching 2,400 modules and their files' names copies 1,600 pages the parent shares,
    7 ms a kernel. The parent's list, made before it forks, is in pages of its own. (Modules a kernel loads before it
    is made are not in it: none that a debugger would step over.)"""

    def __init__(self, real, modules: dict):
        self.real, self.modules = real, modules

    def __getattr__(self, name):
        return getattr(self.real, name)


LISTED: dict = {}  # the parent's modules with a file, as ListedModules shows them (filled before the first fork)


def listed_modules() -> dict:
    """The loaded modules that have a file, each as a stand-in holding a copy of its file's name: made together, they
    lie side by side in a few pages."""
    files = {name: getattr(module, "__file__", None) for name, module in list(sys.modules.items())}
    return {name: types.SimpleNamespace(__file__=file.encode().decode()) for name, file in files.items()
            if file and isinstance(file, str)}


def code_of(status: int) -> int:
    """An exit status as bwrap reports it: the exit code, or 128 + N for signal N."""
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def init(kernel: int) -> int:
    """PID 1 of the hand-in's namespace: collect every orphan; end, with the kernel's status, when the kernel ends
    (which ends every process left in the namespace)."""
    while True:
        pid, status = os.wait()
        if pid == kernel:
            return code_of(status)


def join_cgroups(fds: list[int], pids: list[int]) -> None:
    """The processes `pids` (0: this one) into the kernel's cgroups, through their cgroup.procs files as the grader
    opened them (with its permission, which this process need not have); then they are closed."""
    for fd in fds:
        for pid in pids:
            os.write(fd, str(pid).encode())
        os.close(fd)


def child(order: dict, fds: list[int]) -> int:
    """The hand-in's side of a fork, PID 1 of a PID namespace of its own (the parent made it for this fork): its other
    namespaces and folders, then the kernel, which it moves with itself into the kernel's cgroups, and whose end it
    waits for (`init`)."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the warm parent gone, so is the namespace
    cgroups = order.get("cgroups", 0)
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC), "unshare")
    loopback_up()
    private_folders(order, fds[2 + cgroups:])
    fresh_proc()
    joined, tell = os.pipe()
    kernel = os.fork()
    if kernel == 0:
        try:
            os.close(tell)
            run_kernel(order, fds[0], fds[1], joined)
        except BaseException as error:  # on the kernel's stderr: the grading's log
            import traceback
            os.write(2, f"autograder warm kernel: {type(error).__name__}: {error}\n{traceback.format_exc()}".encode())
        os._exit(1)
    # Into the kernel's cgroups, this process and the kernel, while the kernel starts (it answers nothing before it
    # is told, run_kernel): cgroup v1 makes each move wait for an RCU grace period, 5-14 ms. Should a move fail, this
    # process ends, and the namespace with it.
    join_cgroups(fds[2:2 + cgroups], [0, kernel])
    os.write(tell, b"1")
    os.closerange(3, 1 << 16)  # PID 1 holds nothing of the hand-in's
    return init(kernel)


class Parent:
    """The warm parent: one connection per hand-in, one forked child per connection."""

    def __init__(self, path: str):
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(path)
        self.server.listen(16)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.server, selectors.EVENT_READ)
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector.register(wake_read, selectors.EVENT_READ)
        self.children: dict[int, socket.socket] = {}  # pid -> its grader's connection
        self.buffers: dict[socket.socket, bytes] = {}
        self.killed: set[int] = set()
        self.own_pids = os.open("/proc/self/ns/pid", os.O_RDONLY)  # this process's PID namespace (accept)

    def serve(self) -> None:
        print("ready", flush=True)
        while True:
            for key, _ in self.selector.select():
                if key.fileobj is self.server:
                    self.accept()
                elif isinstance(key.fileobj, int):
                    os.read(key.fileobj, 512)
                    self.reap()
                else:
                    self.read(key.fileobj)

    def accept(self) -> None:
        connection, _ = self.server.accept()
        self.wait_for_killed()
        data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 256)
        try:
            order = json.loads(data.decode())
        except ValueError:
            connection.close()
            return
        compile_once(order.get("setup"))
        # the child is PID 1 of a PID namespace of its own: killing it ends every process of the namespace, and its
        # end is reported once they are gone (a fork fewer than a child forking its PID 1: 6-10 ms with torch loaded).
        # A process may make one such namespace for its children: this one's own is taken back after each fork.
        check(libc.unshare(CLONE_NEWPID), "unshare")
        pid = -1
        try:
            pid = os.fork()
        finally:
            if pid != 0:  # in the parent, the fork made or not
                check(libc.setns(self.own_pids, CLONE_NEWPID), "setns")
        if pid == 0:
            code = 1
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                self.server.close()
                connection.close()
                code = child(order, fds)
            except BaseException as error:  # told to the kernel's stderr, where the grader's log has it
                import traceback
                os.write(fds[1] if len(fds) > 1 else 2, f"autograder warm kernel: {error}\n{traceback.format_exc()}".encode())
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        self.children[pid] = connection
        self.buffers[connection] = b""
        self.selector.register(connection, selectors.EVENT_READ)
        self.send(connection, {"started": pid})

    def read(self, connection: socket.socket) -> None:
        pid = next((p for p, c in self.children.items() if c is connection), None)
        try:
            chunk = connection.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:  # the grader is gone: so is its kernel
            self.forget(connection)
            if pid is not None:
                self.kill(pid)
            return
        self.buffers[connection] += chunk
        while b"\n" in self.buffers[connection]:
            line, self.buffers[connection] = self.buffers[connection].split(b"\n", 1)
            ask = json.loads(line)
            if pid is not None and ask.get("kill"):
                self.kill(pid)
            elif pid is not None and ask.get("count"):  # below PID 1, besides the kernel and what the grader does not count
                uncounted = tuple(ask.get("uncounted", ()))
                left = [p for p in descendants(pid) if not started_as(p, uncounted)]
                self.send(connection, {"count": max(0, len(left) - 1)})

    def kill(self, pid: int) -> None:
        """End a child's namespace by killing the child, its PID 1: the kernel then kills and waits for every process
        in it, so the child ends (and is reported) only when the namespace is empty."""
        self.killed.add(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait_for_killed(self, limit: float = 30.0) -> None:
        """Before a fork: wait until the namespaces told to end are gone. Their processes (a fork bomb's thousands)
        count against the process limit of the sandbox's user, which the next kernel, as that user, shares."""
        deadline = time.monotonic() + limit
        while self.killed & self.children.keys() and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.01)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.killed.discard(pid)
            connection = self.children.pop(pid, None)
            if connection is not None and connection in self.buffers:
                self.send(connection, {"exit": code_of(status)})

    def send(self, connection: socket.socket, message: dict) -> None:
        try:
            connection.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            self.forget(connection)

    def forget(self, connection: socket.socket) -> None:
        if connection in self.buffers:
            del self.buffers[connection]
            self.selector.unregister(connection)
            connection.close()


def started_as(pid: int, prefixes: tuple[str, ...]) -> bool:
    """Whether an argument of the process's command line starts with one of `prefixes`."""
    import psutil
    try:
        return bool(prefixes) and any(arg.startswith(prefixes) for arg in psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def descendants(pid: int) -> list[int]:
    """Every process below `pid` still running (this parent sees into its children's namespaces)."""
    import psutil
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    except psutil.Error:
        return []


def warm_caches() -> None:
    """Fill once the caches a kernel fills on its first error (most of a second with torch loaded): `inspect`'s map of
    every loaded module's file, and what IPython's tracebacks load to show one."""
    import inspect
    try:
        raise RuntimeError
    except RuntimeError as error:
        inspect.getmodule(error.__traceback__.tb_frame)
        try:
            from IPython.core.ultratb import AutoFormattedTB
            for mode in ("Plain", "Context"):  # the grader's kernels' mode (execute.py), and IPython's default
                AutoFormattedTB(mode=mode).structured_traceback(type(error), error, error.__traceback__)
        except Exception:  # a cache not filled costs time, never a grade
            pass


def launch(order: dict, command: list[str]) -> None:
    """A kernel started afresh, its sandbox readied as a forked kernel's: private folders capped in size and files,
    the root and /dev read-only, the sandbox's user without capabilities and with the limits; then the kernel.
    Without the capabilities (sandbox.py --plain), the limits alone."""
    if order["capable"]:
        cap_scratch(order)
        no_user_namespaces()
        read_only_root()
    become_student(order)
    os.execvp(command[0], command)


def main() -> None:
    if sys.argv[1] == "--launch":
        launch(json.loads(sys.argv[2]), sys.argv[sys.argv.index("--") + 1:])
    order, path, modules = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3:]
    cap_scratch(order)  # its own private folders, which no kernel sees (each child mounts its own)
    no_user_namespaces()
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no kernel may read this process's memory through /proc
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")  # as ipykernel sets it
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # ipykernel's debugger warns of frozen modules
    import gc
    import importlib
    for name in [*KERNEL_MODULES, "torch", "psutil", *modules]:
        try:
            importlib.import_module(name)
        except ImportError as error:  # a kernel that needs it fails as a fresh one would
            print(f"autograder warm kernel: {name} not imported ({error})", file=sys.stderr, flush=True)
    warm_caches()
    LISTED.update(listed_modules())
    # What was imported is never garbage: out of the collector's sight, a kernel's collections skip its millions of
    # objects (with torch loaded, a full one took 0.1 s) and leave the pages it shares with this parent unwritten.
    gc.freeze()
    Parent(path).serve()


if __name__ == "__main__":
    main()
