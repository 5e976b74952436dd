"""Limits the operating system counts (autograder/kernel/limits.py, sandbox.py, warm.py) and the kernel's own output on its way
to the log (autograder/relay.py): hostile hand-ins graded beside right ones, on both kernel paths (forked from a warm
parent, started afresh); and the cgroup module against fake cgroup trees (v1, v2 as root, v2 delegated), since one
machine shows one layout at most."""

import mmap
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import pytest
from traitlets.config import Config

from autograder.kernel import manager as kernel, limits, sandbox
from autograder.kernel.manager import SandboxedKernelManager
from autograder.kernel.relay import PREFIX, Relay, visible
from course import ROOT
from handins import ASSIGNMENT, FIRST, grade, handin, right, right_answers, rows_of, scratch_course, write, write_folder

SANDBOXED = [pytest.mark.xdist_group("grader-limits"), pytest.mark.sandbox, pytest.mark.slow]
MEMORY_GIB = 1  # the kernels' limit in these gradings (--memory)
MARKER = "MARKER-WRITTEN-AFTER-A-HIDDEN-TEST"
INODES = SandboxedKernelManager.class_traits()["scratch_inodes"].default_value  # files and folders in a private folder

# Shared memory that RLIMIT_DATA does not count, 4 GiB of it where the limit is 1: each file under the limit on one file
MEMFD_HOG = """import mmap, os
_maps = []
for _k in range(10):
    _fd = os.memfd_create(f"hog{_k}")
    os.ftruncate(_fd, 400 << 20)
    _maps.append(mmap.mmap(_fd, 400 << 20, mmap.MAP_SHARED))
    for _i in range(0, 400 << 20, 1 << 20):
        _maps[-1][_i:_i + (1 << 20)] = b"x" * (1 << 20)
print("held 4 GiB")"""
FOLDERS_HOG = """_written = 0
for _folder in ("/dev/shm", "/tmp", "."):  # 3 x 512 MiB, each folder to its cap
    try:
        with open(f"{_folder}/hog", "wb") as _f:
            while True:
                _f.write(b"x" * (1 << 20))
                _written += 1
    except OSError:
        pass
print(f"held {_written} MiB")"""
SYSV_HOG = """import ctypes
_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmat.restype = ctypes.c_void_p
_id = _libc.shmget(0, ctypes.c_size_t(4 << 30), 0o1600)
ctypes.memset(_libc.shmat(_id, None, 0), 1, 4 << 30)
print("held 4 GiB")"""
INODE_FILLER = """_made = 0
try:
    while _made < 20_000:
        open(f"/tmp/f{_made}", "w").close()
        _made += 1
except OSError:
    pass
print(f"made {_made} files")"""
ESCAPES = r"""import os
os.write(2, b"\x1b]52;c;aGVsbG8=\x07 clipboard, \x1b[2J\x1b[H cleared, \x1b[8m concealed\x1b[0m, "
            b"\xe2\x80\xae reversed\n")"""
AFTER_HIDDEN = f"""import os
os.write(2, b"{MARKER}\\n")
os.write(1, b"{MARKER}\\n")"""
FLOOD = """import os
for _ in range(2):
    os.write(1, b"y" * (3 << 18))"""  # 1.5 MiB


def hostile_class(cgroups: bool) -> dict[str, object]:
    """student -> notebook. The memory hogs only where cgroups bound them: elsewhere they would take the machine's."""
    hogs = {"memfd_hog": handin(right_answers(), added=[MEMFD_HOG]),
            "folders_hog": handin(right_answers(), added=[FOLDERS_HOG]),
            "sysv_hog": handin(right_answers(), added=[SYSV_HOG])} if cgroups else {}
    return {**hogs,
            "inode_filler": handin(right_answers(), added=[INODE_FILLER]),
            "escapes": handin({**right_answers(), FIRST: f"{ESCAPES}\n\n{right_answers()[FIRST]}"},
                              added=[AFTER_HIDDEN]),
            "flood": handin({**right_answers(), FIRST: f"{FLOOD}\n\n{right_answers()[FIRST]}"}),
            "right": right(), "zz_right": right()}


