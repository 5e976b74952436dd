"""Limits the operating system counts: a cgroup per kernel, bounding its memory (shared memory, files in its private
folders and the kernel memory they cost included) and its processes, where this machine lets the grader make one.

    backend = limits.chosen()                     # once per process: the batch's, inherited by its gradings
    group = backend.create(memory=BYTES, processes=N)           # CgroupError if it cannot be made
    ... the kernel's processes join it through group.procs before any student code runs (sandbox.py, warm.py) ...
    group.out_of_memory(), group.remove()

The backend: cgroup v2 with the memory controller, in the grader's own cgroup, where this user may write it (delegated
to an ordinary user, e.g. by `systemd-run --user --scope -p Delegate=yes`; or as root); else cgroup v1's memory (and
pids) hierarchies, writable by root; else none, saying why. A kernel's cgroup is made inside the grader's own, so that
it stays within whatever bounds the grader (a Slurm job's cgroup, a container's).
"""

import os
import re
import time
from dataclasses import dataclass, field
from functools import cache
from multiprocessing.util import Finalize
from pathlib import Path

PREFIX = "autograder-kernel-"  # a kernel's cgroup: PREFIX, the PID of the process that made it, a random part
MADE_BY = re.compile(rf"{PREFIX}(\d+)-")
# cgroup v2: a cgroup with controllers for its children holds no process itself, so the grader's own processes move
# into this child of it first
LEAF = "autograder-processes"
REMOVAL_WAIT = 5.0  # seconds a process, as it ends, waits for its kernels' cgroups to empty (their teardown: ~50 ms)


class CgroupError(OSError):
    """A kernel's cgroup could not be made."""


@dataclass(frozen=True)
class Mount:
    point: Path
    root: str  # the cgroup mounted there
    kind: str  # "cgroup" (v1) or "cgroup2"
    options: frozenset[str]  # v1: its controllers


@dataclass(frozen=True)
class Backend:
    """Where kernels' cgroups are made: controller -> the cgroup they go under. No parents: none (`why` says why)."""
    version: int = 0
    parents: dict[str, Path] = field(default_factory=dict)
    delegated: bool = False
    why: str = ""

    def __str__(self) -> str:
        if not self.version:
            return f"no cgroup ({self.why})"
        return f"cgroup v{self.version}{', delegated' if self.delegated else ''}"

    def counts(self, controller: str) -> bool:
        return controller in self.parents

    def create(self, memory: int, processes: int) -> "Cgroup":
        """A cgroup for one kernel: at most `memory` bytes (swap none, where it can say so), `processes` tasks."""
        sweep(self.parents.values())
        name = f"{PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
        group = Cgroup(self.version, {c: parent / name for c, parent in self.parents.items()})
        try:
            for path in group.folders():
                path.mkdir()
            memory_folder, pids_folder = group.controllers["memory"], group.controllers.get("pids")
            if self.version == 1:
                settings = [(memory_folder / "memory.limit_in_bytes", memory, True),
                            (memory_folder / "memory.memsw.limit_in_bytes", memory, False)]  # after: memsw >= limit
            else:
                settings = [(memory_folder / "memory.max", memory, True), (memory_folder / "memory.swap.max", 0, False),
                            (memory_folder / "memory.oom.group", 1, False)]  # out of memory: the whole kernel ends
            settings += [(pids_folder / "pids.max", processes, True)] if pids_folder else []
            for path, value, required in settings:
                if required or offered(path):
                    write(path, value)
        except OSError as error:
            group.remove()
            raise CgroupError(error.errno, f"cannot make the kernel's cgroup {name} ({error.strerror})") from None
        return group


