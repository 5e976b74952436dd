"""The record every wing shares: what one grading needs (`Job`), what it found (`Result`, a row of grades.csv, its
`Cell`s), the statuses, and how a result is stored."""

import csv
import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TypedDict

from traitlets.config import Config

from .layout import output

STATUSES = ("graded", "tampered", "timeout", "crashed", "invalid", "missing")  # what each means: README.md
NEEDS_REVIEW = ("tampered", "timeout", "crashed", "invalid")  # flagged for manual grading in the gradebook
GRADER_FAILED = 3  # exit code of a grading that failed for a reason of the grader's own (no result is written)
FIXED_COLUMNS = ["student_id", "name", "gradebook_id", "assignment", "notebook", "score", "max_score", "status", "message",
                 "timestamp", "seconds_late", "late_penalty", "graded_by_hand"]


class Cell(TypedDict, total=False):
    """One graded cell of a row: its points, and why it lost them."""
    score: float
    max_score: float
    needs_manual_grade: bool
    message: str  # the test's failure, as the feedback shows it
    by_hand: bool  # the score is one an instructor entered in formgrader (read back from the gradebook)


@dataclass(kw_only=True)
class Job:
    """Everything one grading needs; paths are absolute."""
    student_id: str
    assignment: str
    notebook: str  # the assignment's notebook file name
    submitted: str
    template: str  # scratch course holding the assignment's source, release and gradebook
    scratch: str  # this submission's own scratch course (made here, removed after)
    out: str
    config: Config  # the course's, from config.load: paths absolute, the command line's settings in it
    points: dict[str, float] = field(default_factory=dict)  # grade_id -> points of every graded cell
    others: dict[str, list[str]] = field(default_factory=dict)  # grade_ids of other assignments, to name a wrong hand-in
    tests: dict[str, str] = field(default_factory=dict)  # grade_id -> each test cell's text in the gradebook (hidden in)
    note: str = ""  # what finding the notebook taught us (several copies handed in, say), for the message
    timestamp: str = ""  # from nbgrader's exchange: when it was submitted ("" if unknown: never late)
    secret: str = ""  # from nbgrader's exchange: kept beside the feedback, which release_feedback names after it
    due: str = ""  # the student's due date (extension included), ISO, from the course's gradebook ("" if none)
    given_id: str = ""  # the student's id as the LMS, folder or file gave it ("" where it is student_id itself)
    warm: str = ""  # the socket of the slot's warm parent, which forks this hand-in's kernel ("": one started afresh)


@dataclass(kw_only=True)
class Result:
    """One row of grades.csv, and what is needed to put it into the course's gradebook."""
    student_id: str  # the name of the student's files and gradebook entry (collect.file_name_of the id given)
    assignment: str
    notebook: str
    status: str  # one of STATUSES
    message: str
    score: float = 0.0  # late penalty taken off
    max_score: float = 0.0
    cells: dict[str, Cell] = field(default_factory=dict)  # grade_id -> the cell's points
    comments: dict = field(default_factory=dict)  # answer grade_id -> nbgrader's automatic comment
    sha256: str = ""  # of the file graded: an unchanged file is not graded again
    seconds: float = 0.0  # wall time of the whole grading
    execute_seconds: float = 0.0  # of which running the notebook's cells
    check_seconds: float = 0.0  # and the integrity checks around its tests
    phases: dict = field(default_factory=dict)  # where the rest of `seconds` went: phase -> seconds (make bench-grade)
    timestamp: str = ""  # when it was submitted, from nbgrader's exchange ("" for a folder or a zip)
    secret: str = ""  # the exchange's submission secret: its feedback is released under a name made from it
    seconds_late: float = 0.0  # after the due date (the student's extension included) in the gradebook
    late_penalty: float = 0.0  # points the course's LateSubmissionPlugin took off
    given_id: str = ""  # the student's id as the LMS, folder or file gave it ("" where it is student_id itself)
    first_name: str = ""  # the student's name: as the gradebook has it once recorded (an instructor's wins), else as
    last_name: str = ""  # the LMS's zip gave it (Canvas's lastfirst whole as the last name); "" where none is known


