"""Values judged outside the student's kernel, against hand-ins that attack them (tests/hostile.py, the last section).

The grader's test course has an assignment written with `expect` (03_values): a grading runs its test cells without
their expected values, and judges what they send against the solution's. Each family of attack that won points while
the comparison ran in the kernel is handed in: answers whose values lie, a torch mode that copies the expected value
into the answer, an answer that reads the test's own text, a patched judge, a replaced testing module, a finder that
serves one, builtins.setattr replaced (so that `refused` refuses nothing), and the same set up to undo itself later
(IPython callbacks, a timer thread, a signal handler); an answer that ends its test early with the grader's own check
error, as if the test had passed. The control: stock nbgrader gives the ones that can win points.
"""

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

import hostile
from course import grading, nbgrader
from handins import (exercise_points, grade, handin, private_env, right_answers, rows_of, scratch_course, source,
                     write, write_folder)

pytestmark = [pytest.mark.xdist_group("grader-values"), pytest.mark.sandbox, pytest.mark.slow]
VALUES = "03_values"
NOTEBOOK = f"{VALUES}.ipynb"
SCALE, COUNT, TOTAL = "ex1_scale", "ex2_count_positive", "ex3_total"
ALL = {SCALE, COUNT, TOTAL}


def right(**changed: str):
    """03_values with right answers, but for those given."""
    return handin({**right_answers(VALUES), **changed}, assignment=VALUES)


WRONG_VALUES = "import torch\ndef scale(x, k):\n    return torch.zeros_like(x)"

# student -> (notebook, expected status, exercises scoring 0 (the others full marks))
CLASS = {
    "equals_anything": (right(**{COUNT: hostile.EQUALS_ANYTHING}), "graded", {COUNT}),
    "lying_tensor": (right(**{SCALE: hostile.LYING_TENSOR}), "graded", {SCALE}),
    "mode_copies_want": (right(**{SCALE: hostile.MODE_COPIES_WANT}), "tampered", ALL),
    "source_reader": (right(**{SCALE: hostile.SOURCE_READER, COUNT: "# count_positive: answered above"}), "graded",
                      {SCALE, COUNT}),
    "judge_patched": (right(**{SCALE: hostile.JUDGE_PATCHED + "\n" + WRONG_VALUES,
                               COUNT: "def count_positive(xs):\n    return -1"}), "tampered", ALL),  # the course's module
    "testing_replaced": (right(**{TOTAL: hostile.TESTING_REPLACED}), "tampered", {TOTAL}),
    "meta_path_finder": (right(**{TOTAL: hostile.META_PATH_FINDER}), "tampered", {TOTAL}),
    "builtins_setattr": (right(**{TOTAL: hostile.BUILTINS_SETATTR}), "tampered", {TOTAL}),
    "callbacks_undo": (right(**{TOTAL: hostile.CALLBACKS_UNDO}), "tampered", {TOTAL}),
    "timer_undoes": (right(**{TOTAL: hostile.TIMER_UNDOES}), "tampered", {TOTAL}),
    "alarm_undoes": (right(**{TOTAL: hostile.ALARM_UNDOES}), "tampered", {TOTAL}),
    "event_loop_undoes": (right(**{TOTAL: hostile.EVENT_LOOP_UNDOES}), "tampered", {TOTAL}),
    "imported_rebound": (right(**{TOTAL: hostile.IMPORTED_REBOUND}), "tampered", {TOTAL}),
    "event_loop_once_undoes": (right(**{TOTAL: hostile.EVENT_LOOP_ONCE_UNDOES}), "tampered", {TOTAL}),
    "course_module_changed": (right(**{TOTAL: hostile.COURSE_MODULE_CHANGED}), "tampered", {TOTAL}),
    "ends_test_early": (right(**{COUNT: hostile.ENDS_TEST_EARLY}), "tampered", {COUNT, TOTAL}),
    "forged_count": (right(**{COUNT: hostile.forged_count("10 ** 60")}), "graded", set()),
    "forged_count_text": (right(**{COUNT: hostile.forged_count("'hidden test text'")}), "graded", set()),
    "zz_right": (right(), "graded", set()),
    "zz_unedited": (handin(assignment=VALUES), "graded", ALL),
}
# What wins points where the comparison and `refused` live in the kernel alone (the timer, the alarm and the
# event loop's callback win by chance there, so they are not part of the control).
WINS_IN_THE_KERNEL = {"mode_copies_want": {SCALE}, "source_reader": {SCALE, COUNT}, "judge_patched": {SCALE, COUNT},
                      "testing_replaced": {TOTAL}, "meta_path_finder": {TOTAL}, "builtins_setattr": {TOTAL},
                      "callbacks_undo": {TOTAL}, "imported_rebound": {TOTAL}, "course_module_changed": {TOTAL},
                      "event_loop_once_undoes": {TOTAL}}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("values")
    course = scratch_course(base / "course")
    submissions = write_folder(base / "submissions", {s: write(v[0]) for s, v in CLASS.items()}, NOTEBOOK)
    grade(course, submissions, assignment=VALUES, env=private_env(base / "env"))
    out = course / "autograder" / "grades" / VALUES
    return course, out, rows_of(out)