class SharedMemory:
    """The machine's shared memory (tmpfs, memfd, SysV: /proc/meminfo's Shmem) sampled while a block runs: its rise."""

    def __enter__(self):
        self.start, self.peak, self.done = self.now(), 0, threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.done.set()
        self.thread.join()

    @staticmethod
    def now() -> int:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) << 10 for line in f if line.startswith("Shmem:"))

    def sample(self):
        while not self.done.wait(0.02):
            self.peak = max(self.peak, self.now() - self.start)


@pytest.fixture(scope="module", params=["warm", "fresh"])
def graded(request, tmp_path_factory):
    """The hostile class graded once per kernel path: (out, rows, the rise of the machine's shared memory, cgroups)."""
    base = tmp_path_factory.mktemp(f"limits-{request.param}")
    course = scratch_course(base / "course")
    if request.param == "fresh":
        with open(course / "nbgrader_config.py", "a") as f:
            f.write("\nc.SandboxedKernelManager.fork_warm = False\n")
    cgroups = bool(limits.choose().version)
    submissions = write_folder(base / "submissions", {s: write(nb) for s, nb in hostile_class(cgroups).items()})
    with SharedMemory() as shared:
        grade(course, submissions, "--memory", str(MEMORY_GIB))
    out = course / "autograder" / "grades" / ASSIGNMENT
    return out, rows_of(out), shared.peak, cgroups


def log_of(out: Path, student: str) -> str:
    return (out / "logs" / f"{student}.log").read_text(errors="surrogateescape")


def printed(out: Path, student: str) -> str:
    nb = nbformat.read(out / "autograded" / f"{student}.ipynb", as_version=4)
    return "".join(o.get("text", "") for cell in nb.cells for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream")


class TestHostileHandins:
    pytestmark = SANDBOXED

    def test_right_hand_ins_beside_them_keep_their_full_marks(self, graded):
        _, rows, _, _ = graded
        for student in ("right", "zz_right", "inode_filler", "escapes", "flood"):
            row = rows[student]
            assert (row["status"], float(row["score"])) == ("graded", float(row["max_score"])), (student, row)

    def test_shared_memory_past_the_limit_runs_out_of_memory(self, graded):
        """memfd + MAP_SHARED, the private folders (/dev/shm among them) and SysV shared memory, none of which
        RLIMIT_DATA counts, each 1.5-4 GiB where the limit is 1: each kernel ran out of memory at its limit, and the
        machine's shared memory never rose past two kernels' limits (two gradings at once)."""
        out, rows, rise, cgroups = graded
        if not cgroups:
            pytest.skip(f"no cgroup for kernels here: {limits.choose()}")
        for student in ("memfd_hog", "folders_hog", "sysv_hog"):
            row = rows[student]
            said = f"ran out of memory (the limit is {MEMORY_GIB} GiB)"
            assert row["status"] == "crashed" and said in row["message"], (student, row["message"])
            assert float(row["score"]) == float(row["max_score"]), "the tests ran before the hog, and count"
            assert "held" not in printed(out, student), student
        assert rise < (2 * MEMORY_GIB + 0.5) * 2**30, f"the machine's shared memory rose by {rise / 2**30:.1f} GiB"

    def test_no_kernels_cgroup_outlives_its_grading(self, graded):
        """Each kernel's cgroup is gone once its grading's process has ended (those of live processes, a grading run
        beside this one, may stay)."""
        _, _, _, cgroups = graded
        if not cgroups:
            pytest.skip(f"no cgroup for kernels here: {limits.choose()}")
        left = [p for parent in limits.choose().parents.values() for p in parent.glob(f"{limits.PREFIX}*")
                if not limits.alive(int(limits.MADE_BY.match(p.name).group(1)))]
        assert not left, left

    def test_an_inode_filler_stops_at_the_cap_on_files(self, graded):
        out, _, _, _ = graded
        made = int(printed(out, "inode_filler").split("made ")[1].split()[0])
        assert INODES - 10 < made < INODES, made

    def test_the_kernels_own_output_reaches_the_log_escaped_and_not_after_a_hidden_test(self, graded):
        out, _, _, _ = graded
        log = log_of(out, "escapes")
        assert "\x1b" not in log and "\x07" not in log and "\u202e" not in log, "a raw terminal escape is in the log"
        assert f"{PREFIX}\\x1b]52;c;aGVsbG8=\\x07 clipboard, \\x1b[2J\\x1b[H cleared" in log, log[-3000:]
        assert "\\u202e reversed" in log
        assert MARKER not in log and "bytes withheld" in log, log[-3000:]

    def test_a_flood_of_kernel_output_is_capped(self, graded):
        out, _, _, _ = graded
        log = log_of(out, "flood")
        assert "more bytes dropped" in log and len(log) < 1.5 * 2**20, len(log)

    def test_the_log_says_which_limits_applied(self, graded):
        out, _, _, cgroups = graded
        log = log_of(out, "right")
        said = next(line for line in log.splitlines() if "autograder: limits:" in line)
        assert f"memory {MEMORY_GIB} GiB" in said and f"{INODES} files each" in said, said
        if cgroups:
            assert "shared memory counted" in said and "cgroup pids" in said, said
        else:
            assert "shared memory not counted: no cgroup (" in said, said


# The cgroup module against fake trees: /proc/self/cgroup and mountinfo as the kernel writes them, the hierarchies as
# folders. What the kernel does on its own (a new cgroup's files) the fakes do by hand.

def fake_proc(folder: Path, cgroup: str, mounts: list[tuple[Path, str, str, str]]) -> Path:
    """A /proc/self with these cgroup lines and these (mount point, cgroup there, kind, options) hierarchies."""
    proc = folder / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup)
    (proc / "mountinfo").write_text("".join(
        f"{30 + k} 23 0:{40 + k} {root} {point} rw,relatime - {kind} {kind} rw,{options}\n"
        for k, (point, root, kind, options) in enumerate(mounts)))
    return proc


