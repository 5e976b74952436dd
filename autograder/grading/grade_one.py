"""Grade one submission with nbgrader's own autograde and feedback steps, in a scratch course of its own.

Runs in a process of its own (forked by batch.py): whatever the grading leaves ends with that process. The course's
configuration, as config.load resolved it (the command line's settings on top), decides how it grades (the execute
step, its limits, the feedback); `Job.config` carries it.
"""

import copy
import errno
import hashlib
import json
import logging
import os
import shutil
import signal
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from nbconvert.preprocessors import ExecutePreprocessor as Execute
from nbgrader.converters import Autograde, BaseConverter, GenerateFeedback
from nbgrader.coursedir import CourseDirectory
from nbgrader.utils import parse_utc, setenv
from sqlalchemy.exc import SAWarning
from traitlets.config import Config
from traitlets.utils.importstring import import_item

from torchcourse.format import HIDDEN, answer_cells, test_cells

from . import handin, notebook
from .. import layout
from ..kernel import processes
from .feedback import ERROR_NAMES, TIMED_OUT, VISIBLE_RUN, HideHiddenTests, kept_error, stopped, wants_visible_run
from .integrity import tests_read
from ..kernel.manager import UNFENCED_WARNING, SandboxedKernelManager
from .lessons import skippable
from ..nbgrader_patches import forget_engines, schema_checked_once, share_engines, shared_engine
from .notebook import FINDINGS, SKIPPED, Grading, error_output, is_test, not_run_output
from .step import Step
from ..kernel.relay import visible
from ..layout import in_scratch, output, replace_file, scratch_gradebook, write_exchange_files
from ..results import GRADER_FAILED, Job, Result, not_graded, write_result

ATTEMPTS = 4  # a notebook that kills its kernel is graded again without the cell that did, this many times at most
FREE_BYTES = 16 << 20  # less free disk than this where a grading writes is a full disk
SIGNALS = {signal.SIGSEGV: "a segmentation fault", signal.SIGKILL: "being killed (most often: out of memory)",
           signal.SIGABRT: "an abort", signal.SIGBUS: "a bus error"}


class GraderError(Exception):
    """Grading could not be done for a reason of the grader's own (its scratch files gone, a full disk, no kernel
    starting): no row is written, the batch stops, and a rerun grades this student again."""


def from_memory(exporter, nb) -> None:
    """The exporter's notebook `nb`, already in memory, where nbconvert's from_filename reads the notebook's file: it
    still sets what the file gives (its name, its folder, its date), then reads the open file, which is left unread."""
    exporter.from_file = lambda _file, resources=None, **kw: exporter.from_notebook_node(nb, resources=resources, **kw)


class Autograded(Autograde):
    """nbgrader's Autograde in one pass: its sanitize steps, then its autograde steps, on the notebook in memory, given
    and kept (nbgrader runs them as two passes, each reading and writing the notebook's file; the file is written
    once, for formgrader and the output folder); a grading's inputs for the execute step in the notebook's resources
    (FINDINGS), where the step leaves its findings; keeping the exception a step raised (nbgrader logs it and raises
    one of its own)."""
    failure: Exception | None = None

    def __init__(self, grading: Grading, notebook, **kw):
        super().__init__(**kw)
        self.grading = grading  # the step's findings land in it too (GuardedExecute.preprocess)
        self.notebook = notebook  # what the submitted file holds (prepare wrote it)
        self.graded = None  # the notebook as the steps leave it, and as nbgrader writes it into autograded/

    def init_single_notebook_resources(self, notebook_filename):
        return {**super().init_single_notebook_resources(notebook_filename), FINDINGS: self.grading}

    def keep(self, nb, resources):
        """The last step: the graded notebook kept in memory (the steps work on a copy of the one given)."""
        self.graded = nb
        return nb, resources

    def convert_single_notebook(self, notebook_filename):
        self.exporter._preprocessors = []  # as Autograde._init_preprocessors does for each of its passes
        for step in [*self.sanitize_preprocessors, *self.autograde_preprocessors, self.keep]:
            self.exporter.register_preprocessor(step)
        from_memory(self.exporter, self.notebook)
        try:
            with setenv(NBGRADER_EXECUTION="autograde"):  # as nbgrader's autograde pass runs
                BaseConverter.convert_single_notebook(self, notebook_filename)
        except Exception as error:
            self.failure = error
            raise


