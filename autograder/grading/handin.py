"""A hand-in read as source text alone, and the notebook a grading runs: the assignment's release with those sources.

A notebook's JSON is the student's to write: every field of it, nbgrader's metadata included, can say anything. So the
grader takes from it only the text of the cells a student may change, and builds the notebook to grade from the
release (its cells, order, ids, nbgrader metadata, kernelspec and notebook metadata), so that nbgrader's steps never
read a field a student wrote:
  - an answer's source, matched by its grade_id (the last copy counts, as in nbgrader; earlier copies stay as cells
    of the student's own), whatever its cell type (nbgrader's OverwriteCells keeps it so too);
  - a lesson cell's source, matched by its cell id, else, for a hand-in that holds none of the release's ids (Colab
    keeps ids of its own), by its text and its place among the lesson cells (difflib's alignment of the two);
  - code and markdown cells the student added, without metadata, outputs or attachments, after the cell they
    followed in the hand-in.
Test cells are the instructor's, whatever the hand-in holds: the text the gradebook keeps (hidden tests in it), where
the grading gives it (`instructor_tests`), so that nbgrader's OverwriteCells, which puts that text back into a cell
that differs, finds nothing to change and its warnings in a log mean that something was.
Outputs are never carried: the grading makes its own. `Invalid` says, in a student's words, why a file cannot be read.
"""

import copy
import difflib
import json
import re
from collections import Counter
from dataclasses import dataclass, field

import nbformat
from nbgrader.api import Gradebook

from torchcourse.format import grading

MAX_BYTES = 50 * 2**20  # a notebook larger than this is not a course notebook
MAX_SOURCE_CHARS = 2**20  # a cell's text: a course answer is tens of lines
MAX_CELLS = 5000  # cells in a hand-in: a course notebook has under a hundred
# nbgrader's source markers, which the release strips: a hand-in holding them is a copy of the instructor's sources
SOURCE_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) (SOLUTION|HIDDEN TESTS)", re.M)
CELL_TYPES = ("code", "markdown")  # the cells a student's text is taken from (raw cells are not run)


class Invalid(Exception):
    """A hand-in that cannot be graded at all; the message says why, to the student."""


@dataclass(kw_only=True)
class Sources:
    """What a grading takes from a hand-in: text, keyed by the release cell it belongs to."""
    answers: dict[str, str] = field(default_factory=dict)  # answer grade_id -> source
    lessons: dict[str, str] = field(default_factory=dict)  # release lesson cell id -> source
    added: list[tuple[str | None, str, str]] = field(default_factory=list)  # (release cell id it follows, type, text)
    grade_ids: set[str] = field(default_factory=set)  # every grade_id the hand-in names (which assignment is it?)
    repeated: set[str] = field(default_factory=set)  # graded cells the hand-in holds more than once
    markers: bool = False  # solution or hidden-test markers in its code: the instructor's sources
    dropped: Counter = field(default_factory=Counter)  # what of the hand-in was not used, counted by kind


def load(data: bytes) -> list:
    """The hand-in's cells as plain JSON, or Invalid saying in a student's words what is wrong with the file."""
    if len(data) > MAX_BYTES:
        raise Invalid(f"the file is over {MAX_BYTES >> 20} MiB: that is not this course's notebook")
    if not data.strip():
        raise Invalid("the file is empty")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise Invalid("the file is not a notebook: it is not even text") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise Invalid(f"the file is not a complete notebook: its JSON is broken at line {error.lineno} "
                      "(was it cut off while saving or uploading?)") from None
    except (ValueError, RecursionError):  # numbers too long to read; nesting deeper than the parser's stack
        raise Invalid("the file is JSON that no notebook holds (nested too deep, or numbers too long)") from None
    cells = raw.get("cells") if isinstance(raw, dict) else None
    if not isinstance(cells, list):
        raise Invalid("the file is JSON but not a Jupyter notebook (it has no list of cells)")
    if not cells:
        raise Invalid("the notebook is empty: it has no cells")
    if len(cells) > MAX_CELLS:
        raise Invalid(f"the notebook has {len(cells)} cells, over the {MAX_CELLS} a course notebook may have")
    return cells


def text_of(value) -> str | None:
    """A cell's source as nbformat stores it (a string, or a list of strings), as valid text; None if it is neither.
    A lone surrogate (JSON allows "\\ud800") cannot be written as UTF-8: it becomes U+FFFD."""
    if isinstance(value, list) and all(isinstance(part, str) for part in value):
        value = "".join(value)
    if not isinstance(value, str):
        return None
    if re.search("[\ud800-\udfff]", value):
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


