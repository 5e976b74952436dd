"""Hand in: save the notebook you work in as the file the grader expects, once it is known to be that assignment's.

    from torchcourse.handin import hand_in
    hand_in()            # in its last cell: checks, says which exercises are attempted, writes hand-in/NN_name.ipynb

In Colab the notebook lives in the browser and in Drive, not on the runtime's disk: it is read through Colab's own
notebook API (what File > Download does), with every edit, saved or not, and the file is then downloaded. Elsewhere
it is the file Jupyter opened, as last saved: save it first (Ctrl+S).

    python -m torchcourse.handin --manifest notebooks/   # `make release`: what each assignment's notebook holds
"""

import hashlib
import json
import os
import sys
from pathlib import Path

from .format import answer_cells, grading

MANIFEST = Path(__file__).with_name("assignments.json")
OUT = "hand-in"  # the folder the file to hand in is written to, beside the notebook


def digest(source: str) -> str:
    """A cell's source as the manifest keeps it: whether an answer cell still holds the released stub."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def grade_ids(nb) -> dict:
    """nbgrader's grade_id -> cell, for the notebook's graded and answer cells."""
    return {grading(cell)["grade_id"]: cell for cell in nb.cells if grading(cell).get("grade_id")}


def manifest(notebooks: Path) -> dict:
    """For each released notebook under `notebooks`: its file name, its answer cells' released sources (digests), and
    its graded test cells, by nbgrader's grade_id."""
    import nbformat

    found = {}
    for path in sorted(Path(notebooks).glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        found[path.parent.name] = {
            "notebook": path.name,
            "answers": {grading(c)["grade_id"]: digest(c.source) for c in answer_cells(nb)},
            "tests": [i for i, c in grade_ids(nb).items() if grading(c).get("grade") and not grading(c).get("solution")],
        }
    return found


def running_notebook():
    """The notebook this kernel runs, as an nbformat node, and where it came from (a path, or "Colab")."""
    import nbformat

    try:
        from google.colab import _message  # Colab's frontend holds the notebook; the runtime's disk does not
    except ImportError:
        _message = None
    if _message is not None:
        ipynb = _message.blocking_request("get_ipynb", timeout_sec=60)["ipynb"]
        return nbformat.reads(json.dumps(ipynb), as_version=4), "Colab"  # reads joins list-of-lines sources
    path = os.environ.get("JPY_SESSION_NAME")  # Jupyter's server tells its kernels their notebook's path
    if not path:
        from IPython import get_ipython  # VS Code names it in the user's namespace
        path = (get_ipython().user_ns if get_ipython() else {}).get("__vsc_ipynb_file__")
    if path and Path(path).is_dir():  # the classic Notebook's front end names no file: the server names its folder
        inside = sorted(Path(path).glob("*.ipynb"))
        if len(inside) != 1:
            raise RuntimeError(f"Jupyter names the folder {path}, not the notebook, and it holds {len(inside)} "
                               "notebooks: hand in the .ipynb file itself, after `python -m torchcourse.check "
                               "path/to/it.ipynb`")
        path = str(inside[0])
    if not path or not Path(path).is_file():
        raise RuntimeError("cannot tell which notebook this kernel runs (not Colab, and Jupyter did not say): hand in "
                           "the .ipynb file itself, after `python -m torchcourse.check path/to/it.ipynb`")
    return nbformat.read(path, as_version=4), path


def which(nb, known: dict) -> str:
    """The assignment whose answer cells the notebook holds, or a ValueError that says what is wrong."""
    ids = set(grade_ids(nb))
    matches = [a for a, m in known.items() if set(m["answers"]) <= ids]
    if matches:
        return matches[0]
    closest = max(known, key=lambda a: len(set(known[a]["answers"]) & ids))
    raise ValueError(f"this is not a course notebook as released: it lacks the answer cells "
                     f"{sorted(set(known[closest]['answers']) - ids)} (of {closest}, the closest): work in the "
                     "released notebook, and do not delete or retype its exercise cells")


def attempted(nb, entry: dict) -> dict[str, bool]:
    """Each exercise of the assignment: True where its answer cell differs from the released stub."""
    cells = grade_ids(nb)
    return {answer: digest(cells[answer].source) != stub for answer, stub in entry["answers"].items()}


def hand_in(assignment: str | None = None, out: str = OUT) -> Path | None:
    """Check that the running notebook is `assignment`'s (any course notebook when None), print which exercises are
    attempted and which test cells are missing, and write it to `out/<the assignment's notebook name>`; in Colab,
    download that file. Returns its path."""
    import nbformat

    if os.environ.get("NBGRADER_EXECUTION"):  # nbgrader's Validate, or a grading: the notebook is handed in already
        print("hand_in: nothing to do while nbgrader runs this notebook")
        return None
    known = json.loads(MANIFEST.read_text())
    nb, origin = running_notebook()
    found = which(nb, known)
    if assignment and not found.startswith(assignment):
        raise ValueError(f"this notebook is {found}'s, not {assignment}'s: open {assignment}'s notebook and hand it in")
    entry = known[found]
    missing = [t for t in entry["tests"] if t not in grade_ids(nb)]
    if missing:
        raise ValueError(f"the test cells {missing} are gone from this notebook: their points would be lost; copy "
                         f"them back from the released {entry['notebook']}")
    done = attempted(nb, entry)
    for answer, edited in done.items():
        print(f"  {answer:32} {'attempted' if edited else 'not attempted (the released stub)'}")
    print(f"{sum(done.values())} of {len(done)} exercises attempted, read from {origin}")
    path = Path(out) / entry["notebook"]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    print(f"hand in this file: {path.resolve()}")
    if origin == "Colab":
        from google.colab import files
        files.download(str(path))  # the browser saves it to the student's Downloads
    return path


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--manifest":
        raise SystemExit(__doc__)
    MANIFEST.write_text(json.dumps(manifest(Path(sys.argv[2])), indent=1, sort_keys=True) + "\n")
    print(f"wrote {MANIFEST}")
