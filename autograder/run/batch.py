"""Grade a class: every submission in a process of its own, N at a time; grades.csv from the results on disk, whatever
happens; then the course's gradebook."""

import copy
import errno
import hashlib
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta, timezone
from pathlib import Path

import nbformat
from nbgrader.coursedir import CourseDirectory
from nbgrader.utils import parse_utc
from sqlalchemy.engine import make_url
from traitlets.config import Config

from .. import config as course_config, gradebook, layout
from ..grading import execute, grade_one, handin
from ..kernel import limits, processes
from ..reports import similarity
from .collect import Submission, collect, from_course, layout_of
from ..config import enter, resolve
from ..kernel.manager import SandboxUnavailable, require_sandbox
from ..grading.notebook import nbgrader_ids
from ..layout import LOCK, OUTPUTS, REPORT, SOLUTION_LOG, TABLE, default_out, exclusive, output, replace_file
from ..kernel.processes import in_child
from .progress import Progress
from ..reports.report import write_report
from ..results import STATUSES, Job, Result, formgraders_mean, not_graded, read_result, write_result, write_table
from . import supervisor
from ..kernel.manager import WarmParents
from .supervisor import BatchFailed


@dataclass(kw_only=True)
class Options:
    assignment: str
    submissions: Path | None  # None: what `nbgrader collect` put in the course's submitted folder
    jobs: int
    out: Path | None
    force: bool
    pattern: str | None
    course: Path
    settings: dict = field(default_factory=dict)  # nbgrader settings from the command line, {"Section": {...}}
    shard: tuple[int, int] | None = None  # (K, N): grade the K-th of N fixed parts of the class (1 <= K <= N)
    scheduler: str | None = None  # a dask.distributed scheduler's address: its workers grade the hand-ins


@contextmanager
def step(name: str):
    """Name the step in the error if it fails."""
    try:
        yield
    except (BatchFailed, SystemExit, KeyboardInterrupt):
        raise
    except Exception as error:
        raise BatchFailed(f"{name} failed ({type(error).__name__}: {error})") from error


def check_configuration(config: Config) -> None:
    """Refuse to grade with a configuration that would run tests unguarded or show hidden tests in the feedback."""
    steps = [str(s) for s in config.Autograde.get("autograde_preprocessors", [])]
    feedback = [str(s) for s in config.GenerateFeedback.get("preprocessors", [])]
    if not any(s.endswith("GuardedExecute") for s in steps) or not any(s.endswith("HideHiddenTests") for s in feedback):
        raise SystemExit("nbgrader_config.py must run autograder.grading.execute.GuardedExecute in Autograde.autograde_"
                         "preprocessors and autograder.grading.feedback.HideHiddenTests in GenerateFeedback.preprocessors "
                         "(see this course's nbgrader_config.py)")
    filters = config.HTMLExporter.get("filters", {})
    if not config.HTMLExporter.get("sanitize_html") or not str(filters.get("markdown2html", "")).endswith(
            "SanitisedMarkdown"):
        raise SystemExit("nbgrader_config.py must sanitise what pages show of a hand-in: c.HTMLExporter.sanitize_html "
                         "= True and autograder.grading.feedback.SanitisedMarkdown as its markdown2html filter (see this "
                         "course's nbgrader_config.py)")
    if not config.SandboxedKernelManager.get("unfenced", False):
        try:
            require_sandbox(config.SandboxedKernelManager.get("bwrap", "bwrap"))
        except SandboxUnavailable as error:
            raise SystemExit(str(error)) from None


def shard_of(student_id: str, count: int) -> int:
    """Which of `count` parts of a class a student is in (1 to count): fixed by the id alone, on any machine."""
    return int.from_bytes(hashlib.sha256(student_id.encode()).digest()[:8], "big") % count + 1


