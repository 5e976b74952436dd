"""Start a student's kernel fenced in: a memory limit, and folders it can read but not change.

    python autograder/sandbox.py --memory BYTES --protect DIR ... --writable DIR -- KERNEL COMMAND ...

Run as a script (not `-m`) so the kernel it becomes starts with a clean sys.path. Linux only; elsewhere, and where
user namespaces are not allowed, it says so on stderr and starts the kernel with the memory limit alone.
"""

import argparse
import ctypes
import os
import resource
import sys

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
# statvfs() flag -> mount() flag: a remount inside a user namespace must keep the flags the mount already has.
KEPT_FLAGS = {os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC, os.ST_NOATIME: MS_NOATIME,
              os.ST_NODIRATIME: MS_NODIRATIME, os.ST_RELATIME: MS_RELATIME}


def limit_memory(nbytes: int) -> None:
    """Cap the address space: an allocation past it raises MemoryError instead of taking the machine down."""
    resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfault should not write a core file into the scratch folder


def _call(libc, name, *args) -> None:
    if getattr(libc, name)(*args) != 0:
        raise OSError(ctypes.get_errno(), f"{name}{args}: {os.strerror(ctypes.get_errno())}")


def _enter_user_namespace(libc) -> None:
    """A new user and mount namespace in which this process may mount, mapped to the same user outside."""
    uid, gid = os.getuid(), os.getgid()
    _call(libc, "unshare", CLONE_NEWUSER | CLONE_NEWNS)
    for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                       ("/proc/self/gid_map", f"{gid} {gid} 1")):
        with open(path, "w") as f:
            f.write(text)


def fence(protect: list[str], writable: list[str]) -> None:
    """Make `protect` read-only for this process and its children, except the `writable` folders inside them."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
    _enter_user_namespace(libc)
    _call(libc, "mount", None, b"/", None, MS_REC | MS_PRIVATE, None)  # nothing we do here leaks out
    for path in protect:
        _call(libc, "mount", path.encode(), path.encode(), None, MS_BIND | MS_REC, None)
    for path in writable:  # mounted on top before the read-only remount, which touches only the mount below
        _call(libc, "mount", path.encode(), path.encode(), None, MS_BIND | MS_REC, None)
    for path in protect:
        kept = sum(m for st, m in KEPT_FLAGS.items() if os.statvfs(path).f_flag & st)
        _call(libc, "mount", None, path.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept, None)
    # A second user namespace locks those mounts: code running inside can neither unmount them nor make them
    # writable again (mount_namespaces(7), "locked mounts").
    _enter_user_namespace(libc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", type=int, required=True, help="address-space limit in bytes")
    parser.add_argument("--protect", action="append", default=[], help="a folder to make read-only")
    parser.add_argument("--writable", action="append", default=[], help="a folder inside them to keep writable")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    protect = [os.path.realpath(p) for p in args.protect if os.path.isdir(p)]
    writable = [os.path.realpath(p) for p in args.writable if os.path.isdir(p)]
    if protect:
        try:
            fence(protect, writable)
        except (OSError, AttributeError) as error:
            print(f"autograder: student code is not fenced off from the course's files ({error})", file=sys.stderr)
    limit_memory(args.memory)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
