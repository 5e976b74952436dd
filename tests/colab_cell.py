"""The set-up cell that opens every notebook, made from one template; run as a script, it writes it into solutions/.

    python tests/colab_cell.py   # `make release` runs it before generating notebooks/

The repository's address has one home, `[project.urls] Repository` in pyproject.toml: Colab has nothing but the
notebook, so each notebook carries the address literally, and this template is how the six copies stay equal.
"""

import sys
import tomllib

import nbformat

from course import ROOT, SETUP_CELLS, assignments, read, source_path

CELL_ID = SETUP_CELLS[0]
FOLDER = "pytorch-course"  # where Colab keeps the clone, next to the notebook: /content/pytorch-course
TEMPLATE = '''\
# Set-up for Colab (or any Python without the course): fetch the course's helpers and data from its repository.
# In the course's own environment (`make setup`) this cell does nothing.
import importlib, importlib.util, os, subprocess, sys

if importlib.util.find_spec("torchcourse") is None:
    repository = os.environ.get("TORCHCOURSE_REPO", "{repository}")
    folder = os.path.abspath("{folder}")
    if not os.path.isdir(folder):
        subprocess.run(["git", "clone", "--quiet", "--depth", "1", repository, folder], check=True)
    # --no-deps keeps Colab's own torch; -e leaves data/ next to the package, where torchcourse looks for it
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "-e", folder], check=True)
    sys.path.insert(0, folder)  # importable in this kernel now, without a restart
    importlib.invalidate_caches()
'''


def repository() -> str:
    """The course repository's address, from pyproject.toml."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


def source() -> str:
    """The set-up cell's code, as every notebook must hold it."""
    return TEMPLATE.format(repository=repository(), folder=FOLDER).rstrip("\n")


def write(path) -> bool:
    """Make the notebook's first code cell the set-up cell (replacing an older copy); True if the file changed."""
    nb = read(path)
    old = [cell for cell in nb.cells if cell.get("id") == CELL_ID]
    if old and old[0].source == source() and next(c for c in nb.cells if c.cell_type == "code") is old[0]:
        return False
    cells = [cell for cell in nb.cells if cell.get("id") != CELL_ID]
    first_code = next(i for i, cell in enumerate(cells) if cell.cell_type == "code")
    cells.insert(first_code, nbformat.v4.new_code_cell(source(), id=CELL_ID))
    nb.cells = cells
    nbformat.write(nb, path)
    return True


if __name__ == "__main__":
    for assignment in assignments():
        if write(source_path(assignment)):
            print(f"wrote the set-up cell into {source_path(assignment).relative_to(ROOT)}")
    sys.exit(0)
