"""A right hand-in's log says nothing that means nothing: no nbgrader warning (OverwriteCells finds the test cells as the
gradebook keeps them, hidden tests in), no kernel notice (ipykernel's "Ctrl-C will not work"), on either kernel path.
A line of warning in a log then means that something happened."""

import logging

import pytest
from nbconvert.exporters import HTMLExporter
from nbgrader.preprocessors import NbGraderPreprocessor, OverwriteCells

from autograder.grading import handin
from autograder.grading.step import Step
from handins import ASSIGNMENT, assignment_gradebook, grade, release, right, scratch_course, source, write, write_folder
from torchcourse.format import HIDDEN, grading


@pytest.fixture(scope="module")
def gradebook(tmp_path_factory) -> str:
    return assignment_gradebook(tmp_path_factory.mktemp("template"))


def overwrite_warnings(nb, db_url: str) -> list[str]:
    """What nbgrader's OverwriteCells warns of on `nb` (it puts back a changed locked cell's text, and says so)."""
    step = OverwriteCells()
    said = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())
    step.log.addHandler(handler)
    try:
        step.preprocess(nb, {"nbgrader": {"notebook": ASSIGNMENT, "assignment": ASSIGNMENT, "db_url": db_url}})
    finally:
        step.log.removeHandler(handler)
    return said


def test_a_right_hand_in_is_built_with_the_instructors_tests(gradebook):
    tests = handin.instructor_tests(gradebook, ASSIGNMENT, ASSIGNMENT)
    hidden = {grading(c)["grade_id"]: c.source for c in source().cells if HIDDEN.search(c.source)}
    assert hidden and all(tests[gid] == text for gid, text in hidden.items()), "the gradebook's test text is not the source's"
    nb = handin.build(handin.sources(handin.load(write(right()).encode()), release()), release(), tests)
    assert overwrite_warnings(nb, gradebook) == []


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("path", ["warm", "fresh"])
def test_a_right_hand_ins_log_has_no_warning_and_no_kernel_notice(path, tmp_path):
    course = scratch_course(tmp_path / "course")
    if path == "fresh":
        with open(course / "nbgrader_config.py", "a") as f:
            f.write("\nc.SandboxedKernelManager.fork_warm = False\n")
    grade(course, write_folder(tmp_path / "submissions", {"right": write(right())}))
    log = (course / "autograder" / "grades" / ASSIGNMENT / "logs" / "right.log").read_text()
    noise = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR", "kernel: "))]
    assert not noise, "\n".join(noise)


@pytest.mark.parametrize("base", [Step, NbGraderPreprocessor])
def test_a_step_of_ours_takes_the_exporters_settings_without_a_warning(base):
    """The configuration nbconvert's HTMLExporter gives every step it runs; only a Step takes it without a warning."""
    step_class = type("AStep", (base,), {})
    said = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("traitlets").addHandler(handler)
    try:
        step_class(config=HTMLExporter().config)
    finally:
        logging.getLogger("traitlets").removeHandler(handler)
    assert [s for s in said if "display_data_priority" in s] == ([] if base is Step else [
        "Config option `display_data_priority` not recognized by `AStep`."])
