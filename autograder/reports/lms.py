"""Grades out to an LMS: the CSV file that Canvas's or Moodle's gradebook import takes, from the course's gradebook,
written by nbgrader export plugins (`CanvasExport`, `MoodleExport`): `python -m autograder export ASSIGNMENT --lms
canvas`, or nbgrader's own command, `nbgrader export --exporter=autograder.reports.lms.CanvasExport
--assignment=[02_autograd] --to=canvas.csv`.

The scores are `nbgrader export`'s (nbgrader/plugins/export.py, CsvExportPlugin): every student in the gradebook, with
their submission's score (a score entered by hand wins over the autograder's) less its late penalty, never below 0;
0 for a student with no submission. Each student goes by the id the LMS knows them by: the one `grade` read from the
LMS's zip (its layout recognised, or --pattern), which the batch keeps as the student's lms_user_id (gradebook.py),
else their nbgrader id; and by the name the gradebook has for them (from the zip's names, or an instructor's).

Canvas (Grades > Import). We rely on its importer, app/models/gradebook_importer.rb in instructure/canvas-lms, and on
Canvas's guide "How do I import grades in the Gradebook?": the header must open with "Student" and "ID", may go on
with "SIS User ID" and "SIS Login ID", and must end its student columns with "Section" (header?,
update_column_count); a row is matched by its ID, the Canvas user id, then by the SIS ids, then by name
(process_student); a column headed "Title (id)" is that assignment, another is the assignment of that title or a new
one (parse_assignments, Assignment.title_and_id); a row opening with "Points Possible" gives a new assignment its
points (process_pp). Canvas's "Download submissions" zip names each file <lastfirst>_[LATE_]<user id>_<file id>_<name>
(lib/content_zipper.rb, get_filename): CANVAS_PATTERN (collect.py) reads the user id from it.

Moodle (the assignment's "Upload grading worksheet"). Its importer, assignfeedback_offline in moodle/moodle
(mod/assign/feedback/offline/importgradeslib.php, and process_import_grades in its locallib.php), finds its columns by
their names in the uploader's language (English here): "Identifier", "Grade" and "Last modified (grade)", and each
feedback plugin's own. An Identifier is "Participant " and the participant id, which Moodle's download-all zip puts in
each student's folder name, <Full name>_<participant id>_assignsubmission_file_/ (mod/assign/locallib.php,
download_submissions): MOODLE_PATTERN (collect.py) reads it. A row is skipped where the grade in Moodle changed more
than 60 s after the row's "Last modified (grade)" (unless the upload form allows it: we write the time of the export),
where the grade is above the assignment's maximum grade in Moodle, or equal to the one there. The worksheet's
"Feedback comments" column is left out: an empty one would erase comments written in Moodle.
"""

import csv
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory
from nbgrader.plugins import ExportPlugin
from sqlalchemy.engine import make_url
from traitlets import Unicode

from .. import config as course_config, gradebook
from ..config import enter, resolve
from ..layout import default_out
from ..results import spreadsheet_safe

CANVAS_STUDENT_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_COLUMNS = ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
                  "Grade can be changed", "Last modified (submission)", "Last modified (grade)"]


@dataclass(kw_only=True)
class Grade:
    """One student's grade on the assignment, as `nbgrader export` computes it."""
    student_id: str  # nbgrader's
    lms_id: str  # the LMS's, read from its zip (the nbgrader id where there is none)
    first_name: str
    last_name: str
    email: str
    score: float
    max_score: float
    handed_in: bool  # whether the gradebook holds a submission of theirs
    submitted: datetime | None  # the hand-in's time, where the exchange recorded one (UTC)


def no_grades(assignment: str, db_url: str) -> SystemExit:
    shown = make_url(db_url).render_as_string(hide_password=True)
    return SystemExit(f"{assignment} has no grades in the course's gradebook ({shown}): grade it first "
                      f"(make grade ASSIGNMENT={assignment.split('_')[0]} ...)")


def grades(gb: Gradebook, assignment: str) -> list[Grade]:
    """Every student of the gradebook with their grade on `assignment` (0 without a submission); SystemExit where the
    assignment has no grades."""
    none = no_grades(assignment, str(gb.db.get_bind().url))
    try:
        found = gb.find_assignment(assignment)
    except MissingEntry:
        raise none from None
    if not found.submissions:
        raise none
    rows = []
    for student in gb.students:
        try:
            submission = gb.find_submission(assignment, student.id)
        except MissingEntry:
            submission = None
        rows.append(Grade(student_id=student.id, lms_id=student.lms_user_id or student.id,
                          first_name=student.first_name or "", last_name=student.last_name or "",
                          email=student.email or "", score=gradebook.exported_score(submission) if submission else 0.0,
                          max_score=float(found.max_score), handed_in=submission is not None,
                          submitted=submission and submission.timestamp))
    return sorted(rows, key=lambda g: g.student_id)


