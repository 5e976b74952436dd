"""Hand-ins for the grader's own tests, on its small course (tests/grader_course/: 01_basics and 02_other without
torch, 03_values with torch and `expect`).

Every grading a test runs gets a HOME and a temporary folder of its own (`grade`), so that nothing a hostile hand-in
tries can reach this machine's own kernels or other runs, even where the sandbox failed.
"""

import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from functools import cache
from pathlib import Path

import nbformat

import course
from course import HIDDEN, ROOT, grading, nbgrader

COURSE = ROOT / "tests" / "grader_course"
ASSIGNMENT, OTHER = "01_basics", "02_other"
NOTEBOOK = f"{ASSIGNMENT}.ipynb"
FIRST, SECOND = "ex1_mean", "ex2_clip"  # the answer cells; each exercise's tests are "<answer>_tests/_hidden"


# Notebooks that break a grading in every way the grader must survive (tests/classroom.py uses them too).
STUBBORN_LOOP = """import time
while True:  # ignores the grader's interrupt
    try:
        time.sleep(0.05)
    except KeyboardInterrupt:
        pass"""

CHILDREN = """import os, subprocess
subprocess.Popen(["sleep", "613"])
if os.fork() == 0:  # a daemon: forks twice and leaves the session, so it is nobody's child
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "614"])
    os._exit(0)
"""

MEMORY_HOG = """def hoard():
    chunks = []
    while True:
        chunks.append(bytearray(50 * 2**20))
hoard()"""

NOISY = """import sys, warnings
print("debugging output on stderr", file=sys.stderr)
warnings.warn("a warning outside the tests")
"""

WIDGETS = """import ipywidgets
from IPython.display import display
ipywidgets.interact(lambda n: n * n, n=(0, 10))
display(ipywidgets.IntSlider(value=3))
"""


def source(assignment: str = ASSIGNMENT):
    return nbformat.read(COURSE / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)


def scratch_course(folder: Path) -> Path:
    """A course folder with the grader's test assignments and this repository's nbgrader settings."""
    return course.scratch_course(folder, COURSE / "solutions")


@cache
def release_text(assignment: str = ASSIGNMENT) -> str:
    """The student version, as `nbgrader generate_assignment` makes it (once per test process)."""
    folder = Path(tempfile.mkdtemp(prefix="grader-release-"))
    course = scratch_course(folder / "course")
    nbgrader("generate_assignment", assignment, "--force", "--no-db", cwd=course)
    text = (course / "notebooks" / assignment / f"{assignment}.ipynb").read_text()
    shutil.rmtree(folder, ignore_errors=True)
    return text


def release(assignment: str = ASSIGNMENT):
    return nbformat.reads(release_text(assignment), as_version=4)


def right_answers(assignment: str = ASSIGNMENT) -> dict[str, str]:
    """The reference answer of each exercise, as a student would type it (markers removed)."""
    return {grading(c)["grade_id"]: "\n".join(line for line in c.source.splitlines() if "### " not in line)
            for c in source(assignment).cells if grading(c).get("solution")}


def handin(answers: dict[str, str] | None = None, added: list[str] = (), lesson: str | None = None,
           assignment: str = ASSIGNMENT):
    """The student version with these answers (the others unanswered), cells added at the end, the lesson cell edited."""
    nb = release(assignment)
    for cell in nb.cells:
        gid = grading(cell).get("grade_id")
        if gid in (answers or {}):
            cell.source = answers[gid]
        if cell.id == "lesson" and lesson is not None:
            cell.source = lesson
    nb.cells += [nbformat.v4.new_code_cell(code, id=f"added-{k}") for k, code in enumerate(added)]
    return nb


def right(**changed: str):
    """Right answers, but for those given."""
    return handin({**right_answers(), **changed})


def write(nb) -> str:
    return nbformat.writes(nb)


def hidden_lines(assignment: str = ASSIGNMENT, shortest: int = 20) -> list[str]:
    """The test's own list of hidden lines worth finding: those inside hidden regions, long enough to recognise."""
    lines = [line.strip() for cell in source(assignment).cells for block in HIDDEN.findall(cell.source)
             for line in block.splitlines()[1:-1]]
    return [line for line in lines if len(line) >= shortest]


def html_text(path: Path) -> str:
    """What a reader of an HTML page sees: tags stripped, entities decoded, whitespace collapsed."""
    page = path.read_text(errors="replace")
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S | re.I)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def leaked(text: str, lines: list[str]) -> list[str]:
    """The hidden lines found in `text`, whitespace differences ignored."""
    flat = re.sub(r"\s+", " ", text)
    return [line for line in lines if re.sub(r"\s+", " ", line) in flat]


