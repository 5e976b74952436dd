"""Grade a class: every submission in a process of its own, N at a time; then grades.csv and the course's gradebook."""

import csv
import hashlib
import json
import multiprocessing
import multiprocessing.connection
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter, deque
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from sqlalchemy.exc import SAWarning
from nbgrader.converters import GenerateAssignment
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config, PyFileConfigLoader

from . import grade_one, processes
from .collect import collect
from .notebook import nbgrader_ids

STATUSES = ("graded", "timeout", "crashed", "invalid", "missing")
FIXED_COLUMNS = ["student_id", "assignment", "notebook", "score", "max_score", "status", "message"]


@dataclass
class Options:
    assignment: str
    submissions: Path
    jobs: int
    timeout: int
    out: Path | None
    force: bool
    memory_gib: float
    pattern: str | None
    course: Path


def course_directory(course: Path) -> tuple[CourseDirectory, Path | None]:
    """The course's nbgrader settings (nbgrader_config.py in `course`), and that file."""
    path = course / "nbgrader_config.py"
    config = PyFileConfigLoader(path.name, path=str(course)).load_config() if path.exists() else Config()
    config.CourseDirectory.root = str(course)
    return CourseDirectory(config=config), (path if path.exists() else None)


def resolve(cd: CourseDirectory, name: str) -> tuple[str, Path]:
    """An assignment named in full or by its number ('02'), and its one notebook in the sources."""
    source = Path(cd.root) / cd.source_directory
    names = sorted(p.name for p in source.iterdir() if p.is_dir()) if source.is_dir() else []
    matches = [n for n in names if n == name or n.split("_")[0] == name]
    if len(matches) != 1:
        raise SystemExit(f"no assignment '{name}' in {source}; there are: {', '.join(names) or 'none'}")
    notebooks = sorted((source / matches[0]).glob("*.ipynb"))
    if len(notebooks) != 1:
        raise SystemExit(f"{source / matches[0]} must hold exactly one notebook (it holds {len(notebooks)})")
    return matches[0], notebooks[0]


def generate_assignment(cd: CourseDirectory, config_file: Path | None, assignment: str, root: Path | None,
                        db_url: str, release: Path) -> None:
    """nbgrader's generate_assignment: the student version into `release`, the tests into the gradebook at db_url."""
    config = PyFileConfigLoader(config_file.name, path=str(config_file.parent)).load_config() \
        if config_file else Config()
    config.CourseDirectory.root = str(root or cd.root)
    config.CourseDirectory.source_directory = "source" if root else cd.source_directory
    config.CourseDirectory.release_directory = str(release)
    config.CourseDirectory.db_url = db_url
    config.CourseDirectory.assignment_id = assignment
    config.BaseConverter.force = True
    GenerateAssignment(coursedir=CourseDirectory(config=config), config=config).start()


def in_child(function, *args) -> None:
    """Run `function` in a forked process, so that this one never holds a database connection across a fork."""
    process = multiprocessing.get_context("fork").Process(target=function, args=args)
    process.start()
    process.join()
    if process.exitcode:
        raise SystemExit(f"{function.__name__} failed (exit code {process.exitcode}); see the messages above")


class Progress:
    """One line on stderr: a bar, counts by status, and the time left."""

    def __init__(self, total: int):
        self.total, self.done, self.counts, self.start = total, 0, Counter(), time.perf_counter()
        self.tty = sys.stderr.isatty()

    def update(self, result: dict) -> None:
        self.done += 1
        self.counts[result["status"]] += 1
        elapsed = time.perf_counter() - self.start
        left = elapsed / self.done * (self.total - self.done)
        bar = "#" * round(20 * self.done / self.total)
        counts = " ".join(f"{s} {self.counts[s]}" for s in STATUSES if self.counts[s])
        line = f"[{bar:<20}] {self.done}/{self.total}  {counts}  ETA {int(left) // 60}:{int(left) % 60:02d}"
        print(f"\r{line}" if self.tty else f"{line}  ({result['student_id']})", end="" if self.tty else "\n",
              file=sys.stderr, flush=True)