def field_of(value, *keys):
    """value[k1][k2]... through dicts only, else None: a hand-in's JSON may have any shape."""
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def cell_id(cell) -> str | None:
    """The cell's id: nbformat's, else the one Colab keeps in the metadata."""
    for found in (field_of(cell, "id"), field_of(cell, "metadata", "id")):
        if isinstance(found, str) and found:
            return found
    return None


def is_lesson(cell) -> bool:
    """A release cell that is neither an answer nor a test (nbgrader tracks those by grade_id)."""
    return not (grading(cell).get("solution") or grading(cell).get("grade"))


def count_dropped(cell, dropped: Counter) -> None:
    """What of a hand-in's cell is not used, by kind: the grading keeps text and nothing else."""
    if not isinstance(cell, dict):
        dropped["entries that are not cells"] += 1
        return
    if field_of(cell, "cell_type") not in CELL_TYPES:
        dropped["raw or unknown cells"] += 1
    if field_of(cell, "outputs"):
        dropped["outputs"] += 1
    if field_of(cell, "attachments"):
        dropped["attachments"] += 1
    if any(key not in ("id", "tags") for key in (field_of(cell, "metadata") or {})):
        dropped["cell metadata"] += 1


def sources(cells: list, release) -> Sources:
    """The text a grading takes from the hand-in's `cells` (plain JSON, as `load` returns them)."""
    answers = {grading(c)["grade_id"] for c in release.cells if grading(c).get("solution")}
    tests = {grading(c)["grade_id"] for c in release.cells if grading(c).get("grade") and not grading(c).get("solution")}
    lessons = {c.id: c for c in release.cells if is_lesson(c)}
    found, seen, last = Sources(), Counter(), None  # last: the release cell the hand-in's next cells follow
    answered_after: dict[str, str | None] = {}  # answer grade_id -> the release cell its copy taken so far followed
    unplaced = []  # (index in `found.added`, cell type, text) of cells that may be lesson cells without their ids
    for cell in cells:
        count_dropped(cell, found.dropped)
        kind, text = field_of(cell, "cell_type"), text_of(field_of(cell, "source"))
        gid = field_of(cell, "metadata", "nbgrader", "grade_id")
        gid = gid if isinstance(gid, str) else None
        if gid:
            found.grade_ids.add(gid)
            seen[gid] += 1
        if kind not in CELL_TYPES or text is None:
            continue
        if len(text) > MAX_SOURCE_CHARS:
            raise Invalid(f"a cell holds {len(text):,} characters, over the {MAX_SOURCE_CHARS:,} a course cell may")
        found.markers = found.markers or (kind == "code" and bool(SOURCE_MARKER.search(text)))
        if gid in tests:  # the instructor's text, whatever the hand-in says
            last = gid
            continue
        if gid in answers:
            if gid in found.answers:  # an earlier copy: a cell of the student's own, as nbgrader's DeduplicateIds
                found.added.append((answered_after[gid], "code", found.answers[gid]))
            found.answers[gid], answered_after[gid], last = text, last, gid
            continue
        cid = cell_id(cell)
        if cid in lessons and cid not in found.lessons and lessons[cid].cell_type == kind:
            found.lessons[cid], last = text, cid
            continue
        if cid not in lessons:
            unplaced.append((len(found.added), kind, text))
        found.added.append((last, kind, text))
    found.repeated = {gid for gid, n in seen.items() if n > 1 and (gid in answers or gid in tests)}
    if not found.lessons:  # none found by its id: the ids were lost (where some were found, a cell without one is new)
        place_lessons(found, unplaced, [c for c in release.cells if is_lesson(c)])
    return found


def place_lessons(found: Sources, unplaced: list, missing: list) -> None:
    """Lesson cells that lost their ids (Colab keeps ids of its own) found among the cells taken as added: those whose
    type and text are a released lesson cell's, and, between two such, those of the same types in the same number
    (edited ones), in order: difflib's alignment of the two runs of cells."""
    ours = [(kind, text) for _, kind, text in unplaced]
    theirs = [(c.cell_type, c.source) for c in missing]
    matcher = difflib.SequenceMatcher(a=ours, b=theirs, autojunk=False)
    taken = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        pairs = list(zip(range(i1, i2), range(j1, j2)))
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1
                              and all(ours[i][0] == theirs[j][0] for i, j in pairs)):
            taken += pairs
    for i, j in taken:
        found.lessons[missing[j].id] = ours[i][1]
    gone = {unplaced[i][0] for i, _ in taken}
    found.added = [cell for k, cell in enumerate(found.added) if k not in gone]


