"""Grades out to an LMS (`python -m autograder export ASSIGNMENT --lms canvas|moodle`): a class graded from Canvas's
zip (its layout recognised, no --pattern), a late hand-in and a score entered by hand, exported for Canvas's and
Moodle's imports and checked against the layouts they document and against `nbgrader export`; each LMS's layout
pattern, given as --pattern, reads its zip."""

import csv
import subprocess
import sys
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from nbgrader.api import Gradebook
from nbgrader.utils import parse_utc

from autograder.run.collect import CANVAS_PATTERN, MOODLE_PATTERN, collect
from course import ROOT, nbgrader
from handins import ASSIGNMENT, FIRST, NOTEBOOK, grade, right, scratch_course, write

pytestmark = [pytest.mark.xdist_group("lms-export"),  # one worker grades the class once; the tests read its exports
              pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")]  # its gradebook edited as formgrader does
DUE = "2026-11-20 12:00:00 UTC"
HOSTILE_FIRST, HOSTILE_LAST = '=HYPERLINK("http://example.org")', "@SUM(1)"
# Canvas's "Download submissions": <lastfirst>_[LATE_]<user id>_<file id>_<file name>, at the zip's top
CANVAS_ZIP = {"smithalice_101_9001_": "alice", "jonesbob_102_9002_": "bob (late: his hand-in time is in the gradebook)",
              "nguyenchi_103_9003_": "chi (a hostile name in the gradebook)",
              "leedana_104_9004_": "dana (graded by hand)"}
# `make grade` of this class, then the instructor's edits in formgrader: what each student ends with (of 6 points)
EXPECTED = {"101": 6.0, "102": 0.0, "103": 6.0, "7777": 5.0, "105": 0.0}


def gradebook(course: Path) -> Gradebook:
    return Gradebook(f"sqlite:///{course}/autograder/gradebook.db", "pytorch-course")


def export(course: Path, lms: str, out: Path, *args: str) -> list[list[str]]:
    """`python -m autograder export 01 --lms LMS --out FILE` as an instructor runs it, FILE named from where the command
    is given; the file's rows."""
    result = subprocess.run([sys.executable, "-m", "autograder", "export", "01", "--lms", lms, "--out", out.name,
                             "--course", str(course), *args], cwd=out.parent, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    with open(out, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded from Canvas's zip: (course, `nbgrader export`'s score by student id).

    Before grading, the gradebook holds the due date, bob's hand-in time (a day late; the course takes late work's
    points away) and eve, who handed nothing in. After, as formgrader would: dana's hidden test given 1 of its 2 points
    by hand, dana's LMS id and chi's name changed (an instructor's `nbgrader db student import`)."""
    tmp = tmp_path_factory.mktemp("lms")
    course = scratch_course(tmp / "course")
    with open(course / "nbgrader_config.py", "a") as f:
        f.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    nbgrader("generate_assignment", ASSIGNMENT, "--force", cwd=course)
    nbgrader("db", "assignment", "add", ASSIGNMENT, f"--duedate={DUE}", cwd=course)
    with gradebook(course) as gb:
        gb.update_or_create_student("102")
        gb.update_or_create_submission(ASSIGNMENT, "102", timestamp=parse_utc("2026-11-21 12:00:00 UTC"))
        gb.update_or_create_student("105", first_name="Eve", last_name="Absent")
    archive = tmp / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for prefix in CANVAS_ZIP:
            z.writestr(prefix + NOTEBOOK, write(right()))
    grade(course, archive)
    with gradebook(course) as gb:
        hand = gb.find_grade(f"{FIRST}_hidden", Path(NOTEBOOK).stem, ASSIGNMENT, "104")
        hand.manual_score, hand.needs_manual_grade = 1.0, False
        gb.update_or_create_student("104", lms_user_id="7777")
        gb.update_or_create_student("103", first_name=HOSTILE_FIRST, last_name=HOSTILE_LAST)
        gb.db.commit()
    nbgrader("export", "--to", str(tmp / "nbgrader.csv"), cwd=course)
    with open(tmp / "nbgrader.csv", newline="") as f:
        exported = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f) if r["assignment"] == ASSIGNMENT}
    return course, exported


def nbgrader_score(exported: dict[str, float], lms_id: str) -> float:
    return exported["104" if lms_id == "7777" else lms_id]


