"""The base one module at a time: the row (results, grades.csv, the statuses) and the course's configuration."""

import csv
import dataclasses
import json
import re
import shutil

import pytest

from autograder import results
from autograder import config as course_config
from course import ROOT


def test_results_are_whole_or_absent(tmp_path):
    path = tmp_path / "alice.json"
    assert results.read_result(path) is None
    path.write_text('{"status": "graded", "student')
    assert results.read_result(path) is None
    row = results.Result(student_id="alice", assignment="a", notebook="a.ipynb", status="graded", message="")
    results.write_result(path, row)
    assert results.read_result(path) == row and not list(tmp_path.glob(".*tmp"))
    path.write_text(json.dumps({**json.loads(path.read_text()), "a_field_of_a_newer_grader": 1}))
    assert results.read_result(path) == row


def test_the_readme_explains_every_status():
    table = re.findall(r"^\| `(\w+)` \|", (ROOT / "autograder" / "README.md").read_text(), re.M)
    assert tuple(table) == results.STATUSES


def test_a_spreadsheet_runs_no_cell_of_grades_csv(tmp_path):
    """A cell opening with = + - @ or a control character is quoted; the id as given is kept beside the file name."""
    row = results.Result(student_id="%2Bx", given_id="+x", assignment="a", notebook="a.ipynb", score=1.0, max_score=2.0,
                         status="graded", message="=HYPERLINK(\"http://x\")")
    results.write_table(tmp_path / "grades.csv", [row, dataclasses.replace(row, given_id="@SUM(1)", message="-1")], [])
    rows = list(csv.DictReader(open(tmp_path / "grades.csv")))
    assert [(r["student_id"], r["gradebook_id"], r["message"]) for r in rows] == [
        ("'+x", "%2Bx", "'=HYPERLINK(\"http://x\")"), ("'@SUM(1)", "%2Bx", "'-1")]


def test_the_configuration_is_resolved_against_the_course_folder(tmp_path, monkeypatch):
    """Relative paths of nbgrader_config.py mean the course folder, from wherever the grader starts; a read-only
    folder that is not there is an error naming it."""
    course = tmp_path / "course"
    (course / "data").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=f"{course / 'torchcourse'}, which is not a folder"):
        course_config.load(course, {})
    (course / "torchcourse").mkdir()
    config = course_config.load(course, {"Execute": {"timeout": 5}})
    assert config.SandboxedKernelManager.read_only == [str(course / "data"), str(course / "torchcourse")]
    assert config.CourseDirectory.db_url == f"sqlite:///{course}/autograder/gradebook.db"
    assert config.Execute.timeout == 5 and config.CourseDirectory.root == str(course)