class Feedback(GenerateFeedback):
    """nbgrader's GenerateFeedback of the graded notebook in memory (nbgrader reads it again from autograded/)."""

    def __init__(self, graded, **kw):
        super().__init__(**kw)
        self.graded = graded

    def convert_single_notebook(self, notebook_filename):
        from_memory(self.exporter, self.graded)
        super().convert_single_notebook(notebook_filename)


RELEASES: dict[Path, object] = {}  # each release notebook read, as the batch's rehearsal read it (warm_up)


def release_of(job: Job):
    """The notebook released to students: read once, in the batch's process, for the gradings it forks (3 ms each)."""
    path = Path(job.template) / "release" / job.assignment / job.notebook
    if path not in RELEASES:
        try:
            RELEASES[path] = nbformat.read(path, as_version=4)
        except OSError as error:
            raise GraderError(f"the batch's template course is unreadable ({error})") from None
    return RELEASES[path]


def course_config(job: Job, root: Path) -> Config:
    """The course's nbgrader configuration, pointed at the scratch course."""
    config = copy.deepcopy(job.config or Config())
    for key, folder in layout.SCRATCH_FOLDERS.items():
        config.CourseDirectory[key] = folder
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = scratch_gradebook(root)
    config.CourseDirectory.assignment_id = job.assignment
    config.CourseDirectory.student_id = layout.SCRATCH_STUDENT
    config.Autograde.create_student = True
    config.BaseConverter.force = True
    config.SandboxedKernelManager.warm = job.warm
    if "optimistic_validation" not in config.Exporter:  # the notebook validated once after all the steps, not after
        config.Exporter.optimistic_validation = True  # each (3 ms a step, 18 steps a grading); a course may say otherwise
    return config


def cell_name(nb, index: int | None) -> str:
    if index is None:
        return "the notebook"
    gid = notebook.grade_id(nb.cells[index]) if index < len(nb.cells) else None
    return gid or f"cell {index + 1}"


def prepare(job: Job, nb) -> Path:
    """A fresh scratch course holding the assignment's sources, a copy of the template gradebook and the notebook."""
    root = Path(job.scratch)
    forget_engines()  # an attempt before this one had the gradebook open
    shutil.rmtree(root, ignore_errors=True)
    try:
        shutil.copytree(Path(job.template) / "source", root / "source")
        shutil.copy(Path(job.template) / layout.SCRATCH_GRADEBOOK, root / layout.SCRATCH_GRADEBOOK)
    except OSError as error:
        raise GraderError(f"the batch's template course is unreadable ({error})") from None
    target = in_scratch(root, "submitted", job.assignment, job.notebook)
    target.parent.mkdir(parents=True)
    # nbgrader finds the notebook by its file, then grades the one in memory (from_memory), which the file holds as
    # plain JSON: nbformat's indented, validated text costs 3 ms, for a file nobody reads
    target.write_text(json.dumps(nb), encoding="utf-8")
    # nbgrader's autograde records the time and its AssignLatePenalties step prices it against the due date; both
    # files then travel with the notebook to autograded/ and feedback/
    write_exchange_files(target.parent, job.timestamp, job.secret)
    if job.due:
        with Gradebook(scratch_gradebook(root)) as gb:
            gb.update_or_create_assignment(job.assignment, duedate=parse_utc(job.due))
    return root


