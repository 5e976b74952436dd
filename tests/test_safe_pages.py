"""Pages that show a hand-in run none of its script: the feedback page and formgrader's view of a submission, rendered
as the course's nbgrader_config.py has them made, from a notebook whose markdown and outputs carry script
(tests/payloads.py); the lessons' markdown shown as it was; report.html's policy. No grading, no browser:
tests/test_browser.py opens the pages of a graded hand-in in Chromium."""

import re

import nbformat
import pytest
from nbconvert.exporters import HTMLExporter
from nbgrader.converters import GenerateFeedback

import payloads
from autograder.config import load
from autograder.grading.feedback import ExerciseSummary
from autograder.reports.report import write_report
from course import ROOT, assignments, read, source_path
from handins import ASSIGNMENT, COURSE, FIRST, NOTEBOOK, source

GRADER_SOURCE = COURSE / "solutions" / ASSIGNMENT / NOTEBOOK
SCORES = {"score": 0, "max_score": 6, "late_penalty": 0}


def hostile_notebook():
    """The grader course's notebook, with the payloads: a markdown cell of them after the lesson, the output ones as
    the first answer's outputs, and widget state."""
    nb = source()
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.metadata.nbgrader["score"] = 0  # as GetGrades sets it: the page shows it
    at = [cell.id for cell in nb.cells].index("lesson") + 1
    nb.cells.insert(at, nbformat.v4.new_markdown_cell(payloads.MARKDOWN, id="payloads"))
    next(cell for cell in nb.cells if cell.id == FIRST).outputs = payloads.outputs()
    nb.metadata.widgets = payloads.widget_state()
    return nb


def feedback_exporter():
    """The feedback's exporter, as the course's configuration makes it (GenerateFeedback in grade_one.feedback)."""
    converter = GenerateFeedback(config=load(ROOT, {}))
    return converter.exporter_class(config=converter.config)


def runs_no_script(policy: str) -> bool:
    """Whether a Content-Security-Policy lets no script run: script-src, or else default-src, is 'none'."""
    directives = dict((d.split() + [""])[:2] for d in policy.split(";") if d.strip())
    return directives.get("script-src", directives.get("default-src")) == "'none'"


def test_the_feedback_page_runs_none_of_a_hand_ins_script():
    page, _ = feedback_exporter().from_notebook_node(hostile_notebook(), resources={"nbgrader": {"notebook": ASSIGNMENT,
                                                                                                   **SCORES}})
    assert not payloads.live(page), f"the feedback page would run {payloads.live(page)}"
    assert payloads.policy(page) and runs_no_script(payloads.policy(page)), payloads.policy(page)
    for kept in (payloads.LESSON_TEXT, payloads.HTML_OUTPUT_TEXT, payloads.MARKDOWN_OUTPUT_TEXT, "Exercise 1."):
        assert kept in page
    assert len(re.findall(r'<img [^>]*src="data:image/(png|svg\+xml);base64,', page)) == 2  # the PNG and the SVG


def test_formgraders_view_of_a_submission_runs_none_of_a_hand_ins_script(monkeypatch):
    """formgrader's exporter as formgrader makes it (FormgradeExtension's settings, then the course's
    nbgrader_config.py, read from the server's folder), rendering a submission as its handler does."""
    from nbgrader.server_extensions.formgrader.formgrader import FormgradeExtension

    monkeypatch.chdir(ROOT)
    extension = FormgradeExtension()
    extension.initialize([])
    resources = {"assignment_id": ASSIGNMENT, "notebook_id": ASSIGNMENT, "submission_id": "0" * 32, "index": 0,
                 "total": 1, "base_url": "", "student": "hostile", "last_name": None, "first_name": None,
                 "notebook_path": f"autograder/autograded/hostile/{ASSIGNMENT}/{NOTEBOOK}"}
    page, _ = HTMLExporter(config=extension.config).from_notebook_node(hostile_notebook(), resources=resources)
    assert "formgrade.js" in page, "not formgrader's page"
    assert not payloads.live(page), f"formgrader's view would run {payloads.live(page)}"
    for kept in (payloads.LESSON_TEXT, payloads.HTML_OUTPUT_TEXT, payloads.MARKDOWN_OUTPUT_TEXT, "Exercise 1."):
        assert kept in page


@pytest.mark.parametrize("notebook", [*assignments(), "grader course"])
def test_a_lessons_markdown_is_shown_as_it_was(notebook):
    """Every markdown cell of a lesson, and the feedback's summary of it, renders through the page's sanitising filter
    exactly as nbconvert renders it unsanitised: the lesson loses nothing."""
    nb = read(GRADER_SOURCE if notebook == "grader course" else source_path(notebook))
    nb, _ = ExerciseSummary().preprocess(nb, {})
    exporter = feedback_exporter()
    shown = exporter.environment.filters["markdown2html"]  # the filter the templates call
    cells = [cell for cell in nb.cells if cell.cell_type == "markdown"]
    assert cells[0].id.startswith("exercise-summary")
    for cell in cells:
        context = {"cell": cell, "resources": {}}
        assert shown(context, cell.source) == HTMLExporter.markdown2html(exporter, context, cell.source), cell.id


def test_report_html_lets_no_script_run(tmp_path):
    write_report(tmp_path / "report.html", [], GRADER_SOURCE)
    shown = payloads.policy((tmp_path / "report.html").read_text())
    assert shown and runs_no_script(shown), shown
