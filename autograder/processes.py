"""Processes a notebook leaves behind: found through /proc, and stopped."""

import ctypes
import os
import signal
import time

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphans of our descendants (a daemon a notebook started) become our children instead of init's, so we find them."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: children are still found, orphans are not
        pass


def parents() -> dict[int, int]:
    """pid -> parent pid of every process we can see."""
    found = {}
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else []:
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    found[int(entry.name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass  # it ended while we looked
    return found


def running(pids: list[int]) -> list[int]:
    """Those of `pids` that still run (not ended, not a zombie waiting for its parent)."""
    alive = []
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    alive.append(p)
        except (OSError, IndexError):
            pass
    return alive


def descendants(pid: int, spare: set[int] = frozenset()) -> list[int]:
    """Every process below `pid`, outside the subtrees of `spare`."""
    ppid = parents()
    tree, frontier = [], [c for c, parent in ppid.items() if parent == pid and c not in spare]
    while frontier:
        tree += frontier
        frontier = [c for c, parent in ppid.items() if parent in frontier]
    return tree


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