def autograde(job: Job, nb, skip: dict[int, str], lessons: set[str],
              retried: bool = False) -> tuple[dict, str | None, object]:
    """nbgrader's autograde of `nb` in a fresh scratch course: its execute step's findings, None or why the kernel was
    lost, and the graded notebook (None where the kernel was lost: nbgrader writes none). `skip`: cells not to run
    again, by index; `lessons`: ids of lesson cells the grading does not need."""
    root = prepare(job, nb)
    config = course_config(job, root)
    try:
        expected = layout.read_expected(job.template)
    except (OSError, ValueError) as error:
        raise GraderError(f"the batch's expected values are unreadable ({error})") from None
    converter = Autograded(coursedir=CourseDirectory(config=config), config=config, notebook=nb,
                           grading=Grading(skip=skip, lessons_skipped=lessons, expected=expected))
    try:
        converter.start()
        if converter.grading.findings is None:
            raise GraderError("the course's Autograde.autograde_preprocessors must hold autograder's GuardedExecute")
        return converter.grading.findings, None, converter.graded
    except Exception:  # nbgrader logs the details and raises a generic error: what we need is in the findings
        found = converter.grading.findings
        if found is None:  # the execute step never ran: a step before it raised, or none is configured
            raise converter.failure or RuntimeError("nbgrader's autograde failed") from None
        if found["start_failed"]:  # the machine's fault (no cell has run): once more, then the batch stops
            if not retried:
                return autograde(job, nb, skip, lessons, retried=True)
            raise GraderError(f"a kernel could not start ({found['start_failed']})") from None
        if found["lost"] is None:  # a step raised on this hand-in: its row says so (run)
            raise converter.failure or RuntimeError("nbgrader's autograde failed") from None
        return found, (f"ran out of memory (the limit is {found['memory_gib']:g} GiB)" if found["out_of_memory"]
                       else lost_kernel_reason(found["lost"], found["kernel_exit"], found["timeout"])), None


