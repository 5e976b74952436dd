"""A hand-in read as source text alone (autograder/grading/handin.py): examples of each rule, then thousands of generated
mutants of right hand-ins (Hypothesis): each is built into a notebook nbgrader's own steps accept, or refused with a
message, and nothing else ever happens.
"""

import copy
import json
import random
import re
from functools import cache

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nbformat import NotebookNode
from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, DeduplicateIds, OverwriteCells, OverwriteKernelspec

from autograder.grading import handin
from course import read, release_path, source_path
from handins import ASSIGNMENT, FIRST, SECOND, colab, handin as student_version, release, right, right_answers, source
from handins import assignment_gradebook, write
from torchcourse.format import grading

COURSE_NOTEBOOK = "07_checkpointing"  # a notebook of the course, beside the grader's own test course
# The same examples at every run (no flaky CI), and no example database written into the repository
FUZZ = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)


def build(text: str | bytes, release_nb, others=None):
    """What a grading does with a hand-in's bytes before nbgrader sees it."""
    found = handin.sources(handin.load(text.encode() if isinstance(text, str) else text), release_nb)
    handin.check(found, "the assignment", release_nb, others or {})
    return handin.build(found, release_nb), found


def by_id(nb) -> dict:
    return {cell.id: cell for cell in nb.cells}


# --- each rule, by example -------------------------------------------------------------------------------------------

def test_a_right_hand_in_is_rebuilt_with_its_answers_and_the_release_around_them():
    nb, found = build(write(right()), release())
    assert [c.id for c in nb.cells] == [c.id for c in release().cells]
    answers = right_answers()
    for cell in nb.cells:
        gid = grading(cell).get("grade_id")
        expected = answers.get(gid, next(c for c in release().cells if c.id == cell.id).source)
        assert cell.source == expected
        assert cell.metadata == next(c for c in release().cells if c.id == cell.id).metadata
    assert not found.added


def test_every_field_but_the_text_is_the_releases():
    """Metadata edits that stop nbgrader's own steps (a test cell no longer graded, points as text, an answer also
    marked graded, the kernelspec, outputs, widget state) are not read."""
    raw = json.loads(write(right()))
    raw["metadata"] = {"kernelspec": {"name": "evil", "display_name": "x"}, "widgets": {"state": "<script>"}}
    raw["nbformat_minor"] = 99
    for cell in raw["cells"]:
        meta = cell["metadata"].get("nbgrader")
        if meta and meta.get("grade") and not meta.get("solution"):
            meta.update(grade=False, points="all of them", checksum="0")
        elif meta and meta.get("solution"):
            meta.update(grade=True, points=100, locked=True)
        if cell["cell_type"] == "code":
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "forged"}]
            cell["execution_count"] = 7
        cell["metadata"]["tags"] = ["skip-in-grading"]
    nb, found = build(json.dumps(raw), release())
    assert nb.metadata == release().metadata
    for cell, released in zip(nb.cells, release().cells):
        assert cell.metadata == released.metadata and cell.cell_type == released.cell_type
        assert cell.get("outputs", []) == [] and cell.get("execution_count") is None
    assert found.dropped["outputs"] and found.dropped["cell metadata"]
    assert "outputs" in handin.dropped(found) and "metadata" in handin.dropped(found)


def test_cells_the_student_added_follow_the_cell_they_followed_without_metadata():
    nb = right()
    at = next(i for i, c in enumerate(nb.cells) if c.id == FIRST)
    mine = nbformat.v4.new_code_cell("x = 1", id="mine")
    mine.metadata["nbgrader"] = {"grade": True, "grade_id": "ex9_from_elsewhere", "points": 5, "solution": False,
                                 "locked": True}  # a cell copied from another assignment
    note = nbformat.v4.new_markdown_cell("my notes <img src=x onerror=alert(1)>", id="notes",
                                         attachments={"a.png": {"image/png": "AAAA"}})
    nb.cells[at + 1:at + 1] = [mine, note]
    nb.cells.insert(0, nbformat.v4.new_code_cell("print('first')", id="top"))
    built, found = build(write(nb), release())
    ids = [c.id for c in built.cells]
    first = ids.index(FIRST)
    assert [built.cells[first + 1].source, built.cells[first + 2].source] == ["x = 1", note.source]
    assert built.cells[0].source == "print('first')"
    for cell in (built.cells[0], built.cells[first + 1], built.cells[first + 2]):
        assert cell.metadata == {} and "attachments" not in cell and cell.id.startswith("added-")
    assert len(found.added) == 3


