"""The committed notebooks are clean sources: no outputs, stable ids, well-formed nbgrader cells, and lesson cells
marked skip-in-grading only where grading needs nothing from them."""

import ast
import re
from functools import cache

import nbformat
import pytest
from nbclient import NotebookClient

from course import (HIDDEN, ROOT, SETUP_CELLS, answer_ids, assignments, grading, read, release_path, source_path,
                    graded_cells_of, wrong_answers)
from autograder.grading.lessons import names, skippable, tagged
from torchcourse.format import SKIP_TAG

# A graded test cell opens with a one-line docstring; a hidden-test cell's ends with ';', since its released cell is
# that docstring alone, which IPython would show as Out[n] (and nbgrader's Validate read as a partial score).
DOCSTRING = r'"""[^\n]+"""'
QUIET_DOCSTRING = re.compile(DOCSTRING + ";\n")
ALL_NOTEBOOKS = sorted((ROOT / "solutions").rglob("*.ipynb")) + sorted((ROOT / "notebooks").rglob("*.ipynb"))


def test_course_layout():
    assert assignments(), "no assignment under solutions/"
    assert sorted(p.name for p in (ROOT / "notebooks").iterdir()) == assignments()
    for assignment in assignments():
        assert re.fullmatch(r"\d\d_[a-z0-9_]+", assignment), assignment
        notebooks = list((ROOT / "solutions" / assignment).glob("*.ipynb"))
        assert len(notebooks) == 1 and notebooks[0].name.startswith(assignment[:3]), notebooks


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_without_outputs_and_with_stable_ids(path):
    nb = read(path)
    assert nb.nbformat == 4 and nb.nbformat_minor >= 5, "cell ids need nbformat 4.5"
    ids = [cell.get("id") for cell in nb.cells]
    assert all(ids) and len(set(ids)) == len(ids), "every cell needs its own id"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"cell {cell.id} carries outputs"
        if grading(cell):
            assert cell.id == grading(cell)["grade_id"], "graded cells are named by their grade_id"


@pytest.mark.parametrize("assignment", assignments())
def test_every_exercise_has_visible_and_hidden_tests(assignment):
    nb = read(source_path(assignment))
    cells = {grading(c)["grade_id"]: c for c in nb.cells if grading(c)}
    assert len(cells) == sum(1 for c in nb.cells if grading(c)), "grade_ids must be unique"
    exercises = answer_ids(nb)
    assert exercises
    for answer_id in exercises:
        tests = [cells[t] for t in graded_cells_of(nb, answer_id)]
        hidden = [t for t in tests if "### BEGIN HIDDEN TESTS" in t.source]
        assert hidden and len(hidden) < len(tests), f"{answer_id} needs visible and hidden test cells"
    for grade_id, cell in cells.items():
        if grading(cell).get("grade"):
            assert grading(cell)["points"] > 0 and grading(cell)["locked"], grade_id
            assert any(grade_id in graded_cells_of(nb, a) for a in exercises), f"{grade_id} belongs to no exercise"
            assert re.match(DOCSTRING, cell.source), f"{grade_id} must open with a one-line docstring"
            if HIDDEN.search(cell.source):
                assert QUIET_DOCSTRING.match(cell.source), f"{grade_id}'s docstring must end with ';'"


@cache
def released_hidden_test_cells_run() -> dict[str, list]:
    """grade_id -> outputs of every released hidden-test cell (nbgrader leaves its docstring alone), run in a kernel
    as a student runs them in JupyterLab: one notebook holding them all, one kernel."""
    nb = nbformat.v4.new_notebook()
    for assignment in assignments():
        hidden = {grading(c)["grade_id"] for c in read(source_path(assignment)).cells if HIDDEN.search(c.source)}
        nb.cells += [c for c in read(release_path(assignment)).cells if grading(c).get("grade_id") in hidden]
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    return {grading(c)["grade_id"]: c.outputs for c in nb.cells}


