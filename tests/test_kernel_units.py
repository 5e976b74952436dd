"""The kernel wing one module at a time: the sandbox and its limits, warm parents, processes left running."""

import copy
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from traitlets.config import Config

from autograder.kernel.manager import SandboxUnavailable, SandboxedKernelManager, require_sandbox
from course import ROOT
import hostile


SANDBOX = ROOT / "autograder" / "kernel" / "sandbox.py"


PROBE = """import json, os, socket, sys
found = {"uid": os.getuid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
         "top": sorted(os.listdir("/")), "cwd": os.getcwd(), "env": sorted(os.environ),
         "solutions": os.path.exists(sys.argv[1]), "home": os.environ["HOME"]}
for name, path in (("tmp", "/tmp/x"), ("home_file", os.path.expanduser("~/x")), ("work", "x"), ("venv", sys.prefix + "/x")):
    try:
        open(path, "w").write("x")
        found[name] = "written"
    except OSError as error:
        found[name] = type(error).__name__
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    found["net"] = "reached"
except OSError as error:
    found["net"] = type(error).__name__
print(json.dumps(found))"""


def in_sandbox(code: str, *options: str, python: str = sys.executable, user: str | None = None, args=()) -> tuple:
    """Run `code` through sandbox.py, as this user or `user`: (exit code, stdout, stderr)."""
    runtime = tempfile.mkdtemp(prefix="sandbox-test-")
    start = tempfile.mkdtemp(prefix="sandbox-start-")
    (Path(start) / "data.txt").write_text("a file beside the notebook")
    if user:
        for path in (runtime, start):
            shutil.chown(path, user)
    prefix = ["runuser", "-u", user, "--"] if user else []
    command = [*prefix, python, str(SANDBOX), f"--runtime={runtime}", f"--read-only={sys.prefix}",
               f"--read-only={sys.base_prefix}", *options, "--", python, "-c", code, *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=start, timeout=120)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
        shutil.rmtree(start, ignore_errors=True)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.sandbox
def test_a_sandboxed_process_sees_only_its_own_folders():
    code, out, err = in_sandbox(PROBE, args=[str(ROOT / "solutions")])
    assert code == 0, err
    found = json.loads(out)
    assert found["uid"] == 1000 and found["pids"] == [1, 2], found  # its own PID namespace: bwrap's init and itself
    assert not found["solutions"], "the course's solutions are visible"
    assert found["cwd"] == "/home/student/work" and found["home"] == "/home/student"
    assert (found["tmp"], found["home_file"], found["work"]) == ("written",) * 3
    assert found["venv"] == "OSError" and found["net"] in ("OSError", "ConnectionRefusedError", "TimeoutError"), found
    assert set(found["env"]) <= {"HOME", "TMPDIR", "USER", "LOGNAME", "LANG", "PATH", "PWD", "LC_CTYPE"}, found["env"]


@pytest.mark.sandbox
@pytest.mark.parametrize("base", ["/tmp", "/dev/shm", "/home/student"])
def test_a_read_only_folder_shows_wherever_the_course_lives(base):
    """A course under /tmp, /dev/shm or a home folder: the sandbox's own private folders there hide nothing of it."""
    if not os.access(base if Path(base).exists() else Path(base).parent, os.W_OK):
        pytest.skip(f"needs a user who may write {base} (root): the sandbox's home is /home/student")
    Path(base).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="course-", dir=base))
    try:
        (folder / "data").mkdir()
        (folder / "data" / "digits.txt").write_text("0123456789")
        code, out, err = in_sandbox("import sys; print(open(sys.argv[1]).read())", f"--read-only={folder / 'data'}",
                                    args=[str(folder / "data" / "digits.txt")])
    finally:
        shutil.rmtree(folder)
    assert code == 0 and out.strip() == "0123456789", err


@pytest.mark.sandbox
def test_the_files_beside_the_notebook_are_copied_into_its_working_folder():
    code, out, err = in_sandbox("print(open('data.txt').read())")
    assert code == 0 and out.strip() == "a file beside the notebook", err


