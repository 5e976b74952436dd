"""Self-check: run a notebook's visible tests and report each exercise, without running any hidden test.

    python -m torchcourse.check 02                              # notebooks/02_.../..., as `make check NB=02`
    python -m torchcourse.check ~/Downloads/02_autograd.ipynb   # any copy, one saved by Colab included

Prints, per exercise, passed / failed / not attempted, the first failure message and the points at stake.
"""

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .format import HIDDEN, STUB, answer_cells, grading, test_cells

@dataclass
class Exercise:
    """What the self-check found for one exercise."""
    name: str
    status: str  # "passed", "failed" or "not attempted"
    points: float  # at stake: visible and hidden tests together
    message: str = ""


def find_notebook(name: str) -> Path:
    """A path as given, or for a two-digit number the student notebook of that assignment in notebooks/."""
    if re.fullmatch(r"\d\d", name):
        found = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob(f"{name}_*/*.ipynb"))
        if not found:
            raise SystemExit(f"no notebook numbered {name} under notebooks/")
        return found[0]
    path = Path(name).expanduser()
    if not path.exists():
        raise SystemExit(f"{path}: no such notebook")
    return path


def check(path: Path, timeout: int = 120) -> list[Exercise]:
    """Run the notebook with its hidden tests removed; report every exercise (answer cell) in order."""
    import nbformat
    from nbclient import NotebookClient

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as error:  # not JSON, truncated, not a notebook
        raise SystemExit(f"{path}: cannot read this notebook ({type(error).__name__}: {error})") from None
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = HIDDEN.sub("", cell.source)  # a copy of the sources keeps its hidden tests: skip them
    NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return exercises(nb)


def exercises(nb) -> list[Exercise]:
    """Every exercise of a notebook that has run, in order, as its test cells' outputs show it."""
    reports = []
    for answer in answer_cells(nb):
        name = grading(answer)["grade_id"]
        tests = test_cells(nb, name)
        points = sum(float(grading(t).get("points", 0)) for t in tests)
        errors = [o for t in tests for o in t.get("outputs", []) if o.output_type == "error"]
        if STUB in answer.source and all(e.ename == "NotImplementedError" for e in errors):
            reports.append(Exercise(name, "not attempted", points))
        elif errors:
            reports.append(Exercise(name, "failed", points, f"{errors[0].ename}: {errors[0].evalue}".strip()))
        else:
            reports.append(Exercise(name, "passed", points, "visible tests pass; hidden tests run when graded"))
    return reports


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    path = find_notebook(argv[0])
    print(f"checking {path} (visible tests only)")
    reports = check(path)
    width = max((len(r.name) for r in reports), default=8)
    for r in reports:
        print(f"  {r.name:{width}}  {r.status:13}  {r.points:g} points at stake  {r.message[:200]}")
    done = sum(r.status == "passed" for r in reports)
    print(f"{done} of {len(reports)} exercises pass their visible tests")
    return 0  # a report, not a verdict: unfinished exercises are normal while working


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