def plan(found, options: Options, make_job, out: Path) -> tuple[dict, list]:
    """Rows known without grading (missing, or kept from an earlier run), and the jobs left to do."""
    results, todo = {}, []
    for s in found:
        job = make_job(s)
        if s.path is None:
            results[s.student_id] = not_graded(job, s.status, s.message)
            write_result(output(out, "results", s.student_id), results[s.student_id])  # for a merge
            continue
        previous = output(out, "results", s.student_id)
        old = None if options.force else read_result(previous)
        try:
            same = old and (old.sha256, old.timestamp) == (
                hashlib.sha256(s.path.read_bytes()).hexdigest(), s.timestamp)
            if not same:
                replace_file(output(out, "submitted", s.student_id), source=s.path)  # what the gradebook will hold
        except OSError as error:  # a file the instructor cannot read costs its row alone; a full disk stops the batch
            if error.errno in (errno.ENOSPC, errno.EDQUOT):
                raise
            results[s.student_id] = not_graded(
                job, "invalid", f"the notebook handed in could not be read ({type(error).__name__}: {error.strerror})")
            write_result(previous, results[s.student_id])
            continue
        if same:
            results[s.student_id] = old  # graded by an earlier run, from the same file: kept
            continue
        previous.unlink(missing_ok=True)
        todo.append(job)
    return results, todo


def price_marked_late(found: list[Submission], due: dict[str, str], assignment: str) -> None:
    """A hand-in the LMS marked late without saying when (Canvas's LATE_) counts as handed in 1 s after the student's
    due date in the gradebook, the least it can be: the course's LateSubmissionPlugin then prices it, here and in
    formgrader. Without a due date nothing can price it: its row says so, and so does the command."""
    unpriced = []
    for s in found:
        if not s.marked_late or s.path is None:
            continue
        if s.student_id in due:
            deadline = parse_utc(due[s.student_id]).replace(tzinfo=timezone.utc)
            s.timestamp = (deadline + timedelta(seconds=1)).isoformat()
            said = (f"handed in late ({s.marked_late}, without saying when): it counts as handed in 1 s after the "
                    f"due date ({deadline:%Y-%m-%d %H:%M:%S} UTC), the least it can be, and the course's late rule "
                    "applies")
        else:
            unpriced.append(s.given_id or s.student_id)
            said = (f"handed in late ({s.marked_late}); the gradebook has no due date for this assignment, so no late "
                    "penalty was applied")
        s.message = "; ".join(filter(None, [s.message, said]))
    if unpriced:
        print(f"{len(unpriced)} hand-ins marked late in the zip ({', '.join(unpriced)}) lose no points: {assignment} "
              f"has no due date in the gradebook. To apply the course's late rule, set it (nbgrader db assignment add "
              f"{assignment} --duedate='YYYY-MM-DD HH:MM:SS TIMEZONE') and run the same command again: only "
              "those hand-ins are graded again", file=sys.stderr)


def with_names(results: dict[str, Result], found: list[Submission], out: Path) -> dict[str, Result]:
    """The rows with each student's name as the zip gave it, kept in their stored results too (a merge reads them)."""
    names = {s.student_id: (s.first_name, s.last_name) for s in found}
    for sid, r in results.items():
        if sid in names and (r.first_name, r.last_name) != names[sid]:
            results[sid] = replace(r, first_name=names[sid][0], last_name=names[sid][1])
            write_result(output(out, "results", sid), results[sid])
    return results


