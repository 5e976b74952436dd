"""Processes: a step run in a forked child, a lock between runs, and what a notebook leaves behind (found with psutil,
and stopped)."""

import ctypes
import gc
import multiprocessing
import os
import signal
import tempfile
import time

import psutil

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphans of our descendants (a daemon a notebook started) become our children instead of init's, so we find them."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: children are still found, orphans are not
        pass


def running(pids: list[int]) -> list[int]:
    """Those of `pids` that still run (not ended, not a zombie waiting for its parent)."""
    alive = []
    for p in pids:
        try:
            if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.Error:
            pass
    return alive


# What torchcourse.launch leaves in a kernel beside a GPU, where it starts ranks from a fork server: multiprocessing's
# fork server and resource tracker, which end with the kernel. Told apart by their command line, which a hand-in could
# copy: a process of its own would then be missing from the row's note only (it is stopped with the rest all the same).
LAUNCH_HELPERS = ("from multiprocessing.forkserver import main", "from multiprocessing.resource_tracker import main")


def launch_helpers(pids: list[int]) -> list[int]:
    """Those of `pids` that are multiprocessing's fork server or resource tracker (see LAUNCH_HELPERS)."""
    found = []
    for p in pids:
        try:
            if any(arg.startswith(LAUNCH_HELPERS) for arg in psutil.Process(p).cmdline()):
                found.append(p)
        except psutil.Error:
            pass
    return found


def descendants(pid: int, spare: set[int] = frozenset()) -> list[int]:
    """Every process below `pid`, outside the subtrees of `spare`."""
    try:
        tree = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    spared = set(spare)
    for process in tree:
        if process.pid in spared:
            try:
                spared |= {p.pid for p in process.children(recursive=True)}
            except psutil.Error:
                pass
    return [p.pid for p in tree if p.pid not in spared]


def kill(pids: list[int]) -> None:
    """SIGKILL these processes, and collect those that are our children so that none stays a zombie."""
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in pids:
        try:
            os.waitpid(p, 0)
        except ChildProcessError:
            pass  # not our child: its own parent, or init, collects it


def end(process: multiprocessing.Process) -> None:
    """SIGKILL a process forked with `fork` and collect it through multiprocessing, which then knows it ended: one
    collected behind its back stays in multiprocessing's list of children, whose every later poll of its PID could
    collect another child that got the PID since."""
    process.kill()
    process.join()


def stop_descendants(pid: int, spare: set[int] = frozenset()) -> int:
    """Stop every descendant of `pid` outside the subtrees of `spare`, until none is left; return how many."""
    stopped = 0
    for _ in range(50):  # a process may fork while we stop its parent: look again until the tree is empty
        tree = descendants(pid, spare)
        if not tree:
            break
        kill(tree)
        stopped += len(tree)
        time.sleep(0.02)
    return stopped


def fork(target, *args, name: str | None = None) -> multiprocessing.Process:
    """`target(*args)` in a forked process, started. What this process holds is frozen out of the collector's sight
    first (gc.freeze): the child's first full collection walked all of it, 0.1 s in every grading, and wrote into every
    page the child shared with its parent. (Cycles made here before a fork are then never collected: a batch is short.)"""
    gc.freeze()
    process = multiprocessing.get_context("fork").Process(target=target, args=args, name=name)
    process.start()
    return process


def in_child(function, *args):
    """`function(*args)` in a forked process, and its return value: this process never holds a database connection
    across a fork (a child sharing its parent's connection corrupts both)."""
    receive, send = multiprocessing.get_context("fork").Pipe(duplex=False)

    def target():
        send.send(function(*args))

    process = fork(target)
    send.close()
    try:
        value = receive.recv()
    except EOFError:  # it failed before sending: its traceback is on stderr
        value = None
    process.join()
    if process.exitcode:
        raise RuntimeError(f"{function.__name__} ended with exit code {process.exitcode}; see the messages above")
    return value


SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path (sockaddr_un's 108, its closing NUL taken off)


def socket_folder(prefix: str, below: int) -> str:
    """A new folder of this user's alone (mode 0700) for Unix sockets whose paths reach `below` characters past it: in
    the temporary folder, or in /tmp where that one is too deep for their paths."""
    base = tempfile.gettempdir()
    if len(os.path.join(base, prefix + "12345678", "")) + below > SOCKET_PATH_MAX:
        base = "/tmp"
    return tempfile.mkdtemp(prefix=prefix, dir=base)
