"""Grade one submission with nbgrader's own autograde and feedback steps, in a scratch course of its own.

Runs in a process of its own (forked by batch.py), so that whatever the notebook does ends with that process.
"""

import hashlib
import json
import logging
import os
import shutil
import signal
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.api import Gradebook
from sqlalchemy.exc import SAWarning
from nbgrader.converters import Autograde, GenerateFeedback
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import Execute, GetGrades
from traitlets.config import Config, PyFileConfigLoader

from . import execute, notebook, processes
from .execute import GUARD
from .feedback import HideHiddenTests

ATTEMPTS = 4  # a notebook that kills its kernel is graded again without the cell that did, this many times at most
SIGNALS = {signal.SIGSEGV: "a segmentation fault", signal.SIGKILL: "being killed (most often: out of memory)",
           signal.SIGABRT: "an abort", signal.SIGBUS: "a bus error"}


@dataclass
class Job:
    """Everything one grading needs; paths are absolute."""
    student_id: str
    assignment: str
    notebook: str  # the assignment's notebook file name
    submitted: str
    template: str  # scratch course holding the assignment's source, release and gradebook
    scratch: str  # this submission's own scratch course (made here, removed after)
    out: str
    config: str | None  # the course's nbgrader_config.py
    timeout: int
    memory: int
    protect: list[str]
    others: dict[str, list[str]]  # grade_ids of the course's other assignments, to name a wrong hand-in
    note: str = ""  # what finding the notebook taught us (several copies handed in, say), for the message


@dataclass
class Result:
    """One row of grades.csv, and what is needed to put it into the course's gradebook."""
    student_id: str
    assignment: str
    notebook: str
    status: str  # graded, timeout, crashed, invalid or missing
    message: str
    score: float = 0.0
    max_score: float = 0.0
    cells: dict = field(default_factory=dict)  # grade_id -> {"score", "max_score", "needs_manual_grade"}
    comments: dict = field(default_factory=dict)  # answer grade_id -> nbgrader's automatic comment
    sha256: str = ""
    seconds: float = 0.0  # wall time of the whole grading
    execute_seconds: float = 0.0  # of which running the notebook's cells


def release_of(job: Job):
    return nbformat.read(Path(job.template) / "release" / job.assignment / job.notebook, as_version=4)


def zero_cells(job: Job) -> dict:
    """Every graded cell of the assignment at 0 (a submission that could not be graded)."""
    return {notebook.grade_id(c): {"score": 0.0, "max_score": float(c.metadata.nbgrader.get("points", 0)),
                                   "needs_manual_grade": False}
            for c in release_of(job).cells if c.metadata.get("nbgrader", {}).get("grade")}


def not_graded(job: Job, status: str, message: str, sha256: str = "") -> Result:
    cells = zero_cells(job)
    return Result(job.student_id, job.assignment, job.notebook, status, message, 0.0,
                  sum(c["max_score"] for c in cells.values()), cells, {}, sha256)


def course_config(job: Job, root: Path) -> Config:
    """The course's nbgrader configuration, pointed at the scratch course."""
    config = PyFileConfigLoader(Path(job.config).name, path=str(Path(job.config).parent)).load_config() \
        if job.config else Config()
    for key, folder in (("source_directory", "source"), ("release_directory", "release"),
                        ("submitted_directory", "submitted"), ("autograded_directory", "autograded"),
                        ("feedback_directory", "feedback")):
        config.CourseDirectory[key] = folder
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = f"sqlite:///{root}/gradebook.db"
    config.CourseDirectory.assignment_id = job.assignment
    config.CourseDirectory.student_id = job.student_id
    config.Execute.timeout = job.timeout
    config.Autograde.create_student = True
    config.BaseConverter.force = True
    return config


def cell_name(nb, index: int) -> str:
    gid = notebook.grade_id(nb.cells[index]) if index < len(nb.cells) else None
    return gid or f"cell {index + 1}"


