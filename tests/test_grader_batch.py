"""The bulk grader on a class of right, wrong and broken hand-ins of the grader's own test course (two exercises)."""

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from autograder.grading.notebook import NOT_RUN
from course import ROOT, nbgrader, read
from handins import (ASSIGNMENT, CHILDREN, FIRST, MEMORY_HOG, NOISY, NOTEBOOK, OTHER, SECOND, STUBBORN_LOOP, WIDGETS,
                     colab, exercise_points, grade, handin, hidden_lines, html_text, leaked, release, replace_cell,
                     right, right_answers, rows_of, scratch_course, source, without_cells, write, write_folder, write_zip)

pytestmark = [pytest.mark.xdist_group("grader-batch"), pytest.mark.sandbox, pytest.mark.slow]  # one worker grades the class once; the tests read its results
WRONG_MEAN = "def mean(xs):\n    return sum(xs) / (len(xs) + 1)"
FIRST_TESTS = [f"{FIRST}_tests", f"{FIRST}_hidden"]
MEAN_OF_TOTAL = "def mean(xs):\n    return total(xs) / len(xs)"
ENDLESS_CLIP = "def clip(x, low, high):\n    while True:\n        pass"
TIMEOUT = 10  # the class's cell time limit (--timeout): it has endless loops

# student -> (status, the exercises that score 0 (the others must score full marks), words the message must hold)
EXPECTED = {
    "right": ("graded", set(), ""),
    "unedited": ("graded", {FIRST, SECOND}, ""),
    "wrong": ("graded", {FIRST}, ""),
    "loop": ("timeout", {SECOND}, "limit"),
    "loop_in_tests": ("timeout", {SECOND}, f"{SECOND}_hidden was not run"),
    "stubborn": ("timeout", {SECOND}, "KeyboardInterrupt"),
    "exits": ("crashed", {SECOND}, "exit code 3"),
    "segfault": ("crashed", {SECOND}, "segmentation fault"),
    "memory": ("crashed", {SECOND}, "memory"),
    "sys_exit": ("graded", {SECOND}, ""),
    "children": ("graded", set(), "running after grading"),
    "not_json": ("invalid", {FIRST, SECOND}, "JSON"),
    "truncated": ("invalid", {FIRST, SECOND}, "cut off"),
    "other_assignment": ("invalid", {FIRST, SECOND}, OTHER),
    "empty": ("invalid", {FIRST, SECOND}, "empty"),
    "sources": ("invalid", {FIRST, SECOND}, "instructor's sources"),
    "tests_edited": ("graded", {FIRST}, ""),
    "tests_deleted": ("graded", {FIRST}, "put back"),
    "tests_duplicated": ("graded", {FIRST}, "more than once"),
    "answer_deleted": ("graded", {SECOND}, "put back"),
    "noisy": ("graded", set(), ""),
    "widgets": ("graded", set(), ""),
    "colab": ("graded", set(), ""),
    "lesson_edited": ("graded", set(), ""),
    "lesson_used": ("graded", set(), ""),
    "no_notebook": ("missing", {FIRST, SECOND}, "no notebook"),
}


