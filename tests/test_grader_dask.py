"""The bulk grader on dask.distributed workers (`--scheduler`): the same rows and gradebook as a local batch, no row
lost when a worker dies mid-batch, and no Dask imported without `--scheduler`."""

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from nbgrader.api import Gradebook

from autograder.run import on_dask as on_dask
from autograder.results import GRADER_FAILED, Job, Result, read_result
from course import ROOT
from handins import (ASSIGNMENT, FIRST, NOTEBOOK, SECOND, grade, handin, private_env, right, right_answers, rows_of,
                     scratch_course, write, write_folder)

pytestmark = [pytest.mark.xdist_group("grader-dask"), pytest.mark.sandbox, pytest.mark.slow]
BIN = Path(sys.executable).parent
TIMEOUT = ("--timeout", "10")  # seconds a cell may run: the infinite loop costs this much in each batch

# `python -m autograder ARGS` where importing Dask fails and is written down (in the file $DASK_IMPORTS), in this
# process and in the gradings it forks: an import swallowed by an `except ImportError` is still seen.
WITHOUT_DASK = """
import importlib.abc, os, runpy, sys
class NoDask(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("dask", "distributed"):
            with open(os.environ["DASK_IMPORTS"], "a") as f:
                print(name, file=f)
            raise ImportError(f"{name} imported without --scheduler")
sys.meta_path.insert(0, NoDask())
runpy.run_module("autograder", run_name="__main__", alter_sys=True)
"""


@dataclass
class Cluster:
    address: str
    client: object  # a distributed.Client of the scheduler
    processes: dict  # "scheduler", "a", "b" -> its Popen (each the leader of a session of its own)
    folders: dict  # the same names -> the folder holding its HOME, TMPDIR and output