def test_a_lesson_cell_is_taken_by_its_id_and_a_test_cell_never():
    nb = right()
    for cell in nb.cells:
        if cell.id == "lesson":
            cell.source = "def total(xs):\n    return sum(xs)"
        if grading(cell).get("grade_id") == f"{FIRST}_tests":
            cell.source = "pass  # edited test"
    built, _ = build(write(nb), release())
    assert by_id(built)["lesson"].source == "def total(xs):\n    return sum(xs)"
    test = next(c for c in built.cells if grading(c).get("grade_id") == f"{FIRST}_tests")
    assert test.source == next(c for c in release().cells if c.id == test.id).source


def test_colab_ids_are_matched_by_place_and_text():
    """Colab keeps ids of its own: the lesson cells are found by alignment, an edited one by its place."""
    nb = right()
    for cell in nb.cells:
        if cell.id == "lesson":
            cell.source = "def total(xs):\n    return sum(xs)"
    built, found = build(colab(nb), release())
    assert [c.id for c in built.cells] == [c.id for c in release().cells]
    assert by_id(built)["lesson"].source == "def total(xs):\n    return sum(xs)"
    assert not found.added


def test_copies_of_graded_cells_the_last_answer_counts_and_tests_are_the_releases():
    nb = right(**{SECOND: "def clip(x, lo, hi):\n    return 0"})
    at = next(i for i, c in enumerate(nb.cells) if c.id == SECOND)
    earlier = copy.deepcopy(nb.cells[at])
    earlier.source, earlier.id = "# my first try", "try-1"
    twin = copy.deepcopy(next(c for c in nb.cells if grading(c).get("grade_id") == f"{FIRST}_tests"))
    twin.id, twin.source = "twin", "pass"
    nb.cells[at:at] = [earlier, twin]
    built, found = build(write(nb), release())
    assert by_id(built)[SECOND].source == "def clip(x, lo, hi):\n    return 0"
    assert [c.source for c in built.cells if c.id.startswith("added-")] == ["# my first try"]
    assert found.repeated == {SECOND, f"{FIRST}_tests"}
    assert "more than once" in " ".join(handin.notes(found, release()))


def test_lost_cells_come_back_and_the_note_names_them():
    nb = right()
    nb.cells = [c for c in nb.cells if grading(c).get("grade_id") not in (SECOND, f"{FIRST}_hidden")]
    built, found = build(write(nb), release())
    assert [c.id for c in built.cells] == [c.id for c in release().cells]
    assert by_id(built)[SECOND].source == by_id(release())[SECOND].source
    said = " ".join(handin.notes(found, release()))
    assert SECOND in said and f"{FIRST}_hidden" in said and "put back" in said


