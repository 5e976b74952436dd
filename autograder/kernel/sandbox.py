"""Start a student's kernel in a bubblewrap sandbox, or say why it cannot start.

    python autograder/kernel/sandbox.py --runtime DIR [--read-only DIR]... [--memory BYTES] [--processes N]
        [--scratch BYTES] [--inodes N] [--cgroup DIR]... [--env NAME=VALUE]... [--plain] [--unfenced]
        -- KERNEL COMMAND...
    python autograder/kernel/sandbox.py --check [--bwrap PATH]

Inside, the kernel sees the machine's programs and libraries (/usr), the --read-only folders (the Python environment,
the course's data), its runtime folder (connection file and ipc sockets), in a warm parent's sandbox the machine's huge
page settings (read-only, for glibc: HUGE_HEAP), and a private, empty home with its working folder, /tmp and /dev/shm,
each capped in size and in files; nothing else, and nothing it can write but these. It has its own PID, network
(loopback only), IPC, UTS and user namespaces, runs as an unprivileged user with limits on memory and processes, in
the --cgroup cgroups the grader made for it (joined before anything else runs), and dies with its parent. Inside the
sandbox warm.py runs first, with the capabilities of the sandbox's user namespace: it caps the private folders in
files (bwrap's --tmpfs takes a size alone), makes the rest read-only, drops the capabilities and becomes the kernel
(warm.py's launch). --plain: bwrap's own user namespace, where nothing inside has a capability
(for an ordinary user's machine where ours cannot be used: --check says): private folders capped in size alone.

Run as a script (not -m): nothing of the grader is imported, and the kernel starts with a clean sys.path.
Linux only, with bubblewrap (Debian's `bubblewrap`, the `bwrap` command). --unfenced starts the kernel with the
limits and a private home alone, for machines where bwrap cannot run.
"""

import argparse
import ctypes
import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

HOME, WORK, UID = "/home/student", "/home/student/work", 1000  # the student's folders and identity inside
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "nsswitch.conf", "os-release", "fonts")
TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # symlinks into /usr on a merged-/usr system
GENERATED_ETC = {  # the sandbox's own users and hosts, none of the machine's
    "passwd": f"root:x:0:0::/:/usr/sbin/nologin\nstudent:x:{UID}:{UID}::{HOME}:/bin/sh\n"
              "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n",
    "group": f"root:x:0:\nstudent:x:{UID}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost\n",
    "hostname": "sandbox\n",
}
WARM_SCRIPT = "/.autograder-warm.py"  # where the sandbox holds warm.py, outside every folder a kernel imports from
WARM_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm.py")
# A warm parent's malloc heap (torch's half of its memory) in 2 MB pages: each fork copies, and each kernel's end frees,
# one entry per 2 MB of it rather than 512 (4 ms of the 17 a fork and exit of a warm parent cost, twice a hand-in). From
# Linux 5.8 a child's first write to a shared huge page copies 4 kB of it, as before, not the whole 2 MB page.
HUGE_HEAP = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
THP = "/sys/kernel/mm/transparent_hugepage"  # where glibc reads the huge page size
MAX_STARTING_FILES = 256 << 20  # the files nbgrader puts beside the notebook (an assignment's data), at most
CLONE_NEWUSER = 0x10000000


def data_fd(text: str) -> int:
    """An inheritable descriptor holding `text`, for bwrap's --ro-bind-data."""
    fd = os.memfd_create("sandbox-etc", 0)
    os.write(fd, text.encode())
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return fd


def binds(read_only: list[str]) -> list[str]:
    """The machine's programs and libraries, the read-only folders, a little of /etc (none of its secrets)."""
    args = []
    for name in TOP_LEVEL:
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for folder in sorted({os.path.realpath(p) for p in ["/usr", *read_only] if os.path.isdir(p)}):
        args += ["--ro-bind", folder, folder]  # the kernel manager has refused configured folders that are not there
    for name in ETC:
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    for name, text in GENERATED_ETC.items():
        args += ["--perms", "0644", "--ro-bind-data", str(data_fd(text)), f"/etc/{name}"]
    gpus = sorted(d for d in os.listdir("/dev") if d.startswith("nvidia"))  # CUDA's devices (no CI machine has one)
    for device in gpus:
        args += ["--dev-bind", f"/dev/{device}", f"/dev/{device}"]
    return args + (["--ro-bind", "/sys", "/sys"] if gpus else [])


