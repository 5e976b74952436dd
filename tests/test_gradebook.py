"""The course's gradebook is the one record of scores: a regrade keeps what an instructor entered by hand, late
penalties follow nbgrader's settings and the gradebook's due dates and extensions, and grades.csv agrees with it."""

import copy
import csv
import shutil
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades
from nbgrader.utils import parse_utc

from autograder.config import load
from autograder.gradebook import write_rows
from autograder.results import Result
from course import nbgrader
from handins import ASSIGNMENT, FIRST, NOTEBOOK, SECOND, grade, right, rows_of, scratch_course, source, write
from torchcourse.format import grading

pytestmark = [pytest.mark.sandbox, pytest.mark.slow, pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")]
DUE = "2026-11-20 12:00:00 UTC"
HAND_GRADED = f"{FIRST}_hidden"


def hand_in(course: Path, student: str, nb_text: str, timestamp: str) -> None:
    """A hand-in as `nbgrader collect` leaves it in the course's submitted folder."""
    folder = course / "autograder" / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / NOTEBOOK).write_text(nb_text)
    (folder / "timestamp.txt").write_text(timestamp)
    (folder / "submission_secret.txt").write_text(f"{student}-secret")


def gradebook(course: Path) -> Gradebook:
    return Gradebook(f"sqlite:///{course}/autograder/gradebook.db", "pytorch-course")


def test_manual_grades_survive_a_regrade_and_late_penalties_follow_the_gradebook(tmp_path):
    """alice on time; bob a day late with a two-day extension; carol late; eve's timestamp.txt is not a time. An
    instructor's grade entered by hand survives `--force`, flagged for review, and grades.csv shows it."""
    course = scratch_course(tmp_path / "course")
    with open(course / "nbgrader_config.py", "a") as f:
        f.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    nbgrader("generate_assignment", ASSIGNMENT, "--force", cwd=course)
    nbgrader("db", "assignment", "add", ASSIGNMENT, f"--duedate={DUE}", cwd=course)
    hand_in(course, "alice", write(right()), "2026-11-19 10:00:00.000000 UTC")
    hand_in(course, "bob", write(right()), "2026-11-21 12:00:00.000000 UTC")
    hand_in(course, "carol", write(right()), "2026-11-21 12:00:00.000000 UTC")
    hand_in(course, "eve", write(right()), "yesterday, honest")
    with gradebook(course) as gb:
        gb.update_or_create_student("bob")
        gb.update_or_create_submission(ASSIGNMENT, "bob")
        gb.grant_extension(ASSIGNMENT, "bob", days=2)
    out = course / "autograder" / "grades" / ASSIGNMENT

    grade(course, None)
    rows = rows_of(out)
    assert (rows["alice"]["score"], rows["alice"]["seconds_late"], rows["alice"]["late_penalty"]) == ("6", "0", "0")
    assert (rows["bob"]["score"], rows["bob"]["seconds_late"]) == ("6", "0"), "the extension covers bob's day"
    assert (rows["carol"]["score"], rows["carol"]["seconds_late"], rows["carol"]["late_penalty"]) == ("0", "86400", "6")
    assert rows["eve"]["status"] == "invalid" and "timestamp.txt" in rows["eve"]["message"]

    with gradebook(course) as gb:  # what formgrader does when the instructor types a score
        hand = gb.find_grade(HAND_GRADED, Path(NOTEBOOK).stem, ASSIGNMENT, "alice")
        hand.manual_score, hand.needs_manual_grade = 1.0, False
        gb.db.commit()
    grade(course, None, "--force")
    rows = rows_of(out)
    assert (rows["alice"][HAND_GRADED], rows["alice"]["score"], rows["alice"]["graded_by_hand"]) == \
        ("1", "5", HAND_GRADED)
    with gradebook(course) as gb:
        hand = gb.find_grade(HAND_GRADED, Path(NOTEBOOK).stem, ASSIGNMENT, "alice")
        assert (hand.manual_score, hand.auto_score, hand.needs_manual_grade) == (1.0, 2.0, True)
    nbgrader("export", "--to", str(tmp_path / "export.csv"), cwd=course)
    exported = {r["student_id"]: r for r in csv.DictReader(open(tmp_path / "export.csv"))}
    for student, row in rows.items():
        assert float(exported[student]["score"]) == float(row["score"]), student
        assert float(exported[student]["late_submission_penalty"]) == float(row["late_penalty"]), student
    feedback = course / "autograder" / "feedback" / "carol" / ASSIGNMENT
    assert {p.name for p in feedback.iterdir()} == {"01_basics.html", "timestamp.txt", "submission_secret.txt"}
    assert "Late submission penalty" in (feedback / "01_basics.html").read_text()