READ_ERRORS = [
    (b"", "empty"), (b"   \n", "empty"), (b"\xff\xfe\x00garbage", "not even text"),
    (b'{"cells": [', "cut off"), (b"[1, 2]", "not a Jupyter notebook"), (b'{"cells": {}}', "not a Jupyter notebook"),
    (b'{"cells": []}', "no cells"), (b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
    (b'{"cells": [], "metadata": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deep"),
    (b'{"cells": [1e99999999999999999999]}', ""),  # Python reads it as inf: one bad cell, no grade_ids
    (b'{"cells": [' + b",".join([b"{}"] * (handin.MAX_CELLS + 1)) + b"]}", "cells"),
]


@pytest.mark.parametrize("text, words", READ_ERRORS, ids=[f"{k}-{w or 'cells'}" for k, (_, w) in enumerate(READ_ERRORS)])
def test_what_cannot_be_read_gets_a_sentence(text, words):
    with pytest.raises(handin.Invalid) as refused:
        build(text, release())
    assert words in str(refused.value) and str(refused.value)


def test_another_assignments_notebook_and_the_instructors_sources_are_refused():
    with pytest.raises(handin.Invalid, match="02_other"):
        build(write(release("02_other")), release(), {"02_other": {"ex1_twice"} | {
            grading(c)["grade_id"] for c in release("02_other").cells if grading(c).get("grade_id")}})
    with pytest.raises(handin.Invalid, match="instructor's sources"):
        build(write(source()), release())


def test_text_that_cannot_be_written_as_utf8_is_mended():
    raw = json.loads(write(right()))
    answer = next(c for c in raw["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == FIRST)
    answer["source"] = ["x = '\ud800'\n", "y = '\x00\x1b[2J'"]
    built, _ = build(json.dumps(raw), release())
    assert by_id(built)[FIRST].source == "x = '\ufffd'\ny = '\x00\x1b[2J'"
    nbformat.writes(built).encode("utf-8")


def test_a_cell_too_long_to_be_an_answer_is_refused():
    with pytest.raises(handin.Invalid, match="characters"):
        build(write(right(**{FIRST: "#" * (handin.MAX_SOURCE_CHARS + 1)})), release())


# --- generated hand-ins ----------------------------------------------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
                    max_leaves=12)
DEEP = "\ue000deep\ue000"  # a placeholder the JSON text's nesting replaces (json.dumps cannot write it)
GRADED_EDITS = [  # what copying cells between assignments and editing metadata by hand do
    {"grade": False}, {"points": "all of them"}, {"points": -3}, {"grade": True, "solution": True},
    {"grade_id": "ex9_elsewhere"}, {"grade_id": None}, {"locked": False}, {"checksum": "forged"},
    {"schema_version": 99}, {"cell_type": "raw"},
]


def paths(value, at=()) -> list[tuple]:
    """Every place in a JSON value, as the keys and indices leading to it."""
    found = [at]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += paths(inner, at + (key,))
    elif isinstance(value, list):
        for k, inner in enumerate(value):
            found += paths(inner, at + (k,))
    return found


def holder(value, at: tuple):
    for key in at[:-1]:
        value = value[key]
    return value


@st.composite
def mutants(draw, base: str) -> str:
    """A right hand-in's JSON with one to four of: any value replaced by any JSON, a key or element removed or added,
    nesting a hundred thousand deep, a cell's type swapped, cells duplicated or reordered, ids repeated, nbgrader
    metadata edited, a huge or ill-formed string."""
    raw, deep = json.loads(base), 0
    for _ in range(draw(st.integers(1, 4))):
        places = paths(raw)[1:]
        cells = raw.get("cells") if isinstance(raw, dict) and isinstance(raw.get("cells"), list) else []
        kind = draw(st.sampled_from(["replace", "remove", "add", "deep", "type", "duplicate", "shuffle", "same id",
                                     "graded", "string"]))
        if kind in ("replace", "remove", "deep", "string") and places:
            at = draw(st.sampled_from(places))
            inside = holder(raw, at)
            if kind == "remove":
                del inside[at[-1]]
            elif kind == "deep":
                inside[at[-1]], deep = DEEP, draw(st.sampled_from([10, 1000, 100_000]))
            elif kind == "string":
                inside[at[-1]] = draw(st.sampled_from(["\ud800", "\x00\x1b]52;c;cHduZWQ=\x07", "x" * (2**20 + 1),
                                                       "### BEGIN SOLUTION", "<script>alert(1)</script>", ""]))
            else:
                inside[at[-1]] = draw(JSON)
        elif kind == "add":
            dicts = [p for p in [()] + places if isinstance(holder(raw, p + ("",)) if p else raw, dict)]
            at = draw(st.sampled_from(dicts))
            (holder(raw, at + ("",)) if at else raw)[draw(st.text(max_size=8))] = draw(JSON)
        elif cells and kind == "type":
            cell = draw(st.sampled_from(cells))
            if isinstance(cell, dict):
                cell["cell_type"] = draw(st.sampled_from(["code", "markdown", "raw", "heading", 3]))
        elif cells and kind == "duplicate":
            cells.insert(draw(st.integers(0, len(cells))), copy.deepcopy(draw(st.sampled_from(cells))))
        elif cells and kind == "shuffle":
            random.Random(draw(st.integers(0, 2**16))).shuffle(cells)
        elif cells and kind == "same id":
            a, b = draw(st.sampled_from(cells)), draw(st.sampled_from(cells))
            if isinstance(a, dict) and isinstance(b, dict):
                a["id"] = b.get("id")
        elif cells and kind == "graded":
            graded = [c for c in cells if isinstance(c, dict) and isinstance(c.get("metadata"), dict)
                      and isinstance(c["metadata"].get("nbgrader"), dict)]
            if graded:
                draw(st.sampled_from(graded))["metadata"]["nbgrader"].update(draw(st.sampled_from(GRADED_EDITS)))
    text = json.dumps(raw)
    return text.replace(json.dumps(DEEP), "[" * deep + "]" * deep) if deep else text


def check_built(text: str, release_nb) -> NotebookNode | None:
    """The property: refused with a sentence, or built into a valid notebook whose every field but text is the
    release's (the student's own cells: no metadata, outputs or attachments)."""
    try:
        nb, _ = build(text, release_nb)
    except handin.Invalid as refused:
        assert str(refused).strip()
        return None
    nbformat.validate(nb)
    assert nb.metadata == release_nb.metadata and (nb.nbformat, nb.nbformat_minor) == (4, release_nb.nbformat_minor)
    ids = [c.id for c in nb.cells]
    assert len(ids) == len(set(ids))
    released = {c.id: c for c in release_nb.cells}
    assert [c.id for c in nb.cells if c.id in released] == [c.id for c in release_nb.cells]
    for cell in nb.cells:
        if cell.id in released:
            assert cell.metadata == released[cell.id].metadata and cell.cell_type == released[cell.id].cell_type
            if grading(cell).get("grade") and not grading(cell).get("solution"):
                assert cell.source == released[cell.id].source
        else:
            assert cell.metadata == {} and "attachments" not in cell and cell.cell_type in handin.CELL_TYPES
        assert cell.get("outputs", []) == []
    nbformat.reads(nbformat.writes(nb), as_version=4)
    return nb


@cache
def course_right_hand_in() -> tuple[str, NotebookNode]:
    """A right hand-in of one of the course's own notebooks, and its release."""
    released, solved = read(release_path(COURSE_NOTEBOOK)), read(source_path(COURSE_NOTEBOOK))
    answers = {grading(c)["grade_id"]: re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION.*\n?", "", c.source, flags=re.M)
               for c in solved.cells if grading(c).get("solution")}
    nb = copy.deepcopy(released)
    for cell in nb.cells:
        cell.source = answers.get(grading(cell).get("grade_id"), cell.source)
    return nbformat.writes(nb), released


@settings(max_examples=1000, **FUZZ)
@given(data=st.data())
def test_every_mutant_of_a_right_hand_in_is_built_or_refused(data):
    text = data.draw(mutants(write(right())))
    check_built(text, release())


@settings(max_examples=200, **FUZZ)
@given(data=st.data())
def test_every_mutant_of_a_course_notebook_is_built_or_refused(data):
    base, released = course_right_hand_in()
    check_built(data.draw(mutants(base)), released)


@pytest.fixture(scope="module")
def gradebook(tmp_path_factory) -> str:
    return assignment_gradebook(tmp_path_factory.mktemp("template"))


def nbgraders_own_steps(nb, db_url: str) -> None:
    """The steps of `nbgrader autograde` that run before the kernel, which raised on edited metadata."""
    resources = {"nbgrader": {"notebook": ASSIGNMENT, "assignment": ASSIGNMENT, "db_url": db_url}}
    for step in (ClearOutput(), DeduplicateIds(), OverwriteKernelspec(), OverwriteCells(), CheckCellMetadata()):
        nb, resources = step.preprocess(nb, resources)


@settings(max_examples=200, **FUZZ)
@given(data=st.data())
def test_nbgrader_accepts_every_notebook_built(gradebook, data):
    nb = check_built(data.draw(mutants(write(right()))), release())
    if nb is not None:
        nbgraders_own_steps(nb, gradebook)


def test_stock_nbgrader_refuses_the_edits_the_builder_makes_harmless(gradebook):
    """The control: the same edits given to nbgrader's steps as handed in raise, which stopped the class before."""
    raw = json.loads(write(right()))
    test_cell = next(c for c in raw["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == f"{FIRST}_tests")
    test_cell["metadata"]["nbgrader"]["grade"] = False
    with pytest.raises(Exception, match="[Cc]hecksum"):
        nbgraders_own_steps(nbformat.reads(json.dumps(raw), as_version=4), gradebook)
    nbgraders_own_steps(build(json.dumps(raw), release())[0], gradebook)


def generated_class(count: int, seed: int = 0) -> dict[str, str]:
    """`count` mutants of a right hand-in, for a class graded end to end (tests/test_grader_hostile.py)."""
    found = []

    @settings(max_examples=count, **FUZZ)
    @given(data=st.data())
    def collect(data):
        found.append(data.draw(mutants(write(right()))))

    collect()
    return {f"mutant_{k:02d}": text for k, text in enumerate(found[:count])}


def test_an_unedited_notebook_is_its_release():
    built, found = build(write(student_version()), release())
    assert nbformat.writes(built) == nbformat.writes(release())
    assert not found.added


def test_a_cell_added_where_a_lesson_cell_was_deleted_stays_where_the_student_put_it():
    """With the release's ids in the hand-in, a cell without one is the student's own: it is not taken for a lesson
    cell they deleted (which comes back as released), and runs where they put it."""
    nb = right()
    nb.cells = [c for c in nb.cells if c.id != "lesson"]
    nb.cells.insert(1, nbformat.v4.new_code_cell("print('mine, at the top')", id="mine"))
    built, found = build(write(nb), release())
    assert by_id(built)["lesson"].source == by_id(release())["lesson"].source
    assert [c.source for c in built.cells if c.id.startswith("added-")] == ["print('mine, at the top')"]
    assert [c.id for c in built.cells].index("added-0") < [c.id for c in built.cells].index("lesson")