def broken_class() -> dict[str, str | None]:
    """student -> notebook text (None: a folder with no notebook). The second exercise is the one broken."""
    wrong = right(**{FIRST: WRONG_MEAN})
    answers = right_answers()
    return {
        "right": write(right()),
        "unedited": write(handin()),
        "wrong": write(wrong),
        "loop": write(right(**{SECOND: "while True:\n    pass"})),
        "loop_in_tests": write(right(**{SECOND: ENDLESS_CLIP})),  # each test of clip calls it
        "stubborn": write(right(**{SECOND: STUBBORN_LOOP})),
        "exits": write(right(**{SECOND: "import os\nos._exit(3)"})),
        "segfault": write(right(**{SECOND: "import ctypes\nctypes.string_at(0)"})),
        "memory": write(right(**{SECOND: MEMORY_HOG})),
        "sys_exit": write(right(**{SECOND: "import sys\nsys.exit()"})),
        "children": write(right(**{SECOND: CHILDREN + answers[SECOND]})),
        "not_json": "These are my answers: 1. the mean ...",
        "truncated": write(right())[:1500],
        "other_assignment": write(release(OTHER)),
        "empty": json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}),
        "sources": write(source()),  # the solution notebook itself, as a link in the exchange brings it
        "tests_edited": write(replace_cell(replace_cell(wrong, FIRST_TESTS[0], "pass"), FIRST_TESTS[1], "pass")),
        "tests_deleted": write(without_cells(wrong, set(FIRST_TESTS))),
        "tests_duplicated": write(replace_cell(wrong, FIRST_TESTS[1], "pass", duplicate_first=True)),
        "answer_deleted": write(without_cells(right(), {SECOND})),
        "noisy": write(right(**{gid: NOISY + code for gid, code in answers.items()})),
        "widgets": write(right(**{FIRST: WIDGETS + answers[FIRST]})),
        "colab": colab(right()),
        # a helper defined in a lesson cell and used by an answer: lesson cells run in grading too
        "lesson_edited": write(handin({FIRST: MEAN_OF_TOTAL, SECOND: answers[SECOND]},
                                      lesson="def total(xs):\n    return sum(xs)")),
        # the released lesson cell, tagged skip-in-grading, unchanged; its helper used by an answer: it must run
        "lesson_used": write(handin({FIRST: MEAN_OF_TOTAL, SECOND: answers[SECOND]})),
        "no_notebook": None,
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded once: (course, submissions, out folder, rows by student, the command's stderr)."""
    course = scratch_course(tmp_path_factory.mktemp("course"))
    submissions = write_folder(tmp_path_factory.mktemp("submissions"), broken_class())
    result = grade(course, submissions, "--timeout", str(TIMEOUT), "--memory", "2")
    out = course / "autograder" / "grades" / ASSIGNMENT
    return course, submissions, out, rows_of(out), result.stderr


@pytest.mark.parametrize("student", EXPECTED)
def test_each_submission_gets_its_row(graded, student):
    """Status, message and scores: broken exercises score 0, every other exercise full marks."""
    status, zero, words = EXPECTED[student]
    row = graded[3][student]
    assert row["status"] == status, f"{student}: {row['status']} ({row['message']})"
    assert words in row["message"], f"{student}: the message '{row['message']}' does not mention '{words}'"
    if status != "graded":
        assert row["message"], f"{student}: no message says why it is {status}"
    for exercise in (FIRST, SECOND):
        got, best = exercise_points(row, exercise)
        assert got == (0 if exercise in zero else best), f"{student}: {exercise} scores {got}/{best} ({row['message']})"


def test_a_lesson_cell_is_skipped_only_as_released_and_unused(graded):
    """The tagged lesson cell: skipped in the right answers' grading, run when edited or when an answer uses it."""
    out = graded[2]

    def lesson_output(student):
        (cell,) = [c for c in read(out / "autograded" / f"{student}.ipynb").cells if c.id == "lesson"]
        return "".join(o.get("text", "") for o in cell.outputs)

    assert lesson_output("right") == NOT_RUN
    assert "a lesson cell ran: 6" in lesson_output("lesson_used")
    assert lesson_output("lesson_edited") == ""  # ran: the edited cell prints nothing


def test_table_has_the_promised_columns_and_a_summary(graded):
    """grades.csv: the fixed columns then one per graded cell; the run ends with a summary by status."""
    _, _, out, rows, stderr = graded
    header = next(csv.reader(open(out / "grades.csv")))
    cells = [f"{FIRST}_tests", f"{FIRST}_hidden", f"{SECOND}_tests", f"{SECOND}_hidden"]
    assert header == ["student_id", "name", "gradebook_id", "assignment", "notebook", "score", "max_score", "status",
                      "message", "timestamp", "seconds_late", "late_penalty", "graded_by_hand"] + cells
    assert sorted(rows) == sorted(EXPECTED)
    assert f"{len(EXPECTED)} students:" in stderr and "mean score" in stderr and "ETA" in stderr


def test_a_test_past_the_limit_spares_its_exercises_later_tests_the_limit(graded):
    """clip loops forever: its visible test runs to the limit, and its hidden test, which calls the same answer, is
    not run (the row and the cell say why) instead of waiting the limit again; the other exercise is graded in full."""
    _, _, out, rows, _ = graded
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in read(out / "autograded" / "loop_in_tests.ipynb").cells}
    assert [o.get("ename") for o in cells[f"{SECOND}_tests"].outputs if o.get("output_type") == "error"][-1] == \
        "CellTimeoutError"
    (skipped,) = [o for o in cells[f"{SECOND}_hidden"].outputs if o.get("output_type") == "error"]
    assert skipped.ename == "TestSkipped" and f"{SECOND}_tests" in skipped.evalue and f"{TIMEOUT} s" in skipped.evalue
    assert "the same exercise had run past the time limit" in rows["loop_in_tests"]["message"]
    seconds = json.loads((out / "results" / "loop_in_tests.json").read_text())["execute_seconds"]
    assert TIMEOUT <= seconds < 1.5 * TIMEOUT, f"its cells ran {seconds} s: the limit was spent twice"


