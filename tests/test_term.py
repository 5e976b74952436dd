"""A term as an instructor and students live it (issue 36's "How to show it"), on the grader's small course: a wrong
first run refused before it writes anything, a Canvas zip and a Moodle zip graded without --pattern (ids, names and
Canvas's LATE_ read from their names), a late hand-in priced by the course's late rule, the names in the gradebook as
formgrader lists them, in grades.csv and in `export --lms canvas`, and a student taken out again with `remove`.

The class grades once (`term`, two batches); each test reads what it made. Checks of other parts of the term (the
feedback pages, say) are added as tests of this class that read `term` too."""

import csv
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from nbgrader.api import Gradebook
from nbgrader.utils import parse_utc

from course import ROOT
from handins import ASSIGNMENT, FIRST, NOTEBOOK, grade, right, rows_of, scratch_course, write

pytestmark = [pytest.mark.xdist_group("term"), pytest.mark.sandbox, pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")]
DUE = "2026-11-20 12:00:00 UTC"
WRONG_MEAN = "def mean(xs):\n    return sum(xs) / (len(xs) + 1)"
# Canvas's "Download submissions": <lastfirst>_[LATE_]<user id>_<file id>_<file name>
CANVAS = {"curiemarie_LATE_101_9001_": right(), "jonesbob_102_9002_": right(),
          "leedana_103_9003_": right(**{FIRST: WRONG_MEAN})}
# Moodle's download-all zip: a folder <Full name>_<participant id>_assignsubmission_file_ per student
MOODLE = {"Alan Mathison Turing_555_assignsubmission_file_/": right()}
# What a new instructor might zip by hand: the student's name and the assignment's in each file name
UNREADABLE = {"curie_marie_": right(), "jones_bob_": right()}
INSTRUCTORS_NAME = ("Robert", "Jones")  # entered in the gradebook for 102 before any grading: no zip overwrites it


@dataclass
class Term:
    course: Path
    refused: subprocess.CompletedProcess  # the wrong first run
    left_by_refusal: tuple[bool, list[str]]  # after it: whether the output folder exists, the gradebook's students
    canvas: subprocess.CompletedProcess
    moodle: subprocess.CompletedProcess
    moodle_out: Path  # the Moodle zip's output folder (its own grades.csv)

    @property
    def out(self) -> Path:
        return self.course / "autograder" / "grades" / ASSIGNMENT

    def gradebook(self) -> Gradebook:
        return Gradebook(f"sqlite:///{self.course}/autograder/gradebook.db", "pytorch-course")


def zip_of(path: Path, hand_ins: dict, notebook: str = NOTEBOOK) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for prefix, nb in hand_ins.items():
            z.writestr(prefix + notebook, write(nb))
    return path


def autograder(course: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m autograder ...` as an instructor runs it, in the course folder."""
    return subprocess.run([sys.executable, "-m", "autograder", *args, "--course", str(course)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="class")
def term(tmp_path_factory) -> Term:
    """The term: the course takes late work's points away (nbgrader's "zero" rule) and has a due date; 102's name is
    in the gradebook; a zip no layout reads is refused; then Canvas's zip, then Moodle's (into an output folder of its
    own), graded without --pattern."""
    tmp = tmp_path_factory.mktemp("term")
    course = scratch_course(tmp / "course")
    with open(course / "nbgrader_config.py", "a") as f:
        f.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    term = Term(course=course, refused=None, left_by_refusal=None, canvas=None, moodle=None,
                moodle_out=tmp / "moodle-out")
    import autograder.gradebook  # noqa: F401  (a gradebook made here without the alembic command, as the grader does)
    with term.gradebook() as gb:
        gb.update_or_create_assignment(ASSIGNMENT, duedate=parse_utc(DUE))
        gb.update_or_create_student("102", first_name=INSTRUCTORS_NAME[0], last_name=INSTRUCTORS_NAME[1])
    term.refused = grade(course, zip_of(tmp / "hand-ins.zip", UNREADABLE), check=False)
    with term.gradebook() as gb:
        term.left_by_refusal = (term.out.exists(), sorted(s.id for s in gb.students))
    term.canvas = grade(course, zip_of(tmp / "canvas.zip", CANVAS))
    term.moodle = grade(course, zip_of(tmp / "moodle.zip", MOODLE), "--out", str(term.moodle_out))
    return term


class TestTerm:
    def test_a_zip_no_layout_reads_is_refused_before_anything_is_written(self, term):
        """The instructor's first try, a zip of names the grader cannot split into students: exit 1, a message
        showing two of its names and a --pattern that reads them, and no output folder, no student in the
        gradebook made by it."""
        assert term.refused.returncode == 1, term.refused.stderr
        said = term.refused.stderr
        assert f"'curie_marie_{NOTEBOOK}'" in said and f"'jones_bob_{NOTEBOOK}'" in said, said
        assert "--pattern '" in said and "'curie' and 'jones'" in said and "Nothing was graded or written" in said
        assert term.left_by_refusal == (False, ["102"])

    def test_each_lms_zip_is_recognised_and_named(self, term):
        """The command says which layout it read; Canvas's user ids and Moodle's participant ids are the students."""
        assert "canvas.zip: Canvas's (" in term.canvas.stderr and "moodle.zip: Moodle's (" in term.moodle.stderr
        assert sorted(rows_of(term.out)) == ["101", "102", "103"]
        assert sorted(rows_of(term.moodle_out)) == ["555"]

    def test_names_reach_the_gradebook_as_formgrader_lists_them(self, term):
        """formgrader's student list shows "last_name, first_name": Moodle's full name split at its last space,
        Canvas's lastfirst whole (where it splits is unknowable), an instructor's name kept over the zip's."""
        with term.gradebook() as gb:
            listed = {s.id: f"{s.last_name}, {s.first_name}" for s in gb.students}  # manage_students.js's render
            lms_ids = {s.id: s.lms_user_id for s in gb.students}
        assert listed["555"] == "Turing, Alan Mathison"
        assert listed["101"] == "curiemarie, " and listed["103"] == "leedana, "
        assert listed["102"] == f"{INSTRUCTORS_NAME[1]}, {INSTRUCTORS_NAME[0]}"
        assert lms_ids["101"] == "101" and lms_ids["555"] == "555"

    def test_grades_csv_shows_each_name_beside_the_id(self, term):
        rows = {**rows_of(term.out), **rows_of(term.moodle_out)}
        assert {sid: row["name"] for sid, row in rows.items()} == {
            "101": "curiemarie", "102": " ".join(INSTRUCTORS_NAME), "103": "leedana", "555": "Alan Mathison Turing"}

    def test_canvas_late_marker_is_priced_by_the_course_late_rule(self, term):
        """Canvas's LATE_ carries no time: the hand-in counts as 1 s after the due date, so the course's "zero" rule
        takes its points, in grades.csv and in the gradebook (formgrader, nbgrader export); the row says why."""
        late, on_time = rows_of(term.out)["101"], rows_of(term.out)["102"]
        assert float(late["seconds_late"]) == 1 and float(late["late_penalty"]) == 6 and float(late["score"]) == 0
        assert "Canvas marked it LATE_" in late["message"] and "1 s after the due date" in late["message"]
        assert float(on_time["seconds_late"]) == 0 and float(on_time["score"]) == 6
        with term.gradebook() as gb:
            submission = gb.find_submission(ASSIGNMENT, "101")
            assert submission.timestamp == parse_utc(DUE) + timedelta(seconds=1)
            assert float(submission.late_submission_penalty) == 6

    def test_canvas_export_holds_each_student_once_with_their_name(self, term, tmp_path):
        out = tmp_path / "canvas.csv"
        result = autograder(term.course, "export", "01", "--lms", "canvas", "--out", str(out))
        assert result.returncode == 0, result.stderr
        with open(out, newline="") as f:
            rows = list(csv.reader(f))[2:]
        ids = [row[1] for row in rows]
        assert len(ids) == len(set(ids)), ids
        names = {row[1]: row[0] for row in rows}
        assert names["101"] == "curiemarie" and names["102"] == "Jones, Robert"
        assert names["555"] == "Turing, Alan Mathison"

    def test_remove_lists_first_then_takes_a_student_out_of_gradebook_and_folders(self, term):
        """`remove` without --force changes nothing and lists what it would take; with it, the student's submission
        and entry leave the gradebook and their files the grader's and nbgrader's folders."""
        files = [term.out / "results" / "103.json", term.out / "feedback" / "103.html",
                 term.course / "autograder" / "submitted" / "103" / ASSIGNMENT]
        listed = autograder(term.course, "remove", "01", "103")
        assert listed.returncode == 0 and "Nothing was removed" in listed.stderr, listed.stderr
        assert "103 (leedana)" in listed.stderr and "the student, who has no other submission" in listed.stderr
        assert all(path.exists() for path in files) and "103" in rows_of(term.out)
        removed = autograder(term.course, "remove", "01", "10[3]", "--force")
        assert removed.returncode == 0 and "Removed 1 student from" in removed.stderr, removed.stderr
        assert not any(path.exists() for path in files)
        assert sorted(rows_of(term.out)) == ["101", "102"]
        with term.gradebook() as gb:
            assert "103" not in {s.id for s in gb.students}
            assert "102" in {s.id for s in gb.students}