@pytest.mark.sandbox
@pytest.mark.slow
def test_canvas_file_has_canvas_import_layout_and_nbgrader_export_scores(graded, tmp_path):
    """Canvas's import: Student, ID, SIS User ID, SIS Login ID, Section, then the assignment; a Points Possible row;
    one row per student of the gradebook with Canvas's user id (from the zip, or as the gradebook now has it), and
    `nbgrader export`'s score: the hand-entered point and the late penalty in it; a name that opens with = or @
    starts with ' so that no spreadsheet runs it."""
    course, exported = graded
    rows = export(course, "canvas", tmp_path / "canvas.csv")
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", ASSIGNMENT]
    assert rows[1] == ["Points Possible", "", "", "", "", "6"]
    scores = {row[1]: float(row[5]) for row in rows[2:]}
    assert scores == EXPECTED
    assert all(score == nbgrader_score(exported, lms_id) for lms_id, score in scores.items())
    names = {row[1]: row[0] for row in rows[2:]}
    assert names["103"] == f"'{HOSTILE_LAST}, {HOSTILE_FIRST}" and names["105"] == "Absent, Eve"
    titled = export(course, "canvas", tmp_path / "titled.csv", "--title", "Basics (4567)")
    assert titled[0][-1] == "Basics (4567)" and titled[2:] == rows[2:]
    # the same file from nbgrader's own command, with the grader's export plugin
    nbgrader("export", "--exporter=autograder.reports.lms.CanvasExport", f"--assignment=['{ASSIGNMENT}']",
             f"--to={tmp_path / 'by_nbgrader.csv'}", cwd=course)
    with open(tmp_path / "by_nbgrader.csv", newline="") as f:
        assert list(csv.reader(f)) == rows


@pytest.mark.sandbox
@pytest.mark.slow
def test_moodle_worksheet_has_moodle_columns_and_nbgrader_export_scores(graded, tmp_path):
    """Moodle's grading worksheet: its columns by their English names, each row's Identifier "Participant <id>", the
    grade `nbgrader export` gives and the maximum, and a "Last modified (grade)" of now, so that Moodle takes it over
    any grade changed there before."""
    course, exported = graded
    before = datetime.now(timezone.utc).replace(microsecond=0)
    rows = export(course, "moodle", tmp_path / "moodle.csv")
    assert rows[0] == ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
                       "Grade can be changed", "Last modified (submission)", "Last modified (grade)"]
    by_id = {row[0]: dict(zip(rows[0], row)) for row in rows[1:]}
    assert set(by_id) == {f"Participant {lms_id}" for lms_id in EXPECTED}
    for lms_id, score in EXPECTED.items():
        row = by_id[f"Participant {lms_id}"]
        assert float(row["Grade"]) == score == nbgrader_score(exported, lms_id), lms_id
        assert row["Maximum Grade"] == "6"
        assert before <= datetime.fromisoformat(row["Last modified (grade)"]) <= before + timedelta(minutes=2)
    assert by_id["Participant 103"]["Full name"] == f"'{HOSTILE_FIRST} {HOSTILE_LAST}"
    assert by_id["Participant 102"]["Last modified (submission)"].startswith("2026-11-21T12:00:00")
    assert by_id["Participant 105"]["Status"] == "No submission"


def test_an_assignment_without_grades_is_refused_with_a_reason(tmp_path):
    """Before any grading there is nothing to export: the command says which assignment and what to do."""
    course = scratch_course(tmp_path / "course")
    result = subprocess.run([sys.executable, "-m", "autograder", "export", "01", "--lms", "moodle", "--course",
                             str(course)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and f"{ASSIGNMENT} has no grades in the course's gradebook" in result.stderr
    assert not (course / "autograder" / "gradebook.db").exists(), "looking must not create a gradebook"


def student_ids(tmp_path: Path, names: list[str], pattern: str) -> dict[str, str]:
    """The students the grader finds in a zip of these entries with this --pattern: student id -> id as given."""
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name in names:
            z.writestr(name, write(right()) if name.endswith(".ipynb") else "not a notebook")
    return {s.student_id: s.given_id or s.student_id for s in collect(archive, NOTEBOOK, pattern, tmp_path / "x")}


def test_the_canvas_pattern_reads_canvas_user_ids(tmp_path):
    """Canvas names each file <lastfirst>_[LATE_]<user id>_<file id>_<name>: the pattern reads the user id, late or
    not, whatever the student named the file."""
    names = ["smithalice_101_9001_01_basics.ipynb", "jonesbob_LATE_102_9002_01_basics-1.ipynb",
             "nguyễnchi_103_9003_01_basics.ipynb", "smithalice_101_9005_notes.txt"]
    assert student_ids(tmp_path, names, CANVAS_PATTERN) == {"101": "101", "102": "102", "103": "103"}


def test_the_moodle_pattern_reads_participant_ids(tmp_path):
    """Moodle's download-all zip: a folder <Full name>_<participant id>_assignsubmission_file_ per student (or, with
    "Download submissions in folders" off, that prefix on each file): the pattern reads the participant id."""
    names = ["Alice Smith_555_assignsubmission_file_/01_basics.ipynb",
             "José Núñez_556_assignsubmission_file_/work/01_basics.ipynb",
             "José Núñez_556_assignsubmission_onlinetext_/onlinetext.html",
             "Bob Jones_557_assignsubmission_file_01_basics.ipynb"]
    assert student_ids(tmp_path, names, MOODLE_PATTERN) == {"555": "555", "556": "556", "557": "557"}


def test_the_readme_gives_the_patterns_the_grader_recognises():
    """autograder/README.md shows each LMS's layout, as the pattern the grader reads it with."""
    text = (ROOT / "autograder" / "README.md").read_text()
    assert CANVAS_PATTERN in text and MOODLE_PATTERN in text
