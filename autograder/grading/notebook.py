"""What the grader reads and writes in notebooks it trusts (the assignment's, and those it built): graded cells, exercise
names, first failures, the grader's findings and errors; and nbgrader's metadata schema checked once."""

import re
from dataclasses import dataclass, field

from nbformat import NotebookNode
from nbgrader.utils import is_grade, is_solution

from torchcourse.format import grading

HEADING = re.compile(r"^#{1,6}\s+(.*?)[\s#]*$")
POINTS_NOTE = re.compile(r"\s*\(\d+(\.\d+)?\s+points?\)$")  # "Exercise 3: GELU (4 points)"
NAME_CHARS = 80  # an exercise's name is cut to this many characters
MESSAGE_CHARS = 200  # a failure message, in the results and the feedback's summary, is cut to this many characters

FINDINGS = "autograder"  # the notebook metadata key under which a run's findings reach nbgrader's later steps
NOT_RUN = "(not run in grading: a lesson cell as it was released, which the exercises do not need)\n"
SKIPPED = "TestSkipped"  # the error a test cell shows when it was not run, as a test of its exercise ran out of time


def not_run_output() -> NotebookNode:
    """What a lesson cell the grading skips shows (lessons.py): the execute step's, and its stand-in's."""
    return NotebookNode(output_type="stream", name="stdout", text=NOT_RUN)


def error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def is_test(cell) -> bool:
    """A cell of tests (graded, not an answer) with code in it."""
    return cell.cell_type == "code" and is_grade(cell) and not is_solution(cell) and bool(cell.source.strip())


TIMED_OUT = "CellTimeoutError"  # the error nbgrader's execute step adds to a cell it stopped at the time limit
VISIBLE_RUN = "visible_run"  # under FINDINGS: visible tests' errors in a run without the hidden tests (grade_one)
NOT_ANSWERED = "not answered (the answer raises NotImplementedError, as released)"  # the summary's words for a stub
# The feedback page's and report.html's own: no script at all (so MathJax neither: formulas show as TeX), no request
# (inline styles, data: images and fonts only), no <base> or form to send anything elsewhere.
PAGE_POLICY = ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
               "img-src data:; font-src data:; base-uri 'none'; form-action 'none'\">")


@dataclass(kw_only=True)
class Grading:
    """One grading's inputs to the execute step and what it found, in the notebook's resources under FINDINGS: one
    object the grader and the step share (nbconvert deep-copies resources before its steps, and passes this one as is).
    Without it (a plain `nbgrader autograde`) the tests run as written."""
    # cell index -> why it is not run: set by the grader before a second attempt; the step adds the later tests of an
    # exercise whose test ran out of time, which so stay skipped in a second attempt too
    skip: dict[int, str] = field(default_factory=dict)
    # grade_id -> the values the solution's test cell sent (judge.py): the test cells then run without their expected
    # values and the grader judges what they send. None: they run as written, comparing in the kernel.
    expected: dict[str, list[dict]] | None = None
    recording: bool = False  # the solution's own run, which makes `expected`: its test cells run as in a grading
    lessons_skipped: set[str] = field(default_factory=set)  # ids of lesson cells the grading does not need (lessons.py)
    findings: dict | None = None  # the step's findings, as it also writes them into the notebook's metadata

    def __deepcopy__(self, memo):
        return self

def grade_id(cell) -> str | None:
    return grading(cell).get("grade_id")


def nbgrader_ids(nb) -> list[str]:
    """grade_ids of the cells nbgrader tracks (answers and tests), in order."""
    return [gid for cell in nb.cells if (gid := grade_id(cell))]


def heading_of(markdown: str) -> str:
    """A markdown cell's last heading (else its first line), as plain text for a table or a report."""
    lines = [line.strip() for line in markdown.splitlines() if line.strip()]
    headings = [m.group(1) for line in lines if (m := HEADING.match(line))]
    text = headings[-1] if headings else lines[0] if lines else ""
    text = POINTS_NOTE.sub("", re.sub(r"[`*]", "", text))  # the points are shown beside the name, from the grades
    return text if len(text) <= NAME_CHARS else text[:NAME_CHARS - 1] + "…"


def exercise_name(nb, answer) -> str:
    """An exercise's name for people: its answer cell's grade_id and the markdown cell nearest above that cell
    ("ex3_gelu — Exercise 3: GELU as an autograd.Function"); the grade_id alone where there is none."""
    at = next(i for i, cell in enumerate(nb.cells) if cell is answer)
    for cell in reversed(nb.cells[:at]):
        if grading(cell).get("solution"):
            break  # the text above an earlier exercise names that one
        if cell.cell_type == "markdown" and (text := heading_of(cell.source)):
            return f"{grade_id(answer)} — {text}"
    return grade_id(answer)


def first_failure(cells) -> str:
    """The first error in these cells' outputs as one line ("AssertionError: ..."), cut to MESSAGE_CHARS; "" if none."""
    for output in (o for cell in cells for o in cell.get("outputs", [])):
        if output.get("output_type") == "error":
            line = (f"{output.get('ename', 'Error')}: {output.get('evalue', '')}".strip().splitlines() or [""])[0]
            return line if len(line) <= MESSAGE_CHARS else line[:MESSAGE_CHARS - 1] + "…"
    return ""


def unanswered(failure: str) -> bool:
    """Whether a test's first failure (first_failure) is an answer's stub as released: a bare NotImplementedError."""
    return failure.strip() == "NotImplementedError:"
