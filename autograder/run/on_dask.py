"""Grade a class on the workers of a dask.distributed scheduler: `python -m autograder grade ... --scheduler ADDRESS`.

Start the scheduler on one machine, and one worker on each grading machine, from the course folder, with the course's
Python environment (the grader installed in it, as `make setup` makes it) at the same paths as on the instructor's
machine, and bubblewrap installed:

    dask scheduler                                               # listens on tcp://host:8786
    dask worker tcp://host:8786 --nthreads N --nworkers 1        # N: the hand-ins this machine grades at once

Each hand-in is one task. It carries what a worker cannot read from the course folder: the batch's template course
(made by the instructor's command, fetched once by each worker and unpacked into its temporary folder) and the
hand-in's bytes. The worker grades it with `grade_one.run` in a process of its own, in the same sandbox and with the
same time limit as a local batch, its kernel forked from one of the worker's warm parents (one per `--nthreads`),
and sends back the row, the feedback, the graded notebook and the log; the instructor's command writes them into
its output folder, the table and the gradebook as a local batch does.

A worker that dies while grading loses nothing: the scheduler gives its hand-ins to another worker (a hand-in whose
workers die `distributed.scheduler.allowed-failures` + 1 times, 4 by default, gets a 'crashed' row). A scheduler
lost stops the batch like a failed step: the rows graded are kept, and the same command grades the rest.
Nothing here is imported without `--scheduler`, and the grading processes never import Dask.
"""

import base64
import io
import json
import os
import pickle
import select
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

from ..kernel.processes import socket_folder
from ..layout import RETURNED, output, replace_file
from ..results import GRADER_FAILED, Job, read_result, settle, write_result

CONNECT_TIMEOUT = 30  # seconds to reach the scheduler, and then to see a first worker
POLL = 1.0  # seconds between a worker's looks at its grading (and at the batch's stop signal)
SERVER, SERVER_LOCK = [], threading.Lock()  # this worker process's fork server and its socket, and who may start it


# --- the instructor's side ---------------------------------------------------------------------------------------

class OnDask:
    """A batch's runner (supervisor.Runner) on the workers of the scheduler at `address`: every hand-in is handed over
    at once, each worker grading as many at a time as its `--nthreads`; the same files land in job.out as locally."""

    def __init__(self, address: str, template: Path, deadline: float):
        from distributed import Event  # lazily: the grader imports Dask only with --scheduler
        self.client, self.deadline = connect(address), deadline
        # The batch's name keys its template on the workers (its folder, removed at the end), not the template's hash:
        # shards of one class started together can make byte-identical templates, and one's end would remove the other's.
        self.batch = uuid.uuid4().hex[:20]
        self.stop = Event(f"autograder-stop-{self.batch}", client=self.client)
        # The template is a task's result, not scattered data: if every worker holding it dies, the scheduler makes it
        # again from this task, where scattered data would be lost, and every hand-in still to grade with it.
        self.template = self.client.submit(held, pack(template), key=f"autograder-template-{self.batch}", pure=False)
        self.futures: dict = {}  # each task handed over and not yet ended -> its job

    def free(self) -> bool:
        return True  # the scheduler queues them

    def handed_over(self) -> int:
        return len(self.futures)

    def launch(self, job: Job) -> None:
        future = self.client.submit(grade_remotely, self.template, self.batch, job, handin_of(job), self.deadline,
                                    os.getcwd(), self.stop.name, key=f"grade-{job.student_id}-{self.batch}", pure=False,
                                    retries=0)
        self.futures[future] = job

    def running(self) -> dict[str, float]:
        return {}  # the workers keep the time; the progress line counts what ended

    def ended(self, timeout: float) -> list[tuple[Job, int | None, str]]:
        from distributed import wait
        try:
            done = wait(list(self.futures), timeout=timeout, return_when="FIRST_COMPLETED").done
        except TimeoutError:
            return []
        ended = []
        for future in done:
            job = self.futures.pop(future)
            if future.cancelled():  # by the scheduler (the connection to it lost, say): the batch's failure, not a row
                ended.append((job, None, dropped(future)))
            else:
                ended.append((job, write_back(job, outcome_of(future), self.deadline), ""))
        return ended

    def stop_launching(self) -> None:
        """Drop the tasks no worker has started yet (a rerun grades them)."""
        started = {key for keys in self.client.processing().values() for key in keys}
        waiting = [f for f in self.futures if f.key not in started]
        self.client.cancel(waiting)
        for future in waiting:
            del self.futures[future]

    def interrupt(self) -> None:
        """The workers end the gradings they are running (Dask does not interrupt a running task)."""
        try:
            self.stop.set()
            self.client.cancel(list(self.futures))
        except Exception:  # the scheduler is gone: the gradings under way end by their deadline
            pass

    def close(self) -> None:
        """The batch's template removed from the workers' temporary folders (best effort: a worker gone keeps its
        own), and the connection closed."""
        try:
            self.client.run(remove_template, self.batch, on_error="ignore")
        except Exception:
            pass
        self.client.close()


