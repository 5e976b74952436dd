"""Zips of hand-ins told apart by their names (Canvas's, Moodle's, a folder or a notebook per student), without
--pattern: who handed in what, their names and Canvas's LATE_ read from them; a zip that says none of it refused before
anything is written; a LATE_ hand-in priced against the due date, or its row saying why it is not; `remove` refusing
an id that names nobody. No grading: fast."""

import json
import zipfile
from pathlib import Path

import pytest

from autograder.run import collect
from autograder.run.batch import price_marked_late
from autograder.run.remove import chosen

NOTEBOOK = "02_autograd.ipynb"
TEXT = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def found_in(tmp_path: Path, names: list[str], pattern: str | None = None) -> dict[str, collect.Submission]:
    """The hand-ins the grader finds in a zip of these notebooks: student id as given -> hand-in."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    archive = tmp_path / "hand-ins.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name in names:
            z.writestr(name, TEXT)
    return {s.given_id: s for s in collect.collect(archive, NOTEBOOK, pattern, tmp_path / "unzipped")}


def refusal(tmp_path: Path, names: list[str], pattern: str | None = None) -> str:
    with pytest.raises(SystemExit) as refused:
        found_in(tmp_path, names, pattern)
    assert not (tmp_path / "unzipped").exists(), "refused after unpacking"
    return str(refused.value)


def test_canvas_names_give_user_id_name_and_late_marker(tmp_path):
    """<lastfirst>_[LATE_]<user id>_<file id>_<name>: the user id is the student, lastfirst their last name (it cannot
    be split), LATE_ marks the hand-in late; a lastfirst holding "_" and a resubmission's "-1" are read too."""
    found = found_in(tmp_path, ["curiemarie_LATE_10001_900001_02_autograd.ipynb",
                                "jonesbob_10002_900002_02_autograd-1.ipynb", "o_brienpat_10003_900003_notes.ipynb"])
    assert sorted(found) == ["10001", "10002", "10003"]
    assert (found["10001"].first_name, found["10001"].last_name) == ("", "curiemarie")
    assert found["10001"].marked_late == "Canvas marked it LATE_" and not found["10002"].marked_late
    assert found["10003"].last_name == "o_brienpat"
    assert found["10003"].path.name == "o_brienpat_10003_900003_notes.ipynb"


def test_moodle_names_give_participant_id_and_full_name(tmp_path):
    """<Full name>_<participant id>_assignsubmission_file_/ (or that prefix on each file): the full name split at its
    last space, as Moodle writes "First Last"."""
    found = found_in(tmp_path, ["Marie Curie_555_assignsubmission_file_/02_autograd.ipynb",
                                "José Núñez García_556_assignsubmission_file_/work/02_autograd.ipynb",
                                "Plato_557_assignsubmission_file_02_autograd.ipynb"])
    assert {sid: (s.first_name, s.last_name) for sid, s in found.items()} == {
        "555": ("Marie", "Curie"), "556": ("José Núñez", "García"), "557": ("", "Plato")}


@pytest.mark.parametrize("names, students", [
    (["alice/02_autograd.ipynb", "bob/work/02_autograd.ipynb"], ["alice", "bob"]),
    (["alice.ipynb", "bob.ipynb"], ["alice", "bob"]),
    (["alice/02_autograd.ipynb", "bob.ipynb"], ["alice", "bob"]),
    (["hand-ins/alice/02_autograd.ipynb", "hand-ins/bob/02_autograd.ipynb"], ["alice", "bob"]),  # a zipped folder
    (["export/curiemarie_10001_900001_02_autograd.ipynb", "export/jonesbob_10002_900002_02_autograd.ipynb"],
     ["10001", "10002"]),
])
def test_plain_layouts_and_a_folder_around_the_class(tmp_path, names, students):
    """A folder or a notebook per student, named by the student's id; a folder holding the whole class names nobody."""
    assert sorted(found_in(tmp_path, names)) == students


def test_names_that_match_no_layout_are_refused_with_two_names_and_a_pattern(tmp_path):
    """A notebook per student whose names hold the assignment's own is an LMS's name read whole: refused, naming two of
    them and a --pattern, with what it reads from them; that pattern then reads every student."""
    names = ["curie_marie_02_autograd.ipynb", "jones_bob_02_autograd.ipynb"]
    said = refusal(tmp_path, names)
    assert "'curie_marie_02_autograd.ipynb' and 'jones_bob_02_autograd.ipynb'" in said
    assert f"--pattern '{collect.SUGGESTED_PATTERN}'" in said and "reads 'curie' and 'jones'" in said
    assert "Nothing was graded or written" in said
    assert sorted(found_in(tmp_path / "again", names, collect.SUGGESTED_PATTERN)) == ["curie", "jones"]


