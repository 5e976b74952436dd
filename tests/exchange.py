"""nbgrader's own exchange in a temporary folder: an instructor, students who fetch and submit, and the bulk grader.

Nothing here needs root: every user is a folder with its own HOME and working folder, not an account. nbgrader names
a submitter by their account (nbgrader.utils.get_username reads the password database, not USER), so each student's
config gives their id instead, as `nbgrader submit --student` would.
"""

import datetime
import subprocess
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course import grading, nbgrader
from handins import ASSIGNMENT, NOTEBOOK, private_env

COURSE_ID = "pytorch-course"


def open_exchange(folder: Path) -> Path:
    """An exchange root as an administrator makes one: existing, and writable by everyone (nbgrader checks both)."""
    folder.mkdir(parents=True)
    folder.chmod(0o777)  # mkdir's mode is cut by the umask
    return folder


def join_exchange(course: Path, exchange: Path):
    """Point the instructor's course at the exchange, and make a late hand-in score 0."""
    with open(course / "nbgrader_config.py", "a") as f:
        f.write(f"\nc.Exchange.root = {str(exchange)!r}\n"
                'c.LateSubmissionPlugin.penalty_method = "zero"\n')


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


@dataclass
class Student:
    """One student's side of the exchange: a HOME of their own (nbgrader's submission cache lives there) and the
    folder they work in."""

    name: str
    home: Path

    @property
    def work(self) -> Path:
        return self.home / "work"

    @property
    def env(self) -> dict[str, str]:
        # USER and LOGNAME as a login sets them; nbgrader itself reads the student id from the config (see above).
        return private_env(self.home, USER=self.name, LOGNAME=self.name)

    def nbgrader(self, *args: str) -> subprocess.CompletedProcess:
        return nbgrader(*args, cwd=self.work, env=self.env)

    @property
    def notebook(self) -> Path:
        return self.work / ASSIGNMENT / NOTEBOOK

    def answer(self, answers: dict[str, str]):
        """Type these answers (by grade_id) into the fetched notebook and save it."""
        nb = nbformat.read(self.notebook, as_version=4)
        for cell in nb.cells:
            if grading(cell).get("grade_id") in answers:
                cell.source = answers[grading(cell)["grade_id"]]
        nbformat.write(nb, self.notebook)

    def feedback(self) -> list[Path]:
        """The feedback pages `nbgrader fetch_feedback` brought: <assignment>/feedback/<timestamp>/<notebook>.html."""
        return sorted((self.work / ASSIGNMENT / "feedback").glob("*/*.html"))


def enrol(folder: Path, name: str, exchange: Path) -> Student:
    """A student's folders, and their nbgrader settings: the exchange, the course, their id. No gradebook."""
    student = Student(name, folder)
    student.work.mkdir(parents=True)
    (student.work / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.Exchange.root = {str(exchange)!r}\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.CourseDirectory.student_id = {name!r}\n")
    return student