def test_the_progress_names_a_long_hand_in_and_its_time_while_it_runs(graded):
    """The batch's stderr (not a terminal) says which hand-ins are still running and for how long, at an interval no
    longer than the cell time limit, between the lines of hand-ins graded."""
    stderr = graded[4]
    lines = re.findall(r"^still grading: (\S+) (\d+):(\d\d)", stderr, re.M)
    assert lines, stderr[-2000:]
    assert all(student in EXPECTED for student, _, _ in lines)
    assert max(60 * int(m) + int(s) for _, m, s in lines) >= TIMEOUT, lines


def test_no_process_is_left_running(graded):
    """The processes the 'children' notebook started (one a daemon of its own session) were stopped."""
    left = subprocess.run(["pgrep", "-f", "sleep 61[34]"], capture_output=True, text=True).stdout.split()
    assert not left, f"processes started by a notebook are still running: {left}"


def test_every_kernel_was_forked_from_its_slots_warm_parent(graded):
    """Each hand-in that ran got a kernel forked from its slot's warm parent, none started afresh (autograder/kernel/warm.py)."""
    _, _, out, rows, stderr = graded
    ran = [s for s, r in rows.items() if r["status"] not in ("invalid", "missing")]
    logs = {s: (out / "logs" / f"{s}.log").read_text() for s in ran}
    cold = [s for s, log in logs.items() if "kernel forked from the slot's warm parent" not in log
            or "this kernel starts afresh" in log]
    assert ran and not cold, f"kernels started afresh: {cold}; {stderr[-500:]}"
    assert "kernels start afresh" not in stderr


def test_feedback_names_each_test_and_hides_hidden_code(graded):
    """Every graded student gets feedback naming each test; a failing hidden test shows the instructor's message."""
    _, _, out, rows, _ = graded
    secret = hidden_lines()
    for student, row in rows.items():
        if row["status"] in ("invalid", "missing"):
            continue
        text = html_text(out / "feedback" / f"{student}.html")
        assert not leaked(text, secret), f"{student}'s feedback shows hidden test code: {leaked(text, secret)}"
        assert f"{FIRST}_hidden" in text and "Hidden tests ran here" in text
    wrong = html_text(out / "feedback" / "wrong.html")
    assert "AssertionError: the mean of … is …, not …" in wrong, "a failing hidden test shows its own message"


def test_grades_reach_the_course_gradebook_and_nbgrader_export(graded):
    """formgrader and `nbgrader export` see every student; those that could not be graded are flagged for a human."""
    course, _, _, rows, _ = graded
    with Gradebook(f"sqlite:///{course}/autograder/gradebook.db") as gb:
        for student, row in rows.items():
            submitted = gb.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, student)
            assert submitted.score == float(row["score"]), student
            assert submitted.needs_manual_grade == (row["status"] in ("tampered", "timeout", "crashed", "invalid")), student
    assert (course / "autograder" / "autograded" / "right" / ASSIGNMENT / NOTEBOOK).exists()
    nbgrader("export", "--to", str(course / "export.csv"), cwd=course)
    exported = {r["student_id"]: r for r in csv.DictReader(open(course / "export.csv"))}
    assert set(rows) <= set(exported)
    assert float(exported["right"]["raw_score"]) == float(rows["right"]["score"])


def test_the_reports_mean_is_formgraders(graded):
    """report.html's mean is the one formgrader shows for the assignment (nbgrader's average_assignment_score, on the
    course's gradebook the batch wrote), over every student of the class, whatever their status."""
    course, _, out, rows, _ = graded
    with Gradebook(f"sqlite:///{course}/autograder/gradebook.db") as gb:
        formgraders = gb.average_assignment_score(ASSIGNMENT)
    text = html_text(out / "report.html")
    assert f"mean score {formgraders:.2f} of 6 points over all {len(rows)}," in text, text[:500]


def holds_answer(text: str | None, exercise: str) -> bool:
    """Whether a hand-in is a notebook with that answer cell."""
    try:
        cells = json.loads(text or "")["cells"]
    except (ValueError, KeyError, TypeError):
        return False
    return any(c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == exercise for c in cells)


def test_the_report_compares_every_answer_handed_in(graded):
    """report.html's similar answers read the notebooks the batch kept (submitted/): each exercise counts every
    hand-in holding its answer cell, and finds no two alike in this class (its answers are one line, or unique)."""
    page = (graded[2] / "report.html").read_text()
    assert "<h2>Similar answers</h2>" in page
    for exercise in (FIRST, SECOND):
        holding = sum(holds_answer(text, exercise) for text in broken_class().values())
        assert f'<section class="similar" data-exercise="{exercise}" data-pairs="0" data-answers="{holding}"' in page