def reachable(args: list[str]) -> list[str]:
    """bwrap (0.8) makes the folders it creates above a mount point private to whoever sets up the sandbox (root,
    for a root grader): open them to the sandbox's user. Not the mount points, nor anything inside a bound folder."""
    bound = {args[i + 2] for i, a in enumerate(args) if a in ("--ro-bind", "--ro-bind-data", "--dev-bind", "--bind")}
    fresh = {args[i + 1] for i, a in enumerate(args) if a in ("--tmpfs", "--proc", "--dev", "--dir")}
    above = set()
    for target in bound:
        while (target := os.path.dirname(target)) != "/" and not any(
                target == b or target.startswith(b + "/") for b in bound) and target not in fresh:
            above.add(target)
    return [a for folder in sorted(above) for a in ("--chmod", "0755", folder)]


def files_beside(folder: str | None) -> tuple[list[str], list[tuple[str, int]]]:
    """The folders and files nbgrader put beside the notebook (an assignment's data files), relative to it: the
    folders, and each file with a descriptor to read it. ValueError past MAX_STARTING_FILES bytes."""
    folders, files, total = [], [], 0
    for root, dirs, names in os.walk(folder) if folder else ():
        folders += [os.path.relpath(os.path.join(root, d), folder) for d in dirs]
        for name in names:
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            total += os.path.getsize(path)
            if total > MAX_STARTING_FILES:
                for _, fd in files:
                    os.close(fd)
                raise ValueError(f"the files beside the notebook exceed {MAX_STARTING_FILES >> 20} MiB")
            files.append((os.path.relpath(path, folder), os.open(path, os.O_RDONLY)))
    return folders, files


def starting_files(folder: str | None) -> list[str]:
    """The files beside the notebook, copied into the working folder by bwrap."""
    try:
        folders, files = files_beside(folder)
    except ValueError as error:
        raise SystemExit(f"autograder: {error}") from None
    args = [a for d in folders for a in ("--perms", "0777", "--dir", os.path.join(WORK, d))]
    for name, fd in files:
        os.set_inheritable(fd, True)
        args += ["--perms", "0666", "--file", str(fd), os.path.join(WORK, name)]
    return args


def hand_over(runtime: str) -> None:
    """For a root grader: the runtime folder and its files to `nobody`, who the kernel is outside (it writes its
    sockets there and reads its connection file)."""
    nobody = pwd.getpwnam("nobody")
    for path in [runtime] + [os.path.join(runtime, f) for f in os.listdir(runtime)]:
        os.chown(path, nobody.pw_uid, nobody.pw_gid)


def limits(memory: int, processes: int, file_size: int) -> list[str]:
    """prlimit, for an --unfenced kernel (inside the sandbox, warm.py sets the same limits).

    Memory is limited as data (private writable memory), not address space, which CUDA reserves by the terabyte.
    """
    return ["prlimit", f"--data={memory}", f"--nproc={processes}", f"--fsize={file_size}", "--core=0", "--"]


def join_cgroups(folders: list[str]) -> None:
    """This process, and so all it starts, into the kernel's cgroups (made by the grader, which runs this script)."""
    for folder in folders:
        with open(os.path.join(folder, "cgroup.procs"), "w") as procs:
            procs.write("0")


def huge_page_settings() -> list[str]:
    """bwrap's options for the machine's huge page settings, where glibc reads them, read-only; the folders above them
    made readable (bwrap makes a mount point's missing folders for its owner alone, and gloo, finding /sys but not
    reading it, cannot start a process group)."""
    folders = [str(p) for p in reversed(Path(THP).parents) if p != Path("/")]  # /sys, /sys/kernel, /sys/kernel/mm
    return [*(a for folder in folders for a in ("--perms", "0755", "--dir", folder)), "--ro-bind-try", THP, THP]


def huge_pages_split() -> bool:
    """Whether this Linux copies 4 kB of a shared huge page that a process writes to (5.8 and later), not 2 MB."""
    try:
        return tuple(int(part) for part in os.uname().release.split(".")[:2]) >= (5, 8)
    except ValueError:
        return False


def environment(pairs: list[str], home: str, tmp: str) -> dict[str, str]:
    """The kernel's whole environment: nothing of the grader's (it may hold passwords) but these."""
    env = {"HOME": home, "TMPDIR": tmp, "USER": "student", "LOGNAME": "student", "LANG": "C.UTF-8",
           "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin"}
    env.update(pair.split("=", 1) for pair in pairs)
    return env


