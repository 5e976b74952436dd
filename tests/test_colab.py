"""Colab: every notebook opens with the same set-up cell, its install branch works with only what Colab has, every
student notebook runs on Colab's versions (`make colab-check`), and the README links each notebook to Colab."""

import ast
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import colab_check
import shipped
from colab_cell import CELL_ID, TEMPLATE, find_links, repository, source, version, wheel
from conftest import require
from course import ROOT, assignments, grading, read, release_path, source_path

ALL_NOTEBOOKS = [p for a in assignments() for p in (source_path(a), release_path(a))]
BADGE = "https://colab.research.google.com/assets/colab-badge.svg"


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_opens_with_the_setup_cell(path):
    cells = read(path).cells
    first = next(cell for cell in cells if cell.cell_type == "code")
    assert cells[0].cell_type == "markdown" and first is cells[1], "the set-up cell comes right after the title"
    assert first.id == CELL_ID and not grading(first), f"the first code cell must be the ungraded '{CELL_ID}' cell"
    assert first.source == source(), "the set-up cell differs from tests/colab_cell.py's template: run `make release`"


def test_setup_cell_installs_the_release_of_the_helpers_by_name():
    """The cell names torchcourse at the course's version and no repository: every copy of the course installs the
    same way; the wheel it asks students to upload is the one `make dist` builds."""
    assert "{wanted}" in TEMPLATE and "://" not in TEMPLATE, "the template must not carry an address of its own"
    assert f'"torchcourse=={version()}"' in source() and wheel() in source() and "git clone" not in source()
    assert json.dumps(["."] + ([find_links()] if find_links() else [])) in source()


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


@pytest.fixture(scope="module")
def dist():
    """`make dist` by the instructor in the course as shipped: its dist/ folder."""
    shipped.instructor().run("make dist", cwd=shipped.course())
    return shipped.course() / "dist"


@pytest.fixture(scope="module")
def colab_env():
    """`make colab-check`'s environment of Colab's versions (built under .colab/ once, about 2 minutes and 5 GB)."""
    base = colab_check.colab_python()
    require("Colab's versions need Python 3.13 or 3.12", None if base else "neither is on PATH or under pyenv")
    return colab_check.environment(base)


@pytest.mark.slow
@pytest.mark.xdist_group("colab")  # one worker: the tests that share .colab/ and dist/
def test_make_dist_builds_the_release_with_its_data_and_twine_accepts_it(dist):
    assert sorted(p.name for p in dist.iterdir()) == sorted([wheel(), f"torchcourse-{version()}.tar.gz"])
    with zipfile.ZipFile(dist / wheel()) as built:
        names = set(built.namelist())
    data = {f"torchcourse/datasets/{p.name}" for p in (ROOT / "data").iterdir() if p.suffix == ".gz"}
    assert data and data <= names and "torchcourse/datasets/README.md" in names, sorted(names)
    assert {"torchcourse/data.py", "torchcourse/testing.py"} <= names


def test_colabs_list_has_what_torchcourse_needs():
    """The set-up cell installs torchcourse with --no-deps, keeping Colab's torch: each of its dependencies must be in
    Colab's own list, and the check's environment pins Colab's torch, not a URL."""
    colab = {re.split(r"==| @ ", line)[0].lower().replace("_", "-") for line in colab_check.FREEZE.read_text().splitlines()
             if not line.startswith("#")}
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert dependencies and not [d for d in dependencies if d.lower() not in colab], colab_check.FREEZE
    pins = colab_check.constraints(colab_check.FREEZE.read_text())
    assert [p for p in pins if p.startswith("torch==")] == ["torch==2.11.0"] and not any(" @ " in p for p in pins)
    assert not any(p.lower().startswith("nvidia") for p in pins), "NVIDIA's libraries are the torch build's to choose"


@pytest.mark.slow  # pip installs
@pytest.mark.xdist_group("colab")
def test_colab_setup_cell_installs_an_uploaded_wheel_and_nothing_else(dist, colab_env, tmp_path):
    """On Colab's versions, with no package index and no clone: the set-up cell says what to do; with the wheel
    uploaded beside the notebook it installs it, changes no other package, and a new process finds its data."""
    python = colab_env.python
    env = colab_check.fresh_runtime(python)
    freeze = [python, "-m", "pip", "list", "--format=freeze", "--exclude", "torchcourse"]
    before = subprocess.run(freeze, capture_output=True, text=True, check=True).stdout
    content = tmp_path / "content"  # Colab's working folder
    content.mkdir()

    alone = subprocess.run([python, "-c", source()], env=env, cwd=content, capture_output=True, text=True)
    assert alone.returncode != 0 and f"Ask your instructor for the file {wheel()}, upload it" in alone.stderr, \
        alone.stderr[-2000:]
    shutil.copy(dist / wheel(), content)  # what a student uploads in Colab's file panel
    installed = subprocess.run([python, "-c", source()], env=env, cwd=content, capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr[-2000:]
    after = subprocess.run(freeze, capture_output=True, text=True, check=True).stdout
    assert after == before, "the set-up cell changed Colab's packages (torch reinstalled?)"
    # As after a kernel restart: a new process finds the package through pip's install, and its data inside it.
    data = subprocess.run([python, "-c", "from torchcourse.data import data_file; print(data_file('digits.csv.gz'))"],
                          env=env, cwd=tmp_path, capture_output=True, text=True)
    assert data.returncode == 0 and Path(data.stdout.strip()).is_relative_to(python.parents[1]), data.stderr


@pytest.mark.slow  # every notebook, about 6 minutes
@pytest.mark.xdist_group("colab")
def test_every_student_notebook_runs_on_colabs_versions(colab_env, tmp_path):
    """`make colab-check`: each notebook, answered, from its set-up cell (the wheel uploaded) to hand_in(), on
    Colab's versions: every cell runs, nothing on stderr but this machine's stand-ins, every figure and widget shown,
    every exercise's visible tests pass."""
    status = colab_check.main(["--python", str(colab_env.python), "--out", str(tmp_path / "report.md")])
    assert status == 0, (tmp_path / "report.md").read_text()