def colab(nb) -> str:
    """The notebook as Colab saves it: format 4.0, no cell ids but its own in the metadata, its own metadata."""
    raw = json.loads(nbformat.writes(nb))
    raw["nbformat_minor"] = 0
    raw["metadata"] = {"colab": {"provenance": [], "name": "submission.ipynb"}, "accelerator": "GPU",
                       "kernelspec": {"name": "python3", "display_name": "Python 3"}, "language_info": {"name": "python"}}
    for i, cell in enumerate(raw["cells"]):
        cell.pop("id", None)
        cell["metadata"] = {k: v for k, v in cell["metadata"].items() if k not in ("deletable", "editable")}
        cell["metadata"]["id"] = hashlib.md5(str(i).encode()).hexdigest()[:12]
        if cell["cell_type"] == "code":
            cell["metadata"]["colab"] = {"base_uri": "https://localhost:8080/"}
            cell["execution_count"] = i + 1
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ran in Colab\n"]}]
    return json.dumps(raw, indent=2)


def replace_cell(nb, grade_id: str, source: str, duplicate_first: bool = False):
    """A copy of nb whose cell `grade_id` holds `source` (or, with duplicate_first, gets an edited twin before it)."""
    nb = nbformat.from_dict(nb)
    i = next(i for i, c in enumerate(nb.cells) if grading(c).get("grade_id") == grade_id)
    if duplicate_first:
        twin = nbformat.from_dict(nb.cells[i])
        twin.id = f"{nb.cells[i].id}-twin"
        twin.source = source
        nb.cells.insert(i, twin)
    else:
        nb.cells[i].source = source
    return nb


def without_cells(nb, grade_ids: set[str]):
    nb = nbformat.from_dict(nb)
    nb.cells = [c for c in nb.cells if grading(c).get("grade_id") not in grade_ids]
    return nb


def write_folder(folder: Path, class_: dict[str, str | None], notebook: str = NOTEBOOK) -> Path:
    """The folder layout: one sub-folder per student holding the notebook (or nothing)."""
    for student, text in class_.items():
        (folder / student).mkdir(parents=True)
        if text is not None:
            (folder / student / notebook).write_text(text)
    return folder


def write_zip(path: Path, class_: dict[str, str], notebook: str = NOTEBOOK) -> Path:
    """As Canvas exports: one flat zip, the student's name and ids in each file name."""
    with zipfile.ZipFile(path, "w") as z:
        for k, (student, text) in enumerate(class_.items()):
            z.writestr(f"{student}_{1000 + k}_{5000 + k}_{notebook}", text)
    return path


def private_env(folder: Path, **extra: str) -> dict[str, str]:
    """The environment of a grading a test runs: a HOME and temporary folder of its own."""
    for name in ("home", "tmp"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    return dict(os.environ, HOME=str(folder / "home"), TMPDIR=str(folder / "tmp"), **extra)


def grade(course: Path, submissions: Path | None, *args: str, env: dict | None = None, check: bool = True,
          timeout: int = 900, assignment: str = ASSIGNMENT) -> subprocess.CompletedProcess:
    """`python -m autograder grade` as an instructor runs it (from the repository), on a scratch course, with the
    course's time limit unless `args` set one (a class with an endless loop does, to wait less for it). Without
    `submissions`, it grades what `nbgrader collect` put in the course."""
    env = env or private_env(course.parent / f"env-{course.name}")
    given = [str(submissions)] if submissions else []
    result = subprocess.run([sys.executable, "-m", "autograder", "grade", assignment, *given,
                             "--jobs", "2", "--course", str(course), *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    if check:
        assert result.returncode == 0, f"the grader failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result


def rows_of(out: Path) -> dict[str, dict]:
    import csv
    with open(out / "grades.csv") as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


def exercise_points(row: dict, exercise: str, assignment: str = ASSIGNMENT) -> tuple[float, float]:
    """Points earned on one exercise, and its maximum, from a row of grades.csv (or test cell -> score)."""
    cells = {grading(c)["grade_id"]: grading(c)["points"] for c in source(assignment).cells if grading(c).get("grade")}
    mine = [c for c in cells if c.startswith(exercise + "_")]
    return sum(float(row[c]) for c in mine), sum(cells[c] for c in mine)


def assignment_gradebook(root: Path) -> str:
    """The URL of a gradebook under `root` holding the grader course's assignment, as the batch's template holds it."""
    from traitlets.config import Config

    from autograder.gradebook import generate_assignment  # the grader's: imported only by the tests that use it

    folder = root / "source" / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(source(), folder / f"{ASSIGNMENT}.ipynb")
    url = f"sqlite:///{root}/gradebook.db"
    generate_assignment(Config(), ASSIGNMENT, root, url, root / "release")
    return url