def connect(address: str):
    """A client of the scheduler at `address` that sees at least one worker, or SystemExit saying what is missing."""
    from distributed import Client
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT)
    except Exception as error:  # unreachable, refused, or not an address: all mean the same to the instructor
        raise SystemExit(f"cannot reach the Dask scheduler at {address} ({error}); start it with `dask scheduler`, "
                         "or grade on this machine without --scheduler") from None
    try:
        client.wait_for_workers(1, timeout=CONNECT_TIMEOUT)
    except TimeoutError:
        client.close()
        raise SystemExit(f"the Dask scheduler at {address} has no workers after {CONNECT_TIMEOUT} s; start one on each "
                         f"grading machine, from the course folder: `dask worker {address} --nthreads N`") from None
    return client


def pack(folder: Path) -> bytes:
    """The folder as an uncompressed tar (a few hundred KB: a course's source, release and gradebook)."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.add(folder, arcname="template")
    return data.getvalue()


def held(tar: bytes) -> bytes:
    """The template's task: its value is its argument, kept by the scheduler."""
    return tar


def handin_of(job: Job) -> bytes | None:
    """The hand-in's bytes, sent with its task (None where it can no longer be read: its grading fails, as locally)."""
    try:
        return Path(job.submitted).read_bytes()
    except OSError:
        return None


def outcome_of(future) -> dict:
    """What the task sent back; for a task that failed as a whole, a 'crashed' row saying what happened."""
    from distributed import KilledWorker
    try:
        return future.result()
    except KilledWorker as error:
        why = (f"the Dask workers grading it died {error.allowed_failures + 1} times "
               f"(the last: {error.last_worker.address}); it was not graded")
    except Exception as error:  # the task could not run or ended with an error: the row says so, the batch goes on
        why = f"grading on a Dask worker failed ({type(error).__name__}: {error})"
    return {"result": None, "crashed": why, "exitcode": None}


def dropped(future) -> str:
    """Why the scheduler cancelled a task."""
    try:
        future.result()
    except Exception as error:
        return f"the Dask scheduler dropped it ({getattr(error, 'reason', error)})"
    return "the Dask scheduler dropped it"


def write_back(job: Job, outcome: dict, deadline: float) -> int | None:
    """The grading's files into job.out, and its row settled as a local one is; returns the grading's exit code."""
    out, sid = Path(job.out), job.student_id
    for folder in RETURNED:
        if outcome.get(folder) is not None:
            replace_file(output(out, folder, sid), outcome[folder])
    if outcome["result"] is not None:  # the worker's own supervisor settled it: settle keeps it
        write_result(output(job.out, "results", job.student_id), outcome["result"])
    return settle(job, outcome["exitcode"], deadline, crashed=outcome.get("crashed") or "")


# --- a worker's side ----------------------------------------------------------------------------------------------

def template_folder(batch: str) -> Path:
    """Where a worker keeps the batch's template: in its temporary folder, named after this user and the batch."""
    return Path(tempfile.gettempdir()) / f"autograder-dask-{os.getuid()}-{batch}"


def remove_template(batch: str) -> None:
    shutil.rmtree(template_folder(batch), ignore_errors=True)