def user_namespace(uid_map: str, gid_map: str) -> int:
    """A descriptor of a new user namespace with these maps, made by a forked helper (bwrap's --userns)."""
    ready, go = os.pipe(), os.pipe()
    child = os.fork()
    if child == 0:  # holds the new namespace open until its maps are written and a descriptor is taken
        ok = ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWUSER) == 0
        os.write(ready[1], b"y" if ok else b"n")
        os.read(go[0], 1)
        os._exit(0)
    try:
        if os.read(ready[0], 1) != b"y":
            raise SystemExit("autograder: cannot create a user namespace for the sandbox")
        if os.geteuid() != 0:
            with open(f"/proc/{child}/setgroups", "w") as f:  # required before an ordinary user writes gid_map
                f.write("deny")
        for name, text in (("uid_map", uid_map), ("gid_map", gid_map)):
            with open(f"/proc/{child}/{name}", "w") as f:
                f.write(text)
        fd = os.open(f"/proc/{child}/ns/user", os.O_RDONLY)
    finally:
        os.write(go[1], b"x")
        os.waitpid(child, 0)
    os.set_inheritable(fd, True)
    for path in (ready + go):
        os.close(path)
    return fd


def root_user_namespace() -> int:
    """For a grader running as root: a user namespace where the sandbox's user is `nobody` outside.

    Root is exempt from the process limit, so the kernel must not be root. Inside, uid 0 stays root (so that bwrap
    can bind folders only root can reach) until warm.py makes the kernel uid 1000, that is `nobody`.
    """
    nobody = pwd.getpwnam("nobody")
    return user_namespace(f"0 0 1\n{UID} {nobody.pw_uid} 1\n", f"0 0 1\n{UID} {nobody.pw_gid} 1\n")


def own_user_namespace() -> int:
    """For an ordinary user's grader: a namespace mapping the sandbox's user to this one, made by us, not by bwrap, so
    that the mounts bwrap makes in it stay ours to change (a warm child's fresh /proc, the launcher's capped
    folders)."""
    return user_namespace(f"{UID} {os.getuid()} 1\n", f"{UID} {os.getgid()} 1\n")


def identity(runtime: str, warm: bool = False, plain: bool = False) -> list[str]:
    """bwrap's options for the sandbox's user namespace: one made by us, in which warm.py (a warm parent, or the
    launcher of a kernel started afresh) keeps its capabilities to mount and cap the private folders, then drops them
    and becomes the sandbox's user (a warm parent's child, or the launcher). `plain`, for an ordinary user: bwrap's own
    namespace, where nothing inside has a capability. As root, never plain: bwrap's namespace would map the sandbox's
    user to root."""
    if plain and os.geteuid() != 0:
        return ["--unshare-user", "--disable-userns", "--uid", str(UID), "--gid", str(UID)]
    if os.geteuid() == 0 and not warm:
        hand_over(runtime)  # its kernel, `nobody` outside, writes its sockets there
    return ["--userns", str(root_user_namespace() if os.geteuid() == 0 else own_user_namespace()), "--cap-add", "ALL"]


def bwrap_command(args, kernel: list[str], files_from: str | None, warm: bool = False) -> list[str]:
    """The whole bwrap command line that starts `kernel` in the sandbox through warm.py's launcher (with `warm`,
    `kernel` is the warm parent's socket and modules: warm.py's parent, which makes each hand-in's private folders
    itself)."""
    plain = getattr(args, "plain", False) and not warm and os.geteuid() != 0
    user = identity(args.runtime, warm, plain)
    order = {"memory": args.memory, "processes": args.processes, "scratch": args.scratch, "inodes": args.inodes,
             "home": HOME, "capable": not plain}
    first = [sys.executable, WARM_SCRIPT, json.dumps(order)] if warm else \
        [sys.executable, "-I", "-S", WARM_SCRIPT, "--launch", json.dumps(order), "--"]  # the standard library alone
    huge = warm and huge_pages_split()
    env = {**environment(args.env, HOME, "/tmp"), **(HUGE_HEAP if huge else {})}
    private = [a for path in ("/tmp", "/dev/shm", HOME) for a in ("--size", str(args.scratch), "--perms", "1777",
                                                                 "--tmpfs", path)]
    command = [args.bwrap, *user, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--hostname", "sandbox", "--clearenv",
            *[a for name, value in env.items() for a in ("--setenv", name, value)],
            # bwrap mounts in this order: the private folders first, so that none hides a folder bound below it
            # (a course under /tmp, /dev/shm or a home folder)
            "--proc", "/proc", "--dev", "/dev", *private, *binds(args.read_only), "--ro-bind", WARM_PY, WARM_SCRIPT,
            *(huge_page_settings() if huge else []),
            "--perms", "0777", "--dir", WORK, *starting_files(files_from),
            "--bind", args.runtime, os.path.realpath(args.runtime), "--chdir", WORK]
    return command + reachable(command) + ["--", *first, *kernel]