@pytest.mark.parametrize("assignment", assignments())
def test_a_released_hidden_test_cell_runs_to_no_output(assignment):
    """Running a hidden-test cell of notebooks/ shows nothing: no Out[n] in JupyterLab, and no result that nbgrader's
    Validate tries to read as a partial score ("cannot be converted to a float")."""
    ran = released_hidden_test_cells_run()
    hidden = [grading(c)["grade_id"] for c in read(source_path(assignment)).cells if HIDDEN.search(c.source)]
    assert hidden and set(hidden) <= set(ran), "notebooks/ lacks hidden-test cells: run make release"
    shown = {gid: ran[gid] for gid in hidden if ran[gid]}
    assert not shown, f"running these hidden-test cells shows something: {shown}"


@pytest.mark.parametrize("assignment", assignments())
def test_wrong_answer_catalogue_covers_every_exercise(assignment):
    exercises = answer_ids(read(source_path(assignment)))
    catalogue = wrong_answers(assignment)
    for answer_id in exercises:
        assert len(catalogue["WRONG"].get(answer_id, {})) >= 2, f"{answer_id} needs at least two wrong answers"
    unknown = (set(catalogue["WRONG"]) | set(catalogue["ALSO_RIGHT"])) - set(exercises)
    assert not unknown, f"catalogue names no such exercise: {unknown}"


@pytest.mark.parametrize("assignment", assignments())
def test_hidden_checks_say_what_failed(assignment):
    # Students' feedback hides the hidden code, so a bare AssertionError would tell them nothing.
    silent = []
    for cell in read(source_path(assignment)).cells:
        for block in HIDDEN.findall(cell.source):
            for node in ast.walk(ast.parse(block)):
                if isinstance(node, ast.Assert) and node.msg is None:
                    silent.append(f"{cell.id}: {ast.unparse(node)[:80]}")
                if (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("assert_close")
                        and not any(k.arg == "msg" for k in node.keywords)):
                    silent.append(f"{cell.id}: {ast.unparse(node)[:80]}")
    assert not silent, f"give these hidden checks a message (msg= for assert_close): {silent}"


def skip_marking_problems(nb, assignment: str) -> list[str]:
    """What is wrong in a notebook's marking of lesson cells with SKIP_TAG ([] if nothing).

    A tagged cell must be a lesson code cell, and the grader must be able to skip it in the solution as handed in
    (autograder/lessons.py): nothing it defines may be read by a later cell that runs (a test, above all). Side
    effects (seeds, files, settings) are not seen here: tests/test_grading.py grades every exercise with the tagged
    cells skipped.
    """
    problems = [] if any(tagged(cell) for cell in nb.cells) else [f"{assignment}: no cell is tagged {SKIP_TAG!r}"]
    marked = [cell for cell in nb.cells if SKIP_TAG in cell.get("metadata", {}).get("tags", [])]
    problems += [f"{assignment}: cell {cell.id} is tagged {SKIP_TAG!r} but is not a lesson code cell" for cell in marked
                 if cell.cell_type != "code" or grading(cell) or cell.id in SETUP_CELLS]
    code, skipped = [cell for cell in nb.cells if cell.cell_type == "code"], skippable(nb, nb)
    for i, cell in enumerate(code):
        if tagged(cell) and not grading(cell) and cell.id not in skipped:
            read = [f"the cell {later.id} below reads {', '.join(sorted(names(cell.source)[2] & reads))}"
                    for later in code[i + 1:] if later.id not in skipped
                    and (reads := names(later.source)[0]) is not None and names(cell.source)[2] & reads]
            problems.append(f"{assignment}: cell {cell.id} is tagged {SKIP_TAG!r} but grading must run it: " +
                            (read[0] if read else "a cell below may read any name (exec, eval or globals())"))
    return problems


@pytest.mark.parametrize("assignment", assignments())
def test_cells_skipped_in_grading_define_nothing_graded_cells_use(assignment):
    problems = skip_marking_problems(read(source_path(assignment)), assignment)
    assert not problems, "\n".join(problems)