def unpacked(tar: bytes, batch: str) -> Path:
    """The batch's template unpacked in a folder of this user's alone (mode 0700), once per worker machine.

    Two tasks may unpack at once: each into a folder of its own, renamed into place; the loser's copy is dropped.
    """
    folder = template_folder(batch)
    if not folder.exists():
        fresh = Path(tempfile.mkdtemp(prefix=".autograder-dask-", dir=folder.parent))  # mode 0700
        try:
            with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
                # The grader made this archive; the "data" filter is a second guard where Python has it (3.11.4+):
                # requires-python allows older ones, Debian 12's 3.11.2 among them
                archive.extractall(fresh, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            os.rename(fresh, folder)
        except OSError:
            if not folder.exists():
                raise
            # else another task of this batch renamed its copy into place first
        finally:
            shutil.rmtree(fresh, ignore_errors=True)  # nothing is left there once renamed
    info = os.lstat(folder)
    # The name is predictable: a folder someone else made there (to read the kernels' sockets) must not be used.
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise RuntimeError(f"{folder} is not a private folder of this user's; remove it")
    return folder


def grade_remotely(tar: bytes, batch: str, job: Job, handin: bytes | None, deadline: float, course: str,
                   stop: str) -> dict:
    """The task: grade one hand-in on this worker and return what the instructor's command writes.

    {"result": the row or None, "exitcode": the grading's, "feedback"/"autograded"/"logs": the files' bytes or None}
    """
    problem = missing_here(job, course)
    if problem:
        return {"result": None, "exitcode": GRADER_FAILED, "logs": f"{problem}\n".encode()}
    base = unpacked(tar, batch)
    local = Path(tempfile.mkdtemp(prefix="handin-", dir=base))
    try:
        here = localised(job, base, local, handin)
        exitcode = supervised(here, deadline, course, stop)
        found = {folder: read_bytes(output(here.out, folder, job.student_id))
                 for folder in RETURNED}
        return {"result": read_result(output(here.out, "results", here.student_id)), "exitcode": exitcode, **found}
    finally:
        shutil.rmtree(local, ignore_errors=True)


def missing_here(job: Job, course: str) -> str | None:
    """Why this worker cannot grade (no course folder where the instructor's is), or None."""
    from distributed import get_worker
    for path in (course, *(job.config or {}).get("SandboxedKernelManager", {}).get("read_only", [])):
        if path and not os.path.exists(path):
            return (f"the Dask worker {get_worker().address} has no {path}: start each worker on a machine that "
                    "holds the course folder at the same path")
    return None


def localised(job: Job, base: Path, local: Path, handin: bytes | None) -> Job:
    """The job with this worker's paths: the unpacked template, the hand-in written here, and a local out folder."""
    for folder in ("results", *RETURNED):
        (local / "out" / folder).mkdir(parents=True)
    submitted = local / "handin"
    if handin is not None:
        submitted.write_bytes(handin)  # else its grading fails on the missing file: a 'crashed' row, as locally
    return replace(job, submitted=str(submitted), template=str(base / "template"), scratch=str(local / "scratch"),
                   out=str(local / "out"))


def read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def supervised(job: Job, deadline: float, course: str, stop: str) -> int | None:
    """Grade through this worker's fork server (see `serve`); the grading's exit code, None after a timeout."""
    from distributed import Event, get_worker
    threads = max(1, (os.cpu_count() or 1) // get_worker().state.nthreads)  # the cores shared among the gradings
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # as batch.grade sets
           "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    # pickled: the job holds the course's configuration as a traitlets Config (sets, tuples); the server is ours
    order = base64.b64encode(pickle.dumps({"job": job, "deadline": deadline, "course": course, "env": env,
                                           "at_once": get_worker().state.nthreads})) + b"\n"
    interrupt, started, said = Event(stop), time.monotonic(), b""
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(str(fork_server()))
        connection.sendall(order)
        while True:
            if select.select([connection], [], [], POLL)[0]:
                chunk = connection.recv(65536)
                said += chunk
                if not chunk:
                    break
            # the grading's supervisor keeps the deadline; far past it, it is stuck: closing the connection stops it
            elif stopped(interrupt) or time.monotonic() - started > deadline + 120:
                break
    lines = said.decode(errors="replace").strip().splitlines()
    return json.loads(lines[-1])["exitcode"] if lines else None


def fork_server() -> Path:
    """The socket of this worker process's fork server, started on its first grading.

    A grading is forked from it, not from the worker: a Dask worker runs tasks in threads, and under a nanny it is a
    daemon, which multiprocessing forbids children. The server imports the grader once (seconds), then forks each
    grading's supervisor in milliseconds. It ends with its worker.
    """
    with SERVER_LOCK:
        if SERVER and SERVER[0].poll() is None:
            return SERVER[1]
        # mode 0700: nobody else may ask for gradings; under /tmp where $TMPDIR is too deep for a socket's address
        # (108 bytes at most)
        folder = Path(socket_folder("autograder-forks-", below=len("socket")))
        path = folder / "socket"
        process = subprocess.Popen([sys.executable, "-m", "autograder.run.fork_server", str(path)],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        process.stdout.readline()  # "ready": listening, the grader imported
        SERVER[:] = [process, path]
        return path


def stopped(interrupt) -> bool:
    """Whether the instructor interrupted the batch."""
    try:
        return interrupt.is_set()
    except Exception:  # the scheduler is out of reach for now: the grading goes on
        return False