def trial(bwrap: str, plain: bool) -> subprocess.CompletedProcess:
    """A sandbox started as a kernel's would be, its process asserting that it is the sandbox's user."""
    runtime = os.path.realpath(f"/tmp/autograder-check-{os.getpid()}-{time.monotonic_ns()}")
    os.mkdir(runtime, 0o700)
    try:
        args = argparse.Namespace(runtime=runtime, env=[], read_only=[sys.prefix, sys.base_prefix], memory=1 << 30,
                                  processes=64, scratch=1 << 20, inodes=64, bwrap=bwrap, plain=plain)
        command = bwrap_command(args, [sys.executable, "-c", "import os; assert os.getuid() == 1000"], None)
        return subprocess.run(command, capture_output=True, text=True, close_fds=False, cwd=runtime)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def check(bwrap: str) -> int:
    """Can a sandbox start here, as this user? Exit 0 (saying "plain: WHY" on stdout where only a --plain one can),
    or 1 having said why on stderr."""
    if shutil.which(bwrap) is None:
        print(f"{bwrap} is not there: bubblewrap is not installed (Debian and Ubuntu: apt install bubblewrap)",
              file=sys.stderr)
        return 1
    result = trial(bwrap, plain=False)
    said = result.stderr.strip().splitlines()
    if result.returncode and os.geteuid() != 0 and trial(bwrap, plain=True).returncode == 0:
        print(f"plain: {said[-1] if said else f'exit code {result.returncode}'}")  # ours failed, bwrap's own works
        return 0
    if result.returncode:
        print(f"bwrap cannot start a sandbox here: {result.stderr.strip() or f'exit code {result.returncode}'}",
              file=sys.stderr)
    return result.returncode


def main() -> None:
    if sys.argv[1:2] == ["--check"]:
        raise SystemExit(check(sys.argv[3] if sys.argv[2:3] == ["--bwrap"] else "bwrap"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bwrap", default="bwrap", help="the bubblewrap command")
    parser.add_argument("--runtime", required=True, help="the kernel's runtime folder (connection file, sockets)")
    parser.add_argument("--read-only", action="append", default=[], help="a folder the kernel may read")
    parser.add_argument("--memory", type=int, default=4 << 30, help="bytes of data memory")
    parser.add_argument("--processes", type=int, default=256, help="processes and threads at once")
    parser.add_argument("--scratch", type=int, default=512 << 20, help="bytes of each private folder, and of a file")
    parser.add_argument("--inodes", type=int, default=10_000, help="files and folders in each private folder")
    parser.add_argument("--cgroup", action="append", default=[], help="a cgroup folder to join first (one per "
                                                                       "hierarchy): the kernel's, made by the grader")
    parser.add_argument("--plain", action="store_true", help="bwrap's own user namespace: private folders capped in "
                                                             "size alone (where --check says so)")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE to pass to the kernel")
    parser.add_argument("--unfenced", action="store_true", help="no sandbox: the limits and a private home alone")
    parser.add_argument("--warm", metavar="SOCKET", help="start warm.py's parent, listening on SOCKET (in --runtime), "
                                                         "importing the modules given after --")
    parser.add_argument("kernel", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    kernel = args.kernel[1:] if args.kernel[:1] == ["--"] else args.kernel
    join_cgroups(args.cgroup)
    if args.unfenced:
        home, tmp = (os.path.join(args.runtime, name) for name in ("home", "tmp"))
        for folder in (home, tmp):
            os.makedirs(folder, exist_ok=True)
        command = limits(args.memory, args.processes, args.scratch) + kernel
        os.execvpe(command[0], command, environment(args.env, home, tmp))
    if args.warm:
        command = bwrap_command(args, [args.warm, *kernel], None, warm=True)
        os.execvp(command[0], command)
    command = bwrap_command(args, kernel, os.getcwd())  # nbgrader starts the kernel beside the notebook
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
