"""`make colab-check`: every student notebook as a student runs it in Google Colab, on Colab's own versions.

    python tests/colab_check.py [--only 01_tensors ...] [--out report.md] [--timeout SECONDS_PER_CELL] [--browser]

Colab's versions are those of tests/colab-pip-freeze.txt, Colab's own list (googlecolab/backend-info, pip-freeze.txt
at a724079, 2026-08-19: Python 3.13, torch 2.11.0+cpu, ipywidgets 7.7.1, ipykernel 6.17.1, IPython 7.34, numpy 2.1.3,
matplotlib 3.10.0); replace the file with a newer one of theirs to follow Colab. The environment, built once under
.colab/ (git-ignored) and rebuilt when the list or the interpreter changes:
- Python 3.13, or 3.12 (Colab's pinned 2026.07 runtime), found on PATH or under pyenv; refused without either;
- every package of the list at Colab's version, pip's resolver choosing only what the list does not name;
- torch 2.11.0 from PyPI: Colab's CPU build lives on download.pytorch.org, which the course's machines cannot reach,
  so PyPI's build stands in (CUDA 13, with NVIDIA's runtime libraries it needs to import; on a machine without a GPU
  it runs on the CPU as Colab's CPU runtime does). The report gives its size and the time it took.
Then, for each notebook: the torchcourse wheel (`make dist`'s) is the only thing beside the notebook and pip sees no
index, so the notebook's own set-up cell installs the course's helpers as it does for a student who uploaded the
wheel; torchcourse is uninstalled again before the next notebook. The notebook is the student's, with each exercise
answered by its solution: the lessons, their figures and widgets and the visible tests all run, then `hand_in()`
(the file Jupyter would have opened; Colab's own notebook API exists only in Colab). The report says per notebook what
ran and what failed, and why. With --browser, notebooks 01 and 08 also run in Chromium in the classic Notebook of
Colab's list (nbclassic 1.3.3, widgetsnbextension 3.6.10: JupyterLab 4's widget manager cannot show ipywidgets 7) on
this environment (tests/test_browser.py's `colab` tests): Run All, figures shown, widgets that react.
Exit status 1 when a notebook failed, 2 when the environment cannot be built here.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course import FIGURE, ROOT, SETUP_CELLS, WIDGET, assignments, read, release_path, solution_answers, with_answers
from torchcourse.check import exercises

FREEZE = ROOT / "tests" / "colab-pip-freeze.txt"
ENVIRONMENTS = ROOT / ".colab"
PYTHONS = ("3.13", "3.12")  # Colab's runtime, then its pinned 2026.07 runtime
# What a notebook run needs of Colab's packages: torchcourse's dependencies (the set-up cell installs it with
# --no-deps: Colab must have them) and what runs a notebook; pip brings what these depend on, at the list's versions too.
PACKAGES = (*tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"],
            "ipykernel", "nbclient", "nbformat")
# Where this machine's stand-ins for Colab show, and not Colab: lines a cell writes that Colab's would not.
STAND_INS = {
    "No CUDA runtime is found": "PyPI's CUDA build of torch without a GPU; Colab's CPU runtime has the CPU build",
    "Guards may run slower on Python 3.13.0": "this machine's Python 3.13.0; Colab's is a later 3.13",
}
PROBE_ID, HAND_IN_ID = "colab-check-probe", "colab-check-hand-in"
PROBE = '''import json, sys, IPython, ipykernel, ipywidgets, matplotlib, numpy, torch, torchcourse
print("COLAB-CHECK " + json.dumps({"python": sys.version.split()[0], "torch": torch.__version__,
    "numpy": numpy.__version__, "ipywidgets": ipywidgets.__version__, "ipykernel": ipykernel.__version__,
    "IPython": IPython.__version__, "matplotlib": matplotlib.__version__, "torchcourse": torchcourse.__file__}))'''
HAND_IN = "from torchcourse.handin import hand_in\nhand_in()"


def colab_python(versions=PYTHONS) -> Path | None:
    """An interpreter of Colab's Python (the first of `versions` found): on PATH, or one pyenv installed."""
    for version in versions:
        candidates = [shutil.which(f"python{version}")]
        pyenv = subprocess.run(["pyenv", "root"], capture_output=True, text=True) if shutil.which("pyenv") else None
        if pyenv and pyenv.returncode == 0:  # pyenv's shim answers only for the versions selected: ask the installs
            candidates += sorted(Path(pyenv.stdout.strip()).glob(f"versions/{version}.*/bin/python{version}"), reverse=True)
        for candidate in filter(None, candidates):
            works = subprocess.run([candidate, "-c", "import sys, venv; print(sys.version_info[:2])"],
                                   capture_output=True, text=True)
            if works.returncode == 0 and works.stdout.strip() == str(tuple(map(int, version.split(".")))):
                return Path(candidate)
    return None


