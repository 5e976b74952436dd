"""The student's feedback page explains: it opens with the score and the summary of each exercise, folds the lesson away,
fetches nothing; a visible test's own error is shown (from a run without the hidden tests where hidden tests had run
before it), a hidden test's says the instructor's words and no more, a cell stopped at the time limit names the limit,
and the row says which answers were not answered or raised. Unit tests on the feedback's steps, then one small class of
the grader's test course graded once (tests/test_browser.py reads such pages in Chromium)."""

import copy
import re

import nbformat
import pytest
from nbformat import NotebookNode
from traitlets.config import Config

from autograder.grading.execute import FINDINGS
from autograder.grading.feedback import ERROR_CHARS, NOT_ANSWERED, TIMED_OUT, TRACEBACK_LINES, UNKNOWN_MESSAGE, VISIBLE_RUN, VISIBLE_UNKNOWN, ExerciseSummary, FoldLessons, HideHiddenTests, kept_error
from autograder.grading.grade_one import answers_said
from course import grading, read, source_path
from handins import (ASSIGNMENT, FIRST, SECOND, grade, handin, hidden_lines, html_text, leaked, release, right,
                     right_answers, rows_of, scratch_course, source, write, write_folder)
from test_safe_pages import feedback_exporter

LIMIT = 10  # seconds a cell may run in the graded class (a loop costs it once)
VISIBLE, HIDDEN_TEST = f"{SECOND}_tests", f"{SECOND}_hidden"  # tests of the second exercise: after the first hidden one


