"""The bulk grader (`python -m autograder grade`) on a class with right, wrong and broken submissions of notebook 02."""

import csv
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from classroom import broken_class, scratch_course, write_folder, write_zip
from course import ROOT, answer_ids, graded_cells_of, hidden_test_lines, nbgrader, read, source_path

ASSIGNMENT, OTHER = "02_autograd", "03_modules"
NOTEBOOK = source_path(ASSIGNMENT).name
EXERCISES = answer_ids(read(source_path(ASSIGNMENT)))
FIRST, SECOND, THIRD, FOURTH = EXERCISES
pytestmark = pytest.mark.xdist_group("autograder")  # one worker grades the class once; the tests read its results

# student -> (status, the exercises that score 0 (the others must score full marks), words the message must hold)
EXPECTED = {
    "right": ("graded", set(), ""),
    "unedited": ("graded", set(EXERCISES), ""),
    "wrong": ("graded", {FIRST}, ""),
    "loop": ("timeout", {SECOND}, "limit"),
    "stubborn": ("timeout", {SECOND}, "KeyboardInterrupt"),
    "exits": ("crashed", {SECOND}, "exit code 3"),
    "segfault": ("crashed", {SECOND}, "segmentation fault"),
    "memory": ("crashed", {SECOND}, "memory"),
    "sys_exit": ("graded", {SECOND}, ""),
    "children": ("graded", set(), "running after grading"),
    "not_json": ("invalid", set(EXERCISES), "JSON"),
    "truncated": ("invalid", set(EXERCISES), "cut off"),
    "other_assignment": ("invalid", set(EXERCISES), OTHER),
    "empty": ("invalid", set(EXERCISES), "empty"),
    "tests_edited": ("graded", {FIRST}, ""),
    "tests_deleted": ("graded", {FIRST}, "put back"),
    "tests_duplicated": ("graded", {FIRST}, "more than once"),
    "answer_deleted": ("graded", {SECOND}, "put back"),
    "noisy": ("graded", set(), ""),
    "faked": ("graded", {THIRD, FOURTH}, "torch.allclose"),
    "widgets": ("graded", set(), ""),
    "colab": ("graded", set(), ""),
    "vandal": ("graded", set(), ""),
    "no_notebook": ("missing", set(EXERCISES), "no notebook"),
}


