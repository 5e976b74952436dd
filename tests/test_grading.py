"""The course's bulk grader grades each notebook's class, as shipped (`make grade` by an ordinary user in a fresh copy
of the repository under /tmp): solutions get full marks, unedited notebooks 0, wrong answers lose the points of their
exercise and of no exercise answered right; lesson cells tagged skip-in-grading are skipped, and run once edited.

The catalogued answers share hand-ins: each hand-in ("round") holds at most one catalogued answer per exercise, and
only answers of independent exercises, so that a class has as many rounds as its longest catalogue, not one hand-in
per answer. Cells run in order, so an answer can change only the exercises after it; two exercises are independent
when neither's cells read a name the other's answer binds (lessons.names). A wrong answer that changed a later
exercise some other way (global state) would show where that exercise is answered right, in the other rounds.
"""

import json
import os
from functools import lru_cache

import pytest

import shipped
from autograder.grading.lessons import names
from course import (answer_ids, assignments, grading, read, release_path, solution_answers, source_path,
                    graded_cells_of, with_answers, wrong_answers)
from torchcourse.format import SKIP_TAG, test_cells as exercise_tests  # not test*: pytest collects it


pytestmark = [pytest.mark.sandbox, pytest.mark.slow]
KINDS = {"WRONG": "wrong", "ALSO_RIGHT": "right"}
HELPER = "\n\n\ndef _from_the_lesson():\n    return 1\n"  # defined in an edited lesson cell, used by an answer


def lesson_edited(release, right: dict[str, str]):
    """The solution with every tagged lesson cell edited (so every cell runs), one of them defining a helper that
    the first answer calls: edited lesson cells must run, and an answer may use what they define."""
    nb = with_answers(release, right)
    first_answer = next(i for i, cell in enumerate(nb.cells) if grading(cell).get("solution"))
    tagged = [cell for cell in nb.cells[:first_answer] if SKIP_TAG in cell.metadata.get("tags", [])]
    for cell in tagged:
        cell.source += "\n# edited by the student"
    tagged[-1].source += HELPER
    nb.cells[first_answer].source = "assert _from_the_lesson() == 1\n" + nb.cells[first_answer].source
    return nb


def reads_and_binds(code: str) -> tuple[set[str] | None, set[str]]:
    reads, _, binds = names(code)
    return (None if reads is None else set(reads)), set(binds)


def independent(earlier: str, later: str, codes: dict[str, str], tests: dict[str, str]) -> bool:
    """Whether nothing of exercise `later` (its answer in `codes`, its tests) reads a name exercise `earlier`'s answer
    binds; `codes` holds both answers as the hand-in has them."""
    reads, _ = reads_and_binds(codes[later] + "\n" + tests[later])
    return reads is not None and not reads & reads_and_binds(codes[earlier])[1]


@lru_cache
def rounds(assignment: str) -> tuple[dict[str, tuple[str, str, str]], ...]:
    """The catalogue packed into hand-ins: each a dict answer_id -> (kind, why, code), at most one answer per exercise,
    of exercises pairwise independent (the right answers' names count too), in as few hand-ins as the greedy finds."""
    source, right = read(source_path(assignment)), solution_answers(assignment)
    order = answer_ids(source)
    tests = {a: "\n".join(cell.source for cell in exercise_tests(source, a)) for a in order}
    packed: list[dict[str, tuple[str, str, str]]] = []
    for key, kind in KINDS.items():
        for answer_id, variants in wrong_answers(assignment)[key].items():
            for why, code in variants.items():
                for hand_in in packed + [{}]:
                    codes = {**right, **{a: c for a, (_, _, c) in hand_in.items()}, answer_id: code.strip()}
                    chosen = sorted([*hand_in, answer_id], key=order.index)
                    if answer_id not in hand_in and all(
                            independent(a, b, codes, tests) and independent(a, b, right | {a: codes[a]}, tests)
                            for i, a in enumerate(chosen) for b in chosen[i + 1:]):
                        hand_in[answer_id] = (kind, why, code.strip())
                        if hand_in not in packed:
                            packed.append(hand_in)
                        break
    return tuple(packed)


def class_of(assignment: str, release) -> dict:
    """Every hand-in graded for one assignment: the solution, the unedited notebook, the solution with its lesson
    edited, and the rounds of catalogued answers (each in the whole notebook, the other exercises answered right)."""
    right = solution_answers(assignment)
    students = {"solution": with_answers(release, right), "unedited": release,
                "lesson-edited": lesson_edited(release, right)}
    for r, hand_in in enumerate(rounds(assignment)):
        students[f"round-{r}"] = with_answers(release, {**right, **{a: code for a, (_, _, code) in hand_in.items()}})
    return students