def full_disk(job: Job, error: BaseException) -> str | None:
    """Why `error` is a full disk's, the instructor's to mend, not the hand-in's (None where it is not): an OSError
    saying so, in the exception or what it came from, or less than FREE_BYTES left where the grading writes."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"the disk is full ({error})"
        error = error.__cause__ or error.__context__
    for folder in (job.out, job.scratch, job.template):
        try:
            if shutil.disk_usage(folder).free < FREE_BYTES:
                return f"the disk is full: less than {FREE_BYTES >> 20} MiB free in {folder}"
        except OSError:
            continue
    return None


def lost_kernel_reason(lost: str, code: int | None, timeout: int | None = None) -> str:
    """How a cell lost its kernel, in words: `lost` is "timeout" or "died", `code` the kernel's exit status if known,
    `timeout` the seconds a cell may run."""
    if code is None:
        limit = f"the {timeout} s time limit" if timeout else "the time limit"
        return (f"kept running after {limit} and could not be interrupted (does it catch KeyboardInterrupt?)"
                if lost == "timeout" else "made the kernel die")
    signal_number = -code if code < 0 else code - 128 if code > 128 else None  # bwrap reports a signal as 128 + N
    if signal_number:
        return f"made the kernel die by {SIGNALS.get(signal_number, f'signal {signal_number}')}"
    return f"made the kernel exit (exit code {code})"


def problems_in(nb, timeout: int, memory_gib: float | None) -> list[tuple[str, str]]:
    """(status, sentence) for each cell that ran out of memory or was stopped at the time limit, in order; the test
    cells not run because a test of their exercise was stopped are named together, last."""
    found, skipped = [], []
    for i, cell in enumerate(nb.cells):
        names = [o.get("ename") for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        errors = " ".join(f"{o.get('ename')}: {o.get('evalue')}" for o in cell.get("outputs", [])
                          if o.get("output_type") == "error")
        if "MemoryError" in errors or "can't allocate memory" in errors or "not enough memory" in errors:
            limit = f" (the limit is {memory_gib:g} GiB)" if memory_gib else ""
            found.append(("crashed", f"{cell_name(nb, i)} ran out of memory{limit}"))
        elif SKIPPED in names:
            skipped.append(cell_name(nb, i))
        elif TIMED_OUT in names:
            found.append(("timeout", f"{cell_name(nb, i)} ran past the {timeout} s limit and was stopped"))
    if skipped:
        found.append(("timeout", f"{' and '.join(skipped)} {'was' if len(skipped) == 1 else 'were'} not run (0 points): "
                                 "a test of the same exercise had run past the time limit, and "
                                 f"{'it' if len(skipped) == 1 else 'each'} would have waited as long again"))
    return found


def scores(job: Job, graded) -> tuple[dict, dict, float, float]:
    """Grades and automatic comments from the scratch gradebook, with each graded cell's first failure as the feedback
    shows it (from the first hidden test on, the kernel's own words are not shown: they could quote hidden tests, and
    the messages reach report.html); seconds late and the late penalty."""
    as_shown, _ = HideHiddenTests(config=course_config(job, Path(job.scratch))).preprocess(copy.deepcopy(graded), {})
    failures = {gid: notebook.first_failure([cell]) for cell in as_shown.cells if (gid := notebook.grade_id(cell))}
    with Gradebook(scratch_gradebook(job.scratch)) as gb:
        submitted = gb.find_submission_notebook(Path(job.notebook).stem, job.assignment, layout.SCRATCH_STUDENT)
        cells = {g.name: {"score": float(g.score), "max_score": float(g.max_score),
                          "needs_manual_grade": bool(g.needs_manual_grade), "message": failures.get(g.name, "")}
                 for g in submitted.grades}
        comments = {c.name: c.auto_comment for c in submitted.comments if c.auto_comment}
        late = float(gb.find_submission(job.assignment, layout.SCRATCH_STUDENT).total_seconds_late)
        penalty = float(submitted.late_submission_penalty or 0)
    return cells, comments, late, penalty


# A test's errors that say nothing of how the answer failed: a failed check, or how the run was stopped (said elsewhere)
NOT_THE_ANSWERS = {"AssertionError", "KeyboardInterrupt", TIMED_OUT, "DeadKernelError"}


def listed(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]]))


def answers_said(graded, release) -> list[str]:
    """What the row says of the answers left as released, of those whose own cell raised when it ran, and of those
    whose tests raised an error other than an assertion's (a NameError inside the answer, say), each by the error's
    kind, as the feedback names it (the kernel's words could quote a hidden test); a cell stopped at the time limit or
    by the grader is said elsewhere (problems_in, grade)."""
    released = {notebook.grade_id(cell): cell.source for cell in answer_cells(release)}
    verdicts = graded.metadata.get(FINDINGS, {}).get("verdicts", {})
    untouched, said = [], []
    for cell in answer_cells(graded):
        gid = notebook.grade_id(cell)
        errors = [o.get("ename") for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if cell.source == released.get(gid):
            untouched.append(gid)
        elif errors and TIMED_OUT not in errors and cell.id not in verdicts:
            kind = errors[0] if errors[0] in ERROR_NAMES else "an error"
            said.append(f"{gid}'s cell raised {kind} when it ran")
        elif kinds := [o.get("ename") for test in test_cells(graded, gid) if test.id not in verdicts
                       for o in test.get("outputs", []) if o.get("output_type") == "error"
                       and o.get("ename") in ERROR_NAMES - NOT_THE_ANSWERS]:
            said.append(f"{gid}'s tests raised {kinds[0]}")
    if untouched:
        said.insert(0, f"{listed(untouched)} not answered (as released)")
    return said


def visible_errors(job: Job, nb, graded, skip: dict[int, str], lessons: set[str]) -> dict[str, dict]:
    """The own errors of visible tests whose message the feedback cannot show (raised after hidden tests had run, and
    none of the instructor's), as a second run of the same notebook without the hidden tests raised them: its kernel
    never holds a hidden test, so what it says may be shown (feedback.py). Only where there is such a test; the run
    leaves out the hidden test cells, the cells the graded run stopped or the grader ruled on, and every cell after
    the last such test. A run that fails gives nothing: the feedback then says why it shows no message."""
    as_shown, _ = HideHiddenTests(config=course_config(job, Path(job.scratch))).preprocess(copy.deepcopy(graded), {})
    wanted = set(wants_visible_run(graded, as_shown))
    if not wanted:
        return {}
    verdicts = graded.metadata.get(FINDINGS, {}).get("verdicts", {})
    last = max(i for i, cell in enumerate(graded.cells) if cell.id in wanted)
    left_out = {i: "not run: a run without the hidden tests, for the visible tests' own messages"
                for i, cell in enumerate(graded.cells) if cell.cell_type == "code" and (
                    i > last or cell.id in verdicts or stopped(cell)
                    or (is_test(cell) and HIDDEN.search(cell.source)))}
    second = replace(job, scratch=f"{job.scratch}-visible")
    try:
        findings, lost, ran = autograde(second, nb, {**left_out, **skip}, lessons)
    except Exception:  # the graded run's row and feedback stand; the feedback shows no message for these tests
        logging.exception("the run without hidden tests failed")
        return {}
    finally:
        processes.stop_descendants(os.getpid())
        shutil.rmtree(second.scratch, ignore_errors=True)
    if lost:
        logging.warning("the run without hidden tests stopped: %s", lost)
        return {}
    found = {}
    for cell in ran.cells:
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if cell.id in wanted and errors and errors[0].get("ename") != TIMED_OUT and cell.id not in findings["verdicts"]:
            found[cell.id] = kept_error(errors[0])
    return found


def feedback(job: Job, graded) -> None:
    """nbgrader's HTML feedback of `graded`, as the course's configuration makes it, saved as
    out/feedback/<student>.html."""
    config = course_config(job, Path(job.scratch))
    Feedback(coursedir=CourseDirectory(config=config), config=config, graded=graded).start()
    html = in_scratch(job.scratch, "feedback", job.assignment, Path(job.notebook).with_suffix(".html").name)
    replace_file(output(job.out, "feedback", job.student_id), source=html)


class TestsFailed(Step):
    """The execute step's stand-in in a grading rehearsed without a kernel: each test cell fails as an assertion; a
    lesson cell the grading skips shows so, as the execute step's do (the feedback page keeps their HTML)."""

    def preprocess_cell(self, cell, resources, index):
        if is_test(cell):
            cell.outputs = [error_output("AssertionError", "")]
        elif cell.id in getattr(resources.get(FINDINGS), "lessons_skipped", ()):
            cell.outputs = [not_run_output()]
        return cell, resources


def as_if_tests_failed(config: Config) -> Config:
    """`config` with TestsFailed in place of its execute step: a grading with no kernel, every test failing."""
    steps = config.Autograde.get("autograde_preprocessors", Autograde.class_traits()["autograde_preprocessors"].default())
    config.Autograde.autograde_preprocessors = [
        TestsFailed if issubclass(import_item(step) if isinstance(step, str) else step, Execute) else step
        for step in steps]
    return config


def bookkeeping(job: Job, nb, lessons: set[str]) -> None:
    """nbgrader's steps of a grading on `nb` in the job's scratch course, every test failing instead of the execute
    step (TestsFailed), its scores read and its feedback made (into job.out): in the batch's process, through the one
    engine its gradings inherit (nbgrader_patches.shared_engine), which then holds their statements compiled
    (SQLAlchemy compiles and keeps them per engine: 0.02-0.1 s of a grading's 0.2 s of gradebook work, on 03).
    `lessons`: ids of the lesson cells a grading skips."""
    root = prepare(job, nb)
    config = as_if_tests_failed(course_config(job, root))
    converter = Autograded(coursedir=CourseDirectory(config=config), config=config, notebook=nb,
                           grading=Grading(lessons_skipped=lessons))
    converter.start()
    scores(job, converter.graded)
    feedback(job, converter.graded)


def scratch_submission(template: Path, assignment: str) -> None:
    """The submission of the scratch course's one student in the template's gradebook, as nbgrader's autograde makes it
    for a first hand-in (the student, and the submission's rows without scores): each grading's copy of the gradebook
    has them, and nbgrader's autograde only updates them (its timestamp), where it made them for each hand-in."""
    with Gradebook(scratch_gradebook(template)) as gb:
        gb.update_or_create_student(layout.SCRATCH_STUDENT)
        gb.update_or_create_submission(assignment, layout.SCRATCH_STUDENT)


def warm_up(config: Config, template: Path, assignment: str, notebook: str, tests: dict[str, str]) -> None:
    """A grading rehearsed once in the batch's own process before it forks them, and what it loads and keeps inherited:
    the release handed in as it is, its hand-in built with the instructor's `tests` (the hidden tests are every
    hand-in's) and read as a grading reads it (which lesson cells need not run; the execute step's reading of the
    tests), then graded as if every test had failed (no kernel: the batch's process must not hold one when it forks) by
    nbgrader's steps, its scores read and its feedback made (`bookkeeping`), on the gradebook's submission a grading
    updates (`scratch_submission`): nbgrader's metadata schema checked, the kernel's spec read, SQLAlchemy's first use
    (0.15 s) and a grading's statements compiled in the engine the gradings inherit, the feedback page's templates
    compiled, the lesson's code highlighted and its markdown rendered, its
    cells drawn (markdown, and the code cells a grading skips), the tests' notices and messages made."""
    job = Job(student_id="warm-up", assignment=assignment, notebook=notebook, submitted="", template=str(template),
              scratch=str(template.parent / "warm-up"), out=str(template.parent / "warm-up-out"), config=config,
              tests=tests)
    release = release_of(job)
    rehearsed = handin.build(handin.sources(handin.load(nbformat.writes(release).encode()), release), release, tests)
    lessons = skippable(rehearsed, release)
    tests_read(rehearsed)
    # the language as a graded notebook has it, from its kernel (ipykernel's): its lexer highlights the code
    rehearsed.metadata["language_info"] = {**rehearsed.metadata.get("language_info", {}), "pygments_lexer": "ipython3"}
    schema_checked_once()
    # the kernel's spec, as its grading's manager reads it: jupyter_client then knows its provisioners (an entry point
    # scan, 5-7 ms a grading otherwise)
    kernel_name = release.metadata.get("kernelspec", {}).get("name", "python3")
    SandboxedKernelManager(config=config, kernel_name=kernel_name).kernel_spec
    (Path(job.out) / "feedback").mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SAWarning)  # nbgrader's add_submission always sets SQLAlchemy off
            scratch_submission(template, assignment)
            with shared_engine():
                bookkeeping(job, rehearsed, lessons)
    finally:
        shutil.rmtree(job.scratch, ignore_errors=True)
        shutil.rmtree(job.out, ignore_errors=True)


def read_handin(job: Job, data: bytes, release):
    """The notebook to grade, built from the release and the hand-in's text (handin.py), and what the student should
    know of how it was read; handin.Invalid where it cannot be graded."""
    if job.timestamp:
        try:
            parse_utc(job.timestamp)
        except (ValueError, OverflowError):
            raise handin.Invalid("its timestamp.txt does not hold a time: when it was handed in is unknown, so a "
                                 "human must decide") from None
    found = handin.sources(handin.load(data), release)
    handin.check(found, job.assignment, release, {k: set(v) for k, v in job.others.items()})
    logging.info("autograder: %s", handin.dropped(found))
    # the gradebook's test cells (hidden tests in): nbgrader's OverwriteCells then finds nothing changed to warn of
    return handin.build(found, release, job.tests), handin.notes(found, release)


def grade(job: Job) -> Result:
    """Read the hand-in, autograde (again without a cell that killed the kernel), score, write feedback."""
    clock = {"read and check the hand-in (and attempts that lost the kernel)": time.perf_counter()}
    data = Path(job.submitted).read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    release = release_of(job)
    try:
        nb, said = read_handin(job, data, release)
    except handin.Invalid as why:
        return not_graded(job, "invalid", str(why), sha)
    notes = ([job.note] if job.note else []) + said
    problems, skip, lessons = [], {}, skippable(nb, release)
    for _ in range(ATTEMPTS):
        clock["nbgrader's autograde"] = time.perf_counter()
        found, lost, graded = autograde(job, nb, skip, lessons)
        if lost is None:
            break
        status = "timeout" if found["lost"] == "timeout" and found["kernel_exit"] is None else "crashed"
        problems.append((status, f"{cell_name(nb, found['running'])} {lost}; it was skipped and the rest graded"))
        skip[found["running"]] = f"this cell {lost}, so it was not run"
    else:
        return not_graded(job, problems[0][0], "; ".join(p[1] for p in problems) + ": grading gave up", sha)
    processes.stop_descendants(os.getpid())
    problems += problems_in(graded, found["timeout"], found["memory_gib"])
    if found["out_of_memory"] and not any("out of memory" in said for _, said in problems):  # a child it started, say
        problems.append(("crashed", f"a process of the notebook ran out of memory (the limit is "
                                    f"{found['memory_gib']:g} GiB) and was killed"))
    if found["tampered"]:
        problems.insert(0, ("tampered", f"from {cell_name(graded, found['tampered_at'])} on, tests score 0: "
                                        f"{found['tampered']}"))
    if found["left_running"]:
        n = found["left_running"]
        notes.append(f"the notebook left {n} process{'es' if n > 1 else ''} running after grading; "
                     f"{'they were' if n > 1 else 'it was'} stopped")
    notes += answers_said(graded, release)
    clock["a run without hidden tests, for visible tests' messages"] = time.perf_counter()
    if own := visible_errors(job, nb, graded, skip, lessons):
        graded.metadata.setdefault(FINDINGS, {})[VISIBLE_RUN] = own
        replace_file(in_scratch(job.scratch, "autograded", job.assignment, job.notebook),
                     content=nbformat.writes(graded).encode())
    clock["scores from the gradebook"] = time.perf_counter()
    cells, comments, late, penalty = scores(job, graded)
    clock["feedback"] = time.perf_counter()
    try:
        feedback(job, graded)
    except Exception as error:  # the row keeps its scores; the page is missing, and the row says so
        if full_disk(job, error):
            raise
        logging.exception("feedback failed")
        notes.append(f"its feedback page could not be made ({type(error).__name__}); see logs/{job.student_id}.log")
    clock["autograded notebook out"] = time.perf_counter()
    replace_file(output(job.out, "autograded", job.student_id),
                 source=in_scratch(job.scratch, "autograded", job.assignment, job.notebook))
    clock["end"] = time.perf_counter()
    status = problems[0][0] if problems else "graded"
    result = Result(student_id=job.student_id, assignment=job.assignment, notebook=job.notebook, status=status,
                    message="; ".join([p[1] for p in problems] + notes),
                    score=sum(c["score"] for c in cells.values()) - penalty,
                    max_score=sum(c["max_score"] for c in cells.values()), cells=cells, comments=comments, sha256=sha,
                    timestamp=job.timestamp, secret=job.secret, seconds_late=late, late_penalty=penalty,
                    given_id=job.given_id)
    result.execute_seconds = round(found["execute_seconds"], 2)
    result.check_seconds = round(found["check_seconds"], 2)
    marks = list(clock.items())
    phases = {name: later - at for (name, at), (_, later) in zip(marks, marks[1:])}
    inside = {**found["kernel_seconds"], "integrity checks": found["check_seconds"]}  # the last attempt's
    phases["nbgrader's autograde"] -= sum(inside.values()) + found["execute_seconds"]
    result.phases = {name: round(seconds, 3) for name, seconds in {**phases, **inside}.items()}
    return result


class PrintableFormatter(logging.Formatter):
    """Log lines with their control characters escaped: nbgrader's messages and tracebacks can quote a hand-in."""

    def format(self, record):
        return visible(super().format(record))


def run(job: Job) -> None:
    """Entry point of the grading process: grade, write out/results/<student>.json, leave nothing running."""
    processes.become_subreaper()
    share_engines()
    schema_checked_once()
    tempfile.tempdir = str(Path(job.template).parent)  # kernels' runtime folders go with the batch's scratch
    log = output(job.out, "logs", job.student_id)
    handle = open(log, "w")
    os.dup2(handle.fileno(), 1)  # nbgrader, nbconvert and the kernel's own stderr go to the student's log
    os.dup2(handle.fileno(), 2)
    logging.basicConfig(level=logging.INFO, force=True)
    logging.getLogger().handlers[0].setFormatter(PrintableFormatter(logging.BASIC_FORMAT))
    warnings.simplefilter("ignore", SAWarning)  # nbgrader's own add_submission always sets SQLAlchemy off
    if (job.config or Config()).SandboxedKernelManager.get("unfenced"):
        logging.warning(UNFENCED_WARNING)
    start = time.perf_counter()
    try:
        result = grade(job)
    except GraderError as error:
        logging.error("grading stopped: %s", error)
        os._exit(GRADER_FAILED)
    except Exception as error:  # a step raised on this hand-in: the batch goes on, its row says grading failed
        logging.exception("grading failed")
        if full_disk(job, error):
            logging.error("grading stopped: %s", full_disk(job, error))
            os._exit(GRADER_FAILED)
        # named by its kind alone: an exception's text may quote what the kernel chose
        result = not_graded(job, "crashed", f"grading failed ({type(error).__name__}); see logs/{log.name}")
    finally:
        processes.stop_descendants(os.getpid())
        shutil.rmtree(job.scratch, ignore_errors=True)
    result.seconds = round(time.perf_counter() - start, 2)
    write_result(output(job.out, "results", job.student_id), result)