def constraints(freeze: str) -> list[str]:
    """pip constraints from Colab's pip freeze: every `name==version`; torch's download address becomes its version;
    NVIDIA's libraries (a GPU runtime's, which differ by torch build) and other addresses are left to pip."""
    found = []
    for line in freeze.splitlines():
        line = line.split("#")[0].strip()
        if match := re.fullmatch(r"torch @ \S*/torch-([\d.]+)(%2B|\+)\S*", line):
            found.append(f"torch=={match.group(1)}")
        elif "==" in line and not line.lower().startswith("nvidia"):
            found.append(line)
    return found


@dataclass
class Environment:
    python: Path  # the environment's interpreter
    python_version: str
    versions: dict  # what the list pins for PACKAGES
    built_s: float | None  # seconds to build it now; None when reused
    size_mb: int


def environment(base: Path) -> Environment:
    """Colab's packages in a venv under .colab/, built with `base`; reused while the list and `base` are the same."""
    pins = constraints(FREEZE.read_text())
    version = subprocess.run([base, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True,
                             check=True).stdout.strip()
    folder = ENVIRONMENTS / f"py{'.'.join(version.split('.')[:2])}"
    stamp = hashlib.sha256("\n".join([version, *pins, *PACKAGES]).encode()).hexdigest()
    python, built_s = folder / "bin" / "python", None
    if not (folder / "stamp").exists() or (folder / "stamp").read_text() != stamp:
        print(f"building Colab's environment in {folder.relative_to(ROOT)} (Python {version}; torch and NVIDIA's "
              "libraries are about 2.6 GB to download)", flush=True)
        start = time.perf_counter()
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run([base, "-m", "venv", folder], check=True)
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as file:
            file.write("\n".join(pins))
            file.flush()
            pip = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c",
                                  file.name, *PACKAGES], capture_output=True, text=True)
        if pip.returncode:
            raise SystemExit(f"pip could not install Colab's versions into {folder}:\n{pip.stderr[-3000:]}")
        (folder / "stamp").write_text(stamp)
        built_s = time.perf_counter() - start
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    versions = {pin.split("==")[0]: pin.split("==")[1] for pin in pins if pin.split("==")[0] in PACKAGES}
    return Environment(python, version, versions, built_s, size // 2**20)


def build_wheel(out: Path) -> Path:
    """The torchcourse wheel, as `make dist` builds it."""
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", out, ROOT], check=True, capture_output=True)
    (wheel,) = out.glob("torchcourse-*.whl")
    return wheel


@dataclass
class Run:
    """What one notebook did on Colab's versions."""
    assignment: str
    seconds: float = 0.0
    cells: int = 0  # code cells that ran
    exercises: list = field(default_factory=list)  # torchcourse.check.Exercise, visible tests
    figures: int = 0
    widgets: int = 0
    kernel: dict = field(default_factory=dict)  # the probe's versions
    problems: list = field(default_factory=list)
    stand_ins: list = field(default_factory=list)  # what this machine shows and Colab would not (STAND_INS)


def hand_in_copy(assignment: str, folder: Path, hand_in: bool = True) -> Path:
    """The student notebook with every exercise answered by its solution, then the probe and (with `hand_in`)
    hand_in()."""
    nb = with_answers(read(release_path(assignment)), solution_answers(assignment))
    nb.cells.append(nbformat.v4.new_code_cell(PROBE, id=PROBE_ID))
    if hand_in:
        nb.cells.append(nbformat.v4.new_code_cell(HAND_IN, id=HAND_IN_ID))
    path = folder / release_path(assignment).name
    nbformat.write(nb, path)
    return path


def outputs_of(cell, kind: str) -> list:
    return [o for o in cell.get("outputs", []) if o.output_type == kind]


def widget_images(nb, cell) -> int:
    """Figures inside the cell's widgets: an `interact` draws into an Output widget, whose outputs nbclient keeps in
    the notebook's widget state, not in the cell's outputs."""
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    todo = [o.data["application/vnd.jupyter.widget-view+json"]["model_id"] for o in cell.get("outputs", [])
            if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    seen, images = set(), 0
    while todo:
        model = todo.pop()
        if model in seen or model not in state:
            continue
        seen.add(model)
        values = state[model].get("state", {})
        images += sum("image/png" in o.get("data", {}) for o in values.get("outputs", []))
        todo += re.findall(r"IPY_MODEL_(\w+)", json.dumps(values.get("children", [])))
    return images


def fresh_runtime(python: Path, **extra: str) -> dict:
    """Uninstall torchcourse from the environment of `python`, as in a new Colab runtime, and return the environment
    variables its processes get: none of this machine's Jupyter, Python or pip settings, no package index."""
    subprocess.run([python, "-m", "pip", "uninstall", "--quiet", "--yes", "torchcourse"], capture_output=True)
    variables = {k: v for k, v in os.environ.items()
                 if not k.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV", "PIP_", "MPL", "OMP_"))}
    return dict(variables, PIP_NO_INDEX="1", PYTHONNOUSERSITE="1",
                PATH=f"{Path(python).parent}{os.pathsep}{variables['PATH']}", **extra)


def run(assignment: str, env: Environment, wheel: Path, timeout: int) -> Run:
    """Run one notebook in a folder of its own holding it and the wheel, as a fresh Colab runtime would."""
    result = Run(assignment)
    with tempfile.TemporaryDirectory(prefix="colab-content-") as content:
        shutil.copy(wheel, content)
        path = hand_in_copy(assignment, Path(content))
        variables = fresh_runtime(env.python, JPY_SESSION_NAME=str(path))  # Jupyter's name of it, read by hand_in()
        start = time.perf_counter()
        done = subprocess.run([env.python, ROOT / "tests" / "colab_run.py", path, str(timeout)], cwd=content,
                              env=variables, capture_output=True, text=True)
        result.seconds = time.perf_counter() - start
        nb = read(path)
        if done.returncode:
            result.problems.append(f"the run stopped: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
        handed_in = (Path(content) / "hand-in" / path.name).exists()
    tests = {cell.id for cell in nb.cells if cell.get("metadata", {}).get("nbgrader", {}).get("grade")}
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.get("execution_count") is None:
            continue
        result.cells += 1
        images = sum("image/png" in o.get("data", {}) for o in cell.outputs) + widget_images(nb, cell)
        result.figures += images
        result.widgets += sum("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in cell.outputs)
        result.problems += [f"{cell.id}: {e.ename}: {e.evalue}"[:300] for e in outputs_of(cell, "error") if cell.id not in tests]
        for stream in outputs_of(cell, "stream"):
            if stream.name == "stderr" and cell.id not in SETUP_CELLS:
                why = next((why for line, why in STAND_INS.items() if line in stream.text), None)
                (result.stand_ins if why else result.problems).append(
                    f"{cell.id} writes to stderr: {stream.text.strip()[:300]}" + (f" ({why})" if why else ""))
        if FIGURE.search(cell.source) and not images:
            result.problems.append(f"{cell.id} draws a figure but shows no image")
        if WIDGET.search(cell.source) and not any("application/vnd.jupyter.widget-view+json" in o.get("data", {})
                                                  for o in cell.outputs):
            result.problems.append(f"{cell.id} shows no widget")
        if cell.id == PROBE_ID:
            lines = [s.text for s in outputs_of(cell, "stream") if "COLAB-CHECK " in s.text]
            result.kernel = json.loads(lines[0].split("COLAB-CHECK ", 1)[1]) if lines else {}
    not_run = [cell.id for cell in nb.cells if cell.cell_type == "code" and cell.get("execution_count") is None]
    if not_run:
        result.problems.append(f"{len(not_run)} code cells did not run, from {not_run[0]}")
    result.exercises = exercises(nb)
    result.problems += [f"{e.name}: visible tests {e.status}: {e.message}" for e in result.exercises if e.status != "passed"]
    if result.kernel and not Path(result.kernel["torchcourse"]).is_relative_to(env.python.parents[1]):
        result.problems.append(f"torchcourse came from {result.kernel['torchcourse']}, not from the set-up cell's install")
    if not handed_in:
        result.problems.append("hand_in() wrote no file")
    return result


def report(env: Environment, runs: list[Run]) -> str:
    """The Markdown report: the environment, then a row per notebook and what went wrong."""
    kernel = next((r.kernel for r in runs if r.kernel), {})
    built = f"built in {env.built_s:.0f} s" if env.built_s is not None else "reused (built by an earlier run)"
    lines = ["# make colab-check", "",
             f"Colab's versions (tests/colab-pip-freeze.txt): {', '.join(f'{k} {v}' for k, v in env.versions.items())}; "
             f"Python {env.python_version} here.",
             f"The kernels ran: {', '.join(f'{k} {v}' for k, v in kernel.items() if k != 'torchcourse')}.",
             f"Environment: {env.python.parents[1].relative_to(ROOT)}, {env.size_mb:,} MB, {built}.", "",
             "| notebook | result | code cells run | visible tests passed | figures | widgets | seconds |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        passed = sum(e.status == "passed" for e in r.exercises)
        lines.append(f"| {r.assignment} | {'FAILED' if r.problems else 'ran'} | {r.cells} | {passed} of {len(r.exercises)} "
                     f"| {r.figures} | {r.widgets} | {r.seconds:.0f} |")
    for r in runs:
        if r.problems:
            lines += ["", f"## {r.assignment}", *(f"- {p}" for p in r.problems)]
    if stand_ins := [f"- {r.assignment}: {line}" for r in runs for line in r.stand_ins]:
        lines += ["", "## Not Colab's: this machine's stand-ins", *stand_ins]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=assignments(), help="these notebooks (default: all)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a cell may run")
    parser.add_argument("--python", type=Path, help=f"the interpreter to build with (default: Python {' or '.join(PYTHONS)})")
    parser.add_argument("--browser", action="store_true", help="also Run All of 01 and 08 in Chromium (classic Notebook)")
    args = parser.parse_args(argv)
    base = args.python or colab_python()
    if base is None:
        print(f"make colab-check needs Python {' or '.join(PYTHONS)}, Colab's: none on PATH or under pyenv. Install one "
              "(pyenv install 3.13, or your system's python3.13 package), or name it: make colab-check PYTHON_COLAB=...",
              file=sys.stderr)
        return 2
    env = environment(base)
    with tempfile.TemporaryDirectory(prefix="colab-wheel-") as out:
        wheel = build_wheel(Path(out))
        runs = []
        for assignment in args.only or assignments():
            runs.append(run(assignment, env, wheel, args.timeout))
            r = runs[-1]
            print(f"{assignment}: {'FAILED' if r.problems else 'ran'} in {r.seconds:.0f} s", flush=True)
    text = report(env, runs)
    print(text)
    if args.out:
        args.out.write_text(text)
    failed = any(r.problems for r in runs)
    if args.browser:
        browser = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-m", "colab",
                                  ROOT / "tests" / "test_browser.py"], env=dict(os.environ, COURSE_COLAB_PYTHON=str(env.python)))
        failed |= browser.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
