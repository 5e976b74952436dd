"""One hand-in, one row: what a hand-in holds costs its own row alone, never the class's grading, its report, the hidden
tests or anyone else's points. One class of the grader's test course, graded once: right hand-ins beside hand-ins
whose nbgrader metadata was edited, nested past any parser, named their left-behind code after the hidden tests,
printed 200 MiB, and a few dozen generated mutants (tests/test_handin.py's).
"""

import json

import pytest

import hostile
from handins import (ASSIGNMENT, FIRST, SECOND, exercise_points, grade, hidden_lines, leaked, right, right_answers,
                     rows_of, scratch_course, write, write_folder)
from test_handin import generated_class

pytestmark = [pytest.mark.xdist_group("grader-boundary"), pytest.mark.sandbox, pytest.mark.slow]
MUTANTS = 16


def edited(change) -> str:
    """A right hand-in with `change(raw_cells)` made to its JSON."""
    raw = json.loads(write(right()))
    change(raw["cells"])
    return json.dumps(raw)


def nbgrader_of(cells, grade_id: str) -> dict:
    return next(c["metadata"]["nbgrader"] for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def copied_cell(cells):
    """A cell copied from another assignment, its graded-test metadata with it."""
    cells.append({"cell_type": "code", "id": "copied", "metadata": {"nbgrader": {
        "grade": True, "grade_id": "ex9_elsewhere", "locked": True, "points": 5, "schema_version": 3,
        "solution": False, "task": False}}, "source": "assert True", "outputs": [], "execution_count": None})


RIGHT = {"right_1", "right_2", "right_3", "loud"}
METADATA_EDITS = {
    "test_not_graded": lambda cells: nbgrader_of(cells, f"{FIRST}_tests").update(grade=False),
    "points_as_text": lambda cells: nbgrader_of(cells, f"{SECOND}_hidden").update(points="all of them"),
    "answer_also_graded": lambda cells: nbgrader_of(cells, FIRST).update(grade=True, points=3),
    "copied_cell": copied_cell,
}


def boundary_class() -> dict[str, str]:
    deep = json.loads(write(right()))
    deep["metadata"]["nest"] = "NEST"
    return {
        **{name: write(right()) for name in ("right_1", "right_2", "right_3")},
        **{name: edited(change) for name, change in METADATA_EDITS.items()},
        "deep": json.dumps(deep).replace('"NEST"', "[" * 100_000 + "]" * 100_000),
        "named_by_hidden": write(right(**{FIRST: hostile.CODE_NAMED_BY_RECORDING})),
        "loud": write(right(**{FIRST: hostile.LOUD + right_answers()[FIRST]})),
        **generated_class(MUTANTS),
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded once (exit code checked by `grade`); then the same command again."""
    course = scratch_course(tmp_path_factory.mktemp("boundary"))
    submissions = write_folder(tmp_path_factory.mktemp("submissions"), boundary_class())
    first = grade(course, submissions)
    again = grade(course, submissions)
    out = course / "autograder" / "grades" / ASSIGNMENT
    return out, rows_of(out), first.stderr + again.stderr


def test_every_hand_in_has_its_row_and_the_class_its_report(graded):
    out, rows, _ = graded
    assert sorted(rows) == sorted(boundary_class())
    assert (out / "report.html").exists()
    failed = {s: r["message"] for s, r in rows.items() if "grading failed" in r["message"]}
    assert not failed, f"a step raised on these hand-ins: {failed}"


@pytest.mark.parametrize("student", sorted(RIGHT | set(METADATA_EDITS)))
def test_right_answers_keep_full_marks_whatever_the_metadata_says(graded, student):
    row = graded[1][student]
    assert row["status"] == "graded", row
    for exercise in (FIRST, SECOND):
        got, best = exercise_points(row, exercise)
        assert got == best, f"{student}: {exercise} {got}/{best} ({row['message']})"
    assert float(row["max_score"]) == float(graded[1]["right_1"]["max_score"])


def test_a_notebook_nested_past_any_parser_gets_a_row_saying_so(graded):
    row = graded[1]["deep"]
    assert row["status"] == "invalid" and "nested too deep" in row["message"], row


def test_what_the_grader_found_is_named_by_its_kind(graded):
    row = graded[1]["named_by_hidden"]
    assert row["status"] == "tampered", row
    assert "an IPython post_run_cell callback" in row["message"] and "a thread" in row["message"], row["message"]


def test_no_hidden_line_reaches_a_page_a_log_or_the_table(graded):
    out = graded[0]
    lines = hidden_lines()
    texts = {p.name: p.read_text(errors="replace") for folder in ("feedback", "logs") for p in (out / folder).iterdir()}
    texts |= {name: (out / name).read_text() for name in ("report.html", "grades.csv")}
    found = {name: leaked(text, lines) for name, text in texts.items() if leaked(text, lines)}
    assert not found, found


def test_a_cells_output_past_the_cap_is_cut_with_a_note(graded):
    out = graded[0]
    notebook = (out / "autograded" / "loud.ipynb").read_text()
    assert "the rest was dropped" in notebook and len(notebook) < 8 * 2**20


def test_the_same_command_again_keeps_every_row(graded):
    stderr = graded[2]
    assert stderr.count(f"{len(boundary_class())} students:") == 2