def number(value: float) -> str:
    """A score as both LMSs read it: plain decimals, never an exponent."""
    return f"{value:.6f}".rstrip("0").rstrip(".")


def canvas_rows(grades_: list[Grade], title: str) -> list[list[str]]:
    """Canvas's gradebook import: the student columns, one column for the assignment, its points, a row per student."""
    rows = [CANVAS_STUDENT_COLUMNS + [title], ["Points Possible", "", "", "", "", number(grades_[0].max_score)]]
    for g in grades_:
        name = f"{g.last_name}, {g.first_name}" if g.last_name and g.first_name else g.last_name or g.student_id
        rows.append([name, g.lms_id, "", "", "", number(g.score)])
    return rows


def moodle_rows(grades_: list[Grade], now: datetime) -> list[list[str]]:
    """Moodle's grading worksheet: a row per student, identified as a participant."""
    rows = [MOODLE_COLUMNS]
    for g in grades_:
        name = f"{g.first_name} {g.last_name}".strip() or g.student_id
        when = g.submitted.replace(tzinfo=timezone.utc).isoformat(timespec="seconds") if g.submitted else ""
        rows.append([f"Participant {g.lms_id}", name, g.email, "Graded" if g.handed_in else "No submission",
                     number(g.score), number(g.max_score), "Yes", when, now.isoformat(timespec="seconds")])
    return rows


class LmsExport(ExportPlugin):
    """An nbgrader export plugin: one assignment's grades (`assignment`, exactly one) as an LMS's import takes them,
    into `to` (default: the LMS's name .csv), every cell safe from a spreadsheet's formulas."""
    lms = ""  # its name, for messages and the default file

    def rows(self, found: list[Grade]) -> list[list[str]]:
        raise NotImplementedError

    def export(self, gradebook: Gradebook) -> None:
        if len(self.assignment) != 1:
            raise SystemExit(f"{type(self).__name__} exports one assignment: --assignment=[NAME]")
        found = grades(gradebook, self.assignment[0])
        to = Path(self.to or f"{self.lms}.csv")
        to.parent.mkdir(parents=True, exist_ok=True)
        with open(to, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows([[spreadsheet_safe(cell) for cell in row] for row in self.rows(found)])
        name, unknown = self.lms.capitalize(), sorted(g.student_id for g in found if not g.lms_id.isdigit())
        print(f"{len(found)} students' grades on {self.assignment[0]} for {name}: {to}", file=sys.stderr)
        if unknown:  # both LMSs number their users: an id that is no number came from elsewhere (the exchange, a folder)
            print(f"{len(unknown)} without a {name} id read from {name}'s zip, whose rows {name} will not match: "
                  f"{', '.join(unknown)}", file=sys.stderr)


class CanvasExport(LmsExport):
    """Canvas's gradebook import (Grades > Import)."""
    lms = "canvas"
    title = Unicode("", help="the assignment's column, as Canvas names it, 'Title (assignment id)' (default: the "
                             "assignment's name, which Canvas creates unless an assignment has that title)"
                    ).tag(config=True)

    def rows(self, found: list[Grade]) -> list[list[str]]:
        return canvas_rows(found, self.title or self.assignment[0])


class MoodleExport(LmsExport):
    """Moodle's grading worksheet (the assignment's "Upload grading worksheet")."""
    lms = "moodle"

    def rows(self, found: list[Grade]) -> list[list[str]]:
        return moodle_rows(found, datetime.now(timezone.utc))


PLUGINS = {plugin.lms: plugin for plugin in (CanvasExport, MoodleExport)}
LMS = tuple(PLUGINS)


def export(assignment: str, lms: str, out: Path | None, course: Path, title: str | None = None) -> Path:
    """Write the assignment's grades for the LMS's gradebook import, by its export plugin; return the file's path."""
    out = out.resolve() if out else None  # where the command was given, before we move into the course folder
    enter(course)
    cd = CourseDirectory(config=course_config.load(course, {}))
    assignment, _ = resolve(cd, assignment)
    if not gradebook.exists(cd):
        raise no_grades(assignment, cd.db_url)
    out = out or default_out(course, assignment) / f"{lms}.csv"
    plugin = PLUGINS[lms](to=str(out), assignment=[assignment], **({"title": title} if title else {}))
    with Gradebook(cd.db_url, cd.course_id) as gb:
        plugin.export(gb)
    return out
