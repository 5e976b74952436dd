"""report.html from rows written by hand against the grader's test course: no grading, no sandbox."""

import re
from dataclasses import replace
from html.parser import HTMLParser

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autograder.reports.report import write_report
from autograder.results import Result
from autograder.reports.similarity import Exercise, Findings, Pair, Similarity, marked
from handins import ASSIGNMENT, COURSE, FIRST, NOTEBOOK, SECOND, html_text

SOURCE = COURSE / "solutions" / ASSIGNMENT / NOTEBOOK
POINTS = {f"{FIRST}_tests": 1, f"{FIRST}_hidden": 2, f"{SECOND}_tests": 1, f"{SECOND}_hidden": 2}  # the notebook's
VISIBLE_MEAN = "AssertionError: mean([1, 2, 3]) should be 2"
HIDDEN_MEAN = "AssertionError: the mean of [2.5] is 2.5, not 1.25"
HOSTILE = "<script>alert(1)</script></svg>"


def row(student: str, status: str = "graded", seconds: float = 1.0, **failed: str) -> Result:
    """A row: full marks but for the cells named in `failed` (grade_id=message)."""
    cells = {gid: {"score": 0.0 if gid in failed else float(points), "max_score": float(points),
                   "needs_manual_grade": False, "message": failed.get(gid, "")} for gid, points in POINTS.items()}
    if status != "graded":
        cells = {gid: {**cell, "score": 0.0, "message": ""} for gid, cell in cells.items()}
    return Result(student_id=student, assignment=ASSIGNMENT, notebook=NOTEBOOK, status=status, message="",
                  score=sum(c["score"] for c in cells.values()), max_score=6.0, seconds=seconds,
                  execute_seconds=seconds / 2, cells=cells)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The report of a small class: (the page's HTML, what a reader sees)."""
    rows = [row("right", seconds=3.0),
            row("wrong", seconds=9.0, ex1_mean_tests=VISIBLE_MEAN, ex1_mean_hidden=HIDDEN_MEAN),
            row("half", seconds=4.0, ex1_mean_hidden=HIDDEN_MEAN),
            row("also_half", seconds=2.0, ex1_mean_hidden=HIDDEN_MEAN, ex2_clip_hidden=HOSTILE),
            row("<b>mallory</b>", seconds=8.0, ex2_clip_tests=HOSTILE, ex2_clip_hidden=HOSTILE),
            row("slow", "timeout", seconds=30.0),
            row("gone", "missing", seconds=0.0)]
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_report(path, rows, SOURCE)
    return path.read_text(), html_text(path)


def section(page: str, exercise: str) -> str:
    """One exercise's <section> of the page."""
    return re.search(rf'<section class="exercise" data-exercise="{exercise}".*?</section>', page, re.S).group(0)


def test_statuses_are_counted_with_their_students(page):
    """The status table counts each status and names the students behind it, missing ones included."""
    html, text = page
    assert '<tr data-status="graded" data-count="5">' in html
    assert '<tr data-status="timeout" data-count="1">' in html and '<tr data-status="missing" data-count="1">' in html
    assert "gone" in text and "slow" in text and "also_half" in text
    assert "7 students" in text and "left out" in text


def test_each_exercise_counts_full_partial_and_none_without_the_missing(page):
    """Points per exercise are summed over its test cells; a missing student is not counted."""
    html, _ = page
    assert re.search(r'data-exercise="ex1_mean" data-full="2" data-partial="2" data-none="2" data-students="6"', html)
    assert re.search(r'data-exercise="ex2_clip" data-full="3" data-partial="1" data-none="2" data-students="6"', html)
    assert "ex1_mean — Exercise 1." in html  # named by its grade_id and the markdown above it


def test_failures_are_counted_once_per_student_most_common_first(page):
    """A message hit by a student in two test cells counts once for that student; the most common comes first."""
    html, _ = page
    mean = re.findall(r'<li data-count="(\d+)"><code>(.*?)</code>', section(html, FIRST))
    assert mean == [("3", "AssertionError: the mean of [2.5] is 2.5, not 1.25"), ("1", VISIBLE_MEAN)]
    clip = re.findall(r'<li data-count="(\d+)">', section(html, SECOND))
    assert clip == ["2"]


def test_text_from_hand_ins_is_escaped(page):
    """A hostile message or student id shows as text and cannot open a tag or close the plot's svg."""
    html, text = page
    assert "<script" not in html and "<b>" not in html
    assert html.count("</svg>") == html.count("<svg") == 2
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;/svg&gt;" in html
    assert HOSTILE in text and "<b>mallory</b>" in text


def test_one_plot_per_exercise_and_the_slowest_hand_ins(page):
    """Each exercise has its own inline svg; the slowest hand-ins come last, slowest first, with their cells' time."""
    html, _ = page
    for exercise in (FIRST, SECOND):
        assert section(html, exercise).count('<figure class="distribution"><svg') == 1
    slowest = html[html.index("Slowest hand-ins"):]
    students = re.findall(r"<tr><td>(.*?)</td>", slowest)
    assert students == ["slow", "wrong", "&lt;b&gt;mallory&lt;/b&gt;", "half", "right"]
    assert '<td class="number">30.0</td><td class="number">15.0</td>' in slowest


def test_the_page_is_the_same_every_time(tmp_path):
    """Written again from the same rows, the page is byte for byte the same (matplotlib's ids included)."""
    rows = [row("right"), row("wrong", ex1_mean_tests=VISIBLE_MEAN)]
    write_report(tmp_path / "a.html", rows, SOURCE)
    write_report(tmp_path / "b.html", rows, SOURCE)
    assert (tmp_path / "a.html").read_text() == (tmp_path / "b.html").read_text()


def test_the_mean_is_formgraders_over_every_student_and_says_so(tmp_path):
    """The page's mean is formgrader's (nbgrader's average_assignment_score: every submission's points over their
    number, before late penalties): a stopped hand-in's other points and the missing student's 0 count; it says whom
    it counts."""
    stopped = replace(row("slow", "timeout"), score=3.0)  # its first exercise passed before the time limit
    late = replace(row("late", ex1_mean_hidden=HIDDEN_MEAN), seconds_late=60.0, late_penalty=1.0)
    late.score -= 1.0  # grades.csv's score: the late penalty taken off
    rows = [row("right"), row("wrong", ex1_mean_tests=VISIBLE_MEAN, ex1_mean_hidden=HIDDEN_MEAN), stopped, late,
            row("gone", "missing")]
    write_report(tmp_path / "report.html", rows, SOURCE)
    text = html_text(tmp_path / "report.html")
    formgraders = (6 + 3 + 3 + 4 + 0) / 5  # each one's points before the late penalty, over all five
    assert f"mean score {formgraders:.2f} of 6 points over all 5, as formgrader's mean counts them" in text
    assert f"late penalties not taken off: {(6 + 3 + 3 + 3 + 0) / 5:.2f} with them" in text


def test_failures_are_grouped_with_the_students_behind_each_and_no_bare_error(tmp_path):
    """Each group names its students, each once; a time-out's bare KeyboardInterrupt and the test not run after it
    are one group saying so, an unedited answer's bare NotImplementedError reads as not answered."""
    rows = [row("carol", "graded", ex2_clip_tests="KeyboardInterrupt: ",
                ex2_clip_hidden="TestSkipped: not run: ex2_clip_tests, a test of the same exercise, ran past the limit"),
            row("dave", ex1_mean_tests="NotImplementedError: ", ex1_mean_hidden="NotImplementedError: ",
                ex2_clip_tests="NotImplementedError: ", ex2_clip_hidden="NotImplementedError: "),
            replace(row("erin", ex1_mean_hidden=HIDDEN_MEAN), first_name="Erin", last_name="Example"),
            row("frank", ex1_mean_hidden=HIDDEN_MEAN)]
    write_report(tmp_path / "report.html", rows, SOURCE)
    page = (tmp_path / "report.html").read_text()
    groups = r'<li data-count="(\d+)"><code>(.*?)</code> \((.*?)\)</li>'
    mean, clip = (re.findall(groups, section(page, exercise)) for exercise in (FIRST, SECOND))
    assert [(n, who) for n, _, who in mean] == [("2", "2 students: erin (Erin Example), frank"), ("1", "1 student: dave")]
    assert [(n, who) for n, _, who in clip] == [("1", "1 student: dave"), ("1", "1 student: carol")]
    assert mean[0][1] == HIDDEN_MEAN and mean[1][1].startswith("not answered") and clip[0][1] == mean[1][1]
    assert clip[1][1].startswith("stopped at the time limit")
    assert "KeyboardInterrupt" not in page and "NotImplementedError:" not in page


def test_a_students_name_stands_beside_their_id(tmp_path):
    """Where the row carries the student's name (results.Result), the page shows it beside the id (statuses, slowest)."""
    rows = [replace(row("12345"), first_name="Marie", last_name="Curie"), row("67890")]
    write_report(tmp_path / "report.html", rows, SOURCE)
    text = html_text(tmp_path / "report.html")
    assert "12345 (Marie Curie), 67890" in text and text.count("12345 (Marie Curie)") == 2


class Elements(HTMLParser):
    """The elements of a page, in order, with their attributes: its structure, without the text."""

    def __init__(self, page: str):
        super().__init__()
        self.seen = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.seen.append((tag, attrs))

    def handle_endtag(self, tag):
        self.seen.append(("/" + tag, []))


def hostile_class(student_id: str, name: str, message: str, answer: str) -> tuple[list[Result], Findings]:
    """Rows and similar answers where every text a hand-in brings is given: an id (as given, and in a pair), a name, a
    test's message, an answer (as similarity.marked makes it HTML), a student whose answers could not be compared."""
    rows = [replace(row("a", ex1_mean_tests=f"AssertionError: {message}"), given_id=f"id{student_id}",
                    first_name=f"n{name}", seconds_late=1.0, late_penalty=1.0), row("b")]
    shown = marked(answer, np.zeros((2, 0), dtype=int))
    pair = Pair(students=("a", "b"), score=0.9, similarities=(0.9, 0.9), marked=(shown, shown))
    findings = Findings(settings=Similarity(), exercises=[Exercise(grade_id=FIRST, answers=2, pairs=[pair])],
                        left_out=[f"out{student_id}"])
    return rows, findings


@pytest.fixture(scope="module")
def plain_page(tmp_path_factory):
    """The elements of the hostile class's page with plain text in every field, and the folder to write others in."""
    folder = tmp_path_factory.mktemp("escaping")
    rows, findings = hostile_class("x", "x", "x", "x")
    write_report(folder / "report.html", rows, SOURCE, findings)
    return Elements((folder / "report.html").read_text()).seen, folder


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
@given(texts=st.lists(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1).map(lambda s: s + "</svg>'\""),
                      min_size=4, max_size=4))
def test_any_text_from_a_hand_in_shows_as_text_and_adds_no_element(plain_page, texts):
    """Whatever a hand-in's id, name, message and answer hold, the page has the elements and attributes of a page with
    plain text in their place (markup in them opens and closes nothing), and a reader sees each text as it was."""
    elements, folder = plain_page
    student_id, name, message, answer = texts
    rows, findings = hostile_class(*texts)
    write_report(folder / "report.html", rows, SOURCE, findings)
    assert Elements((folder / "report.html").read_text()).seen == elements
    shown = html_text(folder / "report.html")
    for said in (f"id{student_id}", f"n{name}", f"AssertionError: {message}", answer, f"out{student_id}"):
        assert re.sub(r"\s+", " ", said).strip() in shown
