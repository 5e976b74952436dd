"""One term through nbgrader's own exchange: release, fetch, submit (twice, and late), collect, the bulk grader,
release and fetch feedback, on the grader's small test course."""

import csv
import time

import nbformat
import pytest
from nbgrader.api import Gradebook

from course import grading, nbgrader
from exchange import COURSE_ID, enrol, join_exchange, open_exchange, utc_now
from handins import (ASSIGNMENT, FIRST, NOTEBOOK, grade, hidden_lines, html_text, leaked, private_env,
                     right_answers, scratch_course)

pytestmark = [pytest.mark.sandbox, pytest.mark.slow, pytest.mark.xdist_group("exchange")]
STUDENTS = ("alice", "bob", "carol")
WRONG_MEAN = "def mean(xs):\n    return sum(xs) / (len(xs) + 1)"


def marker(name: str) -> str:
    """A comment in the student's first answer, so that each page of feedback shows whose hand-in it is."""
    return f"# {name}'s answer, marked for the exchange test"


def answers(name: str, **changed: str) -> dict[str, str]:
    """The right answers (but for those changed), the first one opening with the student's marker."""
    right = {**right_answers(), **changed}
    return {**right, FIRST: f"{marker(name)}\n{right[FIRST]}"}


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    """The term up to the grading: released, fetched, submitted (bob twice, carol after the due date), collected
    (once between bob's hand-ins, once at the end)."""
    folder = tmp_path_factory.mktemp("exchange-term")
    exchange = open_exchange(folder / "exchange")
    course = scratch_course(folder / "course")
    join_exchange(course, exchange)
    instructor = private_env(folder / "instructor")

    def teach(*args):
        return nbgrader(*args, cwd=course, env=instructor)

    teach("generate_assignment", ASSIGNMENT, "--force")  # records the assignment in the gradebook too
    teach("release_assignment", ASSIGNMENT)

    students = {name: enrol(folder / name, name, exchange) for name in STUDENTS}
    for student in students.values():
        student.nbgrader("fetch_assignment", ASSIGNMENT)
    alice, bob, carol = students.values()
    alice.answer(answers("alice"))
    alice.nbgrader("submit", ASSIGNMENT)
    bob.answer(answers("bob", **{FIRST: WRONG_MEAN}))
    bob.nbgrader("submit", ASSIGNMENT)
    early = teach("collect", ASSIGNMENT)  # an instructor looking in early: bob's first hand-in is collected
    bob.answer(answers("bob"))
    bob.nbgrader("submit", ASSIGNMENT)
    due = utc_now()
    time.sleep(1.1)  # carol is late by this much, and a timestamp's microseconds tell it apart
    carol.answer(answers("carol"))
    carol.nbgrader("submit", ASSIGNMENT)

    # The due date is set after the fact, to a moment between bob's last hand-in and carol's: updates the assignment.
    teach("db", "assignment", "add", ASSIGNMENT, f"--duedate={due.isoformat()}")
    # Without --update, collect leaves a hand-in it collected before; with it, a newer one replaces it.
    late = teach("collect", "--update", ASSIGNMENT)
    return {"course": course, "exchange": exchange, "students": students, "due": due, "teach": teach,
            "instructor": instructor, "folder": folder,
            "early": early.stdout + early.stderr, "late": late.stdout + late.stderr}


@pytest.fixture(scope="module")
def graded(term):
    """The bulk grader on what collect brought, then the feedback released and fetched by every student."""
    grade(term["course"], None, env=term["instructor"])  # no SUBMISSIONS: what collect brought
    term["teach"]("release_feedback", ASSIGNMENT)
    for student in term["students"].values():
        student.nbgrader("fetch_feedback", ASSIGNMENT)
    with open(term["course"] / "autograder" / "grades" / ASSIGNMENT / "grades.csv") as f:
        return {**term, "rows": {row["student_id"]: row for row in csv.DictReader(f)}}


def first_answer(path) -> str:
    """The source of a hand-in's first answer cell (the file's JSON splits a cell's source into lines)."""
    (cell,) = [c for c in nbformat.read(path, as_version=4).cells if grading(c).get("grade_id") == FIRST]
    return cell.source


def submitted(term, name: str):
    return term["course"] / "autograder" / "submitted" / name / ASSIGNMENT