def autograde(job: Job, nb, retried: bool = False) -> str | None:
    """nbgrader's autograde of `nb` in a fresh scratch course; None, or why the kernel was lost."""
    root = Path(job.scratch)
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(Path(job.template) / "source", root / "source")
    shutil.copy(Path(job.template) / "gradebook.db", root / "gradebook.db")
    target = root / "submitted" / job.student_id / job.assignment / job.notebook
    target.parent.mkdir(parents=True)
    nbformat.write(nb, target)
    (root / "runtime").mkdir()
    os.environ["JUPYTER_RUNTIME_DIR"] = str(root / "runtime")  # connection files out of other kernels' reach
    GUARD.running, GUARD.kernel_exit = None, None
    GUARD.writable = [str(root / "autograded" / job.student_id / job.assignment)]
    config = course_config(job, root)
    converter = Autograde(coursedir=CourseDirectory(config=config), config=config)
    converter.autograde_preprocessors = [execute.GuardedExecute if p is Execute else p
                                         for p in converter.autograde_preprocessors]
    try:
        converter.start()
        return None
    except Exception:  # nbgrader logs the details and raises a generic error: what we need is in GUARD
        if GUARD.running is None:
            # The kernel did not start: when many start at once, one can lose the race for a free TCP port
            # ("Address already in use"). Once more, then it is our failure, not the student's.
            if not retried:
                return autograde(job, nb, retried=True)
            raise
        return lost_kernel_reason(job)


def lost_kernel_reason(job: Job) -> str:
    code = GUARD.kernel_exit
    if code is None:
        return "kept running after the time limit and could not be interrupted (does it catch KeyboardInterrupt?)"
    if code < 0:
        return f"made the kernel die by {SIGNALS.get(-code, f'signal {-code}')}"
    return f"made the kernel exit (exit code {code})"


def problems_in(nb, job: Job) -> list[tuple[str, str]]:
    """(status, sentence) for each cell that ran out of memory or was stopped at the time limit, in order."""
    found = []
    for i, cell in enumerate(nb.cells):
        errors = " ".join(f"{o.get('ename')}: {o.get('evalue')}" for o in cell.get("outputs", [])
                          if o.get("output_type") == "error")
        if "MemoryError" in errors or "can't allocate memory" in errors or "not enough memory" in errors:
            found.append(("crashed", f"{cell_name(nb, i)} ran out of memory (the limit is {job.memory / 2**30:g} GiB)"))
        elif "CellTimeoutError" in errors:
            found.append(("timeout", f"{cell_name(nb, i)} ran past the {job.timeout} s limit and was stopped"))
    return found


def scores(job: Job) -> tuple[dict, dict]:
    """Grades and automatic comments from the scratch gradebook."""
    with Gradebook(f"sqlite:///{job.scratch}/gradebook.db") as gb:
        submitted = gb.find_submission_notebook(Path(job.notebook).stem, job.assignment, job.student_id)
        cells = {g.name: {"score": float(g.score), "max_score": float(g.max_score),
                          "needs_manual_grade": bool(g.needs_manual_grade)} for g in submitted.grades}
        comments = {c.name: c.auto_comment for c in submitted.comments if c.auto_comment}
    return cells, comments


def feedback(job: Job) -> None:
    """nbgrader's HTML feedback, hidden tests taken out, saved as out/feedback/<student>.html."""
    config = course_config(job, Path(job.scratch))
    config.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
    GenerateFeedback(coursedir=CourseDirectory(config=config), config=config).start()
    html = Path(job.scratch) / "feedback" / job.student_id / job.assignment / Path(job.notebook).with_suffix(".html")
    shutil.copy(html, Path(job.out) / "feedback" / f"{job.student_id}.html")


