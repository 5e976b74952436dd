"""The course's gradebook (SQLite or PostgreSQL): the one record of scores, which formgrader and `nbgrader export` read.

A batch writes into it by nbgrader's own rules: SaveAutoGrades' (a score an instructor entered by hand is kept and
the cell is marked for manual grading again) and AssignLatePenalties' (the course's late plugin, on the due date and
extension in the gradebook). grades.csv is then read back from it, so the three cannot disagree. The two rules are
typed here, not run as nbgrader's steps: those take a graded notebook (a row that was not graded has none) and open
the gradebook three times a row; a class is written in one session. tests/test_gradebook.py compares what this
leaves with what nbgrader's own steps leave, and fails when nbgrader changes either rule.
"""

import warnings
import zlib
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.converters import GenerateAssignment
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import AssignLatePenalties
from nbgrader.utils import parse_utc
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SAWarning
from sqlalchemy.pool import NullPool
from traitlets.config import Config

from . import nbgrader_patches  # noqa: F401  (every gradebook a batch makes gets its schema version in-process)
from .layout import exclusive, output, replace_file, write_exchange_files
from .results import NEEDS_REVIEW, Result


def is_postgres(db_url: str) -> bool:
    return make_url(db_url).get_backend_name() == "postgresql"


@contextmanager
def lock(cd: CourseDirectory):
    """One batch at a time writes the gradebook: a PostgreSQL advisory lock (batches on several machines share the
    server), else a lock file in the course folder."""
    if not is_postgres(cd.db_url):
        with exclusive(Path(cd.root) / ".autograder-gradebook.lock"):
            yield
        return
    engine = create_engine(cd.db_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:  # the lock is the session's: closing the connection releases it
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": zlib.crc32(cd.course_id.encode())})
            yield
    finally:
        engine.dispose()


def exists(cd: CourseDirectory) -> bool:
    """Whether there is a gradebook to read (a SQLite file not yet made is not one; a server always is)."""
    url = make_url(cd.db_url)
    return url.get_backend_name() != "sqlite" or not url.database or (Path(cd.root) / url.database).exists()


def exported_score(submission) -> float:
    """A submission's score as `nbgrader export` gives it (CsvExportPlugin): a score entered by hand wins (nbgrader's
    own `score`), the late penalty taken off, never below 0. tests/test_lms_export.py compares it with nbgrader's."""
    return max(0.0, submission.score - submission.late_submission_penalty)


def generate_assignment(config: Config, assignment: str, root: Path | None, db_url: str, release: Path) -> None:
    """nbgrader's generate_assignment: the student version into `release`, the tests into the gradebook at db_url."""
    config = Config(config)
    if root:
        config.CourseDirectory.root, config.CourseDirectory.source_directory = str(root), "source"
    config.CourseDirectory.release_directory = str(release)
    config.CourseDirectory.db_url = db_url
    config.CourseDirectory.assignment_id = assignment
    config.BaseConverter.force = True
    GenerateAssignment(coursedir=CourseDirectory(config=config), config=config).start()


def read_due_dates(cd: CourseDirectory, assignment: str, students: list[str]) -> dict[str, str]:
    """student -> the assignment's due date for them (their extension included), in ISO form; {} without a due date."""
    if not exists(cd):
        return {}
    with Gradebook(cd.db_url, cd.course_id) as gb:
        try:
            due = gb.find_assignment(assignment).duedate
        except MissingEntry:
            return {}
        if due is None:
            return {}
        found = {}
        for sid in students:
            try:
                extension = gb.find_submission(assignment, sid).extension
            except MissingEntry:
                extension = None
            found[sid] = (due + (extension or timedelta())).isoformat()
    return found


def time_of(timestamp: str):
    """A submission time as nbgrader reads timestamp.txt, or None (none given, or not a time: the row says so)."""
    try:
        return parse_utc(timestamp) if timestamp else None
    except (ValueError, OverflowError):
        return None


def write_rows(cd: CourseDirectory, config: Config, assignment: str, notebook: str, rows: list[Result],
               out: Path) -> list[Result]:
    """Put every row into the gradebook and the course's folders; return the rows as the gradebook now has them."""
    warnings.simplefilter("ignore", SAWarning)  # nbgrader's own add_submission always sets SQLAlchemy off
    late = AssignLatePenalties(config=config)
    late.init_plugin()  # the course's LateSubmissionPlugin, as its nbgrader_config.py sets it
    stem, seen = Path(notebook).stem, []
    with Gradebook(cd.db_url, cd.course_id) as gb:
        for r in rows:
            sid = r.student_id
            given = r.given_id or sid  # the LMS's own id, where it fits nbgrader's column
            student = gb.update_or_create_student(sid, **({"lms_user_id": given} if len(given) <= 128 else {}))
            name_student(student, r)
            when = {"timestamp": t} if (t := time_of(r.timestamp)) else {}
            submission = gb.update_or_create_submission(assignment, sid, **when)
            nb = gb.find_submission_notebook(stem, assignment, sid)
            flag = r.status in NEEDS_REVIEW
            for grade in nb.grades:
                cell = r.cells.get(grade.name, {})
                grade.auto_score = cell.get("score", 0.0)
                # SaveAutoGrades' rule: a score entered by hand stays (it is the grade's score) and goes back to a human
                grade.needs_manual_grade = flag or cell.get("needs_manual_grade", False) or grade.manual_score is not None
            for comment in nb.comments:
                comment.auto_comment = r.comments.get(comment.name)
            gb.db.commit()
            # AssignLatePenalties' rule, with this session: none unless late, then the plugin's, within [0, score]
            nb.late_submission_penalty = None
            if submission.total_seconds_late > 0:
                penalty = late.plugin_inst.late_submission_penalty(sid, nb.score, submission.total_seconds_late)
                if penalty is not None:
                    nb.late_submission_penalty = min(max(penalty, 0), nb.score)
            gb.db.commit()
            copy_files(cd, assignment, notebook, r, out)
            seen.append(as_recorded(r, nb, submission))
    return seen


def name_student(student, r: Result) -> None:
    """The student's name as the LMS's zip gave it, into the gradebook (as `nbgrader db student add --first-name
    --last-name` would), where the gradebook has none: a name already there, an instructor's or an earlier zip's, is
    kept. "" rather than None for a part not given: formgrader shows None as "None"."""
    if not (student.first_name or student.last_name) and (r.first_name or r.last_name):
        student.first_name, student.last_name = r.first_name, r.last_name


def as_recorded(r: Result, nb, submission) -> Result:
    """A row as the gradebook has it: scores entered by hand win, late penalty taken off, the student's name."""
    cells = {g.name: {**r.cells.get(g.name, {}), "score": float(g.score), "max_score": float(g.max_score),
                      "needs_manual_grade": bool(g.needs_manual_grade), "by_hand": g.manual_score is not None}
             for g in nb.grades}
    penalty = float(nb.late_submission_penalty or 0)
    return replace(r, cells=cells, score=float(nb.score) - penalty, max_score=float(nb.max_score), late_penalty=penalty,
                   seconds_late=float(submission.total_seconds_late), first_name=submission.student.first_name or "",
                   last_name=submission.student.last_name or "")


def copy_files(cd: CourseDirectory, assignment: str, notebook: str, r: Result, out: Path) -> None:
    """The notebook as handed in and as graded into the course's folders, with the exchange's timestamp and secret;
    the feedback where `nbgrader release_feedback` looks, for a hand-in that came through the exchange."""
    sid, root = r.student_id, Path(cd.root)
    timestamp, secret = r.timestamp, r.secret
    html = Path(notebook).with_suffix(".html").name
    exchange = bool(timestamp and secret)  # release_feedback needs both files, and fails without them
    for folder, source, name in ((cd.submitted_directory, output(out, "submitted", sid), notebook),
                                 (cd.autograded_directory, output(out, "autograded", sid), notebook),
                                 (cd.feedback_directory, output(out, "feedback", sid), html)):
        if not source.exists() or (folder == cd.feedback_directory and not exchange):
            continue
        target = root / folder / sid / assignment
        target.mkdir(parents=True, exist_ok=True)
        replace_file(target / name, source=source)
        write_exchange_files(target, timestamp, secret)
