"""A class of the course's own notebooks for `make bench-grade`: right and wrong answers, and a few broken hand-ins."""

import nbformat

from course import answer_ids, read, release_path, solution_answers, with_answers, wrong_answers
from handins import replace_cell


def course_class(assignment: str) -> dict[str, str]:
    """student kind -> notebook text, for one assignment of the course, its whole lesson in each (plain nbgrader runs
    all of it; this grader skips the cells tagged skip-in-grading)."""
    release = read(release_path(assignment))
    right = solution_answers(assignment)
    first, second = answer_ids(release)[:2]
    wrong_first = next(iter(wrong_answers(assignment)["WRONG"][first].values()))
    first_tests = [c.metadata.nbgrader["grade_id"] for c in release.cells
                   if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith(first + "_")]
    wrong = with_answers(release, {**right, first: wrong_first})
    return {"right": nbformat.writes(with_answers(release, right)),
            "wrong": nbformat.writes(wrong),
            "tests_edited": nbformat.writes(replace_cell(wrong, first_tests[-1], "pass")),
            "unedited": nbformat.writes(release),
            "loop": nbformat.writes(with_answers(release, {**right, second: "while True:\n    pass"})),
            "truncated": nbformat.writes(with_answers(release, right))[:5000]}

