"""Read a submitted notebook and make it gradable: the right assignment, every graded cell where nbgrader expects it."""

import copy
import json
import re
import types
import warnings

import jsonschema
import nbformat
import nbgrader.nbgraderformat.common

from torchcourse.check import grading

from .collect import MAX_BYTES

CELL_ID = re.compile(r"^[a-zA-Z0-9-_]{1,64}$")
HEADING = re.compile(r"^#{1,6}\s+(.*?)[\s#]*$")
POINTS_NOTE = re.compile(r"\s*\(\d+(\.\d+)?\s+points?\)$")  # "Exercise 3: GELU (4 points)"
NAME_CHARS = 80  # an exercise's name is cut to this many characters
# nbgrader's source markers, which the release strips: a hand-in holding them is a copy of the instructor's sources
SOURCE_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) (SOLUTION|HIDDEN TESTS)", re.M)
MESSAGE_CHARS = 200  # a failure message, in the results and the feedback's summary, is cut to this many characters


class Invalid(Exception):
    """A submission that cannot be graded at all; the message says why, to the student."""


VALIDATORS: dict = {}  # nbgrader's metadata schema (as JSON) -> its validator, checked (schema_checked_once)


def validate_metadata(instance, schema) -> None:
    """`jsonschema.validate(instance, schema)`, as nbgrader calls it, the schema checked once per process."""
    key = json.dumps(schema, sort_keys=True)  # each MetadataValidator reads the schema's file afresh
    if key not in VALIDATORS:
        kind = jsonschema.validators.validator_for(schema)
        kind.check_schema(schema)
        VALIDATORS[key] = kind(schema)
    error = jsonschema.exceptions.best_match(VALIDATORS[key].iter_errors(instance))
    if error is not None:
        raise error


def schema_checked_once() -> None:
    """From now on in this process and those it forks: nbgrader's metadata validator checks its schema once. It calls
    `jsonschema.validate` at each graded cell, which first checks the schema itself against JSON Schema's own (2-3 ms),
    in two steps of a grading: 0.1 s of 07's. Each cell's metadata is validated by jsonschema, as before."""
    shim = types.ModuleType("jsonschema")  # the module as nbgrader's validator sees it, with that one function changed
    shim.__dict__.update(vars(jsonschema), validate=validate_metadata)
    nbgrader.nbgraderformat.common.jsonschema = shim


def grade_id(cell) -> str | None:
    return grading(cell).get("grade_id")


def nbgrader_ids(nb) -> list[str]:
    """grade_ids of the cells nbgrader tracks (answers and tests), in order."""
    return [gid for cell in nb.cells if (gid := grade_id(cell))]


def parse(data: bytes):
    """The notebook in `data`, or Invalid saying, in a student's words, what is wrong with the file."""
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
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        raise Invalid("the file is JSON but not a Jupyter notebook")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nbformat warns about ids and old minor versions; we repair those below
            nb = nbformat.reads(text, as_version=4)
    except Exception as error:  # nbformat raises a zoo of exception types for malformed notebooks
        raise Invalid(f"the file is not a valid Jupyter notebook ({str(error).splitlines()[0][:200]})") from None
    if not nb.cells:
        raise Invalid("the notebook is empty: it has no cells")
    return nb


def check_assignment(nb, assignment: str, release, others: dict[str, set[str]]) -> None:
    """Refuse a notebook of another assignment, or one whose graded cells were all lost."""
    ours, theirs = set(nbgrader_ids(release)), set(nbgrader_ids(nb))
    if ours & theirs:
        return
    for other, ids in others.items():
        if ids & theirs:
            raise Invalid(f"this is the notebook of {other}, not of {assignment}: was the wrong file handed in?")
    raise Invalid(f"none of {assignment}'s exercise cells is in this notebook: was it re-created from scratch, "
                  "or its cells copied without their metadata?")


def holds_sources(nb) -> bool:
    """Whether a hand-in holds solution or hidden-test markers: the instructor's source notebook (`nbgrader collect`,
    run by the instructor, follows a link a student put in the exchange), not a student's work."""
    return any(cell.cell_type == "code" and SOURCE_MARKER.search(cell.source) for cell in nb.cells)