def test_collect_takes_each_students_newest_submission(term):
    """collect --update brings one hand-in per student, the newest (bob's second), its timestamp and secret beside it."""
    inbound = sorted((term["exchange"] / COURSE_ID / "inbound").iterdir())
    assert sorted(p.name.split("+")[0] for p in inbound) == ["alice", "bob", "bob", "carol"]
    assert sum(WRONG_MEAN in first_answer(p / NOTEBOOK) for p in inbound) == 1  # bob's first is in the exchange still
    assert "Collecting submission: bob" in term["early"]
    assert "Updating submission: bob" in term["late"] and "Collecting submission: carol" in term["late"]
    assert sorted(p.name for p in (term["course"] / "autograder" / "submitted").iterdir()) == list(STUDENTS)
    cached = sorted((term["students"]["bob"].home / "home").rglob(f"bob+{ASSIGNMENT}+*"))
    assert len(cached) == 2, cached  # the student's cache keeps both hand-ins; their names end in the timestamp
    for name in STUDENTS:
        folder = submitted(term, name)
        assert sorted(p.name for p in folder.iterdir()) == [NOTEBOOK, "submission_secret.txt", "timestamp.txt"]
        assert first_answer(folder / NOTEBOOK).startswith(marker(name))
    bob = submitted(term, "bob")
    assert first_answer(bob / NOTEBOOK) == answers("bob")[FIRST]
    assert (bob / "timestamp.txt").read_text() == cached[-1].name.split("+")[2]
    assert (bob / "submission_secret.txt").read_text() == (cached[-1] / "submission_secret.txt").read_text()


def test_timestamps_put_carol_alone_after_the_due_date(term):
    """The timestamps collect kept are what lateness is judged by: alice and bob before the due date, carol after."""
    from nbgrader.utils import parse_utc
    with Gradebook(f"sqlite:///{term['course']}/autograder/gradebook.db", COURSE_ID) as gb:
        due = gb.find_assignment(ASSIGNMENT).duedate
    assert abs((parse_utc(term["due"].isoformat()) - due).total_seconds()) < 1e-3
    for name in STUDENTS:
        stamp = parse_utc((submitted(term, name) / "timestamp.txt").read_text())
        assert (stamp > due) == (name == "carol"), (name, stamp, due)


def test_grades_count_the_newest_hand_in_and_zero_the_late_one(graded):
    """grades.csv: alice and bob (his second hand-in) full marks on time; carol late, her score taken by the penalty."""
    rows = graded["rows"]
    assert sorted(rows) == list(STUDENTS)
    for name in ("alice", "bob"):
        row = rows[name]
        assert float(row["score"]) == float(row["max_score"]) > 0, row
        assert float(row["seconds_late"]) == 0 and float(row["late_penalty"]) == 0, row
        assert row["timestamp"], row
    carol = rows["carol"]
    assert float(carol["seconds_late"]) > 0, carol
    assert float(carol["late_penalty"]) == float(carol["max_score"]) > 0, carol
    assert float(carol["score"]) == 0, carol


def test_gradebook_agrees_and_exports_three_rows(graded):
    """The course's gradebook holds carol's lateness and penalty too, and `nbgrader export` gives the three hand-ins."""
    with Gradebook(f"sqlite:///{graded['course']}/autograder/gradebook.db", COURSE_ID) as gb:
        late = gb.find_submission(ASSIGNMENT, "carol")
        notebook = gb.find_submission_notebook(NOTEBOOK.removesuffix(".ipynb"), ASSIGNMENT, "carol")
        assert late.total_seconds_late > 0
        assert notebook.late_submission_penalty == notebook.score == notebook.max_score > 0
        for name in ("alice", "bob"):
            assert gb.find_submission(ASSIGNMENT, name).total_seconds_late == 0
    export = graded["folder"] / "export.csv"
    graded["teach"]("export", f"--to={export}")
    with open(export) as f:
        rows = [row for row in csv.DictReader(f) if row["assignment"] == ASSIGNMENT]
    assert sorted(row["student_id"] for row in rows) == list(STUDENTS)


def test_each_student_fetches_only_their_own_feedback(graded):
    """fetch_feedback brings each student one page, for their newest hand-in, naming no one else and no hidden test."""
    hidden = hidden_lines()
    for name, student in graded["students"].items():
        pages = student.feedback()
        assert len(pages) == 1, (name, pages)
        assert pages[0].name == NOTEBOOK.replace(".ipynb", ".html")
        assert pages[0].parent.name == (submitted(graded, name) / "timestamp.txt").read_text()
        text = html_text(pages[0])
        assert marker(name) in text
        assert not [other for other in STUDENTS if other != name and marker(other) in text]
        assert not leaked(text, hidden)
