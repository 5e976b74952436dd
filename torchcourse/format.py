"""The notebooks' format: how nbgrader's metadata marks answers and tests, and the course's own markers.

One vocabulary, read by the students' self-check (torchcourse.check), hand_in() and the instructor's grader.
"""

import re

HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.S | re.M)
STUB = "raise NotImplementedError()"
# A lesson cell with this tag is one the grading does not need (a demo, a plot): the grader skips it when the hand-in's
# copy is the one released, and runs it when the student changed it. tests/test_notebook_files.py checks the marking.
SKIP_TAG = "skip-in-grading"


def grading(cell) -> dict:
    """The cell's nbgrader metadata ({} for a lesson cell)."""
    return cell.get("metadata", {}).get("nbgrader", {})


def answer_cells(nb) -> list:
    """The answer (solution) cells, one per exercise, in order."""
    return [cell for cell in nb.cells if grading(cell).get("solution")]


def test_cells(nb, answer_id: str) -> list:
    """The test cells of one exercise: the graded cells named after its answer cell (`<answer_id>_...`)."""
    return [cell for cell in nb.cells if grading(cell).get("grade") and grading(cell)["grade_id"].startswith(answer_id + "_")]