def error(ename: str, evalue: str = "") -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def cell_of(nb, grade_id: str):
    return next(cell for cell in nb.cells if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def scored(nb):
    """The notebook as GetGrades leaves it for the page: every graded cell with a score."""
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.metadata.nbgrader["score"] = 0
    return nb


def as_shown(nb, timeout: int = LIMIT):
    config = Config()
    config.Execute.timeout = timeout
    nb, _ = HideHiddenTests(config=config).preprocess(copy.deepcopy(nb), {})
    return nb


def page_of(nb, name: str = ASSIGNMENT) -> str:
    nb = scored(copy.deepcopy(nb))
    for step in (ExerciseSummary, FoldLessons):
        nb, _ = step().preprocess(nb, {})
    page, _ = feedback_exporter().from_notebook_node(nb, resources={"nbgrader": {
        "notebook": name, "score": 0, "max_score": 6, "late_penalty": 0}})
    return page


def test_a_cell_stopped_at_the_time_limit_names_the_limit():
    """Before and after the first hidden test, in the cell and in the summary: the limit in seconds, not a bare
    KeyboardInterrupt (nbgrader's execute step records the interrupt, then its own CellTimeoutError)."""
    nb = source()
    for gid in (f"{FIRST}_tests", VISIBLE):
        cell_of(nb, gid).outputs = [error("KeyboardInterrupt"), error(TIMED_OUT)]
    shown = as_shown(nb, timeout=7)
    for gid in (f"{FIRST}_tests", VISIBLE):
        first = cell_of(shown, gid).outputs[0]
        assert (first.ename, first.evalue) == (TIMED_OUT, "this cell ran past the 7 s time limit and was stopped"), gid
    summary, _ = ExerciseSummary().preprocess(scored(shown), {})
    assert summary.cells[0].source.count("ran past the 7 s time limit") == 2, summary.cells[0].source


def test_a_visible_tests_own_error_is_shown_from_the_run_without_hidden_tests():
    """After the first hidden test, a visible test shows the error the run without hidden tests recorded, bounded; a
    hidden test never does, even where that record names it; without a record, the page says why it shows none."""
    nb = source()
    for gid in (VISIBLE, HIDDEN_TEST):
        cell_of(nb, gid).outputs = [error("ValueError", "the graded run's words")]
    without = as_shown(nb)
    assert cell_of(without, VISIBLE).outputs[0].evalue == VISIBLE_UNKNOWN
    assert cell_of(without, HIDDEN_TEST).outputs[0].evalue == UNKNOWN_MESSAGE
    long_line = "x" * (3 * ERROR_CHARS)
    record = {"ename": "GradcheckError", "evalue": "Jacobian mismatch for output 0",
              "traceback": [f"line {k}" for k in range(3 * TRACEBACK_LINES)] + [long_line]}
    nb.metadata[FINDINGS] = {VISIBLE_RUN: {cell_of(nb, gid).id: record for gid in (VISIBLE, HIDDEN_TEST)}}
    shown = as_shown(nb)
    visible = [o for o in cell_of(shown, VISIBLE).outputs if o.output_type == "error"]
    assert [(o.ename, o.evalue) for o in visible] == [("GradcheckError", "Jacobian mismatch for output 0")]
    assert len(visible[0].traceback) == TRACEBACK_LINES and len(visible[0].traceback[-1]) == ERROR_CHARS
    assert cell_of(shown, HIDDEN_TEST).outputs[0].evalue == UNKNOWN_MESSAGE
    assert kept_error({"ename": "E" * 1000, "evalue": long_line})["evalue"] == long_line[:ERROR_CHARS - 1] + "…"


def test_the_page_opens_with_the_summary_folds_the_lesson_and_fetches_nothing():
    """A lesson's page (notebook 02, as the course ships it): the score and the summary first, none of nbgrader's
    unlabelled "Test cell" list, the lesson's cells in closed <details>, each exercise's statement and cells outside
    them, and no address outside the page (MathJax from a CDN before)."""
    nb = read(source_path("02_autograd"))
    page = page_of(nb, "02_autograd")
    assert "Test cell</a> (Score:" not in page, "nbgrader's list of test cells is still there"
    assert "<script" not in page.lower(), "the page holds a script (MathJax's, from a CDN)"
    assert not re.findall(r'\b(?:src|href)="(?:https?:)?//', page), "the page loads something from elsewhere"
    body = page[page.index("<body"):]
    assert body.index("02_autograd: 0 of 6 points") < body.index("Your results, exercise by exercise") < \
        body.index('<details class="lesson">'), "the score and the summary do not open the page"
    folded = re.findall(r'<details class="lesson">.*?</details>', body, flags=re.S)
    assert folded and sum(int(n) for n in re.findall(r"Lesson: (\d+) cell", body)) >= 20
    outside = re.sub(r'<details class="lesson">.*?</details>', "", body, flags=re.S)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid:
            assert f'name="{gid}"' in outside or f'name="comment-{gid}"' in outside, f"{gid} is folded away"
    assert "Exercise 1: backpropagation by hand" in outside


def test_a_page_drawn_from_kept_cells_is_the_page_drawn_afresh_and_each_cell_keeps_its_own():
    """The feedback page keeps each cell's HTML by the cell and the page's settings (FeedbackPage.kept_cell: a lesson's
    cells are alike in every hand-in, drawn once per batch): 02's page drawn again, every cell kept, is the page drawn
    afresh; a cell that differs in one output, or a page with other settings (the headings' anchor text), is drawn for
    itself, not taken from the cells kept."""
    from autograder.grading.feedback import FeedbackPage
    nb = read(source_path("02_autograd"))
    code = next(i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and not grading(cell))
    nb.cells[code].outputs = [nbformat.v4.new_output("stream", text="first output\n")]
    FeedbackPage.kept_cells.clear()
    fresh = page_of(nb, "02_autograd")
    kept = len(FeedbackPage.kept_cells)
    assert kept >= len(nb.cells), "the page's cells were not kept"
    assert page_of(nb, "02_autograd") == fresh and len(FeedbackPage.kept_cells) == kept
    nb.cells[code].outputs[0].text = "another output\n"
    assert "another output" in page_of(nb, "02_autograd"), "a cell was drawn as another cell kept"
    exporter = feedback_exporter()
    exporter.anchor_link_text = "LINK-TO-HERE"
    other, _ = exporter.from_notebook_node(scored(copy.deepcopy(nb)), resources={"nbgrader": {
        "notebook": "02_autograd", "score": 0, "max_score": 6, "late_penalty": 0}})
    assert ">LINK-TO-HERE</a>" in other and "&#182;</a>" not in other, "a page has another page's kept cells"


def test_a_lesson_cell_that_raised_is_not_folded_away():
    nb = source()
    lesson = next(cell for cell in nb.cells if cell.id == "lesson")
    lesson.outputs = [error("NameError", "name 'sum' is not defined")]
    body = page_of(nb)
    folded = "".join(re.findall(r'<details class="lesson">.*?</details>', body, flags=re.S))
    assert "NameError" in body and "NameError" not in folded


def test_the_summary_says_an_exercise_left_as_released_was_not_answered():
    """A stub's bare NotImplementedError reads as "not answered" in the summary; an error with a message is shown."""
    nb = scored(release())
    cell_of(nb, f"{FIRST}_tests").outputs = [error("NotImplementedError")]
    cell_of(nb, f"{SECOND}_tests").outputs = [error("NotImplementedError", "clip for ints")]
    summary, _ = ExerciseSummary().preprocess(nb, {})
    first, second = summary.cells[0].source.splitlines()[-2:]  # the table's rows, exercise by exercise
    assert NOT_ANSWERED in first and NOT_ANSWERED not in second and "clip for ints" in second


def test_the_row_says_which_answers_were_not_answered_or_raised():
    """An answer as released, one whose cell raised a built-in error, one that raised an error of its own name (told
    by its kind alone), one stopped at the time limit (said by problems_in, not here)."""
    graded = release()
    cell_of(graded, FIRST).outputs = []  # as released
    answer = cell_of(graded, SECOND)
    answer.source = "clip = lo"
    answer.outputs = [error("NameError", "name 'lo' is not defined")]
    assert answers_said(graded, release()) == [f"{FIRST} not answered (as released)",
                                               f"{SECOND}'s cell raised NameError when it ran"]
    answer.outputs = [error("HiddenTestsSaid", "anything")]
    assert answers_said(graded, release())[1] == f"{SECOND}'s cell raised an error when it ran"
    answer.outputs = [error("KeyboardInterrupt"), error(TIMED_OUT)]
    assert answers_said(graded, release()) == [f"{FIRST} not answered (as released)"]
    answer.outputs = []  # defined, then raising when its tests call it; an assertion's failure is no news here
    tests = [c for c in graded.cells if grading(c).get("grade_id", "").startswith(f"{SECOND}_")]
    tests[0].outputs, tests[-1].outputs = [error("AssertionError", "wrong")], [error("NameError", "name 'lo' ...")]
    assert answers_said(graded, release()) == [f"{FIRST} not answered (as released)", f"{SECOND}'s tests raised NameError"]
    tests[-1].outputs = []
    assert answers_said(graded, release()) == [f"{FIRST} not answered (as released)"]
    cell_of(graded, SECOND).source = cell_of(release(), SECOND).source
    assert answers_said(graded, release()) == [f"{FIRST} and {SECOND} not answered (as released)"]


# --- one class graded -----------------------------------------------------------------------------------------------
RAISES = "def clip(x, low, high):\n    raise ValueError('clip: <b>not</b> written yet & soon')"
# After the first hidden test, the kernel's history holds it: a message made of it would carry hidden lines
READS_HISTORY = ("def clip(x, low, high):\n"
                 "    raise ValueError('history: ' + ' | '.join(s for s in In if 'Hidden tests' in s))")
LOOPS = "def clip(x, low, high):\n    while True:\n        pass"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(the grader's output folder, rows by student)."""
    folder = tmp_path_factory.mktemp("feedback")
    class_ = {"raises": write(right(**{SECOND: RAISES})), "reads_history": write(right(**{SECOND: READS_HISTORY})),
              "loops": write(right(**{SECOND: LOOPS})), "unedited": write(handin()),
              "name_error": write(right(**{SECOND: right_answers()[SECOND] + "\nclip(1, lo, 2)"}))}
    course, out = scratch_course(folder / "course"), folder / "out"
    grade(course, write_folder(folder / "submissions", class_), "--out", str(out), "--timeout", str(LIMIT))
    return out, rows_of(out)


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_visible_tests_own_error_reaches_the_page(graded):
    out, _ = graded
    page = html_text(out / "feedback" / "raises.html")
    assert "ValueError: clip: <b>not</b> written yet & soon" in page, "not in the summary"
    assert re.search(r"second run of your notebook without the hidden tests .*ValueError ?: clip: <b>not</b> written "
                     r"yet & soon.* Grade cell: " + HIDDEN_TEST, page), "not in the visible test's cell"
    assert UNKNOWN_MESSAGE in page, "the hidden test says more than the instructor's words"


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_message_made_of_hidden_tests_never_reaches_the_page(graded):
    """The graded run's error quotes the hidden test (the instructor's copy of the notebook shows it); the page, the
    row and the report show the run without hidden tests, where the history holds none."""
    out, rows = graded
    raw = nbformat.read(out / "autograded" / "reads_history.ipynb", as_version=4)
    lines = hidden_lines()
    assert leaked(str(cell_of(raw, VISIBLE).outputs), lines), "the hostile hand-in did not read the hidden tests"
    for path in (out / "feedback" / "reads_history.html", out / "report.html", out / "grades.csv"):
        assert not leaked(html_text(path), lines), f"{path.name} shows {leaked(html_text(path), lines)}"
    assert "ValueError: history:" in html_text(out / "feedback" / "reads_history.html")


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_time_out_names_the_cell_and_the_limit(graded):
    out, rows = graded
    page = html_text(out / "feedback" / "loops.html")
    said = f"CellTimeoutError: this cell ran past the {LIMIT} s time limit and was stopped"
    assert page.count(said) >= 2, "not in the cell and the summary"
    assert "KeyboardInterrupt" not in page
    assert f"{VISIBLE} ran past the {LIMIT} s limit" in rows["loops"]["message"]


@pytest.mark.sandbox
@pytest.mark.slow
def test_the_row_says_an_answer_raised_or_was_not_answered(graded):
    _, rows = graded
    assert rows["unedited"]["status"] == "graded"
    assert f"{FIRST} and {SECOND} not answered (as released)" in rows["unedited"]["message"]
    assert rows["name_error"]["status"] == "graded"
    assert f"{SECOND}'s cell raised NameError when it ran" in rows["name_error"]["message"]
