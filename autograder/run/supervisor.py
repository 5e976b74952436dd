"""The one supervisor of a batch's gradings: it hands hand-ins to a runner (this machine's slots, or Dask's workers),
settles each one's row whatever happened, shows progress, and stops launching when a grading fails for the grader's
own reason. `supervise` watches one grading; each Dask worker's gradings are watched by it."""

import multiprocessing
import multiprocessing.connection
import os
import sys
import time
from collections import deque
from dataclasses import replace
from typing import Callable, Protocol

from ..kernel import processes
from ..kernel.manager import WarmParents
from ..layout import output
from ..results import GRADER_FAILED, Job, last_line, read_result, settle

Grade = Callable[[Job], None]  # one hand-in's grading, run in a forked process (grade_one.run)


class BatchFailed(Exception):
    """A step of the batch itself failed; the rows graded before it are in grades.csv, and a rerun grades the rest."""


class Runner(Protocol):
    """Where gradings run: `Slots` (this machine) or `distributed.OnDask` (a Dask scheduler's workers)."""
    def free(self) -> bool: ...  # whether a grading can start now
    def handed_over(self) -> int: ...  # gradings launched that have not ended (nor been dropped)
    def launch(self, job: Job) -> None: ...
    def running(self) -> dict[str, float]: ...  # student -> when their grading started (time.monotonic)
    # those that ended since, each settled: (job, its exit code (GRADER_FAILED: no row), why the runner lost it for a
    # reason of the grader's own, no row either, or "")
    def ended(self, timeout: float) -> list[tuple[Job, int | None, str]]: ...
    def stop_launching(self) -> None: ...  # gradings handed over and not started are dropped (a rerun grades them)
    def interrupt(self) -> None: ...  # every grading stopped now


def run(runner: Runner, todo: list[Job], progress) -> None:
    """Grade `todo` through `runner`; rows land in each job's out/results. A grading that fails for the grader's own
    reason stops the launching of new ones: BatchFailed once the running ones are done. Ctrl-C: SystemExit(130)."""
    pending, failed = deque(todo), []
    try:
        while (pending and not failed) or runner.handed_over():
            while pending and not failed and runner.free():
                runner.launch(pending.popleft())
            progress.tick(runner.running())
            for job, exitcode, failure in runner.ended(timeout=1.0):
                why = failure or (last_line(output(job.out, "logs", job.student_id)) if exitcode == GRADER_FAILED else "")
                if why:
                    if not failed:
                        runner.stop_launching()
                    failed.append(f"grading {job.student_id}: {why}")
                else:
                    progress.update(read_result(output(job.out, "results", job.student_id)))
    except KeyboardInterrupt:
        runner.interrupt()
        print(f"\ninterrupted: {progress.done} graded; run the same command again to grade the rest", file=sys.stderr)
        raise SystemExit(130)
    if failed:
        raise BatchFailed(f"{failed[0]}" + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""))


class Slots:
    """This machine's `jobs` slots, each grading one hand-in at a time in a forked process, its kernel forked from the
    slot's warm parent (where there is one). A grading past `deadline` seconds is stopped with all it started, but
    for `spare`: processes of the batch's own beside the gradings (the report's)."""

    def __init__(self, parents: WarmParents, grade: Grade, deadline: float, spare: set[int] = frozenset()):
        self.parents, self.grade, self.deadline, self.spare = parents, grade, deadline, set(spare)
        self.idle = list(range(len(parents.slots)))[::-1]
        self.busy: dict = {}  # a grading's process sentinel -> (process, job, when it started, slot)

    def free(self) -> bool:
        return bool(self.idle)

    def handed_over(self) -> int:
        return len(self.busy)

    def launch(self, job: Job) -> None:
        slot = self.idle.pop()
        job = replace(job, warm=self.parents.socket_of(slot))
        process = processes.fork(self.grade, job, name=job.student_id)
        self.busy[process.sentinel] = (process, job, time.monotonic(), slot)

    def running(self) -> dict[str, float]:
        return {job.student_id: at for _, job, at, _ in self.busy.values()}

    def ended(self, timeout: float) -> list[tuple[Job, int | None, str]]:
        ready, done = multiprocessing.connection.wait(list(self.busy), timeout=timeout), []
        for sentinel in list(self.busy):
            process, job, started, slot = self.busy[sentinel]
            over = time.monotonic() - started > self.deadline
            if sentinel not in ready and not over:
                continue
            del self.busy[sentinel]
            self.idle.append(slot)
            if over:
                processes.end(process)
                others = {p.pid for p, *_ in self.busy.values()}
                processes.stop_descendants(os.getpid(), spare=others | self.parents.pids() | self.spare)
            else:
                process.join()
            done.append((job, settle(job, None if over else process.exitcode, self.deadline), ""))
        return done

    def stop_launching(self) -> None:
        pass  # nothing is handed over before a slot is free

    def interrupt(self) -> None:
        for process, *_ in self.busy.values():
            processes.end(process)
        self.parents.close()
        processes.stop_descendants(os.getpid())


def supervise(job: Job, grade: Grade, deadline: float, stop_asked=lambda: False, poll: float = 1.0) -> int | None | str:
    """Grade `job` in a forked process; stop it, with all it started, at the deadline or when `stop_asked()`; settle
    its row. Returns the grading's exit code (None: stopped at the deadline), or "stopped" when asked (no row)."""
    process, started = processes.fork(grade, job, name=job.student_id), time.monotonic()
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