@pytest.mark.sandbox
@pytest.mark.parametrize("attempt, options, refused", [
    ("import os, time\nn = 0\ntry:\n    while n < 1000:\n        if os.fork() == 0:\n            time.sleep(5)\n"
     "            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n)", ("--processes=20",), lambda out: int(out) < 20),
    ("x = bytearray(600 * 2**20)\nprint('allocated')", ("--memory=268435456",), lambda out: "allocated" not in out),
    ("open('/tmp/big', 'wb').write(bytes(8 * 2**20))\nprint('written')", ("--scratch=1048576",),
     lambda out: "written" not in out),
], ids=["processes", "memory", "scratch"])
def test_limits_hold(attempt, options, refused):
    _, out, err = in_sandbox(attempt, *options)
    assert refused(out.strip()), f"the limit did not hold: {out} {err[-500:]}"


@pytest.mark.sandbox
@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(), reason="needs root to become nobody")
def test_as_an_ordinary_user_too():
    """What an instructor's server runs: the grader as an ordinary user (here `nobody`, with Debian's python3)."""
    code, out, err = in_sandbox("import os\nn = 0\ntry:\n    while n < 100:\n        if os.fork() == 0:\n"
                                "            import time; time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError:\n"
                                "    pass\nprint(os.getuid(), n)", "--processes=20", python="/usr/bin/python3",
                                user=pwd.getpwuid(65534).pw_name)
    assert code == 0, err
    uid, forked = map(int, out.split())
    assert uid == 1000 and forked < 20