def not_graded(job: Job, status: str, message: str, sha256: str = "") -> Result:
    """A row of zeros saying why, with what finding the notebook taught (several copies handed in, say)."""
    cells = {gid: {"score": 0.0, "max_score": points, "needs_manual_grade": False} for gid, points in job.points.items()}
    if job.note and job.note not in message:
        message = f"{message}; {job.note}"
    return Result(student_id=job.student_id, assignment=job.assignment, notebook=job.notebook, status=status,
                  message=message, max_score=sum(c["max_score"] for c in cells.values()), cells=cells, sha256=sha256,
                  timestamp=job.timestamp, secret=job.secret, given_id=job.given_id)


def write_result(path: Path, result: Result) -> None:
    """A result is on disk whole or not at all (JSON, its fields by name): an interrupted run grades that student
    again."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(asdict(result), indent=1))
    os.replace(tmp, path)


def read_result(path: Path) -> Result | None:
    """The result stored at `path`, or None where there is none (or a damaged one, graded again). A field a newer
    grader added is left out, one it dropped takes its default."""
    try:
        stored = json.loads(path.read_text())
        if not isinstance(stored, dict) or stored.get("status") not in STATUSES:
            return None
        return Result(**{f.name: stored[f.name] for f in fields(Result) if f.name in stored})
    except (OSError, ValueError, TypeError):
        return None


def settle(job: Job, exitcode: int | None, deadline: float, crashed: str = "") -> int | None:
    """The row of a finished grading, whatever happened: its own where it wrote one, else a 'timeout' row (exitcode
    None: stopped at the deadline) or a 'crashed' row (saying `crashed`, or its exit code). A grading that failed for
    the grader's own reason (GRADER_FAILED) gets no row: the batch stops, and a rerun grades it. Returns `exitcode`."""
    path = output(job.out, "results", job.student_id)
    if exitcode == GRADER_FAILED or read_result(path) is not None:
        return exitcode
    if exitcode is None and not crashed:
        write_result(path, not_graded(job, "timeout", f"grading took longer than {deadline:.0f} s in all and was stopped"))
    else:
        write_result(path, not_graded(
            job, "crashed", crashed or f"the grading process ended unexpectedly (exit code {exitcode})"))
    return exitcode


def last_line(path: Path) -> str:
    """A log's last line that says something ("" where there is none)."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def shown_id(row: Result) -> str:
    """The student's id as given, for people to read (grades.csv, the report)."""
    return row.given_id or row.student_id


def full_name(row: Result) -> str:
    """The student's name as people write it ("Marie Curie"; Canvas's "curiemarie"), "" where none is known."""
    return " ".join(part for part in (row.first_name, row.last_name) if part)


def formgraders_mean(rows: list[Result]) -> float:
    """The mean score as formgrader shows it (nbgrader's Gradebook.average_assignment_score): every grade of the
    assignment over its number of submissions, late penalties not taken off. Every row is a submission in the
    gradebook (the missing and unreadable at 0), so it is the same number where these rows are all it holds."""
    return sum(r.score + r.late_penalty for r in rows) / len(rows) if rows else 0.0


def spreadsheet_safe(text: str) -> str:
    """A text cell that no spreadsheet runs as a formula: one opening with = + - @ or a control character gets a
    leading ' (OWASP's advice for CSV files)."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r", "\n") else text


def write_table(path: Path, rows: list[Result], grade_ids: list[str]) -> None:
    """grades.csv: one row per student and notebook, then one column per graded cell; replaced whole. A cell's score
    is the one an instructor entered by hand where there is one (its grade_id is then in `graded_by_hand`). The id
    is the student's as given (`gradebook_id`: the name of their files and gradebook entry), their name beside it."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(FIXED_COLUMNS + grade_ids)
        for r in rows:
            by_hand = " ".join(g for g in grade_ids if r.cells.get(g, {}).get("by_hand"))
            text = [shown_id(r), full_name(r), r.student_id, r.assignment, r.notebook]
            writer.writerow([spreadsheet_safe(t) for t in text] + [f"{r.score:g}", f"{r.max_score:g}", r.status,
                             spreadsheet_safe(r.message), spreadsheet_safe(r.timestamp), f"{r.seconds_late:g}",
                             f"{r.late_penalty:g}", by_hand]
                            + [f"{r.cells[g]['score']:g}" if g in r.cells else "" for g in grade_ids])
    os.replace(tmp, path)