def check(found: Sources, assignment: str, release, others: dict[str, set[str]]) -> None:
    """Invalid for a notebook of another assignment, one whose graded cells were all lost, or the instructor's."""
    ours = {gid for c in release.cells if (gid := grading(c).get("grade_id"))}
    if not found.grade_ids & ours:
        for other, ids in others.items():
            if ids & found.grade_ids:
                raise Invalid(f"this is the notebook of {other}, not of {assignment}: was the wrong file handed in?")
        raise Invalid(f"none of {assignment}'s exercise cells is in this notebook: was it re-created from scratch, "
                      "or its cells copied without their metadata?")
    if found.markers:
        raise Invalid("it holds the assignment's solution or hidden-test markers: a copy of the instructor's sources, "
                      "not a hand-in; a human should look")


def instructor_tests(db_url: str, assignment: str, notebook: str) -> dict[str, str]:
    """grade_id -> text of each test cell as the gradebook keeps it (hidden tests in it): what OverwriteCells compares
    a graded notebook's locked cells with. `notebook`: the notebook's name without .ipynb."""
    with Gradebook(db_url) as gb:
        nb = gb.find_notebook(notebook, assignment)
        tests = {cell.name for cell in nb.grade_cells} - {cell.name for cell in nb.solution_cells}
        return {cell.name: cell.source for cell in nb.source_cells if cell.name in tests}


def build(found: Sources, release, tests: dict[str, str] | None = None):
    """The notebook to grade: the release, each cell with the hand-in's text where it may have changed, its test cells
    with the instructor's `tests` (grade_id -> text, from `instructor_tests`) where given, and the student's own cells
    after the cell they followed (before the first, those that came first)."""
    tests = tests or {}
    nb = copy.deepcopy(release)
    after: dict[str | None, list] = {}
    for k, (anchor, kind, text) in enumerate(found.added):
        new = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
        after.setdefault(anchor, []).append(new(text, id=f"added-{k}"))
    cells = list(after.get(None, []))
    for cell in nb.cells:
        gid = grading(cell).get("grade_id")
        if gid in found.answers:
            cell.source = found.answers[gid]
        elif gid in tests:
            cell.source = tests[gid]
        elif cell.id in found.lessons:
            cell.source = found.lessons[cell.id]
        cells.append(cell)
        cells += after.get(gid or cell.id, [])
    ids = {c.id for c in release.cells}
    for cell in cells:  # an added cell's id never collides with the release's
        while cell.id in ids and cell.id.startswith("added-"):
            cell.id += "-"
    nb.cells = cells
    return nb


def notes(found: Sources, release) -> list[str]:
    """What a student should know of how their hand-in was read: graded cells put back or held twice."""
    missing = [gid for c in release.cells if (gid := grading(c).get("grade_id"))
               and gid not in (found.answers if grading(c).get("solution") else found.grade_ids)]
    said = []
    if missing:
        said.append(f"{', '.join(missing)} {'was' if len(missing) == 1 else 'were'} missing and put back from the "
                    "assignment (an answer put back scores 0)")
    if found.repeated:
        said.append(f"{', '.join(sorted(found.repeated))} appeared more than once; the last copy of an answer was "
                    "graded, and test cells as the assignment has them")
    return said


def dropped(found: Sources) -> str:
    """For the row's log: what of the hand-in the grading did not use."""
    kinds = ", ".join(f"{kind} ({n} cell{'s' if n > 1 else ''})" for kind, n in sorted(found.dropped.items()))
    return (f"read from the hand-in: the text of {len(found.answers)} answers, {len(found.lessons)} lesson cells and "
            f"{len(found.added)} cells of the student's own; not used: the notebook's metadata"
            + (f", {kinds}" if kinds else ""))


def answers(data: bytes, release) -> dict[str, str]:
    """grade_id -> answer text of a hand-in (similar answers): as a grading reads it; {} for a file it cannot read."""
    try:
        return sources(load(data), release).answers
    except Invalid:
        return {}
