"""nbgrader itself grades each notebook: solutions get full marks, unedited notebooks 0, wrong answers lose points."""

import os

import nbformat
import pytest
from nbgrader.api import Gradebook

from course import (ROOT, answer_ids, assignments, exercises_only, grading, nbgrader, read, scratch_course,
                    solution_answers, source_path, graded_cells_of, with_answers, wrong_answers)


pytestmark = [pytest.mark.sandbox, pytest.mark.slow]
KINDS = {"WRONG": "wrong", "NOISY_BUT_RIGHT": "noisy"}


def class_of(assignment: str, release) -> dict:
    """Every submission graded for one assignment: the solution, the unedited notebook, each catalogued answer."""
    right = solution_answers(assignment)
    students = {"solution": with_answers(release, right), "unedited": release}
    for key, kind in KINDS.items():
        for answer_id, variants in wrong_answers(assignment)[key].items():
            for k, code in enumerate(variants.values()):
                students[f"{kind}-{answer_id}-{k}"] = exercises_only(with_answers(release, {**right, answer_id: code.strip()}))
    return students


def grade_class(assignment: str, wanted: set[str], workdir) -> tuple[dict, object]:
    """Release, submit and autograde the wanted students of one assignment in a scratch course, in one nbgrader run."""
    scratch_course(workdir, ROOT / "solutions", (assignment,))
    nbgrader("generate_assignment", assignment, "--force", cwd=workdir)
    name = source_path(assignment).name
    students = {s: nb for s, nb in class_of(assignment, read(workdir / "notebooks" / assignment / name)).items() if s in wanted}
    for student, nb in students.items():
        target = workdir / "autograder" / "submitted" / student / assignment / name
        target.parent.mkdir(parents=True)
        nbformat.write(nb, target)
    try:
        nbgrader("autograde", assignment, "--create", cwd=workdir)
    except RuntimeError as error:
        # A kernel can lose the race for a free TCP port when many start at once ("Address already in use");
        # nbgrader then drops that student, and a second run grades just the students it dropped.
        if "Kernel died before replying" not in str(error):
            raise
        nbgrader("autograde", assignment, "--create", cwd=workdir)
    with Gradebook(f"sqlite:///{workdir}/autograder/gradebook.db") as gradebook:
        scores = {student: {g.name: (g.score, g.max_score)
                            for g in gradebook.find_submission_notebook(name.removesuffix(".ipynb"), assignment, student).grades}
                  for student in students}
    return scores, lambda student: read(workdir / "autograder" / "autograded" / student / assignment / name)


@pytest.fixture(scope="session")
def graded(request, tmp_path_factory):
    """graded(assignment) -> (scores by student and grade_id, autograded notebook by student).

    One nbgrader run per assignment, for just the students that the selected tests look at
    (so `-k ex4_sliding_window` grades a handful of notebooks, not the class).
    """
    cache = {}
    # Every worker of one run sees the same `run` folder: a second grading of one class means that the xdist groups
    # are not honoured (as with pytest 9 and xdist 3.8), which would silently double the suite's time.
    base = tmp_path_factory.getbasetemp()
    run = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base

    def grade(assignment):
        if assignment not in cache:
            try:
                (run / f"graded-{assignment}").touch(exist_ok=False)
            except FileExistsError:
                pytest.fail(f"{assignment} was graded by two workers: run pytest with --dist loadgroup (see requirements.txt)")
            wanted = {item.callspec.params["student"] for item in request.session.items
                      if getattr(item, "callspec", None) and item.callspec.params.get("assignment") == assignment
                      and "student" in item.callspec.params}
            try:
                cache[assignment] = grade_class(assignment, wanted, tmp_path_factory.mktemp(f"grade-{assignment}"))
            except Exception as error:  # kept: every later test of this class reports this cause, not a second grading
                cache[assignment] = error
        if isinstance(cache[assignment], Exception):
            pytest.fail(f"grading {assignment}'s class failed: {cache[assignment]}")
        return cache[assignment]
    return grade


def exercise_score(scores: dict, assignment: str, answer_id: str) -> tuple[float, float]:
    cells = graded_cells_of(read(source_path(assignment)), answer_id)
    return sum(scores[c][0] for c in cells), sum(scores[c][1] for c in cells)


def by_assignment(params):
    """Keep one assignment's grading tests on one xdist worker, so its class is graded once."""
    return [pytest.param(*p, marks=pytest.mark.xdist_group(f"grade-{p[0]}"), id="-".join(map(str, p[:-1]))) for p in params]


def catalogue(key: str):
    """(assignment, answer_id, why, student) for every catalogued answer of this kind."""
    return by_assignment([(a, answer_id, why, f"{KINDS[key]}-{answer_id}-{k}") for a in assignments()
                          for answer_id, variants in wrong_answers(a)[key].items() for k, why in enumerate(variants)])


@pytest.mark.parametrize("assignment, student", by_assignment([(a, "solution") for a in assignments()]))
def test_solution_scores_full_marks(graded, assignment, student):
    scores, _ = graded(assignment)
    lost = {cell: s for cell, s in scores[student].items() if s[0] != s[1]}
    assert sum(m for _, m in scores[student].values()) > 0
    assert not lost, f"the solution loses points in {lost}"


@pytest.mark.parametrize("assignment, student", by_assignment([(a, "unedited") for a in assignments()]))
def test_unedited_notebook_scores_zero_and_its_lesson_runs(graded, assignment, student):
    scores, autograded = graded(assignment)
    earned = {cell: s for cell, s in scores[student].items() if s[0] != 0}
    assert not earned, f"an unedited notebook earns points in {earned}"
    lesson_errors = [cell.id for cell in autograded(student).cells if cell.cell_type == "code" and not grading(cell)
                     and any(o.output_type == "error" for o in cell.outputs)]
    assert not lesson_errors, f"lesson cells fail while the exercises are unanswered: {lesson_errors}"


@pytest.mark.parametrize("assignment, answer_id, why, student", catalogue("WRONG"))
def test_wrong_answer_loses_its_points_only(graded, assignment, answer_id, why, student):
    scores, _ = graded(assignment)
    for exercise in answer_ids(read(source_path(assignment))):
        got, best = exercise_score(scores[student], assignment, exercise)
        if exercise == answer_id:
            assert got < best, f"'{why}' keeps all {best} points of {exercise}"
        else:
            assert got == best, f"'{why}' in {answer_id} costs points in {exercise}: {got}/{best}"


@pytest.mark.parametrize("assignment, answer_id, why, student", catalogue("NOISY_BUT_RIGHT"))
def test_right_answer_writing_to_stderr_keeps_its_points(graded, assignment, answer_id, why, student):
    scores, _ = graded(assignment)
    lost = {cell: s for cell, s in scores[student].items() if s[0] != s[1]}
    assert not lost, f"a right answer that {why} loses points in {lost}"
