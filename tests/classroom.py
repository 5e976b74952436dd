"""A class of submissions for the bulk grader: right, wrong, and broken in every way the autograder must survive."""

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import nbformat

from course import ROOT, answer_ids, exercises_only, read, release_path, solution_answers, with_answers, wrong_answers

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


def vandal(targets: list[str]) -> str:
    """Code that tries to overwrite and delete every file matching the glob patterns, quietly."""
    return f"""import glob, os
for _pattern in {targets!r}:
    for _path in glob.glob(_pattern, recursive=True):
        try:
            open(_path, "w").write("vandalised")
        except OSError:
            pass
        try:
            os.remove(_path)
        except OSError:
            pass
"""


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
    i = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
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
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") not in grade_ids]
    return nb


def broken_class(assignment: str, other: str, protected: list[str], lesson: bool = True) -> dict[str, str | None]:
    """student_id -> notebook text (None: a folder with no notebook). The second exercise is the one broken.

    With lesson=False the notebooks hold just their set-up cells and exercises, but for 'right' and 'colab'
    (quicker to grade; the lesson's cells are graded in tests/test_grading.py).
    """
    full = read(release_path(assignment))
    release = full if lesson else exercises_only(full)
    right = solution_answers(assignment)
    first, second, third = answer_ids(release)[:3]
    wrong_first = next(iter(wrong_answers(assignment)["WRONG"][first].values()))
    wrong_third = next(iter(wrong_answers(assignment)["WRONG"][third].values()))
    tests_of_first = [c.metadata.nbgrader["grade_id"] for c in release.cells
                      if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith(first + "_")]

    def answers(**changed):
        return with_answers(release, {**right, **changed})

    def write(nb):
        return nbformat.writes(nb)

    class_ = {
        "right": write(with_answers(full, right)),
        "unedited": write(release),
        "wrong": write(answers(**{first: wrong_first})),
        "loop": write(answers(**{second: "while True:\n    pass"})),
        "stubborn": write(answers(**{second: STUBBORN_LOOP})),
        "exits": write(answers(**{second: "import os\nos._exit(3)"})),
        "segfault": write(answers(**{second: "import ctypes\nctypes.string_at(0)"})),
        "memory": write(answers(**{second: MEMORY_HOG})),
        "sys_exit": write(answers(**{second: "import sys\nsys.exit()"})),
        "children": write(answers(**{second: CHILDREN + right[second]})),
        "not_json": "These are my answers: 1. backward ...",
        "truncated": write(answers())[:5000],
        "other_assignment": write(read(release_path(other))),
        "empty": json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}),
        "tests_edited": write(replace_cell(replace_cell(answers(**{first: wrong_first}), tests_of_first[0], "pass"),
                                           tests_of_first[-1], "pass")),
        "tests_deleted": write(without_cells(answers(**{first: wrong_first}), set(tests_of_first))),
        "tests_duplicated": write(replace_cell(answers(**{first: wrong_first}), tests_of_first[-1], "pass",
                                               duplicate_first=True)),
        "answer_deleted": write(without_cells(answers(), {second})),
        "noisy": write(answers(**{a: NOISY + code for a, code in right.items()})),
        "faked": write(answers(**{third: "import torch\ntorch.allclose = lambda *a, **k: True\n"
                                         "torch.testing.assert_close = lambda *a, **k: None\n"
                                         "torch.autograd.gradcheck = lambda *a, **k: True\n" + wrong_third})),
        "widgets": write(answers(**{first: WIDGETS + right[first]})),
        "colab": colab(with_answers(full, right)),
        "vandal": write(answers(**{first: vandal(protected) + right[first]})),
        "no_notebook": None,
    }
    return class_


def scratch_course(folder: Path, assignments: tuple[str, ...]) -> Path:
    """A course folder with these assignments' sources and the course's nbgrader settings."""
    for name in assignments:
        shutil.copytree(ROOT / "solutions" / name, folder / "solutions" / name)
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    (folder / "autograder").mkdir()
    return folder


def write_folder(folder: Path, class_: dict[str, str | None], notebook: str) -> None:
    """The folder layout: one sub-folder per student holding the notebook (or nothing)."""
    for student, text in class_.items():
        (folder / student).mkdir(parents=True)
        if text is not None:
            (folder / student / notebook).write_text(text)


def write_zip(path: Path, class_: dict[str, str], notebook: str) -> None:
    """As Canvas exports: one flat zip, the student's name and ids in each file name."""
    with zipfile.ZipFile(path, "w") as z:
        for k, (student, text) in enumerate(class_.items()):
            z.writestr(f"{student}_{1000 + k}_{5000 + k}_{notebook}", text)