def hierarchy(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


V1_FILES = {"memory.limit_in_bytes": "9223372036854771712\n", "memory.memsw.limit_in_bytes": "9223372036854771712\n",
            "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", "cgroup.procs": ""}
V2_FILES = {"cgroup.controllers": "cpu io memory pids\n", "cgroup.subtree_control": "", "cgroup.type": "domain\n",
            "cgroup.procs": "", "memory.max": "max\n", "memory.swap.max": "max\n", "memory.oom.group": "0\n"}


def v1_tree(tmp_path: Path) -> Path:
    """This machine's layout: v1 memory and pids hierarchies (this process in memory:/jobs/7), v2 without memory."""
    for name in ("memory", "pids", "unified"):
        (tmp_path / name).mkdir()
    hierarchy(tmp_path / "memory" / "jobs" / "7", V1_FILES)
    hierarchy(tmp_path / "unified", {"cgroup.controllers": "hugetlb\n"})
    return fake_proc(tmp_path, "8:pids:/\n4:memory:/jobs/7\n1:cpu,cpuacct:/\n0::/\n",
                     [(tmp_path / "memory", "/", "cgroup", "memory"), (tmp_path / "pids", "/", "cgroup", "pids"),
                      (tmp_path / "unified", "/", "cgroup2", "nsdelegate")])


def v2_tree(tmp_path: Path, procs: str = "") -> tuple[Path, Path]:
    """A systemd machine's layout: one v2 hierarchy; this process in a scope of its own (with `procs` in it)."""
    scope = hierarchy(tmp_path / "cg" / "user.slice" / "grader.scope", {**V2_FILES, "cgroup.procs": procs})
    proc = fake_proc(tmp_path, "0::/user.slice/grader.scope\n", [(tmp_path / "cg", "/", "cgroup2", "nsdelegate")])
    return proc, scope


def test_cgroup_v1_as_root_limits_memory_with_swap_and_processes(tmp_path):
    backend = limits.choose(v1_tree(tmp_path))
    assert (backend.version, backend.parents) == (1, {"memory": tmp_path / "memory" / "jobs" / "7",
                                                      "pids": tmp_path / "pids"}), backend
    group = backend.create(memory=2 << 30, processes=258)
    memory, pids = group.controllers["memory"], group.controllers["pids"]
    assert memory.parent == tmp_path / "memory" / "jobs" / "7"
    assert memory.name.startswith(f"{limits.PREFIX}{os.getpid()}-")
    assert (memory / "memory.limit_in_bytes").read_text() == str(2 << 30)
    assert (memory / "memory.memsw.limit_in_bytes").read_text() == str(2 << 30), "swap counted within the limit"
    assert (pids / "pids.max").read_text() == "258" and pids.name == memory.name
    assert group.procs == [memory / "cgroup.procs", pids / "cgroup.procs"]
    assert not group.out_of_memory()
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert group.out_of_memory()


def test_cgroup_v2_as_root_in_a_cgroup_that_holds_no_process(tmp_path, monkeypatch):
    proc, scope = v2_tree(tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    backend = limits.choose(proc)
    assert (backend.version, backend.delegated, backend.parents) == (2, False, {"memory": scope, "pids": scope})
    assert (scope / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert not (scope / limits.LEAF).exists(), "no process to move out of the grader's cgroup"
    group = backend.create(memory=1 << 30, processes=100)
    (folder,) = group.folders()
    assert {name: (folder / name).read_text() for name in ("memory.max", "memory.swap.max", "memory.oom.group",
                                                            "pids.max")} == \
        {"memory.max": str(1 << 30), "memory.swap.max": "0", "memory.oom.group": "1", "pids.max": "100"}
    assert group.procs == [folder / "cgroup.procs"]
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")
    assert group.out_of_memory()


def test_cgroup_v2_delegated_moves_the_graders_processes_into_a_leaf_first(tmp_path, monkeypatch):
    """No internal processes: the scope's processes (the grader's) go to its LEAF before it enables memory and pids
    for its children; a later process of the grader, found in the leaf, uses the scope as its parent too. Only in a
    scope systemd delegated (`systemd-run --user --scope -p Delegate=yes`, which marks it so): a login session's,
    though it is the user's to write, holds the user's shell, and stays as it is."""
    proc, scope = v2_tree(tmp_path, procs="4242\n4243\n")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    backend = limits.choose(proc)
    assert not backend.version and "holds processes and is not delegated" in backend.why, backend
    assert not (scope / limits.LEAF).exists() and (scope / "cgroup.subtree_control").read_text() == ""
    os.setxattr(scope, "user.delegate", b"1")
    backend = limits.choose(proc)
    assert (backend.version, backend.delegated, backend.parents["memory"]) == (2, True, scope), backend
    assert str(backend) == "cgroup v2, delegated"
    assert (scope / limits.LEAF / "cgroup.procs").read_text().split() == ["4242", "4243"]
    assert (scope / "cgroup.subtree_control").read_text() == "+memory +pids"
    (proc / "cgroup").write_text(f"0::/user.slice/grader.scope/{limits.LEAF}\n")
    (scope / "cgroup.subtree_control").write_text("memory pids\n")
    assert limits.choose(proc).parents == {"memory": scope, "pids": scope}


def test_cgroup_v2_of_a_container_is_its_own_to_rearrange(tmp_path, monkeypatch):
    """In a container, the root of its cgroup namespace (a cgroup with processes, but the container's alone): its
    processes move to the leaf without a delegation mark."""
    container = hierarchy(tmp_path / "cg", {**V2_FILES, "cgroup.procs": "1\n7\n"})
    proc = fake_proc(tmp_path, "0::/\n", [(container, "/", "cgroup2", "nsdelegate")])
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    backend = limits.choose(proc)
    assert backend.version == 2 and backend.parents["memory"] == container, backend
    assert (container / limits.LEAF / "cgroup.procs").read_text().split() == ["1", "7"]


def test_cgroup_v2_not_delegated_to_this_user_is_none_and_says_what_to_do(tmp_path, monkeypatch):
    proc, scope = v2_tree(tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(os, "access", lambda path, mode: not str(path).startswith(str(tmp_path / "cg")))
    backend = limits.choose(proc)
    assert not backend.version and "not delegated" in backend.why and "Delegate=yes" in backend.why, backend
    assert str(backend).startswith("no cgroup (")


def test_cgroup_v1_not_writable_by_an_ordinary_user_is_none(tmp_path, monkeypatch):
    proc = v1_tree(tmp_path)
    monkeypatch.setattr(os, "access", lambda path, mode: not str(path).startswith(str(tmp_path)))
    backend = limits.choose(proc)
    assert not backend.version and "not writable by this user" in backend.why, backend
    assert "cgroup v2 offers no memory controller" in backend.why


def test_a_cgroup_outside_what_is_mounted_is_none(tmp_path):
    """A cgroup namespace whose root is not the mounted hierarchy's: nothing to write to."""
    (tmp_path / "cg").mkdir()
    proc = fake_proc(tmp_path, "0::/../elsewhere\n", [(tmp_path / "cg", "/jobs", "cgroup2", "nsdelegate")])
    assert not limits.choose(proc).version


def test_a_cgroup_is_removed_once_its_processes_are_gone_and_leftovers_of_ended_graders_too(tmp_path):
    """remove() does not wait for an ended kernel's teardown: a cgroup still busy (here: a folder that rmdir refuses)
    goes with the next kernel's cgroup, or as the process ends; a leftover of a grading that ended without removing
    its own goes when the next kernel's is made; one of a live process stays."""
    backend = limits.choose(v1_tree(tmp_path))
    parent = backend.parents["memory"]
    ended = subprocess_pid()
    leftover, alive = parent / f"{limits.PREFIX}{ended}-0000", parent / f"{limits.PREFIX}{os.getppid()}-0000"
    leftover.mkdir(), alive.mkdir()
    group = backend.create(memory=1 << 30, processes=10)
    assert not leftover.exists() and alive.exists()
    group.remove()  # its folders hold the files written: rmdir refuses, as for a cgroup with processes in it
    assert group.removed and group in limits.PENDING and group.controllers["memory"].exists()
    for folder in group.folders():
        for file in folder.iterdir():
            file.unlink()
    limits.remove_pending(wait=1)
    assert not limits.PENDING and not any(f.exists() for f in group.folders())


def subprocess_pid() -> int:
    """The PID of a process that has ended."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_a_real_cgroup_counts_shared_memory_and_says_so():
    """This machine's own: a process that joins it through its cgroup.procs and maps 4 times its memory limit in
    memfd pages (which RLIMIT_DATA does not count) is killed, and the cgroup says it ran out of memory."""
    if not limits.chosen().version:
        pytest.skip(f"no cgroup for kernels here: {limits.chosen()}")
    group = limits.chosen().create(memory=64 << 20, processes=10)
    try:
        pid = os.fork()
        if pid == 0:
            try:
                for path in group.procs:
                    path.write_text("0")
                fd, chunk = os.memfd_create("hog"), b"x" * (1 << 20)
                os.ftruncate(fd, 256 << 20)
                shared = mmap.mmap(fd, 256 << 20, mmap.MAP_SHARED)
                for offset in range(0, 256 << 20, 1 << 20):
                    shared[offset:offset + (1 << 20)] = chunk
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and group.out_of_memory(), status
    finally:
        group.remove()
        limits.remove_pending()


# The relay of a kernel's own output

def relayed(*writes: bytes, withhold_after: int | None = None, limit: int = 1 << 20) -> str:
    """What a Relay writes into a log for these writes of the kernel's (withheld from write number `withhold_after`)."""
    log_read, log_write = os.pipe()
    relay = Relay(log=log_write, limit=limit)
    kernel = os.dup(relay.write_end)
    relay.given()
    for k, data in enumerate(writes):
        if k == withhold_after:
            time.sleep(0.1)  # what came before is read before withholding starts
            relay.withhold()
        os.write(kernel, data)
    os.close(kernel)
    relay.thread.join(10)
    os.close(log_write)
    with os.fdopen(log_read, "rb") as f:
        return f.read().decode()


def test_the_relay_escapes_controls_and_prefixes_every_line():
    log = relayed(b"plain\n\x1b[2J\x1b]52;c;aGk=\x07\r\n", b"half a li", "ne \u202e é\n".encode(), b"\xff no newline")
    assert log == (f"{PREFIX}plain\n{PREFIX}\\x1b[2J\\x1b]52;c;aGk=\\x07\\r\n{PREFIX}half a line \\u202e é\n"
                   f"{PREFIX}\\xff no newline\n"), log
    assert visible("tab\tkept, DEL \x7f and C1 CSI \x9b escaped") == "tab\tkept, DEL \\x7f and C1 CSI \\x9b escaped"


def test_the_relay_keeps_a_limited_number_of_bytes_and_says_how_many_it_dropped():
    log = relayed(b"a" * 60 + b"\n", b"b" * 100 + b"\n", limit=100)
    assert log == f"{PREFIX}{'a' * 60}\n{PREFIX}{'b' * 39}\n{PREFIX}(62 more bytes dropped: a kernel's log keeps 100 " \
                  "bytes of its output)\n", log


def test_the_relay_withholds_what_comes_once_told():
    log = relayed(b"before\n", f"{MARKER}\n".encode(), withhold_after=1)
    assert log == f"{PREFIX}before\n{PREFIX}({len(MARKER) + 1} bytes withheld: written once a hidden test had " \
                  "started, they may hold it)\n", log


# Where only bwrap's own user namespace works (sandbox.py --plain, for an ordinary user)

def test_where_only_bwraps_own_user_namespace_works_the_check_says_so(monkeypatch, capsys):
    """An ordinary user's machine where ours cannot be used (warm.py's launcher cannot mount in it): --check passes,
    saying why kernels started afresh get bwrap's own; as root it is never offered (bwrap's would map root)."""
    refused = "bwrap: Can't mount tmpfs on /newroot: Operation not permitted"
    monkeypatch.setattr(sandbox, "trial", lambda bwrap, plain: subprocess.CompletedProcess(
        [], 0 if plain else 1, "", "" if plain else refused))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert sandbox.check("bwrap") == 0 and capsys.readouterr().out == f"plain: {refused}\n"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert sandbox.check("bwrap") == 1 and refused in capsys.readouterr().err


def test_the_log_says_when_private_folders_are_capped_in_size_alone(monkeypatch):
    monkeypatch.setattr(kernel, "sandbox_check", lambda bwrap="bwrap": (None, "no mount in our namespace"))
    manager = SandboxedKernelManager(kernel_name="python3", config=Config())
    said = manager.limits_in_force()
    assert "private folders 512 MiB each, files in them not capped (no mount in our namespace)" in said, said


@pytest.mark.sandbox
@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(), reason="needs root to become nobody")
def test_a_plain_sandbox_keeps_its_limits_and_forbids_user_namespaces():
    """sandbox.py --plain as an ordinary user (`nobody`, Debian's python3): warm.py's launcher, without capabilities,
    still sets the limits; bwrap's --disable-userns still forbids new user namespaces."""
    code = ("import ctypes, os\nn = 0\ntry:\n    while n < 100:\n        if os.fork() == 0:\n"
            "            import time; time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError:\n    pass\n"
            "try:\n    open('/tmp/big', 'wb').write(bytes(2 << 20))\n    big = 'written'\n"
            "except OSError:\n    big = 'refused'\n"
            "userns = ctypes.CDLL(None, use_errno=True).unshare(0x10000000)\nprint(os.getuid(), n, big, userns)")
    folders = [tempfile.mkdtemp(prefix="plain-"), tempfile.mkdtemp(prefix="plain-start-")]
    try:
        for folder in folders:
            shutil.chown(folder, "nobody")
        command = ["runuser", "-u", "nobody", "--", "/usr/bin/python3", str(ROOT / "autograder" / "kernel" / "sandbox.py"),
                   f"--runtime={folders[0]}", "--plain", "--processes=20", "--scratch=1048576", "--",
                   "/usr/bin/python3", "-c", code]
        done = subprocess.run(command, capture_output=True, text=True, cwd=folders[1], timeout=120)
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    uid, forked, big, userns = done.stdout.split()
    assert (uid, big, userns) == ("1000", "refused", "-1") and int(forked) < 20, done.stdout
