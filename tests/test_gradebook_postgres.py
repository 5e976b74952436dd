"""The course's gradebook on a real PostgreSQL server, as the grader writes it and nbgrader and formgrader read it."""

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook
from nbgrader.apps.api import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config import PyFileConfigLoader

import postgres
from course import ROOT, nbgrader
from handins import ASSIGNMENT, FIRST, NOTEBOOK, private_env, right, rows_of, scratch_course, write, write_folder

pytestmark = [pytest.mark.postgres, pytest.mark.sandbox, pytest.mark.slow, pytest.mark.xdist_group("gradebook-postgres")]
COURSE_ID = "pytorch-course"  # the repository's nbgrader_config.py names it
STEM = Path(NOTEBOOK).stem
WRONG_MEAN = "def mean(xs):\n    return 0"


@pytest.fixture
def db_url():
    """A server of the test's own: each test starts from an empty gradebook, as a course's first batch does."""
    with postgres.server("gradebook") as url:
        yield url


def postgres_course(folder: Path, db_url: str) -> Path:
    """The grader's test course, its gradebook on the server."""
    course = scratch_course(folder)
    with open(course / "nbgrader_config.py", "a") as f:
        f.write(f"\nc.CourseDirectory.db_url = {db_url!r}\n")
    return course


def formgrader_api(course: Path) -> NbGraderAPI:
    """formgrader's API on the course, configured as formgrader configures it: from the course's nbgrader_config.py."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    config.CourseDirectory.root = str(course)
    return NbGraderAPI(CourseDirectory(config=config), config=config)


def start_grading(course: Path, submissions: Path, out: Path) -> tuple[subprocess.Popen, Path]:
    """handins.grade without waiting for it: the grader in the background, its output into a file."""
    env_folder = course.parent / f"env-{course.name}"
    log = course.parent / f"grader-{course.name}.log"
    with open(log, "w") as f:  # a file, not a pipe: two graders writing pipes no one reads could block
        process = subprocess.Popen([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, str(submissions),
                                    "--jobs", "1", "--course", str(course), "--out", str(out)],
                                   cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=private_env(env_folder),
                                   start_new_session=True)
    return process, log


def test_two_batches_at_once_into_postgres_read_back_by_export_gradebook_and_formgrader(db_url, tmp_path):
    """Two course folders on one server, graded at the same time: every student of both is in the gradebook, and
    `nbgrader export`, the Gradebook API and formgrader's API all give grades.csv's scores."""
    classes = {"first": {"right": write(right()), "wrong": write(right(**{FIRST: WRONG_MEAN})), "not_json": "not json"},
               "second": {"carol": write(right(**{FIRST: WRONG_MEAN})), "dan": write(right())}}
    runs = {}
    try:
        for name, class_ in classes.items():
            course = postgres_course(tmp_path / name / "course", db_url)
            submissions = write_folder(tmp_path / name / "submissions", class_)
            runs[name] = (*start_grading(course, submissions, tmp_path / name / "out"), course)
        for process, _, _ in runs.values():
            process.wait(timeout=900)
    finally:  # a batch still running when the other failed or hung: stopped, not left to the next test
        for process, _, _ in runs.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)  # the grader and the kernels it started
                process.wait()
    for name, (process, log, _) in runs.items():
        assert process.returncode == 0, f"the {name} batch failed ({process.returncode}):\n{log.read_text()}"

    rows = {s: row for name in classes for s, row in rows_of(tmp_path / name / "out").items()}
    scores = {student: float(row["score"]) for student, row in rows.items()}
    assert {s: row["status"] for s, row in rows.items()} == {**dict.fromkeys(scores, "graded"), "not_json": "invalid"}
    assert scores["right"] == scores["dan"] == float(rows["right"]["max_score"]) > scores["wrong"] == scores["carol"] > 0
    course = runs["first"][2]
    assert not (course / "autograder" / "gradebook.db").exists(), "the grades went to SQLite, not to the server"

    nbgrader("export", "--to", str(tmp_path / "export.csv"), cwd=course)
    with open(tmp_path / "export.csv") as f:
        exported = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(f) if r["assignment"] == ASSIGNMENT}
    assert exported == scores

    with Gradebook(db_url, COURSE_ID) as gb:
        assert [a.name for a in gb.assignments] == [ASSIGNMENT]
        for student, score in scores.items():
            submitted = gb.find_submission_notebook(STEM, ASSIGNMENT, student)
            assert submitted.score == score, student
            assert submitted.needs_manual_grade == (student == "not_json"), student

    listed = {s["student"]: s["score"] for s in formgrader_api(course).get_submissions(ASSIGNMENT)}
    assert listed == scores