def run_jobs(todo: list[grade_one.Job], jobs: int, deadline: float, progress: Progress) -> None:
    """Grade `todo`, `jobs` at a time, each in a forked process with a wall-clock limit; results land in out/results/."""
    ctx = multiprocessing.get_context("fork")
    pending, running = deque(todo), {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                job = pending.popleft()
                process = ctx.Process(target=grade_one.run, args=(job,), name=job.student_id)
                process.start()
                running[process.sentinel] = (process, job, time.monotonic())
            ready = multiprocessing.connection.wait(list(running), timeout=1.0)
            for sentinel in list(running):
                process, job, started = running[sentinel]
                over = time.monotonic() - started > deadline
                if sentinel not in ready and not over:
                    continue
                del running[sentinel]
                if over:
                    processes.kill([process.pid])
                    processes.stop_descendants(os.getpid(), spare={p.pid for p, _, _ in running.values()})
                    why = ("timeout", f"grading took longer than {deadline:.0f} s in all and was stopped")
                else:
                    process.join()
                    why = ("crashed", f"the grading process ended unexpectedly (exit code {process.exitcode})")
                path = Path(job.out) / "results" / f"{job.student_id}.json"
                if over or not path.exists():
                    grade_one.write_result(path, asdict(grade_one.not_graded(job, *why)))
                progress.update(json.loads(path.read_text()))
    except KeyboardInterrupt:
        for process, _, _ in running.values():
            processes.kill([process.pid])
        processes.stop_descendants(os.getpid())
        print(f"\ninterrupted: {progress.done} graded; run the same command again to grade the rest", file=sys.stderr)
        raise SystemExit(130)


def write_table(path: Path, results: list[dict], grade_ids: list[str]) -> None:
    """grades.csv: one row per student and notebook, then one column per graded cell."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIXED_COLUMNS + grade_ids)
        for r in results:
            writer.writerow([r["student_id"], r["assignment"], r["notebook"], f"{r['score']:g}", f"{r['max_score']:g}",
                             r["status"], r["message"]] + [f"{r['cells'][g]['score']:g}" if g in r["cells"] else ""
                                                          for g in grade_ids])


def record_in_gradebook(cd: CourseDirectory, assignment: str, notebook: str, results: list[dict], out: Path,
                        submitted: dict[str, Path]) -> None:
    """Put every row into the course's gradebook and folders, so that formgrader and `nbgrader export` see them.

    A submission that could not be graded normally is marked as needing manual grading, so formgrader flags it.
    """
    root = Path(cd.root)
    warnings.simplefilter("ignore", SAWarning)  # nbgrader's own add_submission always sets SQLAlchemy off
    with Gradebook(cd.db_url, cd.course_id) as gb:
        for r in results:
            sid = r["student_id"]
            gb.update_or_create_student(sid)
            gb.update_or_create_submission(assignment, sid)
            nb = gb.find_submission_notebook(Path(notebook).stem, assignment, sid)
            flag = r["status"] in ("timeout", "crashed", "invalid")
            for grade in nb.grades:
                cell = r["cells"].get(grade.name, {})
                grade.auto_score = cell.get("score", 0.0)
                grade.needs_manual_grade = flag or cell.get("needs_manual_grade", False)
            for comment in nb.comments:
                comment.auto_comment = r["comments"].get(comment.name)
            gb.db.commit()
            for folder, source in ((cd.submitted_directory, submitted.get(sid)),
                                   (cd.autograded_directory, out / "autograded" / f"{sid}.ipynb")):
                if source and source.exists():
                    target = root / folder / sid / assignment / notebook
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(source, target)


def plan(found, options: Options, make_job, out: Path) -> tuple[dict, list]:
    """Rows known without grading (missing, or kept from an earlier run), and the jobs left to do."""
    results, todo = {}, []
    for s in found:
        job = make_job(s)
        if s.path is None:
            results[s.student_id] = asdict(grade_one.not_graded(job, "missing", s.message))
            continue
        previous = out / "results" / f"{s.student_id}.json"
        if previous.exists() and not options.force:
            old = json.loads(previous.read_text())
            if old.get("sha256") == hashlib.sha256(s.path.read_bytes()).hexdigest():
                results[s.student_id] = old  # graded by an earlier run, from the same file: kept
                continue
        previous.unlink(missing_ok=True)
        todo.append(job)
    return results, todo


def grade(options: Options) -> list[dict]:
    """The whole command: returns the rows of grades.csv."""
    wall = time.perf_counter()
    os.chdir(options.course)  # nbgrader's paths (the gradebook's among them) are relative to the course folder
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # nbgrader runs alembic
    # Threads per kernel: the cores shared among the parallel kernels, never more (oversubscription is slow).
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(max(1, (os.cpu_count() or 1) // options.jobs))
    processes.become_subreaper()
    cd, config_file = course_directory(options.course)
    assignment, source = resolve(cd, options.assignment)
    out = (options.out or options.course / "autograder" / "grades" / assignment).resolve()
    for folder in ("results", "feedback", "autograded", "logs"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    others = {p.parent.name: nbgrader_ids(nbformat.read(p, as_version=4))
              for p in (Path(cd.root) / cd.source_directory).glob("*/*.ipynb") if p.parent.name != assignment}
    with tempfile.TemporaryDirectory(prefix="autograder-") as scratch:
        scratch = Path(scratch)
        template = scratch / "template"
        shutil.copytree(source.parent, template / "source" / assignment)
        in_child(generate_assignment, cd, config_file, assignment, template, f"sqlite:///{template}/gradebook.db",
                 template / "release")
        found = collect(options.submissions.resolve(), source.name, options.pattern, scratch / "unzipped")
        # What student code may read but not change: the course, this package, the hand-ins, every scratch folder.
        protect = sorted({str(options.course), str(Path(__file__).resolve().parents[1]), str(out), str(scratch),
                          str(options.submissions.resolve())})

        def make_job(s):
            return grade_one.Job(s.student_id, assignment, source.name, str(s.path or ""), str(template),
                                 str(scratch / "work" / s.student_id), str(out),
                                 str(config_file) if config_file else None, options.timeout,
                                 int(options.memory_gib * 2**30), protect, others, s.message)

        results, todo = plan(found, options, make_job, out)
        print(f"{assignment}: {len(found)} students, {len(todo)} to grade ({len(found) - len(todo)} done before or "
              f"with no notebook), {options.jobs} at a time", file=sys.stderr)
        run_jobs(todo, options.jobs, deadline=10 * options.timeout + 120, progress=Progress(max(1, len(todo))))
        results |= {job.student_id: json.loads((out / "results" / f"{job.student_id}.json").read_text())
                    for job in todo}
        rows = [results[sid] for sid in sorted(results)]
        release = nbformat.read(template / "release" / assignment / source.name, as_version=4)
        write_table(out / "grades.csv", rows, [c.metadata.nbgrader["grade_id"] for c in release.cells
                                               if c.metadata.get("nbgrader", {}).get("grade")])
        try:
            in_child(generate_assignment, cd, config_file, assignment, None, cd.db_url, scratch / "course-release")
            in_child(record_in_gradebook, cd, assignment, source.name, rows, out,
                     {s.student_id: s.path for s in found if s.path})
            recorded = f"the course's gradebook ({cd.db_url})"
        except SystemExit as error:
            recorded = f"NOT the course's gradebook: {error}"
    summarise(rows, out, recorded, time.perf_counter() - wall)
    return rows


def summarise(rows: list[dict], out: Path, recorded: str, seconds: float) -> None:
    counts = Counter(r["status"] for r in rows)
    graded = [r["score"] / r["max_score"] for r in rows if r["status"] == "graded" and r["max_score"]]
    mean = f"{100 * sum(graded) / len(graded):.0f}%" if graded else "-"
    print(f"\n{len(rows)} students: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) +
          f"; mean score of the graded {mean}; {seconds:.0f} s in all", file=sys.stderr)
    print(f"grades: {out / 'grades.csv'}\nfeedback: {out / 'feedback'}/<student>.html\nrecorded in {recorded}",
          file=sys.stderr)