def test_a_second_run_grades_only_what_is_missing_and_gives_the_same_table(graded):
    """Results are kept per student: a rerun grades just those whose result is gone (as after an interruption)."""
    course, submissions, out, _, _ = graded
    table = (out / "grades.csv").read_text()
    (out / "results" / "wrong.json").unlink()  # as if the run had been interrupted before grading it
    result = grade(course, submissions, "--timeout", str(TIMEOUT), "--memory", "2")
    assert "1 to grade" in result.stderr
    assert (out / "grades.csv").read_text() == table


def test_zip_export_from_an_lms_with_a_student_pattern(tmp_path):
    """A flat zip as Canvas exports it: the --pattern names the student in each file name; --force regrades."""
    course = scratch_course(tmp_path / "course")
    archive = write_zip(tmp_path / "submissions.zip", {"right": write(right()), "truncated": write(right())[:1500]})
    out = tmp_path / "out"
    pattern = ("--pattern", r"^(?P<student_id>[^_]+)_\d+_\d+_", "--out", str(out))
    grade(course, archive, *pattern)
    rows = rows_of(out)
    assert (rows["right"]["status"], rows["truncated"]["status"]) == ("graded", "invalid")
    assert rows["right"]["score"] == rows["right"]["max_score"]
    assert "2 to grade" in grade(course, archive, *pattern, "--force").stderr


def test_one_notebook_alone_for_debugging(tmp_path):
    """SUBMISSIONS may be one notebook: that student is graded alone, the row and log named after the file."""
    course = scratch_course(tmp_path / "course")
    (tmp_path / "alice.ipynb").write_text(write(right(**{FIRST: WRONG_MEAN})))
    grade(course, tmp_path / "alice.ipynb", "--out", str(tmp_path / "out"))
    row = rows_of(tmp_path / "out")["alice"]
    assert row["status"] == "graded" and exercise_points(row, FIRST)[0] == 0
    assert (tmp_path / "out" / "logs" / "alice.log").read_text()


def test_three_shards_and_a_merge_make_what_one_run_made(graded, tmp_path):
    """`--shard K/3` on three runs, then `merge`: the table, feedback and gradebook of the one run, for these students."""
    course, submissions, _, rows, _ = graded
    some = ["right", "unedited", "wrong", "exits", "truncated", "tests_deleted", "lesson_used", "colab", "no_notebook"]
    part = tmp_path / "submissions"
    for student in some:
        shutil.copytree(submissions / student, part / student)
    course = scratch_course(tmp_path / "course")
    shards = [tmp_path / "shards" / f"shard-{k}" for k in (1, 2, 3)]
    for k, out in enumerate(shards, 1):
        grade(course, part, "--shard", f"{k}/3", "--out", str(out))
    sizes = [len(rows_of(out)) for out in shards]
    assert sum(sizes) == len(some) and max(sizes) < len(some), f"students per shard: {sizes}"
    assert not (course / "autograder" / "gradebook.db").exists(), "a shard wrote the gradebook before the merge"
    merged = tmp_path / "merged"
    result = subprocess.run([sys.executable, "-m", "autograder", "merge", str(tmp_path / "shards"), "--out", str(merged),
                             "--course", str(course)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    kept = ("score", "max_score", "status", *FIRST_TESTS, f"{SECOND}_tests", f"{SECOND}_hidden")
    assert {s: {k: r[k] for k in kept} for s, r in rows_of(merged).items()} == \
        {s: {k: rows[s][k] for k in kept} for s in some}
    assert {p.stem for p in (merged / "feedback").glob("*.html")} == {s for s in some if rows[s]["status"] not in ("invalid", "missing")}
    with Gradebook(f"sqlite:///{course}/autograder/gradebook.db") as gb:
        scores = {s: gb.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, s).score for s in some}
    assert scores == {s: float(rows[s]["score"]) for s in some}


def test_feedback_opens_with_a_summary_of_each_exercise(graded):
    """The feedback's first cell, a table before the notebook's own: each exercise's points and first failure."""
    _, _, out, rows, _ = graded
    page = (out / "feedback" / "wrong.html").read_text()
    text = html_text(out / "feedback" / "wrong.html")
    start, first_cell = text.index("Your results, exercise by exercise"), text.index("Basics: two small exercises")
    summary = text[start:first_cell]
    (got, best), (clip, clip_best) = exercise_points(rows["wrong"], FIRST), exercise_points(rows["wrong"], SECOND)
    assert (got, clip) == (0, clip_best) and best > 0
    assert f"{FIRST} — Exercise 1." in summary
    assert f"0 / {best:g} AssertionError: mean([1, 2, 3]) should be 2" in summary
    assert f"{SECOND} — Exercise 2." in summary and f"{clip_best:g} / {clip_best:g} passed" in summary
    heading = page.index("Your results, exercise by exercise")
    assert heading < page.index("<table", heading) < page.index("</table>", heading) < page.index("Basics: two small")