def test_a_missing_bwrap_is_reported_with_what_to_do():
    done = subprocess.run([sys.executable, str(SANDBOX), "--check", "--bwrap", "/nonexistent/bwrap"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "apt install bubblewrap" in done.stderr
    with pytest.raises(SandboxUnavailable, match="--unfenced"):
        require_sandbox("/nonexistent/bwrap")


def test_the_kernel_command_goes_through_the_sandbox_with_a_short_socket_path():
    manager = SandboxedKernelManager(kernel_name="python3", config=Config(
        {"SandboxedKernelManager": {"read_only": ["data"], "memory_gib": 1.5}}))
    command = manager.format_kernel_cmd()
    assert command[1] == str(SANDBOX) and "--memory=1610612736" in command and "--" in command
    assert f"--read-only={os.path.abspath('data')}" in command and manager.transport == "ipc"
    assert len(manager.ip) + 6 < 107, "an ipc socket's path must fit in 107 bytes"
    shutil.rmtree(os.path.dirname(manager.connection_file))


def forked_in(config, slot_socket: str, **start):
    """A kernel forked from the warm parent at `slot_socket`, started (with `start`'s keywords), with a client:
    (manager, client)."""
    from jupyter_client.utils import run_sync
    config = copy.deepcopy(config)
    config.SandboxedKernelManager.warm = slot_socket
    manager = SandboxedKernelManager(kernel_name="python3", config=config)
    run_sync(manager.start_kernel)(**start)
    client = manager.blocking_client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    return manager, client


def printed(client, code: str) -> str:
    said = []
    client.execute_interactive(code, timeout=60, output_hook=lambda m: said.append(m["content"].get("text", "")))
    return "".join(said)


def ended(manager, client) -> None:
    from jupyter_client.utils import run_sync
    client.stop_channels()
    run_sync(manager.shutdown_kernel)(now=True)


def test_a_warm_kernels_processes_are_all_gone_before_the_slots_next_kernel_is_forked():
    """A kernel forked from a warm parent, which forked up to its process limit, is told to end and shutdown returns at
    once (the grading goes on); the parent forks the slot's next kernel only when every process of the ended one is
    gone, since they count against the limit of the next kernel forked there, which then forks as many; and they all
    go. ipywidgets, imported by the parent before any kernel existed, has its comm targets in each kernel (as a kernel
    that imports it itself has)."""
    from autograder.kernel.manager import processes
    from autograder.kernel.manager import WarmParents
    config = Config({"SandboxedKernelManager": {"warm_modules": ["ipywidgets"], "processes": 128}})
    pool = WarmParents(1, config).ready()
    try:
        assert pool.socket_of(0), "no warm parent on this machine"
        parent = pool.slots[0].process.pid
        before, forked = set(processes.descendants(parent)), []
        for _ in range(2):  # the second forked right after the first ended
            manager, client = forked_in(config, pool.socket_of(0))
            try:
                said = printed(client, "import comm, sys; print('ipywidgets' in sys.modules, "
                                       "sorted(comm.get_comm_manager().targets))")
                assert said.strip() == "True ['jupyter.widget', 'jupyter.widget.control']", said
                forked.append(int(re.search(r"forked (\d+) processes", printed(client, hostile.FORK_BOMB)).group(1)))
            finally:
                ended(manager, client)
        deadline = time.monotonic() + 30
        while set(processes.descendants(parent)) != before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(processes.descendants(parent)) == before, "processes of the ended kernels were still there"
        assert 100 < forked[0] < 128 and forked[1] >= forked[0] - 2, forked
    finally:
        pool.close()
    # collected through its Popen: killed and collected by PID, a later poll() could collect another child of that PID
    assert pool.slots[0].process.returncode is not None and not processes.descendants(parent)


def test_a_warm_parents_malloc_heap_is_in_huge_pages_where_the_machine_offers_them():
    """Forking a warm parent (twice a hand-in) copies an entry per page of its memory, and a kernel's end frees them:
    its malloc heap is in 2 MB pages (sandbox.HUGE_HEAP), which glibc makes only where it can read the machine's huge
    page settings inside the sandbox. Without them the heap is all 4 kB pages."""
    from autograder.kernel import sandbox
    from autograder.kernel.manager import WarmParents, processes
    glibc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    if not sandbox.huge_pages_split() or "[never]" in Path(sandbox.THP, "enabled").read_text() or \
            tuple(int(n) for n in re.findall(r"\d+", glibc)[:2]) < (2, 35):
        pytest.skip(f"no huge pages for malloc here ({os.uname().release}, {glibc})")
    pool = WarmParents(1, Config({"SandboxedKernelManager": {"warm_modules": []}})).ready()
    try:
        assert pool.socket_of(0), "no warm parent on this machine"
        huge = {}
        for pid in processes.descendants(pool.slots[0].process.pid):
            with open(f"/proc/{pid}/smaps_rollup") as f:
                huge[pid] = sum(int(line.split()[1]) for line in f if line.startswith("AnonHugePages:"))
        assert max(huge.values()) > 32 << 10, huge  # kB: of the 100 MB torch leaves in the heap
    finally:
        pool.close()


@contextmanager
def a_warm_parent():
    """A warm parent of its own (warm modules: torch and ipykernel's): (its configuration, its socket)."""
    from autograder.kernel.manager import WarmParents
    config = Config({"SandboxedKernelManager": {"warm_modules": []}})
    pool = WarmParents(1, config).ready()
    try:
        assert pool.socket_of(0), "no warm parent on this machine"
        yield config, pool.socket_of(0)
    finally:
        pool.close()


def said_in_a_forked_kernel(code: str) -> str:
    """What `code` prints in a kernel forked from a warm parent of its own."""
    with a_warm_parent() as (config, socket):
        manager, client = forked_in(config, socket)
        try:
            return printed(client, code)
        finally:
            ended(manager, client)


def test_a_gloo_process_group_forms_in_a_forked_kernel():
    """06 and 07 form process groups in the kernel. Gloo reads /sys when it finds it: the sandbox's /sys, which holds
    only the huge page settings (sandbox.huge_page_settings), must be readable by the sandbox's user or gloo cannot
    start ("Permission denied" where bwrap had made /sys its owner's alone, with a grader running as root)."""
    said = said_in_a_forked_kernel("import torch.distributed as dist\nfrom datetime import timedelta\n"
                                   "store = dist.TCPStore('127.0.0.1', 0, is_master=True, timeout=timedelta(seconds=20))\n"
                                   "dist.init_process_group('gloo', store=store, rank=0, world_size=1)\n"
                                   "print(dist.get_world_size())\ndist.destroy_process_group()")
    assert said.splitlines()[:1] == ["1"], said  # then c10d's warning that the sandbox has no hostname


def test_a_forked_kernel_runs_the_checks_set_up_as_it_starts_with_the_check_its_parent_compiled():
    """A kernel forked with the grader's set-up (integrity.setup_parts) has it done before it answers anything: the audit
    hook hands out the check, compiled, and the tests' modules are imported. The kernel runs the code as its parent
    compiled it (warm.compile_once; it compiles none itself): a set-up that does not compile, or fails, leaves a
    kernel that starts without the hook, whose first check then finds nothing set up (the grader fails the grading,
    as where its set-up cell fails)."""
    from autograder.grading import integrity
    probe = ("import sys\nfound = {}\nsys.audit('autograder.check', found)\n"
             "print(type(found.get('CODE')).__name__, 'colorsys' in sys.modules)")
    broken = [{**integrity.setup_parts(["colorsys"]), "start": "raise ValueError('a set-up that fails')"},
              {**integrity.setup_parts(["colorsys"]), "check": "a check that does not compile ("}]
    said = []
    with a_warm_parent() as (config, socket):
        for setup in (integrity.setup_parts(["colorsys"]), *broken, None):
            manager, client = forked_in(config, socket, **({"checks_setup": setup} if setup else {}))
            try:
                said.append((manager.checks_set_up, printed(client, probe).split()))
            finally:
                ended(manager, client)
    (set_up, done), (_, failed), (_, uncompiled), (plain, none) = said
    assert set_up and done == ["code", "True"], said
    assert failed[0] == uncompiled[0] == "NoneType", said
    assert not plain and none == ["NoneType", "False"], said  # no set-up asked for: none done


def test_a_forked_kernel_answers_only_once_in_its_cgroups_and_never_where_it_cannot_be_moved(monkeypatch):
    """The namespace's PID 1 moves itself and the kernel into the kernel's cgroups while the kernel starts (cgroup v1
    makes each move wait ms), and the kernel answers nothing until told: once it answers, both are in each of its
    cgroups. Where a move fails (here a cgroup.procs that cannot be written: /dev/full), PID 1 ends, and the kernel
    with its namespace: it never answers."""
    import psutil
    from autograder.kernel import limits
    if not limits.chosen().version:
        pytest.skip("this machine offers no cgroups")
    with a_warm_parent() as (config, socket):
        manager, client = forked_in(config, socket)
        try:
            inside = [{int(p) for p in procs.read_text().split()} for procs in manager.cgroup.procs]
            assert inside and all(pids == inside[0] for pids in inside), inside
            parents = {pid: psutil.Process(pid).ppid() for pid in inside[0]}
            assert len(parents) == 2 and any(parents[pid] in parents for pid in parents), \
                f"not the namespace's PID 1 and its kernel: {parents}"
        finally:
            ended(manager, client)

        class Unwritable:  # a cgroup whose cgroup.procs refuses every write
            procs, removed = [Path("/dev/full")], False

            def peak(self):
                return None

            def remove(self):
                self.removed = True
        monkeypatch.setattr(SandboxedKernelManager, "new_cgroup", lambda self: Unwritable())
        with pytest.raises(Exception):
            manager, client = forked_in(config, socket)
            ended(manager, client)


def test_the_kernel_info_a_client_became_ready_with_answers_the_next_request_once():
    """The grader's client keeps the kernel_info reply it became ready with: the next kernel_info request (nbconvert's
    execute step makes one first thing) is answered by it at once, without a round trip; a later one is sent."""
    from jupyter_client.utils import run_sync
    with a_warm_parent() as (config, socket):
        manager, blocking = forked_in(config, socket)
        client = manager.client()
        try:
            client.start_channels()
            run_sync(client.wait_for_ready)(timeout=60)
            first = client.kernel_info()
            reply = client.kept_reply(first)
            assert reply["msg_type"] == "kernel_info_reply" and reply["content"]["language_info"]["name"] == "python"
            assert client.kept_reply(first) is None, "the kept reply answered twice"
            second = client.kernel_info()
            assert second != first and client.kept_reply(second) is None
            while (answer := run_sync(client.shell_channel.get_msg)(timeout=30))["parent_header"]["msg_id"] != second:
                pass
            assert answer["msg_type"] == "kernel_info_reply"
        finally:
            client.stop_channels()
            ended(manager, blocking)


def test_a_forked_kernel_gets_the_list_of_module_files_its_parent_made():
    """IPythonKernel lists every loaded module's file as it is made, through ipykernel.ipkernel's `sys.modules` (the
    name warm.ListedModules stands in for, while the kernel is made): a forked kernel's list is the one its parent made
    (torch's among them), and its module sees the real sys afterwards."""
    import inspect
    from ipykernel.ipkernel import IPythonKernel
    assert "sys.modules" in inspect.getsource(IPythonKernel.__init__), "ipykernel no longer lists sys.modules there"
    said = said_in_a_forked_kernel("import sys, ipykernel.ipkernel as k\nfiles = get_ipython().kernel._kernel_modules\n"
                                   "print(k.sys is sys, len(files) > 1000, any(f.endswith('torch/__init__.py') for f in files))")
    assert said.split() == ["True", "True", "True"], said


def test_a_fork_bomb_in_one_slot_leaves_the_other_slots_kernel_its_whole_process_limit():
    """Each slot's warm parent has a user namespace of its own, where the process limit counts its kernels' processes
    only: a kernel at its limit leaves a kernel graded beside it, in another slot, as many. (With one parent for both
    slots the second kernel could not even start: "Kernel died before replying to kernel_info".)"""
    from autograder.kernel.manager import WarmParents
    config = Config({"SandboxedKernelManager": {"warm_modules": [], "processes": 128}})
    pool = WarmParents(2, config).ready()
    kernels = []
    try:
        assert pool.socket_of(0) and pool.socket_of(1), "no warm parents on this machine"
        forked = []
        for slot in (0, 1):  # the first slot's kernel and its processes live on while the second forks
            kernels.append(forked_in(config, pool.socket_of(slot)))
            forked.append(int(re.search(r"forked (\d+) processes", printed(kernels[-1][1], hostile.FORK_BOMB)).group(1)))
        assert 100 < forked[0] < 128 and forked[1] >= forked[0] - 2, forked
    finally:
        for manager, client in kernels:
            ended(manager, client)
        pool.close()


def test_launchs_fork_server_and_resource_tracker_are_not_counted_as_left_by_the_notebook(fork_server):
    """Beside a GPU, torchcourse.launch starts ranks from multiprocessing's fork server, which (with its resource
    tracker) lives as long as the kernel: a row must not say every notebook that launched left processes running."""
    import multiprocessing
    import psutil
    from autograder.kernel.manager import processes
    context = multiprocessing.get_context("forkserver")
    rank = context.Process(target=os.getpid)  # the first one starts the server and the tracker
    rank.start()
    rank.join()
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        below = processes.running(processes.descendants(os.getpid()))
        helpers = processes.launch_helpers(below)
        assert stray.pid in below and stray.pid not in helpers
        assert len(helpers) == 2, [psutil.Process(p).cmdline() for p in below]
    finally:
        stray.kill()
        stray.wait()


@pytest.mark.sandbox
def test_a_forked_kernels_fork_server_is_not_counted_as_left_running():
    """In a kernel forked from a warm parent (06's lesson starts ranks from a fork server on the CPU too), the fork
    server and its resource tracker are torchcourse.launch's, not processes the notebook left: a process the notebook
    started is counted, they are not."""
    from autograder.kernel.manager import WarmParents
    config = Config()
    pool = WarmParents(1, config).ready()
    try:
        assert pool.socket_of(0), "no warm parent on this machine"
        manager, client = forked_in(config, pool.socket_of(0))
        try:
            printed(client, "import multiprocessing, os\n"
                            "_rank = multiprocessing.get_context('forkserver').Process(target=os.getpid)\n"
                            "_rank.start()\n_rank.join()")
            assert manager.processes_inside() == 0
            printed(client, "import subprocess\n_stray = subprocess.Popen(['sleep', '600'])")
            assert manager.processes_inside() == 1
        finally:
            ended(manager, client)
    finally:
        pool.close()