@pytest.mark.parametrize("student", list(CLASS))
def test_each_attack_on_values_is_graded_as_it_deserves(graded, student):
    _, _, rows = graded
    _, status, zero = CLASS[student]
    row = rows[student]
    assert row["status"] == status, (student, row)
    for exercise in ALL:
        earned, most = exercise_points(row, exercise, VALUES)
        assert earned == (0 if exercise in zero else most), (student, exercise, earned, row)


def test_the_autograded_notebook_keeps_the_tests_as_written_without_the_values_sent(graded):
    """The grading form of a test cell (no expected values) is only what the kernel ran: the notebook the gradebook
    and the feedback read holds the cell as written, and no value the kernel sent."""
    course, _, _ = graded
    from torchcourse.values import MIME
    written = {c.id: c.source for c in source(VALUES).cells}
    for path in (course / "autograder" / "autograded").rglob(NOTEBOOK):
        for cell in nbformat.read(path, as_version=4).cells:
            if grading(cell).get("grade"):
                assert cell.source == written[cell.id], (path, cell.id)
            assert not any(MIME in o.get("data", {}) for o in cell.get("outputs", [])), (path, cell.id)


def test_no_forged_execution_count_reaches_the_feedback(graded):
    """A kernel message may say any execution count: the autograded notebook and the feedback show the grader's."""
    course, out, _ = graded
    for student in ("forged_count", "forged_count_text"):
        autograded = course / "autograder" / "autograded" / student / VALUES / NOTEBOOK
        counts = [c.execution_count for c in nbformat.read(autograded, as_version=4).cells if c.cell_type == "code"]
        assert all(n is None or type(n) is int and n <= len(counts) for n in counts), (student, counts)
        prompts = re.findall(r"In(?:\s|&nbsp;)*\[([^\]]*)\]:", (out / "feedback" / f"{student}.html").read_text())
        assert prompts and all(p.isdigit() and int(p) <= len(counts) for p in prompts), (student, prompts)


def test_the_attacks_on_values_win_points_where_the_kernel_judges(tmp_path):
    """The control: graded by plain nbgrader (the test cells as written, compared in the kernel), each attack scores."""
    from benchmark_grading import stock_nbgrader
    course = stock_nbgrader(scratch_course(tmp_path / "course"))
    nbgrader("generate_assignment", VALUES, "--force", cwd=course)
    for student in WINS_IN_THE_KERNEL:
        target = course / "autograder" / "submitted" / student / VALUES / NOTEBOOK
        target.parent.mkdir(parents=True)
        target.write_text(write(CLASS[student][0]))
    subprocess.run([sys.executable, "-m", "nbgrader", "autograde", VALUES, "--create", "--Execute.timeout=60"],
                   cwd=course, env=private_env(tmp_path / "env"), capture_output=True)
    with Gradebook(f"sqlite:///{course}/autograder/gradebook.db") as gb:
        for student, wins in WINS_IN_THE_KERNEL.items():
            submission = gb.find_submission_notebook(Path(NOTEBOOK).stem, VALUES, student)
            scores = {g.name: g.score for g in submission.grades}
            for exercise in wins:
                earned, most = exercise_points(scores, exercise, VALUES)
                assert earned == most, f"{student} should win {exercise} from stock nbgrader: {scores}"


def test_a_solution_failing_its_own_tests_grades_nobody(tmp_path):
    """Where the solution fails one of its tests there is nothing to judge a hand-in against: the batch stops before
    grading anyone, naming the test that failed, and writes no row."""
    course = scratch_course(tmp_path / "course")
    path = course / "solutions" / VALUES / NOTEBOOK
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if grading(cell).get("grade_id") == TOTAL:  # what ex3's tests refuse
            cell.source = "def total(xs):\n    ### BEGIN SOLUTION\n    return sum(xs)\n    ### END SOLUTION"
    nbformat.write(nb, path)
    submissions = write_folder(tmp_path / "class", {"ana": write(right())}, NOTEBOOK)
    result = grade(course, submissions, check=False, assignment=VALUES)
    assert result.returncode != 0, result.stderr
    said = result.stderr.strip().splitlines()[-1]
    assert "the solution fails its own tests" in said and "ex3_total_tests" in said, said
    assert not list((course / "autograder" / "grades" / VALUES / "results").glob("*.json")), "a hand-in was graded"