def start(command: list, folder: Path) -> subprocess.Popen:
    """One process of the cluster, from the repository, in a session of its own, its output in folder/out.txt."""
    env = private_env(folder)
    with open(folder / "out.txt", "w") as out:
        return subprocess.Popen([str(c) for c in command], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def kill(process: subprocess.Popen) -> None:
    """SIGKILL the process's whole group (a worker and the gradings it runs), and collect it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


@pytest.fixture
def cluster(tmp_path):
    """A scheduler and two workers of one thread each ('a' and 'b') on 127.0.0.1, all stopped at the end."""
    from distributed import Client
    file = tmp_path / "scheduler.json"
    folders = {name: tmp_path / name for name in ("scheduler", "a", "b")}
    started = {}
    try:
        started["scheduler"] = start([BIN / "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
                                      "--scheduler-file", file, "--no-dashboard"], folders["scheduler"])
        for name in ("a", "b"):
            started[name] = start([BIN / "dask", "worker", "--scheduler-file", file, "--nthreads", "1", "--name", name,
                                   "--no-dashboard", "--no-nanny"], folders[name])
        deadline = time.monotonic() + 60
        while not file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        with Client(scheduler_file=str(file), timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
            yield Cluster(client.scheduler.address, client, started, folders)
    finally:
        for process in started.values():
            kill(process)


def without_dask(*args: str, env: dict) -> subprocess.CompletedProcess:
    """`python -m autograder ARGS` from the repository, with Dask's import refused and written down."""
    return subprocess.run([sys.executable, "-c", WITHOUT_DASK, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def small_class() -> dict[str, str | None]:
    return {
        "right": write(right()),
        "wrong": write(right(**{FIRST: "def mean(xs):\n    return sum(xs) / (len(xs) + 1)"})),
        "unedited": write(handin()),
        "loop": write(right(**{SECOND: "while True:\n    pass"})),
        "exits": write(right(**{SECOND: "import os\nos._exit(3)"})),
        "truncated": write(right())[:1500],
        "not_json": "These are my answers: 1. the mean ...",
        "no_notebook": None,
    }


def scores_in_gradebook(course: Path, students) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course}/autograder/gradebook.db") as gb:
        return {s: gb.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, s).score for s in students}


def test_workers_grade_a_class_as_a_local_batch_does(tmp_path, cluster):
    """Every row (but its message), the feedback and the gradebook's scores are those of `--jobs 2` on this machine;
    and the local batch imports no Dask; every kernel on the workers was forked from its worker's warm parent."""
    submissions = write_folder(tmp_path / "submissions", small_class())
    local, remote = scratch_course(tmp_path / "local"), scratch_course(tmp_path / "remote")
    imports = tmp_path / "dask-imports.txt"
    env = private_env(tmp_path / "env-local", DASK_IMPORTS=str(imports))
    result = without_dask("grade", ASSIGNMENT, str(submissions), "--jobs", "2", *TIMEOUT, "--course", str(local),
                          env=env)
    assert result.returncode == 0, f"the local batch failed:\n{result.stderr}"
    assert not imports.exists(), f"grading without --scheduler imported {imports.read_text()}"
    result = grade(remote, submissions, *TIMEOUT, "--scheduler", cluster.address)
    assert f"on the workers of {cluster.address}" in result.stderr

    expected = rows_of(local / "autograder" / "grades" / ASSIGNMENT)
    out = remote / "autograder" / "grades" / ASSIGNMENT
    got = rows_of(out)
    assert sorted(got) == sorted(expected) == sorted(small_class())
    for student, row in expected.items():
        assert {k: v for k, v in got[student].items() if k != "message"} == \
               {k: v for k, v in row.items() if k != "message"}, f"{student}: {got[student]['message']}"
    statuses = [got[s]["status"] for s in ("right", "loop", "exits", "truncated")]
    assert statuses == ["graded", "timeout", "crashed", "invalid"]
    for student, row in got.items():
        if row["status"] not in ("invalid", "missing"):
            assert (out / "feedback" / f"{student}.html").stat().st_size, f"{student} has no feedback"
            assert (out / "autograded" / f"{student}.ipynb").exists() and (out / "logs" / f"{student}.log").exists()
            assert "kernel forked from the slot's warm parent" in (out / "logs" / f"{student}.log").read_text(), \
                f"{student}'s kernel was not forked from its worker's warm parent"
    assert scores_in_gradebook(remote, got) == scores_in_gradebook(local, got) == \
           {s: float(row["score"]) for s, row in got.items()}
    assert not list(Path(cluster.folders["a"], "tmp").glob("autograder-dask-*")), "the template was left on worker a"


def started_on(folder: Path) -> list[str]:
    """The students whose grading has begun on the worker whose TMPDIR is folder/tmp (their log exists)."""
    return [p.stem for p in (folder / "tmp").glob("autograder-dask-*/handin-*/out/logs/*.log")]


def test_a_worker_killed_mid_batch_loses_no_row(tmp_path, cluster):
    """SIGKILL worker 'a' while it grades: the scheduler gives its hand-in to 'b', and every student gets a row."""
    slow = "import time\ntime.sleep(5)\n"  # long enough to catch a grading under way
    class_ = {f"s{k}": write(right(**{FIRST: slow + right_answers()[FIRST]})) for k in range(1, 5)}
    submissions = write_folder(tmp_path / "submissions", class_)
    course = scratch_course(tmp_path / "course")
    command = [sys.executable, "-m", "autograder", "grade", ASSIGNMENT, str(submissions), *TIMEOUT,
               "--course", str(course), "--scheduler", cluster.address]
    batch = subprocess.Popen(command, cwd=ROOT, env=private_env(tmp_path / "env"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (victims := started_on(cluster.folders["a"])) and time.monotonic() < deadline:
            assert batch.poll() is None, f"the batch ended before worker a began a grading: {batch.stderr.read()}"
            time.sleep(0.2)
        assert victims, "worker a never began a grading"
        kill(cluster.processes["a"])
        _, stderr = batch.communicate(timeout=400)
    finally:
        if batch.poll() is None:
            batch.kill()
    assert batch.returncode == 0, f"the batch failed:\n{stderr}"
    rows = rows_of(course / "autograder" / "grades" / ASSIGNMENT)
    assert sorted(rows) == sorted(class_), "a student has no row"
    for student, row in rows.items():
        assert row["status"] == "graded", f"{student} ({'killed' if student in victims else 'not killed'}): " \
                                          f"{row['status']} ({row['message']})"
        assert float(row["score"]) == float(row["max_score"]) > 0, student
    assert len(cluster.client.scheduler_info()["workers"]) == 1, "worker a was not killed"


def test_no_dask_without_scheduler(tmp_path):
    """Importing the grader, and its --help, import nothing of Dask (a grading without --scheduler is checked above)."""
    check = "import autograder.run.batch, autograder.__main__, sys; " \
            "assert not [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')]"
    imported = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    imports = tmp_path / "dask-imports.txt"
    result = without_dask("grade", "--help", env=dict(os.environ, DASK_IMPORTS=str(imports)))
    assert result.returncode == 0 and "--scheduler" in result.stdout, result.stderr
    assert not imports.exists(), imports.read_text()


class Finished:
    """A task as distributed.as_completed hands it over: its value, or the error it ended with."""

    def __init__(self, value=None, error=None):
        self.value, self.error = value, error

    def result(self):
        if self.error:
            raise self.error
        return self.value


def test_every_end_of_a_task_leaves_a_row_but_the_graders_own_failure(tmp_path):
    """The instructor's side: a grading's files written back; a task that died, failed or left no row: a 'crashed'
    row saying why; a grading that failed for the grader's own reason: no row (the batch stops, a rerun grades it)."""
    from distributed import KilledWorker
    for folder in ("results", "feedback", "autograded", "logs"):
        (tmp_path / folder).mkdir()
    job = Job(student_id="alice", assignment=ASSIGNMENT, notebook=NOTEBOOK, submitted="", template="", scratch="",
              out=str(tmp_path), config=None, points={"a": 1.0, "b": 2.0})
    row = Result(student_id="alice", assignment=ASSIGNMENT, notebook=NOTEBOOK, status="graded", score=3.0, max_score=3.0,
                 message="")

    def written(task) -> dict | None:
        (tmp_path / "results" / "alice.json").unlink(missing_ok=True)
        on_dask.write_back(job, on_dask.outcome_of(task), deadline=100)
        return read_result(tmp_path / "results" / "alice.json")

    sent = {"result": row, "exitcode": 0, "feedback": b"<html>", "autograded": b"{}", "logs": b"graded\n"}
    assert written(Finished(sent)) == row
    assert [(tmp_path / f).read_bytes() for f in ("feedback/alice.html", "autograded/alice.ipynb", "logs/alice.log")] \
        == [b"<html>", b"{}", b"graded\n"]
    died = written(Finished(error=KilledWorker("grade-alice", SimpleNamespace(address="tcp://10.0.0.7:40000"), 3)))
    assert (died.status, died.score, died.max_score) == ("crashed", 0.0, 3.0)
    assert "died 4 times" in died.message and "10.0.0.7" in died.message
    assert "RuntimeError: No space left" in written(Finished(error=RuntimeError("No space left"))).message
    assert "exit code -9" in written(Finished({"result": None, "exitcode": -9})).message
    assert written(Finished({"result": None, "exitcode": GRADER_FAILED, "logs": b"no bwrap\n"})) is None
    assert (tmp_path / "logs" / "alice.log").read_text() == "no bwrap\n"


def test_a_template_is_unpacked_once_into_a_private_folder(tmp_path, monkeypatch):
    """Tasks unpacking the same template at once all get the one whole copy (mode 0700); a folder of that name made
    by someone else, or open to others, is refused."""
    (tmp_path / "course" / "source").mkdir(parents=True)
    (tmp_path / "course" / "gradebook.db").write_bytes(b"x" * 100_000)
    tar = on_dask.pack(tmp_path / "course")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    got = []
    threads = [threading.Thread(target=lambda: got.append(on_dask.unpacked(tar, "0123456789abcdef0123"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and len(set(got)) == 1
    template = got[0] / "template"
    assert (template / "gradebook.db").stat().st_size == 100_000 and (template / "source").is_dir()
    assert os.stat(got[0]).st_mode & 0o777 == 0o700
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == [got[0].name], "a copy that lost the race was left"
    os.chmod(got[0], 0o755)
    with pytest.raises(RuntimeError, match="not a private folder"):
        on_dask.unpacked(tar, "0123456789abcdef0123")