def autograde(course: Path, submissions: Path, *args: str) -> subprocess.CompletedProcess:
    """The command as an instructor runs it (from the repository), on a scratch course."""
    result = subprocess.run([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, str(submissions), "--jobs", "2",
                             "--timeout", "10", "--memory", "3", "--course", str(course), *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"the grader failed:\n{result.stdout}\n{result.stderr}"
    return result


def fingerprint(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded once: (course, out folder, rows by student, the command's output, files before/after)."""
    course = scratch_course(tmp_path_factory.mktemp("course"), (ASSIGNMENT, OTHER))
    submissions = tmp_path_factory.mktemp("submissions")
    protected = [f"{course}/**", f"{submissions}/**", f"{tempfile.gettempdir()}/autograder-*/**"]
    write_folder(submissions, broken_class(ASSIGNMENT, OTHER, protected, lesson=False), NOTEBOOK)
    kept = sorted(p for p in list(course.rglob("*")) + list(submissions.rglob("*")) if p.is_file())
    before = fingerprint(kept)
    out = course / "autograder" / "grades" / ASSIGNMENT
    result = autograde(course, submissions)
    with open(out / "grades.csv") as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f)}
    return course, submissions, out, rows, result.stderr, before, fingerprint(kept)


def exercise_points(row: dict, exercise: str) -> tuple[float, float]:
    """Points earned on one exercise, and its maximum, from a row of grades.csv."""
    source = read(source_path(ASSIGNMENT))
    cells = graded_cells_of(source, exercise)
    best = {c.metadata.nbgrader["grade_id"]: c.metadata.nbgrader["points"] for c in source.cells
            if c.metadata.get("nbgrader", {}).get("grade")}
    return sum(float(row[c]) for c in cells), sum(best[c] for c in cells)


@pytest.mark.parametrize("student", EXPECTED)
def test_each_submission_gets_its_row(graded, student):
    """Status, message and scores: broken exercises score 0, every other exercise full marks."""
    status, zero, words = EXPECTED[student]
    row = graded[3][student]
    assert row["status"] == status, f"{student}: {row['status']} ({row['message']})"
    assert words in row["message"], f"{student}: the message '{row['message']}' does not mention '{words}'"
    if status != "graded":
        assert row["message"], f"{student}: no message says why it is {status}"
    for exercise in EXERCISES:
        got, best = exercise_points(row, exercise)
        assert got == (0 if exercise in zero else best), f"{student}: {exercise} scores {got}/{best} ({row['message']})"


def test_table_has_the_promised_columns_and_a_summary(graded):
    """grades.csv: the fixed columns then one per graded cell; the run ends with a summary by status."""
    _, _, out, rows, stderr, _, _ = graded
    header = next(csv.reader(open(out / "grades.csv")))
    source = read(source_path(ASSIGNMENT))
    cells = [c.metadata.nbgrader["grade_id"] for c in source.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert header == ["student_id", "assignment", "notebook", "score", "max_score", "status", "message"] + cells
    assert sorted(rows) == sorted(EXPECTED)
    assert f"{len(EXPECTED)} students:" in stderr and "mean score" in stderr and "ETA" in stderr


def test_student_code_cannot_touch_the_course_other_students_or_the_gradebook(graded):
    """The vandal's notebook tried to overwrite and delete every file it could find: all are unchanged."""
    _, _, _, rows, _, before, after = graded
    assert before == after
    assert rows["vandal"]["score"] == rows["right"]["score"]


def test_no_process_is_left_running(graded):
    """The processes the 'children' notebook started (one a daemon of its own session) were stopped."""
    left = subprocess.run(["pgrep", "-f", "sleep 61[34]"], capture_output=True, text=True).stdout.split()
    assert not left, f"processes started by a notebook are still running: {left}"


def test_feedback_shows_tests_and_points_but_no_hidden_code(graded):
    """Every graded student gets feedback naming each test and its points; no hidden line appears, not even in tracebacks."""
    _, _, out, rows, _, _, _ = graded
    hidden, visible = hidden_test_lines(read(source_path(ASSIGNMENT)))
    secret = [line for line in hidden if line not in visible and len(line) >= 8]
    for student, row in rows.items():
        if row["status"] in ("invalid", "missing"):
            continue
        html = (out / "feedback" / f"{student}.html").read_text()
        leaked = [line for line in secret if line in html]
        assert not leaked, f"{student}'s feedback shows hidden test code: {leaked[:3]}"
        assert f"{FIRST}_hidden" in html and "Hidden tests ran here" in html
    failed = (out / "feedback" / "wrong.html").read_text()
    assert "AssertionError" in failed, "a failing hidden test should still show its message"


def test_grades_reach_the_course_gradebook_and_nbgrader_export(graded):
    """formgrader and `nbgrader export` see every student; those that could not be graded are flagged for a human."""
    course, _, _, rows, _, _, _ = graded
    with Gradebook(f"sqlite:///{course}/autograder/gradebook.db") as gb:
        for student, row in rows.items():
            submitted = gb.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, student)
            assert submitted.score == float(row["score"]), student
            assert submitted.needs_manual_grade == (row["status"] in ("timeout", "crashed", "invalid")), student
    assert (course / "autograder" / "autograded" / "right" / ASSIGNMENT / NOTEBOOK).exists()
    nbgrader("export", "--to", str(course / "export.csv"), cwd=course)
    exported = {r["student_id"]: r for r in csv.DictReader(open(course / "export.csv"))}
    assert {s for s, r in rows.items()} <= set(exported)
    assert float(exported["right"]["raw_score"]) == float(rows["right"]["score"])


def test_a_second_run_grades_only_what_is_missing_and_gives_the_same_table(graded):
    """Results are kept per student: a rerun grades just those whose result is gone (as after an interruption)."""
    course, submissions, out, _, _, _, _ = graded
    table = (out / "grades.csv").read_text()
    (out / "results" / "wrong.json").unlink()  # as if the run had been interrupted before grading it
    result = autograde(course, submissions)
    assert "1 to grade" in result.stderr
    assert (out / "grades.csv").read_text() == table


def test_zip_export_from_an_lms_with_a_student_pattern(tmp_path):
    """A flat zip as Canvas exports it: the --pattern names the student in each file name; --force regrades."""
    course = scratch_course(tmp_path / "course", (ASSIGNMENT, OTHER))
    full = broken_class(ASSIGNMENT, OTHER, [], lesson=False)
    archive = tmp_path / "submissions.zip"
    write_zip(archive, {s: full[s] for s in ("right", "truncated")}, NOTEBOOK)
    out = tmp_path / "out"
    autograde(course, archive, "--pattern", r"^(?P<student_id>[^_]+)_\d+_\d+_", "--out", str(out))
    rows = {r["student_id"]: r for r in csv.DictReader(open(out / "grades.csv"))}
    assert (rows["right"]["status"], rows["truncated"]["status"]) == ("graded", "invalid")
    assert rows["right"]["score"] == rows["right"]["max_score"]
    again = autograde(course, archive, "--pattern", r"^(?P<student_id>[^_]+)_\d+_\d+_", "--out", str(out), "--force")
    assert "2 to grade" in again.stderr