def normalise(nb, release) -> None:
    """What Colab, old Jupyter versions and editors change: the format's minor version, cell ids, the kernel."""
    nb.nbformat, nb.nbformat_minor = 4, max(nb.get("nbformat_minor", 0), 5)
    seen = set()
    for i, cell in enumerate(nb.cells):
        cid = cell.get("id") or cell.get("metadata", {}).get("id", "")  # Colab keeps its ids in the metadata
        if not isinstance(cid, str) or not CELL_ID.match(cid) or cid in seen:
            cid = f"cell-{i}"
        cell["id"] = cid
        seen.add(cid)
    nb.metadata["kernelspec"] = copy.deepcopy(release.metadata.get("kernelspec", {}))


def deduplicate(nb) -> list[str]:
    """Cells copied with their grading metadata: the last copy stays graded (as in nbgrader), the others become plain.

    nbgrader's own DeduplicateIds leaves an empty metadata dict behind, which then fails its schema check and
    the whole submission with it.
    """
    seen, twice = set(), []
    for cell in reversed(nb.cells):
        gid = grade_id(cell)
        if gid in seen:
            del cell.metadata["nbgrader"]
            twice.append(gid)
        elif gid:
            seen.add(gid)
    return sorted(set(twice))


def restore_missing_cells(nb, release) -> list[str]:
    """Put back, from the student version, every answer or test cell the submission lost; return their grade_ids.

    A lost test cell comes back as the instructor wrote it; a lost answer cell comes back unanswered, so that
    exercise scores 0 and the others are graded normally. Each goes right after the cell that precedes it in
    the assignment.
    """
    present = set(nbgrader_ids(nb))
    tracked = [cell for cell in release.cells if grade_id(cell)]
    restored = []
    for k, cell in enumerate(tracked):
        gid = grade_id(cell)
        if gid in present:
            continue
        positions = {grade_id(c): i for i, c in enumerate(nb.cells) if grade_id(c)}
        before = [positions[grade_id(c)] + 1 for c in tracked[:k] if grade_id(c) in positions]
        after = [positions[grade_id(c)] for c in tracked[k + 1:] if grade_id(c) in positions]
        at = max(before) if before else min(after, default=len(nb.cells))
        back = copy.deepcopy(cell)
        back["id"] = gid if gid not in {c.get("id") for c in nb.cells} else f"{gid}-restored"
        nb.cells.insert(at, back)
        present.add(gid)
        restored.append(gid)
    return restored


def heading_of(markdown: str) -> str:
    """A markdown cell's last heading (else its first line), as plain text for a table or a report."""
    lines = [line.strip() for line in markdown.splitlines() if line.strip()]
    headings = [m.group(1) for line in lines if (m := HEADING.match(line))]
    text = headings[-1] if headings else lines[0] if lines else ""
    text = POINTS_NOTE.sub("", re.sub(r"[`*]", "", text))  # the points are shown beside the name, from the grades
    return text if len(text) <= NAME_CHARS else text[:NAME_CHARS - 1] + "…"


def exercise_name(nb, answer) -> str:
    """An exercise's name for people: its answer cell's grade_id and the markdown cell nearest above that cell
    ("ex3_gelu — Exercise 3: GELU as an autograd.Function"); the grade_id alone where there is none."""
    at = next(i for i, cell in enumerate(nb.cells) if cell is answer)
    for cell in reversed(nb.cells[:at]):
        if grading(cell).get("solution"):
            break  # the text above an earlier exercise names that one
        if cell.cell_type == "markdown" and (text := heading_of(cell.source)):
            return f"{grade_id(answer)} — {text}"
    return grade_id(answer)


def first_failure(cells) -> str:
    """The first error in these cells' outputs as one line ("AssertionError: ..."), cut to MESSAGE_CHARS; "" if none."""
    for output in (o for cell in cells for o in cell.get("outputs", [])):
        if output.get("output_type") == "error":
            line = (f"{output.get('ename', 'Error')}: {output.get('evalue', '')}".strip().splitlines() or [""])[0]
            return line if len(line) <= MESSAGE_CHARS else line[:MESSAGE_CHARS - 1] + "…"
    return ""
