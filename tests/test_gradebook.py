"""The course's gradebook is the one record of scores: a regrade keeps what an instructor entered by hand, late
penalties follow nbgrader's settings and the gradebook's due dates and extensions, and grades.csv agrees with it."""

import csv
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from course import nbgrader
from handins import ASSIGNMENT, FIRST, NOTEBOOK, grade, right, rows_of, scratch_course, write

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
