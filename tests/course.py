"""What the course's tests share: where things are, reading notebooks, running them, running nbgrader."""

import os
import re
import runpy
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from torchcourse.format import HIDDEN, answer_cells, grading, test_cells

ROOT = Path(__file__).resolve().parents[1]
SETUP_CELLS = ("colab-setup", "setup")  # ids of the code cells that open every notebook, in order
BIN = Path(sys.executable).parent
# What a cell must show once run: a figure where it calls plt.* or a plot_* function (other than defining one), a live
# widget where it calls interact() or an *_explorer().
FIGURE = re.compile(r"\bplt\.\w|^(?!\s*def ).*\bplot_\w+\(", re.M)
WIDGET = re.compile(r"\binteract\(|_explorer\(")


def scratch_course(folder: Path, solutions: Path = ROOT / "solutions", assignments: tuple[str, ...] = ()) -> Path:
    """A course folder with these assignments (default: all) of `solutions` and this repository's nbgrader_config.py
    as it ships.

    Its data/ and torchcourse/, which that configuration names, are links to this repository's: the kernels import
    torchcourse from here, where it is installed (the sandbox binds what a link points to).
    """
    for name in assignments or sorted(p.name for p in solutions.iterdir()):
        shutil.copytree(solutions / name, folder / "solutions" / name)
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    for name in ("data", "torchcourse"):
        (folder / name).symlink_to(ROOT / name)
    (folder / "autograder").mkdir()
    return folder


def assignments() -> list[str]:
    """Assignment names: the folders under solutions/, in course order."""
    return sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())


def source_path(assignment: str) -> Path:
    """The one solution notebook of an assignment."""
    (path,) = (ROOT / "solutions" / assignment).glob("*.ipynb")
    return path


def release_path(assignment: str) -> Path:
    """The committed student version of an assignment's notebook."""
    return ROOT / "notebooks" / assignment / source_path(assignment).name


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def answer_ids(nb) -> list[str]:
    """grade_ids of the answer (solution) cells, one per exercise, in order."""
    return [grading(cell)["grade_id"] for cell in answer_cells(nb)]


def graded_cells_of(nb, answer_id: str) -> list[str]:
    """grade_ids of the test cells of one exercise."""
    return [grading(cell)["grade_id"] for cell in test_cells(nb, answer_id)]


def hidden_test_lines(nb) -> tuple[list[str], set[str]]:
    """Non-blank lines inside the hidden-test markers of a source notebook, and the set of lines outside them."""
    hidden, visible = [], set()
    for cell in nb.cells:
        for block in HIDDEN.findall(cell.source):
            hidden += [line.strip() for line in block.splitlines()[1:-1] if line.strip()]  # the markers themselves left out
        visible |= {line.strip() for line in HIDDEN.sub("", cell.source).splitlines() if line.strip()}
    return hidden, visible


def with_answers(nb, answers: dict[str, str]):
    """A copy of notebook `nb` whose answer cells (by grade_id) hold the given code."""
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        if grading(cell).get("grade_id") in answers:
            cell.source = answers[grading(cell)["grade_id"]]
    return nb


def solution_answers(assignment: str) -> dict[str, str]:
    """The reference answer of every exercise, as a student would type it (markers removed)."""
    answers = {}
    for cell in answer_cells(read(source_path(assignment))):
        answers[grading(cell)["grade_id"]] = "\n".join(
            line for line in cell.source.splitlines() if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)
    return answers


def changed(right: str, *changes: tuple[str, str]) -> str:
    """A catalogued wrong answer: the right answer with each (old, new) change made, so that it differs by its flaw
    alone."""
    for old, new in changes:
        assert right.count(old) == 1, f"not exactly once in the right answer: {old!r}"
        right = right.replace(old, new)
    return right


def wrong_answers(assignment: str) -> dict:
    """The assignment's catalogue in tests/wrong_answers/: WRONG and ALSO_RIGHT, {grade_id: {why: code}}."""
    path = ROOT / "tests" / "wrong_answers" / f"{assignment}.py"
    # A missing catalogue is reported by test_wrong_answer_catalogue_covers_every_exercise, not by a collection error.
    return runpy.run_path(str(path)) if path.exists() else {"WRONG": {}, "ALSO_RIGHT": {}}


def execute(path: Path, timeout: int = 120) -> tuple[nbformat.NotebookNode, float]:
    """Run a notebook top to bottom in a fresh kernel, in its own folder as Jupyter does; return it and the seconds taken."""
    nb = read(path)
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb, time.perf_counter() - start


def nbgrader(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the nbgrader command line in a folder (as one user, with `env`); raise with its output if it fails."""
    env = env or dict(os.environ)
    env = dict(env, PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")  # nbgrader calls `alembic`
    result = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=300)
    if result.returncode:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({result.returncode}) in {cwd}:\n"
                           f"{result.stdout}\n{result.stderr}")
    return result


def free_port() -> int:
    """A loopback port free now (another process could take it before the server does; unlikely, and it fails loudly)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