@dataclass
class Cgroup:
    """One kernel's cgroup: a folder per hierarchy (v1: memory and pids; v2: one)."""
    version: int
    controllers: dict[str, Path]
    oom_kills: int = 0  # as last read: kept once the cgroup is gone
    removed: bool = False  # remove() was called: it is gone, or goes when its processes have

    def folders(self) -> list[Path]:
        return list(dict.fromkeys(self.controllers.values()))

    @property
    def procs(self) -> list[Path]:
        """The files a process joins it through, writing "0" (itself) to each, with the grader's permission."""
        return [path / "cgroup.procs" for path in self.folders()]

    def read(self, v1: str, v2: str) -> str:
        try:
            return (self.controllers["memory"] / (v1 if self.version == 1 else v2)).read_text()
        except OSError:
            return ""

    def out_of_memory(self) -> bool:
        """Whether Linux's OOM killer ended a process of it, for want of memory within its limit."""
        found = re.search(r"^oom_kill (\d+)", self.read("memory.oom_control", "memory.events"), re.M)
        self.oom_kills = int(found.group(1)) if found else self.oom_kills
        return self.oom_kills > 0

    def peak(self) -> int | None:
        """The most memory it held at once, in bytes (None where the kernel does not say)."""
        text = self.read("memory.max_usage_in_bytes", "memory.peak").strip()
        return int(text) if text.isdigit() else None

    def try_remove(self) -> bool:
        """Remove it if no process is left in it; whether it is gone."""
        for path in self.folders():
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:  # EBUSY: processes are still in it, ending
                return False
        return True

    def remove(self) -> None:
        """Remove it now if its processes are gone; else later (the next kernel's, or as this process ends), without
        waiting for the ended kernel's teardown."""
        self.out_of_memory()
        self.removed = True
        if not self.try_remove():
            remove_later(self)


def offered(knob: Path) -> bool:
    """Whether Linux offers this cgroup file (swap's, say, only where swap is accounted): a new cgroup has it where its
    parent, the grader's own cgroup, has it."""
    return knob.exists() or (knob.parent.parent / knob.name).exists()


def unescape(text: str) -> str:
    """A path as /proc/self/mountinfo writes it (octal escapes: \\040 for a space)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def mounts(mountinfo: str) -> list[Mount]:
    """The cgroup hierarchies mounted, from /proc/self/mountinfo."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        dash = fields.index("-")
        if fields[dash + 1] in ("cgroup", "cgroup2"):
            found.append(Mount(Path(unescape(fields[4])), unescape(fields[3]), fields[dash + 1],
                               frozenset(fields[dash + 3].split(","))))
    return found


def own_cgroups(text: str) -> dict[str, str]:
    """This process's cgroups, from /proc/self/cgroup: controller -> path, "" -> its cgroup v2 path."""
    paths = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def folder_of(mount: Mount, path: str) -> Path | None:
    """Where cgroup `path` is under `mount` (None: outside what is mounted there)."""
    relative = os.path.relpath(path, mount.root)
    return None if relative.startswith("..") else mount.point if relative == "." else mount.point / relative


def words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def write(path: Path, value) -> None:
    path.write_text(str(value))


def probe(parent: Path) -> str | None:
    """Can a cgroup be made (and removed) under `parent`? None, or why not."""
    trial = parent / f"autograder-probe-{os.getpid()}"
    try:
        trial.mkdir()
        trial.rmdir()
    except OSError as error:
        return f"cannot make a cgroup in {parent} ({error.strerror})"
    return None


def vacate(here: Path) -> None:
    """cgroup v2: move every process of `here` into its LEAF, so that `here` may enable controllers for its children."""
    leaf = here / LEAF
    leaf.mkdir(exist_ok=True)
    procs = os.open(leaf / "cgroup.procs", os.O_WRONLY | os.O_CREAT)
    try:
        for pid in words(here / "cgroup.procs"):
            try:
                os.write(procs, f"{pid}\n".encode())  # one process a write
            except ProcessLookupError:  # it ended meanwhile
                pass
    finally:
        os.close(procs)


def delegated(here: Path) -> bool:
    """Whether systemd delegated `here` (Delegate=yes: it then leaves what is below it alone), as it marks it (systemd
    251 on: trusted.delegate for the system's manager, user.delegate for a user's)."""
    for name in ("trusted.delegate", "user.delegate"):
        try:
            if os.getxattr(here, name) == b"1":
                return True
        except OSError:
            pass
    return False


