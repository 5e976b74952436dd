"""A long cell shows its time: the batch's progress while hand-ins run (autograder/run/progress.py), and the test cells a
time-out spares (execute.py's choice of cells, grade_one.problems_in's sentence). No grading: see
tests/test_grader_batch.py for a graded class with an endless loop."""

import io
import re

import nbformat

from autograder.grading.execute import SKIPPED, later_tests_of_its_exercise
from autograder.grading.grade_one import problems_in
from autograder.run import progress as progress_module
from autograder.run.progress import Progress
from autograder.results import Result
from handins import ASSIGNMENT, COURSE, FIRST, NOTEBOOK, SECOND

SOURCE = COURSE / "solutions" / ASSIGNMENT / NOTEBOOK


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True



def graded(student: str) -> Result:
    return Result(student_id=student, assignment="a", notebook="a.ipynb", status="graded", message="")

def test_a_log_gets_a_still_grading_line_at_its_interval_naming_the_slowest(monkeypatch):
    """Not on a terminal: while hand-ins run, a line every `every` seconds names the slowest ones and their time."""
    now = [1000.0]  # the progress's clock, moved by the test: a loaded machine's pauses change nothing
    monkeypatch.setattr(progress_module, "monotonic", lambda: now[0])
    log = io.StringIO()
    progress = Progress(6, every=30, stream=log)
    running = {"alice": now[0] - 5, "carol": now[0] - 150, "dave": now[0] - 61, "erin": now[0] - 1}
    now[0] += 29
    progress.tick(running)
    assert log.getvalue() == "", "a line before the interval has passed"
    now[0] += 1
    progress.tick(running)
    progress.tick(running)  # at once again: no second line
    assert log.getvalue() == "still grading: carol 3:00, dave 1:31, alice 0:35 and 1 more  (0/6 done)\n"
    progress.update(graded("alice"))
    assert re.search(r"1/6  graded 1  ETA \d+:\d\d  \(alice\)\n$", log.getvalue())


def test_a_terminal_line_shows_the_slowest_hand_in_running_and_its_time(monkeypatch):
    """On a terminal, each tick redraws the line in place with the slowest hand-in's time."""
    monkeypatch.setattr(progress_module, "monotonic", lambda: 1000.0)
    screen = Terminal()
    progress = Progress(6, stream=screen)
    progress.update(graded("bob"))
    progress.tick({"carol": 1000.0 - 210, "dave": 1000.0 - 3})
    last = screen.getvalue().split("\r")[-1]
    assert "1/6" in last and "graded 1" in last and "slowest running: carol 3:30" in last, repr(last)
    assert "\n" not in screen.getvalue(), "a terminal's line is redrawn, not repeated"


def test_a_time_out_spares_the_later_tests_of_its_own_exercise_only():
    """The cells not run after a test of an exercise ran out of time: the later tests of that exercise, no other."""
    nb = nbformat.read(SOURCE, as_version=4)
    at = {cell.metadata.get("nbgrader", {}).get("grade_id"): i for i, cell in enumerate(nb.cells)}
    assert later_tests_of_its_exercise(nb, at[f"{FIRST}_tests"]) == [at[f"{FIRST}_hidden"]]
    assert later_tests_of_its_exercise(nb, at[f"{SECOND}_tests"]) == [at[f"{SECOND}_hidden"]]
    assert later_tests_of_its_exercise(nb, at[f"{SECOND}_hidden"]) == []


def test_the_row_says_which_test_was_not_run_and_why():
    """The row's message names the test stopped at the limit, then the test not run after it, and why."""
    nb = nbformat.read(SOURCE, as_version=4)

    def error(ename):
        return nbformat.v4.new_output("error", ename=ename, evalue="", traceback=[])

    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid == f"{SECOND}_tests":
            cell.outputs = [error("KeyboardInterrupt"), error("CellTimeoutError")]
        elif gid == f"{SECOND}_hidden":
            cell.outputs = [error(SKIPPED)]
    assert problems_in(nb, timeout=120, memory_gib=None) == [
        ("timeout", f"{SECOND}_tests ran past the 120 s limit and was stopped"),
        ("timeout", f"{SECOND}_hidden was not run (0 points): a test of the same exercise had run past the time limit, "
                    "and it would have waited as long again")]