def grade(job: Job) -> Result:
    """Validate, repair, autograde (again without a cell that killed the kernel), score, write feedback."""
    data = Path(job.submitted).read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    release = release_of(job)
    try:
        nb = notebook.parse(data)
        notebook.check_assignment(nb, job.assignment, release, {k: set(v) for k, v in job.others.items()})
    except notebook.Invalid as why:
        return not_graded(job, "invalid", str(why), sha)
    notebook.normalise(nb, release)
    twice = notebook.deduplicate(nb)
    restored = notebook.restore_missing_cells(nb, release)
    notes = [job.note] if job.note else []
    notes += [f"{', '.join(restored)} {'was' if len(restored) == 1 else 'were'} missing and put back from the "
             "assignment (an answer put back scores 0)"] if restored else []
    notes += [f"{', '.join(twice)} appeared more than once; the last copy was graded"] if twice else []
    problems = []
    GUARD.memory, GUARD.protect, GUARD.skip, GUARD.faked = job.memory, job.protect, {}, None
    for _ in range(ATTEMPTS):
        lost = autograde(job, nb)
        if lost is None:
            break
        status = "timeout" if GUARD.kernel_exit is None else "crashed"
        problems.append((status, f"{cell_name(nb, GUARD.running)} {lost}; it was skipped and the rest graded"))
        GUARD.skip[GUARD.running] = f"this cell {lost}, so it was not run"
    else:
        return not_graded(job, problems[0][0], "; ".join(p[1] for p in problems) + ": grading gave up", sha)
    stray = processes.stop_descendants(os.getpid())
    graded = nbformat.read(Path(job.scratch) / "autograded" / job.student_id / job.assignment / job.notebook, 4)
    problems += problems_in(graded, job)
    if GUARD.faked:
        notes.append(f"from {cell_name(graded, GUARD.faked[0])} on, tests score 0: {GUARD.faked[1]}")
    if stray:
        notes.append(f"the notebook left {stray} process{'es' if stray > 1 else ''} running after grading; "
                     f"{'they were' if stray > 1 else 'it was'} stopped")
    cells, comments = scores(job)
    feedback(job)
    shutil.copy(Path(job.scratch) / "autograded" / job.student_id / job.assignment / job.notebook,
                Path(job.out) / "autograded" / f"{job.student_id}.ipynb")
    status = problems[0][0] if problems else "graded"
    return Result(job.student_id, job.assignment, job.notebook, status, "; ".join([p[1] for p in problems] + notes),
                  sum(c["score"] for c in cells.values()), sum(c["max_score"] for c in cells.values()),
                  cells, comments, sha)


def run(job: Job) -> None:
    """Entry point of the grading process: grade, write out/results/<student>.json, leave nothing running."""
    processes.become_subreaper()
    log = Path(job.out) / "logs" / f"{job.student_id}.log"
    handle = open(log, "w")
    os.dup2(handle.fileno(), 1)  # nbgrader, nbconvert and the kernel's own stderr go to the student's log
    os.dup2(handle.fileno(), 2)
    logging.basicConfig(level=logging.INFO, force=True)
    warnings.simplefilter("ignore", SAWarning)  # nbgrader's own add_submission always sets SQLAlchemy off
    start = time.perf_counter()
    try:
        result = grade(job)
    except Exception as error:  # a bug of ours or nbgrader's: the batch goes on, the row says grading failed
        logging.exception("grading failed")
        result = not_graded(job, "crashed", f"grading failed ({type(error).__name__}: {error}); see logs/{log.name}")
    finally:
        processes.stop_descendants(os.getpid())
        shutil.rmtree(job.scratch, ignore_errors=True)
    result.seconds = round(time.perf_counter() - start, 2)
    result.execute_seconds = round(GUARD.execute_seconds, 2)
    write_result(Path(job.out) / "results" / f"{job.student_id}.json", asdict(result))


def write_result(path: Path, result: dict) -> None:
    """A result is there whole or not at all: an interrupted run grades that student again."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, path)