@pytest.mark.parametrize("names, words", [
    (["curiemarie_10001_900001_02_autograd.ipynb", "bob.ipynb"], ["1 named as Canvas names", "1 as a notebook per"]),
    (["curiemarie_10001_900001_02_autograd.ipynb", "Marie Curie_555_assignsubmission_file_/02_autograd.ipynb"],
     ["as Canvas names", "as Moodle names"]),
    (["alice/02_autograd.ipynb", "Marie Curie_555_assignsubmission_file_/02_autograd.ipynb"],
     ["as Moodle names", "a folder per student"]),
])
def test_a_zip_mixing_layouts_is_refused(tmp_path, names, words):
    said = refusal(tmp_path, names)
    assert "named in more than one way" in said and all(w in said for w in words), said


def test_a_pattern_must_read_every_notebook_and_may_give_names(tmp_path):
    """--pattern's groups: student_id, and first_name/last_name (or name) and late; a notebook it cannot read refuses
    the zip, rather than being left out silently."""
    pattern = r"^(?P<last_name>[^,/]+),(?P<first_name>[^_/]+)_(?P<student_id>\w+?)(?P<late>-late)?\.ipynb$"
    found = found_in(tmp_path, ["Curie,Marie_s1.ipynb", "Jones,Bob_s2-late.ipynb"], pattern)
    assert {sid: (s.first_name, s.last_name, bool(s.marked_late)) for sid, s in found.items()} == {
        "s1": ("Marie", "Curie", False), "s2": ("Bob", "Jones", True)}
    said = refusal(tmp_path / "other", ["Curie,Marie_s1.ipynb", "bob.ipynb"], pattern)
    assert "reads no student_id from 1 of the zip's 2 notebooks, e.g. 'bob.ipynb'" in said


def test_a_late_marker_is_priced_against_the_due_date_or_its_row_says_why_not(tmp_path, capsys):
    """LATE_ carries no time: with a due date the hand-in counts as 1 s after it (the course's late rule then prices
    it); without one, the row says it was late and why no penalty applied, and the command tells how to price it."""
    late = [collect.Submission("101", tmp_path, given_id="101", marked_late="Canvas marked it LATE_") for _ in "ab"]
    on_time = collect.Submission("102", tmp_path)
    price_marked_late([late[0], on_time], {"101": "2026-12-04T16:00:00", "102": "2026-12-04T16:00:00"}, "02_autograd")
    assert late[0].timestamp == "2026-12-04T16:00:01+00:00" and not on_time.timestamp and not on_time.message
    assert "Canvas marked it LATE_" in late[0].message and "1 s after the due date (2026-12-04 16:00:00 UTC)" in \
        late[0].message
    price_marked_late([late[1]], {}, "02_autograd")
    assert not late[1].timestamp
    assert "no due date for this assignment, so no late penalty was applied" in late[1].message
    assert "nbgrader db assignment add 02_autograd --duedate=" in capsys.readouterr().err


def test_remove_refuses_an_id_that_names_nobody():
    known = {"101": "101 (curiemarie)", "curiemarie_10001_900001_02_autograd": "curiemarie_10001_900001_02_autograd"}
    assert chosen(known, ["*_02_autograd"]) == ["curiemarie_10001_900001_02_autograd"]
    with pytest.raises(SystemExit, match="no student of this assignment is '999': nothing was removed"):
        chosen(known, ["101", "999"])


def found_in_folder(folder: Path, names: list[str], pattern: str | None = None) -> dict[str, collect.Submission]:
    """The hand-ins the grader finds in a folder of these notebooks (a zip unpacked): student id as given -> hand-in."""
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(TEXT)
    return {s.given_id: s for s in collect.collect(folder, NOTEBOOK, pattern, folder.parent / "unzipped")}


def test_a_folder_is_read_as_the_zip_it_was_unpacked_from(tmp_path):
    """An LMS's zip unpacked into a folder: the same layout recognised, ids, names and LATE_ read, the same refusal
    (before anything is written); a folder per student still gives a row to a student whose folder holds nothing."""
    canvas = found_in_folder(tmp_path / "canvas", ["curiemarie_LATE_10001_900001_02_autograd.ipynb",
                                                    "jonesbob_10002_900002_02_autograd.ipynb"])
    assert sorted(canvas) == ["10001", "10002"] and canvas["10001"].last_name == "curiemarie"
    assert canvas["10001"].marked_late and not canvas["10002"].marked_late
    moodle = found_in_folder(tmp_path / "moodle", ["Marie Curie_555_assignsubmission_file_/02_autograd.ipynb"])
    assert (moodle["555"].first_name, moodle["555"].last_name) == ("Marie", "Curie")
    (tmp_path / "plain" / "carol").mkdir(parents=True)
    plain = found_in_folder(tmp_path / "plain", ["alice/02_autograd.ipynb", "bob.ipynb"])
    assert sorted(plain) == ["alice", "bob", "carol"] and plain["carol"].path is None
    with pytest.raises(SystemExit, match="cannot tell whose notebook is whose"):
        found_in_folder(tmp_path / "wrong", ["curie_marie_02_autograd.ipynb", "jones_bob_02_autograd.ipynb"])
    assert collect.layout_of(tmp_path / "canvas", NOTEBOOK, None).pattern == collect.CANVAS_PATTERN
