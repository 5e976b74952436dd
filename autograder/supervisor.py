"""One supervisor for every way of running a grading: each grading forked with its deadline and settled into its row
whatever happened (`supervise`, `settle`), and the pool that runs a batch's gradings N at once, each slot with a warm
kernel to fork (`Pool`). The local batch uses the pool; each Dask worker supervises its gradings with `supervise`."""

import multiprocessing
import multiprocessing.connection
import os
import shutil
import sys
import tempfile
import time
from collections import deque
from dataclasses import asdict, replace
from pathlib import Path

from . import grade_one, processes
from .layout import output
from .kernel import WarmParent, WarmUnavailable
from .results import GRADER_FAILED, Job, not_graded, read_result, write_result


class BatchFailed(Exception):
    """A step of the batch itself failed; the rows graded before it are in grades.csv, and a rerun grades the rest."""


def last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def result_path(job: Job) -> Path:
    return output(job.out, "results", job.student_id)


def start(job: Job) -> multiprocessing.Process:
    """The grading in a forked process: the caller has imported the grader, so the fork is ready at once."""
    return processes.fork(grade_one.run, job, name=job.student_id)


def settle(job: Job, exitcode: int | None, deadline: float, crashed: str = "") -> int | None:
    """The row of a finished grading, whatever happened: its own, a 'timeout' row (exitcode None: stopped at the
    deadline) or a 'crashed' row where it left none (saying `crashed`, or its exit code). A grading that failed for the
    grader's own reason (GRADER_FAILED) gets no row: the batch stops, and a rerun grades it. Returns `exitcode`."""
    path = result_path(job)
    if exitcode is None and not crashed:
        write_result(path, asdict(not_graded(
            job, "timeout", f"grading took longer than {deadline:.0f} s in all and was stopped")))
    elif exitcode != GRADER_FAILED and read_result(path) is None:
        write_result(path, asdict(not_graded(
            job, "crashed", crashed or f"the grading process ended unexpectedly (exit code {exitcode})")))
    return exitcode


def supervise(job: Job, deadline: float, stop_asked=lambda: False, poll: float = 1.0) -> int | None | str:
    """Grade `job` in a forked process; stop it, with all it started, at the deadline or when `stop_asked()`; settle
    its row. Returns the grading's exit code (None: stopped at the deadline), or "stopped" when asked (no row)."""
    process, started = start(job), time.monotonic()
    try:
        while process.exitcode is None and time.monotonic() - started <= deadline:
            if stop_asked():
                return "stopped"
            multiprocessing.connection.wait([process.sentinel], timeout=poll)
    finally:
        over = process.exitcode is None
        if over:
            processes.end(process)
        processes.stop_descendants(os.getpid())
    return settle(job, None if over else process.exitcode, deadline)


class Pool:
    """`jobs` slots, each grading one hand-in at a time in a forked process, its kernel forked from the slot's warm
    parent (where there is one: else each kernel starts afresh, which the batch's output says once). A parent per slot,
    though one could fork for all: each parent's sandbox is a user namespace of its own, where the process limit
    counts its kernels only, so that a fork bomb in one slot leaves a kernel graded beside it its whole limit."""

    def __init__(self, jobs: int, config):
        self.slots: list[WarmParent | None] = [None] * jobs
        # the kernels' sockets go under it, and a socket's path may not exceed 107 bytes: a long $TMPDIR gives way
        self.folder = Path(tempfile.mkdtemp(prefix="autograder-slots-", dir=None if len(tempfile.gettempdir()) <= 40 else "/tmp"))
        try:  # started together, in the background: `ready` waits for them
            self.slots = [WarmParent(self.folder / f"slot-{k}", config) for k in range(jobs)]
        except WarmUnavailable as why:
            self.unavailable(why)

    def ready(self) -> "Pool":
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
        parent = self.slots[slot]
        return parent.socket if parent is not None and parent.alive() else ""

    def spare(self) -> set[int]:
        return {slot.process.pid for slot in self.slots if slot is not None}

    def close(self) -> None:
        for slot in self.slots:
            if slot is not None:
                slot.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def run(self, todo: list[Job], deadline: float, progress, spare: set[int] = frozenset()) -> None:
        """Grade `todo`, a slot each at a time, each with a wall-clock limit; results land in out/results/. `spare`:
        processes of the batch's own beside the gradings, which a grading stopped at its deadline leaves running.

        A grading that fails for the grader's own reason stops the launching of new ones: BatchFailed once the
        running ones are done."""
        pending, running, failed, free = deque(todo), {}, [], list(range(len(self.slots)))[::-1]
        try:
            while (pending and not failed) or running:
                while pending and not failed and free:
                    slot = free.pop()
                    job = replace(pending.popleft(), warm=self.socket_of(slot))
                    process = start(job)
                    running[process.sentinel] = (process, job, time.monotonic(), slot)
                progress.tick({j.student_id: at for _, j, at, _ in running.values()})
                ready = multiprocessing.connection.wait(list(running), timeout=1.0)
                for sentinel in list(running):
                    process, job, started, slot = running[sentinel]
                    over = time.monotonic() - started > deadline
                    if sentinel not in ready and not over:
                        continue
                    del running[sentinel]
                    free.append(slot)
                    if over:
                        processes.end(process)
                        processes.stop_descendants(os.getpid(), spare={p.pid for p, *_ in running.values()} | self.spare() | spare)
                    else:
                        process.join()
                    if settle(job, None if over else process.exitcode, deadline) == GRADER_FAILED:
                        failed.append(f"grading {job.student_id}: {last_line(output(job.out, 'logs', job.student_id))}")
                        continue
                    progress.update(read_result(result_path(job)))
        except KeyboardInterrupt:
            for process, *_ in running.values():
                processes.end(process)
            self.close()
            processes.stop_descendants(os.getpid())
            print(f"\ninterrupted: {progress.done} graded; run the same command again to grade the rest", file=sys.stderr)
            raise SystemExit(130)
        if failed:
            raise BatchFailed(f"{failed[0]}" + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""))