LESSON_CELL_LINES = 40  # the developers' guide: cells under 40 lines


@pytest.mark.parametrize("assignment", assignments())
def test_lesson_and_answer_cells_are_under_40_lines(assignment):
    """What a student reads and writes stays short: lesson cells and answers (the graded test cells are not held to it
    yet: several of 04-08's run to 50-90 lines)."""
    long = {cell.id: len(cell.source.splitlines()) for cell in read(source_path(assignment)).cells
            if cell.cell_type == "code" and not grading(cell).get("grade")
            and len(cell.source.splitlines()) >= LESSON_CELL_LINES}
    assert not long, f"code cells of {LESSON_CELL_LINES} lines or more (split them where a result is worth seeing): {long}"


def reads_of_other_tests(nb) -> dict[str, list[str]]:
    """grade_id -> the global names a test cell reads, as a grading runs it (judge.as_graded), that only other test
    cells bind: its helpers, references and spies, which the answer a test calls could bind to something else."""
    from autograder.grading.judge import as_graded
    from autograder.grading.notebook import is_test

    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    by_the_notebook = set().union(*(names(cell.source)[2] for cell in code if not is_test(cell)))
    by_tests, found = set(), {}
    for cell in code:
        if not is_test(cell):
            continue
        reads, _, binds = names(as_graded(cell.source))  # (a function of the cell may read what the cell binds later)
        carried = sorted((set(reads) if reads is not None else set()) & by_tests - by_the_notebook - binds)
        if carried:
            found[grading(cell)["grade_id"]] = carried
        by_tests |= names(cell.source)[2]
    return found


@pytest.mark.parametrize("assignment", assignments())
def test_each_test_cell_brings_its_own_helpers(assignment):
    """A test imports what it shares with another (torchcourse.testing, torchcourse.checkpoint_helpers) or defines
    it itself: never reads a global another test cell bound, which an answer could have bound again in between."""
    assert not reads_of_other_tests(read(source_path(assignment)))


def test_the_rule_sees_a_helper_read_from_another_test_cell():
    """The rule above, on a notebook whose hidden test reads the visible one's refusal (as 02's did)."""
    from nbformat.v4 import new_code_cell, new_notebook

    def test(gid, source):
        return new_code_cell(source, metadata={"nbgrader": {"grade": True, "grade_id": gid, "points": 1,
                                                            "solution": False, "locked": True}})
    nb = new_notebook(cells=[new_code_cell("import torch\n_x = 1"),
                             test("t1", "_NO_AUTOGRAD = ('why', (torch.autograd, 'grad'))\nassert _x"),
                             test("t2", "def _want_g(): return _NO_AUTOGRAD\nexpect('g', f(), _want_g())\n"
                                        "with refused(*_NO_AUTOGRAD):\n    pass")])
    assert reads_of_other_tests(nb) == {"t2": ["_NO_AUTOGRAD"]}
    nb.cells[2].source = "expect('g', f(), _NO_AUTOGRAD)"  # read in an expected value only: a grading removes it
    assert reads_of_other_tests(nb) == {}


@pytest.mark.parametrize("assignment", assignments())
def test_each_verdict_of_a_test_is_a_value_it_sends(assignment):
    """A test cell asserts nothing in the kernel: what it checks (gradcheck's verdict too) it sends with `expect`, and
    the grader judges it, so that a kernel that hides a cell's error or forges its reply cannot turn a failure into a
    pass; a cell whose values never arrive scores 0."""
    from autograder.grading.judge import wants
    from autograder.grading.notebook import is_test

    tests = [cell for cell in read(source_path(assignment)).cells if cell.cell_type == "code" and is_test(cell)]
    asserting = [grading(c)["grade_id"] for c in tests if any(isinstance(n, ast.Assert) for n in ast.walk(ast.parse(c.source)))]
    assert not asserting, f"test cells that assert in the kernel (send the value with expect instead): {asserting}"
    assert all(wants(cell.source) for cell in tests), "a test cell that sends no value"
