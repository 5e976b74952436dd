"""A Dask worker's fork server (`python -m autograder.fork_server SOCKET`, started by distributed.fork_server): it
imports the grader once, then forks a supervisor for each grading a task asks for, its kernel forked from one of the
worker's warm parents. No module imports it: it stands where the supervisor does, above the gradings it watches."""

import base64
import json
import os
import pickle
import select
import shutil
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..grading import grade_one
from ..kernel import processes
from . import supervisor
from ..kernel.manager import WarmParents
from ..results import Job

POLL = 1.0  # seconds between a supervisor's looks at its grading and at the connection (closed: stop it)


def serve(path: str) -> None:
    """The fork server: for each connection, read its order and fork a supervisor (`supervise`), its kernels forked
    from a warm parent of this worker's (`WarmSlots`); end, with the warm parents, when the worker ends."""
    worker = os.getppid()
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(64)
    warm = WarmSlots()
    print("ready", flush=True)
    try:
        while os.getppid() == worker:
            warm.reap()
            if not select.select([server], [], [], POLL)[0]:
                continue
            connection, _ = server.accept()
            line = connection.makefile("rb").readline()  # the worker's thread sends its order at once
            if not line:
                connection.close()
                continue
            order = pickle.loads(base64.b64decode(line))
            slot, order["job"] = warm.claim(order["job"], order["at_once"])
            pid = os.fork()
            if pid == 0:
                server.close()
                try:
                    supervise(connection, order)
                finally:
                    os._exit(0)  # nothing left to do: skip the interpreter's teardown
            warm.busy[pid] = slot
            connection.close()
    finally:
        warm.close()
        shutil.rmtree(Path(path).parent, ignore_errors=True)


class WarmSlots:
    """This worker's warm parents (kernel.WarmParents): one per grading it runs at once, for the batch being graded (its
    template names it); a grading that finds none free, or a second batch graded at the same time, starts its kernel
    afresh, as `--unfenced` or a GPU machine does (the row's log says which)."""

    def __init__(self):
        self.pool, self.batch = None, None
        self.busy: dict[int, int | None] = {}  # the pid of each supervisor running -> the slot it uses (None: none)

    def claim(self, job: Job, at_once: int) -> tuple[int | None, Job]:
        """A free slot for `job` (None: no warm parent for it) and the job, told the slot's socket."""
        if job.template != self.batch and not self.busy:  # a new batch: warm parents with its configuration
            self.close()
            try:
                self.pool = WarmParents(max(1, at_once), job.config).ready()
            except Exception as error:  # its kernels start afresh; the worker's log says why
                print(f"autograder: no warm kernels on this worker ({error})", file=sys.stderr, flush=True)
            self.batch = job.template
        if self.pool is None or job.template != self.batch:
            return None, job
        deadline = time.monotonic() + 2  # a worker's next task can come while the last one's supervisor is ending
        while True:
            used = set(self.busy.values())
            slot = next((k for k in range(len(self.pool.slots)) if k not in used and self.pool.socket_of(k)), None)
            if slot is not None or not self.busy or time.monotonic() > deadline:
                break
            time.sleep(0.02)
            self.reap()
        return slot, job if slot is None else replace(job, warm=self.pool.socket_of(slot))

    def reap(self) -> None:
        """Collect the supervisors that ended, freeing their slots (only them: the warm parents are children too)."""
        for pid in list(self.busy):
            try:
                ended = os.waitpid(pid, os.WNOHANG)[0]
            except ChildProcessError:
                ended = pid
            if ended:
                del self.busy[pid]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        self.pool, self.batch = None, None


def supervise(connection: socket.socket, order: dict) -> None:
    """The grading's parent on a worker: supervises the order's grading as the local pool does (supervisor.supervise),
    stopping it when the connection closes (the batch interrupted, or its worker gone); sends back its exit code."""
    os.chdir(order["course"])  # as batch.grade works from the course folder
    os.environ.update(order["env"])
    processes.become_subreaper()  # what the grading leaves behind stays below this process, where we stop it
    exitcode = supervisor.supervise(order["job"], grade_one.run, order["deadline"],
                                 stop_asked=lambda: bool(select.select([connection], [], [], 0)[0]))
    if exitcode != "stopped":  # else nobody waits for it: the batch stopped, or the scheduler gave it to another worker
        connection.sendall(json.dumps({"exitcode": exitcode}).encode() + b"\n")


if __name__ == "__main__":
    serve(sys.argv[1])