def grade_class(assignment: str, wanted: set[str]) -> tuple[dict, object]:
    """The wanted students of one assignment, graded in one batch by `make grade`, by an ordinary user, in the
    repository as shipped (tests/shipped.py)."""
    submissions = shipped.write_hand_ins(
        shipped.instructor().home / "classes" / assignment,
        {s: nb for s, nb in class_of(assignment, read(release_path(assignment))).items() if s in wanted},
        source_path(assignment).name)
    # One kernel per batch: xdist runs a batch on each core (and the suite one OpenMP thread per process).
    shipped.make_grade(assignment, submissions, jobs=1)
    out = shipped.course() / "autograder" / "grades" / assignment
    results = {student: json.loads((out / "results" / f"{student}.json").read_text()) for student in wanted}
    unsure = {s: f"{r['status']}: {r['message']}" for s, r in results.items() if r["status"] != "graded"}
    if unsure:
        raise RuntimeError(f"not graded normally: {unsure}")
    scores = {s: {gid: (c["score"], c["max_score"]) for gid, c in r["cells"].items()} for s, r in results.items()}
    return scores, lambda student: read(out / "autograded" / f"{student}.ipynb")


@pytest.fixture(scope="session")
def graded(request, tmp_path_factory):
    """graded(assignment) -> (scores by student and grade_id, autograded notebook by student).

    One batch per assignment, for just the students that the selected tests look at
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
                cache[assignment] = grade_class(assignment, wanted)
            except Exception as error:  # kept: every later test of this class reports this cause, not a second grading
                cache[assignment] = error
        if isinstance(cache[assignment], Exception):
            pytest.fail(f"grading {assignment}'s class failed: {cache[assignment]}")
        return cache[assignment]
    return grade


def lesson_errors(nb) -> list[str]:
    """Ids of the lesson cells of a graded notebook that show an error."""
    return [cell.id for cell in nb.cells if cell.cell_type == "code" and not grading(cell)
            and any(o.output_type == "error" for o in cell.outputs)]


def exercise_score(scores: dict, assignment: str, answer_id: str) -> tuple[float, float]:
    cells = graded_cells_of(read(source_path(assignment)), answer_id)
    return sum(scores[c][0] for c in cells), sum(scores[c][1] for c in cells)


def by_assignment(params):
    """Keep one assignment's grading tests on one xdist worker, so its class is graded once."""
    return [pytest.param(*p, marks=pytest.mark.xdist_group(f"grade-{p[0]}"), id="-".join(map(str, p[:-1]))) for p in params]


def catalogue(key: str):
    """(assignment, answer_id, why, student) for every catalogued answer of this kind, the student its round."""
    return by_assignment([(a, answer_id, why, f"round-{r}") for a in assignments()
                          for r, hand_in in enumerate(rounds(a))
                          for answer_id, (kind, why, _) in hand_in.items() if kind == KINDS[key]])


def wrong_in(assignment: str, student: str) -> set[str]:
    """The exercises a round answers wrong."""
    return {a for a, (kind, _, _) in rounds(assignment)[int(student.split("-")[1])].items() if kind == KINDS["WRONG"]}


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
    failed = lesson_errors(autograded(student))
    assert not failed, f"lesson cells fail while the exercises are unanswered: {failed}"


@pytest.mark.parametrize("assignment, student", by_assignment([(a, "lesson-edited") for a in assignments()]))
def test_edited_lesson_cells_run_and_an_answer_may_use_them(graded, assignment, student):
    scores, autograded = graded(assignment)
    lost = {cell: s for cell, s in scores[student].items() if s[0] != s[1]}
    assert not lost, f"with its lesson cells edited, the solution loses points in {lost}"
    failed = lesson_errors(autograded(student))
    assert not failed, f"lesson cells fail when they run in grading: {failed}"


@pytest.mark.parametrize("assignment, answer_id, why, student", catalogue("WRONG"))
def test_wrong_answer_loses_its_points_only(graded, assignment, answer_id, why, student):
    scores, _ = graded(assignment)
    for exercise in answer_ids(read(source_path(assignment))):
        got, best = exercise_score(scores[student], assignment, exercise)
        if exercise == answer_id:
            assert got < best, f"'{why}' keeps all {best} points of {exercise}"
        elif exercise not in wrong_in(assignment, student):
            assert got == best, f"'{why}' in {answer_id} costs points in {exercise}, answered right: {got}/{best}"


@pytest.mark.parametrize("assignment, answer_id, why, student", catalogue("ALSO_RIGHT"))
def test_another_right_answer_keeps_its_points(graded, assignment, answer_id, why, student):
    scores, _ = graded(assignment)
    for exercise in answer_ids(read(source_path(assignment))):
        got, best = exercise_score(scores[student], assignment, exercise)
        if exercise not in wrong_in(assignment, student):  # its own, and every other answered right in its round
            assert got == best, f"a right answer in {answer_id} ({why}) costs points in {exercise}: {got}/{best}"
