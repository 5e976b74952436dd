"""Colab: every notebook opens with the same set-up cell, its install branch works with only what Colab has, and the
README links each notebook to Colab."""

import ast
import json
import os
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from colab_cell import CELL_ID, FOLDER, TEMPLATE, repository, source
from course import ROOT, assignments, grading, read, release_path, source_path

ALL_NOTEBOOKS = [p for a in assignments() for p in (source_path(a), release_path(a))]
# What a fresh Colab runtime has that the notebooks use, and what runs a notebook; not nbgrader, not the course.
COLAB = ("torch", "numpy", "matplotlib", "ipywidgets", "ipykernel", "nbclient", "nbformat")
BADGE = "https://colab.research.google.com/assets/colab-badge.svg"


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_opens_with_the_setup_cell(path):
    cells = read(path).cells
    first = next(cell for cell in cells if cell.cell_type == "code")
    assert cells[0].cell_type == "markdown" and first is cells[1], "the set-up cell comes right after the title"
    assert first.id == CELL_ID and not grading(first), f"the first code cell must be the ungraded '{CELL_ID}' cell"
    assert first.source == source(), "the set-up cell differs from tests/colab_cell.py's template: run `make release`"


def test_setup_cell_takes_its_address_from_pyproject():
    assert "{repository}" in TEMPLATE and "://" not in TEMPLATE, "the template must not carry an address of its own"
    assert f'"{repository()}"' in source() and "TORCHCOURSE_REPO" in source()
    assert repository().startswith("https://github.com/"), "Colab opens notebooks from GitHub"


def test_notebooks_import_only_what_colab_has():
    allowed = {"torch", "numpy", "matplotlib", "ipywidgets", "torchcourse"}
    found = {}
    for assignment in assignments():
        for cell in read(source_path(assignment)).cells:
            if cell.cell_type == "code":
                tree = ast.parse(cell.source)
                # `try: import x / except ImportError:` is an optional import: the cell runs without x, saying so
                optional = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try) and any(
                    isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in t.handlers)
                    for statement in t.body for n in ast.walk(statement)}
                for node in ast.walk(tree):
                    if id(node) in optional:
                        continue
                    names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                        [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
                    for name in names:
                        found.setdefault(name.split(".")[0], set()).add(f"{assignment}:{cell.id}")
    extra = {name: sorted(where) for name, where in found.items() if name not in allowed | sys.stdlib_module_names}
    assert not extra, f"notebooks import modules that a fresh Colab runtime lacks: {extra}"


def colab_badges() -> list[str]:
    """The README lines a student clicks to open each student notebook in Colab, in course order."""
    owner_repo = repository().removeprefix("https://github.com/")
    return [f"[![Open In Colab]({BADGE})](https://colab.research.google.com/github/{owner_repo}/blob/main/"
            f"{release_path(a).relative_to(ROOT).as_posix()})" for a in assignments()]


def test_readme_students_section_starts_with_colab_badges_then_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"^## Students\n(.*?)(?=^## )", readme, re.S | re.M).group(1).strip()
    found = re.findall(r"\[!\[[^\]]*\]\([^)]*\)\]\([^)]*\)", section)
    expected = colab_badges()
    assert found == expected, "the Students section needs one badge per notebook, with pyproject's address:\n" + \
        "\n".join(expected)
    assert section.startswith(f"- {expected[0]}"), "the section starts with the badges, one list item per notebook"
    after = section[section.index(expected[-1]):]
    commands = re.search(r"```bash\n(.*?)```", after, re.S).group(1)
    assert "make setup" in commands and "make lab" in commands, "after the badges: the two commands"


def snapshot(folder) -> str:
    """A git repository of the working tree as it is, uncommitted changes included; its address."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\0")
    for name in listed:
        if name and (ROOT / name).is_file():  # a file deleted but not yet committed is listed too
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    env = dict(os.environ, GIT_AUTHOR_NAME="test", GIT_AUTHOR_EMAIL="test@localhost",
               GIT_COMMITTER_NAME="test", GIT_COMMITTER_EMAIL="test@localhost")
    for command in (["init", "--quiet"], ["add", "--all"], ["commit", "--quiet", "--message", "snapshot"]):
        subprocess.run(["git", *command], cwd=folder, env=env, check=True, capture_output=True)
    return folder.as_uri()  # file://: a local path would ignore the cell's --depth 1, with a warning


RUN = """
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
               resources={"metadata": {"path": sys.argv[2]}}).execute()
nbformat.write(nb, sys.argv[1])
"""
PROBE = """
import importlib.util, json, sys, torchcourse
print(json.dumps({"prefix": sys.prefix, "torchcourse": torchcourse.__file__,
                  "nbgrader": importlib.util.find_spec("nbgrader") is not None}))
"""


@pytest.mark.slow  # a fresh venv and pip installs
def test_colab_branch_installs_the_course_then_a_notebook_runs(tmp_path):
    pins = dict(line.split("#")[0].strip().split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if line.split("#")[0].strip())
    env_dir, content = tmp_path / "colab-env", tmp_path / "content"  # content/: Colab's working folder
    content.mkdir()
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", env_dir], check=True)
    install = subprocess.run([python, "-m", "pip", "install", "--quiet", *(f"{p}=={pins[p]}" for p in COLAB)],
                             capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-3000:]
    freeze = [python, "-m", "pip", "list", "--format=freeze", "--exclude", "torchcourse"]
    before = subprocess.run(freeze, capture_output=True, text=True, check=True).stdout

    nb = read(source_path("03_modules"))
    nb.cells.append(nbformat.v4.new_code_cell(PROBE, id="probe"))
    nbformat.write(nb, content / "notebook.ipynb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV"))}
    env.update(TORCHCOURSE_REPO=snapshot(tmp_path / "repository"), PYTHONNOUSERSITE="1",
               PATH=f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}")
    run = subprocess.run([python, "-c", RUN, content / "notebook.ipynb", content], env=env, cwd=content,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]

    cells = read(content / "notebook.ipynb").cells
    errors = [f"{c.id}: {o.ename}: {o.evalue}" for c in cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    probe = json.loads(next(o.text for o in cells[-1].outputs if o.output_type == "stream" and o.name == "stdout"))
    assert os.path.samefile(probe["prefix"], env_dir) and not probe["nbgrader"], probe
    assert os.path.samefile(probe["torchcourse"], content / FOLDER / "torchcourse" / "__init__.py"), probe
    after = subprocess.run(freeze, capture_output=True, text=True, check=True).stdout
    assert after == before, "the set-up cell changed Colab's packages (torch reinstalled?)"
    # As after a kernel restart: a new process finds the package through pip's install, and its data beside it.
    data = subprocess.run([python, "-c", "from torchcourse.data import data_file; print(data_file('digits.csv.gz'))"],
                          env=env, cwd=tmp_path, capture_output=True, text=True)
    assert data.returncode == 0 and os.path.samefile(data.stdout.strip(), content / FOLDER / "data" / "digits.csv.gz"), \
        data.stderr