def unified(own: dict[str, str], found: list[Mount]) -> Backend:
    """cgroup v2, in this process's own cgroup, its memory (and pids) controllers enabled for the kernels' cgroups.

    A cgroup that holds processes must move them into its LEAF first (no internal processes): done where it is ours to
    rearrange, delegated by systemd or the root of this process's cgroup namespace (a container's), never in a unit
    systemd manages (a login session's scope, a service), whose other processes are not the grader's."""
    mount = next((m for m in found if m.kind == "cgroup2"), None)
    here = folder_of(mount, own[""]) if mount is not None and "" in own else None
    if here is None:
        return Backend(why="")
    if here.name == LEAF:  # an earlier process of this grader moved it there
        here = here.parent
    available = words(here / "cgroup.controllers")
    if "memory" not in available:
        return Backend(why=f"cgroup v2 offers no memory controller in {here}")
    advice = "run the grader under `systemd-run --user --scope -p Delegate=yes ...` (as root: `systemd-run --scope " \
             "-p Delegate=yes ...`)"
    if not all(os.access(p, os.W_OK) for p in (here, here / "cgroup.procs", here / "cgroup.subtree_control")):
        return Backend(why=f"cgroup v2: {here} is not delegated to this user: {advice}")
    wanted = [c for c in ("memory", "pids") if c in available]
    try:
        if set(wanted) - set(words(here / "cgroup.subtree_control")):
            if (here / "cgroup.type").exists() and words(here / "cgroup.procs"):  # not the root, which may hold both
                if not (delegated(here) or own[""] == "/"):
                    return Backend(why=f"cgroup v2: {here} holds processes and is not delegated: {advice}")
                vacate(here)
            write(here / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
    except OSError as error:
        return Backend(why=f"cgroup v2: cannot enable {' and '.join(wanted)} in {here} ({error.strerror})")
    problem = probe(here)
    if problem:
        return Backend(why=f"cgroup v2: {problem}")
    return Backend(version=2, parents={c: here for c in wanted}, delegated=os.geteuid() != 0)


def separate(own: dict[str, str], found: list[Mount]) -> Backend:
    """cgroup v1: the memory hierarchy (and the pids one where there is one), in this process's own cgroups."""
    parents, problems = {}, []
    for controller in ("memory", "pids"):
        mount = next((m for m in found if m.kind == "cgroup" and controller in m.options), None)
        here = folder_of(mount, own[controller]) if mount is not None and controller in own else None
        if here is None:
            continue
        if not os.access(here, os.W_OK):
            problems.append(f"cgroup v1's {controller} hierarchy is not writable by this user")
        elif problem := probe(here):
            problems.append(f"cgroup v1: {problem}")
        else:
            parents[controller] = here
    if "memory" not in parents:
        return Backend(why="; ".join(problems))
    return Backend(version=1, parents=parents)


def choose(proc: Path = Path("/proc/self")) -> Backend:
    """Which cgroups this process (as `proc` shows it) can make for its kernels: v2 first, then v1, else none."""
    try:
        own, found = own_cgroups((proc / "cgroup").read_text()), mounts((proc / "mountinfo").read_text())
    except OSError as error:
        return Backend(why=f"no cgroups to read here ({error.strerror})")
    reasons = []
    for backend in (unified(own, found), separate(own, found)):
        if backend.version:
            return backend
        reasons += [backend.why] if backend.why else []
    return Backend(why="; ".join(reasons) or "no cgroup hierarchy with a memory controller is mounted")


@cache
def chosen() -> Backend:
    """This process's backend, chosen once: in the batch's process before it forks its gradings, which inherit it."""
    return choose()


PENDING: list[Cgroup] = []  # this process's kernels' cgroups whose processes were still ending when it removed them
FINALIZED_IN = [0]  # the process that registered remove_pending to run as it ends (a forked child registers its own)


def remove_later(group: Cgroup) -> None:
    if FINALIZED_IN[0] != os.getpid():
        Finalize(None, remove_pending, exitpriority=0)  # run as a multiprocessing child ends, or Python exits
        FINALIZED_IN[0] = os.getpid()
    PENDING.append(group)


def remove_pending(wait: float = REMOVAL_WAIT) -> None:
    """As this process ends: remove its kernels' cgroups left, waiting (at most `wait` s) for them to empty."""
    deadline = time.monotonic() + wait
    while PENDING and time.monotonic() < deadline:
        PENDING[:] = [group for group in PENDING if not group.try_remove()]
        if PENDING:
            time.sleep(0.01)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def sweep(parents) -> None:
    """Remove what earlier kernels left: this process's cgroups that were not yet empty, and those of processes that
    ended without removing theirs (a grading stopped at its deadline). A cgroup still holding processes stays."""
    PENDING[:] = [group for group in PENDING if not group.try_remove()]
    for parent in set(parents):
        try:
            names = [p.name for p in parent.iterdir()]
        except OSError:
            continue
        for name in names:
            made_by = MADE_BY.match(name)
            if made_by and int(made_by.group(1)) != os.getpid() and not alive(int(made_by.group(1))):
                try:
                    (parent / name).rmdir()
                except OSError:
                    pass