def nbgraders_own_steps(db_url: str, config, nb, student: str) -> None:
    """What nbgrader autograde records of a graded notebook: its SaveAutoGrades, then its AssignLatePenalties."""
    resources = {"nbgrader": {"db_url": db_url, "assignment": ASSIGNMENT, "notebook": Path(NOTEBOOK).stem,
                              "student": student}}
    for step in (SaveAutoGrades(config=config), AssignLatePenalties(config=config)):
        step.preprocess(copy.deepcopy(nb), copy.deepcopy(resources))


def recorded(db_url: str, student: str) -> dict:
    with Gradebook(db_url, "pytorch-course") as gb:
        nb = gb.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, student)
        return {"grades": {g.name: (g.auto_score, g.manual_score, g.needs_manual_grade, g.score) for g in nb.grades},
                "comments": {c.name: c.auto_comment for c in nb.comments},
                "late_penalty": nb.late_submission_penalty, "score": nb.score}


def test_a_batch_records_a_row_as_nbgraders_own_steps_would(tmp_path):
    """gradebook.write_rows records a class in one session, typing two of nbgrader's rules again (SaveAutoGrades':
    a score entered by hand stays and goes back to a human; AssignLatePenalties': the course's plugin, within
    [0, score]): the gradebook it leaves is the one nbgrader's own steps leave, from the scores a grading read in its
    scratch gradebook. Fails when nbgrader changes either rule. alice: late, one grade entered by hand; bob: on
    time, one test failing."""
    course = scratch_course(tmp_path / "course")
    with open(course / "nbgrader_config.py", "a") as f:
        f.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    nbgrader("generate_assignment", ASSIGNMENT, "--force", cwd=course)
    nbgrader("db", "assignment", "add", ASSIGNMENT, f"--duedate={DUE}", cwd=course)
    config = load(course, {})
    late, on_time = "2026-11-21 12:00:00.000000 UTC", "2026-11-19 10:00:00.000000 UTC"
    graded = source()  # answers and tests, as graded
    failing = next(c for c in graded.cells if grading(c).get("grade_id") == f"{SECOND}_hidden")
    failing.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="", traceback=[])]
    template = course / "autograder" / "gradebook.db"
    with Gradebook(f"sqlite:///{template}", "pytorch-course") as gb:
        for student, when in (("alice", late), ("bob", on_time)):
            gb.update_or_create_student(student)
            gb.update_or_create_submission(ASSIGNMENT, student, timestamp=parse_utc(when))
        hand = gb.find_grade(HAND_GRADED, Path(NOTEBOOK).stem, ASSIGNMENT, "alice")
        hand.manual_score, hand.needs_manual_grade = 1.0, False
        gb.db.commit()
    theirs, ours = (tmp_path / "theirs.db", tmp_path / "ours.db")
    rows = []
    for student, when in (("alice", late), ("bob", on_time)):
        scratch = tmp_path / f"scratch-{student}.db"  # a grading's: the template's, this student on time, none by hand
        shutil.copy(template, scratch)
        with Gradebook(f"sqlite:///{scratch}", "pytorch-course") as gb:
            gb.update_or_create_submission(ASSIGNMENT, student, timestamp=parse_utc(on_time))
            nb = gb.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, student)
            for grade in nb.grades:
                grade.manual_score = None
            gb.db.commit()
        nbgraders_own_steps(f"sqlite:///{scratch}", config, graded, student)
        with Gradebook(f"sqlite:///{scratch}", "pytorch-course") as gb:  # as grade_one.scores reads them
            nb = gb.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, student)
            cells = {g.name: {"score": float(g.score), "max_score": float(g.max_score),
                              "needs_manual_grade": bool(g.needs_manual_grade)} for g in nb.grades}
            comments = {c.name: c.auto_comment for c in nb.comments if c.auto_comment}
        rows.append(Result(student_id=student, assignment=ASSIGNMENT, notebook=NOTEBOOK, status="graded", message="",
                           cells=cells, comments=comments, timestamp=when))
    shutil.copy(template, theirs)
    shutil.copy(template, ours)
    for row in rows:
        nbgraders_own_steps(f"sqlite:///{theirs}", config, graded, row.student_id)
    cd = CourseDirectory(config=config, root=str(course), db_url=f"sqlite:///{ours}")
    (tmp_path / "out").mkdir()
    write_rows(cd, config, ASSIGNMENT, NOTEBOOK, rows, tmp_path / "out")
    for student in ("alice", "bob"):
        assert recorded(f"sqlite:///{ours}", student) == recorded(f"sqlite:///{theirs}", student), student
    alice = recorded(f"sqlite:///{ours}", "alice")
    assert alice["grades"][HAND_GRADED][1:3] == (1.0, True) and alice["late_penalty"] == alice["score"] > 0
    assert recorded(f"sqlite:///{ours}", "bob")["grades"][f"{SECOND}_hidden"][0] == 0.0
