"""The set-up cell that opens every notebook, made from one template; run as a script, it writes it into solutions/.

    python tests/colab_cell.py   # `make release` runs it before generating notebooks/

Colab has nothing but the notebook, so the cell installs the course's helpers and data by a name and version that
are the same for every copy of the course: the torchcourse wheel (`make dist`), from PyPI, from the folder or page
pyproject.toml's `[tool.torchcourse] find-links` names, or from the notebook's own folder (a wheel uploaded there).
The version has one home, `torchcourse.__version__`; this template is how the eight copies stay equal to it.
"""

import ast
import json
import sys
import tomllib

import nbformat

from course import ROOT, SETUP_CELLS, assignments, read, source_path

CELL_ID = SETUP_CELLS[0]
TEMPLATE = '''\
# Set-up for Colab (or any Python without the course): install the course's helpers and data, {wanted}.
# In the course's own environment (`make setup`) this cell does nothing.
import importlib, importlib.util, subprocess, sys

if importlib.util.find_spec("torchcourse") is None:
    wanted, places = "{wanted}", {places}  # ".": this notebook's folder
    # from PyPI, or a wheel in one of `places`; --no-deps keeps Colab's own torch
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", wanted]
    if subprocess.run(pip + [f"--find-links={{place}}" for place in places]).returncode != 0:
        raise RuntimeError(f"pip could not install {{wanted}}, the course's helpers and data (its message is above). "
                           "Ask your instructor for the file {wheel}, upload it beside this "
                           "notebook (in Colab: the folder icon on the left, then Upload) and run this cell again.")
    importlib.invalidate_caches()  # importable in this kernel now, without a restart
'''


def version() -> str:
    """The course's release: torchcourse.__version__, read without importing the package."""
    tree = ast.parse((ROOT / "torchcourse" / "__init__.py").read_text())
    return next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__version__"])


def find_links() -> str:
    """Where the set-up cell looks for the wheel besides PyPI and the notebook's folder (pyproject.toml); "" if nowhere."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["torchcourse"]["find-links"]


def wheel() -> str:
    """The file name of the wheel `make dist` builds."""
    return f"torchcourse-{version()}-py3-none-any.whl"


def source() -> str:
    """The set-up cell's code, as every notebook must hold it."""
    places = ["."] + ([find_links()] if find_links() else [])
    return TEMPLATE.format(wanted=f"torchcourse=={version()}", places=json.dumps(places), wheel=wheel()).rstrip("\n")


def repository() -> str:
    """The course repository's address, from pyproject.toml: where the README's Colab badges open the notebooks."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


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