def grade(options: Options) -> list[Result]:
    """The whole command: returns the rows of grades.csv. BatchFailed names a step that failed after grading began."""
    wall = time.perf_counter()
    enter(options.course)
    # Threads per kernel: the cores shared among the parallel kernels, never more (oversubscription is slow); a
    # number set by the caller wins (another batch sharing the machine, say).
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(max(1, (os.cpu_count() or 1) // options.jobs)))
    processes.become_subreaper()
    config = course_config.load(options.course, options.settings)
    check_configuration(config)
    cd = CourseDirectory(config=config)
    assignment, source = resolve(cd, options.assignment)
    if options.submissions and (layout := layout_of(options.submissions, source.name, options.pattern)):
        # layout_of refuses a zip or folder whose names do not say whose each notebook is: before anything is written
        inside = f", in its folder {layout.inside}" if layout.inside else ""
        print(f"{options.submissions.name}: {layout.name} layout{inside}", file=sys.stderr)
    out = (options.out or default_out(options.course, assignment)).resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SystemExit(f"cannot write the grades into {out}: {error.strerror}") from None
    with exclusive(out / LOCK, f"another grading is writing into {out}: wait for it to finish, or pass --out"):
        rows = grade_class(options, config, cd, assignment, source, out)
    summarise(rows, out, time.perf_counter() - wall, config, options.shard)
    return rows


def points_of(source: Path) -> dict[str, float]:
    """grade_id -> points of every graded cell of the source notebook, in order: grades.csv's last columns."""
    return {c.metadata.nbgrader["grade_id"]: float(c.metadata.nbgrader.get("points", 0))
            for c in nbformat.read(source, as_version=4).cells if c.metadata.get("nbgrader", {}).get("grade")}


def grade_class(options, config, cd, assignment, source, out) -> list[Result]:
    for folder in OUTPUTS:
        (out / folder).mkdir(parents=True, exist_ok=True)
    others = {p.parent.name: nbgrader_ids(nbformat.read(p, as_version=4))
              for p in (Path(cd.root) / cd.source_directory).glob("*/*.ipynb") if p.parent.name != assignment}
    points = points_of(source)
    scratch = Path(tempfile.mkdtemp(prefix="autograder-batch-"))  # this batch's alone (mode 0700); no kernel sees it
    # the warm kernels start (seconds: they import torch) while the template is made; a Dask worker makes its own
    if not options.scheduler:  # chosen once, before the warm parents and the gradings fork: they inherit it
        print(f"kernels' cgroups: {limits.chosen()}", file=sys.stderr)
    parents = None if options.scheduler else WarmParents(options.jobs, config)
    drawing = None
    try:
        template = scratch / "template"
        with step("making the assignment's template course (nbgrader generate_assignment)"):
            shutil.copytree(source.parent, template / "source" / assignment)
            in_child(gradebook.generate_assignment, config, assignment, template,
                     layout.scratch_gradebook(template), template / "release")
            # read once here: a grading process opening the template's gradebook would share its SQLite file
            tests = in_child(handin.instructor_tests, layout.scratch_gradebook(template), assignment, source.stem)
        if parents is not None:  # while the warm kernels start
            with step("rehearsing a grading of the release as handed in (no kernel), for every grading to inherit"):
                grade_one.warm_up(config, template, assignment, source.name, tests)
        with step("running the solution once for the values its tests expect"):
            solution_config = copy.deepcopy(config)  # its kernel forked as the hand-ins' are
            solution_config.SandboxedKernelManager.warm = parents.ready().socket_of(0) if parents else ""
            expected = in_child(execute.expected_values, solution_config, source,
                                template / "release" / assignment / source.name, scratch / "solution", out / SOLUTION_LOG)
            if isinstance(expected, str):
                raise SystemExit(expected)
            layout.write_expected(expected, template)
        submitted = options.submissions or Path(cd.root) / cd.submitted_directory
        with step(f"reading the submissions in {submitted}"):
            found = from_course(submitted, assignment, source.name) if options.submissions is None else \
                collect(options.submissions.resolve(), source.name, options.pattern, scratch / "unzipped")
            if options.shard:
                found = [s for s in found if shard_of(s.student_id, options.shard[1]) == options.shard[0]]
        with step("reading the due dates in the course's gradebook"):
            with gradebook.lock(cd):  # a first batch on an empty PostgreSQL database makes its tables: one at a time
                due = in_child(gradebook.read_due_dates, cd, assignment, [s.student_id for s in found])
        price_marked_late(found, due, assignment)

        def make_job(s):
            # a scratch course named by no student id: its gradebook's URL would decode a '%' in the id
            work = scratch / "work" / hashlib.sha256(s.student_id.encode()).hexdigest()[:16]
            return Job(student_id=s.student_id, assignment=assignment, notebook=source.name,
                                 submitted=str(s.path or ""), template=str(template), scratch=str(work), out=str(out),
                                 config=config, points=points, others=others, tests=tests, note=s.message, timestamp=s.timestamp,
                                 secret=s.secret, due=due.get(s.student_id, ""), given_id=s.given_id)

        results, todo = plan(found, options, make_job, out)
        drawing = Report(out, source, scratch, config,
                         [(r.student_id, r.status) for r in results.values()] + [(j.student_id, "to grade") for j in todo])
        part = f" (shard {options.shard[0]} of {options.shard[1]})" if options.shard else ""
        where = f"on the workers of {options.scheduler}" if options.scheduler else f"{options.jobs} at a time"
        print(f"{assignment}{part}: {len(found)} students, {len(todo)} to grade ({len(found) - len(todo)} done before "
              f"or with no notebook), {where}", file=sys.stderr)
        timeout = config.Execute.get("timeout", 30)
        deadline, progress = 10 * timeout + 120, Progress(max(1, len(todo)), every=min(30, timeout or 30))
        try:
            if options.scheduler and todo:  # Dask is imported only here: without --scheduler the grader never needs it
                from .on_dask import OnDask
                on_dask = OnDask(options.scheduler, template, deadline)
                try:
                    supervisor.run(on_dask, todo, progress)
                finally:
                    on_dask.close()
            elif todo:
                supervisor.run(supervisor.Slots(parents, grade_one.run, deadline, spare={drawing.process.pid}), todo, progress)
        finally:  # whatever happened, every row graded so far goes into the table
            results |= {job.student_id: r for job in todo
                        if (r := read_result(output(out, "results", job.student_id))) is not None}
            results = with_names(results, found, out)
            rows = [results[sid] for sid in sorted(results)]
            write_table(out / TABLE, rows, list(points))
        if not options.shard:  # a shard's rows go into the gradebook with the others', by `merge`
            rows = record(cd, config, assignment, source.name, rows, out, scratch, list(points))
        drawing.draw(rows)
        return rows
    finally:
        if drawing is not None:
            drawing.stop()
        if parents is not None:
            parents.close()
        shutil.rmtree(scratch, ignore_errors=True)


def record(cd, config, assignment: str, notebook: str, rows: list[Result], out: Path, scratch: Path,
           grade_ids: list[str]) -> list[Result]:
    """The rows into the course's gradebook and folders, then grades.csv again as the gradebook has them (scores
    entered by hand, late penalties)."""
    with step("recording the grades in the course's gradebook"):
        with gradebook.lock(cd):  # its assignment made or updated first, as formgrader needs
            in_child(gradebook.generate_assignment, config, assignment, None, cd.db_url, scratch / "course-release")
            rows = in_child(gradebook.write_rows, cd, config, assignment, notebook, rows, out)
    write_table(out / TABLE, rows, grade_ids)
    return rows


class Report:
    """report.html, drawn by a process of its own that starts before the hand-ins are graded: at low priority it loads
    its libraries (copydetect, matplotlib and its fonts: 1-1.5 s) and finds the similar answers, which need only the
    notebooks handed in, while the gradings run; it draws the page when the rows, as grades.csv has them (after the
    gradebook: scores by hand, late penalties), come (`draw`). `students`: each one's id and status."""

    def __init__(self, out: Path, source: Path, scratch: Path, config: Config, students: list[tuple[str, str]]):
        receive, self.send = multiprocessing.get_context("fork").Pipe(duplex=False)
        self.process = processes.fork(self.run, receive, out, source, scratch, config, students)
        receive.close()

    def run(self, receive, out: Path, source: Path, scratch: Path, config: Config, students: list[tuple[str, str]]) -> None:
        self.send.close()
        os.nice(10)  # the gradings beside it come first
        os.environ["MPLCONFIGDIR"] = str(scratch / "matplotlib")  # its font cache: grading writes nothing into HOME
        from matplotlib.figure import Figure  # noqa: F401  (the plots' module, loaded before the rows come)
        try:
            similar = similarity.find(students, out / "submitted", source, config)
        except Exception as error:  # the page is drawn without that part, and says so
            traceback.print_exc()
            similar = similarity.Findings(settings=similarity.Similarity(config=config), exercises=[],
                                          problem=f"Similar answers could not be found ({type(error).__name__}: "
                                                  "the messages printed while grading say why).")
        try:
            rows = receive.recv()
        except EOFError:
            return  # the batch stopped before its rows were ready: no page
        write_report(out / REPORT, rows, source, similar)

    def draw(self, rows: list[Result]) -> None:
        with step("writing report.html"):
            self.send.send(rows)
            self.send.close()
            self.process.join()
            if self.process.exitcode:
                raise RuntimeError(f"its process ended with exit code {self.process.exitcode}; see the messages above")

    def stop(self) -> None:
        """No page: the batch stopped."""
        if self.process.exitcode is None:
            processes.end(self.process)


def shard_outputs(folders: list[Path]) -> list[Path]:
    """The shards' output folders: each given folder that holds results/, or else its sub-folders that do."""
    found = []
    for folder in folders:
        inside = [folder] if (folder / "results").is_dir() else sorted(p for p in folder.iterdir()
                                                                       if (p / "results").is_dir())
        if not inside:
            raise SystemExit(f"{folder} holds no grading output (no results/ folder in it or in its sub-folders)")
        found += inside
    return found


def merge(folders: list[Path], out: Path | None, course: Path, settings: dict) -> list[Result]:
    """The shards' outputs into one grades.csv, feedback folder and gradebook entry, as one run would have made."""
    wall = time.perf_counter()
    enter(course)
    config = course_config.load(course, settings)
    cd = CourseDirectory(config=config)
    shards = [f.resolve() for f in shard_outputs(folders)]
    results, origin = {}, {}
    for shard in shards:
        for path in sorted((shard / "results").glob("*.json")):
            r = read_result(path)
            if r is None:
                raise SystemExit(f"{path} is not a grading result: grade that shard again")
            if r.student_id in origin:
                raise SystemExit(f"{r.student_id} was graded in {origin[r.student_id]} and in {shard}: "
                                 "were the shards made with the same N?")
            results[r.student_id], origin[r.student_id] = r, shard
    names = {r.assignment for r in results.values()}
    if len(names) != 1:
        raise SystemExit(f"the shards hold {' and '.join(sorted(names)) or 'no results'}: merge one assignment's")
    assignment, source = resolve(cd, names.pop())
    out = (out or default_out(course, assignment)).resolve()
    with exclusive(out / LOCK, f"another grading is writing into {out}: wait for it to finish, or pass --out"):
        for folder in OUTPUTS:
            (out / folder).mkdir(parents=True, exist_ok=True)
        for sid, shard in origin.items():
            if shard == out:
                continue
            for folder, suffix in OUTPUTS.items():
                if (shard / folder / (name := f"{sid}{suffix}")).exists():
                    replace_file(out / folder / name, source=shard / folder / name)
        rows = [results[sid] for sid in sorted(results)]
        write_table(out / TABLE, rows, list(points_of(source)))
        scratch = Path(tempfile.mkdtemp(prefix="autograder-merge-"))
        try:
            rows = record(cd, config, assignment, source.name, rows, out, scratch, list(points_of(source)))
            Report(out, source, scratch, config, [(r.student_id, r.status) for r in rows]).draw(rows)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    summarise(rows, out, time.perf_counter() - wall, config)
    return rows


def summarise(rows: list[Result], out: Path, seconds: float, config: Config, shard: tuple[int, int] | None = None) -> None:
    counts = Counter(r.status for r in rows)
    best = max((r.max_score for r in rows), default=0)
    mean = f"mean score {formgraders_mean(rows):.2f} of {best:g} (formgrader's: every student)" if rows else ""
    print(f"\n{len(rows)} students: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) +
          f"; {mean}; {seconds:.0f} s in all", file=sys.stderr)
    if config.SandboxedKernelManager.get("unfenced", False):
        print("UNFENCED: student code ran without the sandbox, with your permissions (--unfenced)", file=sys.stderr)
    print(f"grades: {out / 'grades.csv'}\nfeedback: {out / 'feedback'}/<student>.html", file=sys.stderr)
    print(f"report: {out / 'report.html'}", file=sys.stderr)
    if shard:
        print(f"shard {shard[0]} of {shard[1]}: not yet in the gradebook; once every shard is done, "
              "`python -m autograder merge` their output folders", file=sys.stderr)
    else:
        url = config.CourseDirectory.get("db_url", "")
        shown = make_url(url).render_as_string(hide_password=True) if url else "nbgrader's default"
        print(f"recorded in the course's gradebook ({shown})", file=sys.stderr)
        late = [r for r in rows if r.seconds_late]
        if late:
            print(f"{len(late)} handed in late, {sum(r.late_penalty for r in late):g} points taken off "
                  "(nbgrader's LateSubmissionPlugin)", file=sys.stderr)
        if any(r.timestamp and r.secret for r in rows):
            print("feedback of the exchange's hand-ins is ready for `nbgrader release_feedback`", file=sys.stderr)
