"""`make gpu-check`: on a CUDA machine, run every solution notebook and every test of the suite that has a CUDA branch,
then write a short Markdown report: each notebook's time, peak GPU memory and CUDA cells, each CUDA test passed or
failed, and notebook 08's own checks (tests/capstone_gpu.py): its fully masked attention rows on each of CUDA's SDPA
kernels, a CUDA memory snapshot of its training steps (a file beside the report), and its section 12's table of
techniques as the notebook printed it on the GPU.

    python tests/gpu_check.py [--out report.md] [--timeout SECONDS_PER_CELL] [--only 05_devices ...] [--jobs N]
                              [--executed FOLDER]

Where `torch.cuda.is_available()` is False it refuses at once, with exit status 2 and a message saying why: the CPU
runs of these branches are what `make test` does already. Exit status 1 when a notebook or a CUDA test failed, or a
kernel gave NaN (or anything but zeros) where 08 promises zeros.

What counts as a CUDA branch:
- in a notebook, every code cell whose source names `cuda` (the lessons' `if device.type == "cuda"` and the tests'
  `if torch.cuda.is_available():` blocks); the whole notebook runs, so every such cell runs on the GPU;
- in tests/, every test function whose source (decorators included) names `cuda`, run with pytest.
A notebook's peak memory is `torch.cuda.max_memory_allocated()`, read by a cell appended to it after its last cell.
With `--jobs N` N notebooks run at once (and the tests beside them): a lent GPU machine is paid by the minute, but the
times then include the others' load, as the report says. `--executed FOLDER` keeps each notebook with its outputs.
"""

import argparse
import ast
import json
import multiprocessing
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import nbformat
from nbclient import NotebookClient

import capstone_gpu
from course import ROOT, assignments, read, source_path

CUDA = re.compile(r"\bcuda\b", re.IGNORECASE)
PROBE_ID = "gpu-check-probe"
PROBE = '''import json, torch
print("GPU-CHECK " + json.dumps({"peak_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_initialized() else 0,
                                 "cuda_used": torch.cuda.is_initialized()}))'''


def refusal() -> str | None:
    """Why this machine cannot run the check (None where it can)."""
    import torch
    if torch.cuda.is_available():
        return None
    build = f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
    return (f"make gpu-check needs a CUDA GPU: torch.cuda.is_available() is False on this machine (torch "
            f"{torch.__version__}, {build}). Run it on a machine with an NVIDIA GPU, its driver and a CUDA build of "
            "torch; here, `make test` runs the CPU side of every branch.")


def cuda_cells(nb) -> list[str]:
    """Ids of the code cells of a notebook whose source names cuda."""
    return [cell.id for cell in nb.cells if cell.cell_type == "code" and CUDA.search(cell.source)]


def cuda_tests(folder: Path = ROOT / "tests") -> list[str]:
    """pytest node ids (relative to the repository) of the test functions in `folder` whose source names cuda."""
    found = []
    for path in sorted(folder.glob("test_*.py")):
        if path.name == "test_gpu_check.py":  # this script's own tests: they need no GPU
            continue
        text = path.read_text()
        tree = ast.parse(text)
        scopes = [(node, "") for node in tree.body]
        while scopes:
            node, prefix = scopes.pop(0)
            if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                scopes += [(child, f"{prefix}{node.name}::") for child in node.body]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                source = "\n".join(ast.get_source_segment(text, d) or "" for d in node.decorator_list)
                if CUDA.search(source + (ast.get_source_segment(text, node) or "")):
                    found.append(f"{path.relative_to(ROOT).as_posix()}::{prefix}{node.name}")
    return found


def run_notebook(path: Path, timeout: int, executed: Path | None = None) -> dict:
    """Execute one notebook with a probe cell appended: its time, errors, stderr, CUDA cells and peak GPU memory;
    the notebook with its outputs goes into `executed` where given."""
    nb = read(path)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE, id=PROBE_ID))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}})
    start, stopped = time.perf_counter(), None
    try:
        client.execute()
    except Exception as error:  # a cell past its timeout, a dead kernel: the cells after it did not run
        stopped = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200] if str(error).strip() else ''}"
    seconds = time.perf_counter() - start
    if executed:
        nbformat.write(nb, executed / path.name)
    errors, stderr, probe = {}, {}, {}
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                errors[cell.id] = f"{output.ename}: {output.evalue}"[:300]
            elif output.output_type == "stream" and output.name == "stderr":
                stderr[cell.id] = output.text.strip()[:300]
            elif cell.id == PROBE_ID and output.output_type == "stream" and "GPU-CHECK " in output.text:
                probe = json.loads(output.text.split("GPU-CHECK ", 1)[1])
    ran = {cell.id for cell in nb.cells if cell.cell_type == "code" and cell.get("execution_count") is not None}
    cells = {cid: ("failed" if cid in errors else "passed" if cid in ran else "not run") for cid in cuda_cells(read(path))}
    return {"notebook": path.relative_to(ROOT).as_posix(), "seconds": seconds, "stopped": stopped, "errors": errors,
            "stderr": stderr, "cuda_cells": cells, "peak_bytes": probe.get("peak_bytes"), "cuda_used": probe.get("cuda_used"),
            "table": capstone_gpu.table_text(nb)}


def start_tests(node_ids: list[str], folder: Path) -> subprocess.Popen:
    """Start pytest on the CUDA tests, its JUnit XML report in `folder` (read by `read_outcomes`)."""
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             f"--junitxml={folder / 'junit.xml'}", *node_ids],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def read_outcomes(node_ids: list[str], folder: Path) -> list[dict]:
    """Each CUDA test case's outcome, read from the JUnit XML report of its finished pytest run."""
    if not node_ids:
        return []
    xml = folder / "junit.xml"
    if not xml.exists():
        return [{"test": node, "outcome": "error", "message": "pytest wrote no report"} for node in node_ids]
    cases = []
    for case in ElementTree.parse(xml).iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = (child.get("message") or "").strip().splitlines()[0][:200] if child.get("message") else ""
        cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "seconds": float(case.get("time", 0)),
                      "outcome": outcome, "message": message})
    return cases


def report(device: str, notebooks: list[dict], tests: list[dict], capstone: list[str] = ()) -> str:
    """The Markdown report; `capstone`: the lines of notebook 08's section (capstone_gpu.report_lines)."""
    lines = [f"# make gpu-check, {time.strftime('%Y-%m-%d %H:%M')}", "", f"Device: {device}", "",
             "## Solution notebooks", "",
             "| notebook | time (s) | peak GPU memory (MiB) | errors | CUDA cells passed |",
             "|---|---:|---:|---|---|"]
    for nb in notebooks:
        cells = nb["cuda_cells"]
        passed = sum(v == "passed" for v in cells.values())
        peak = "-" if not nb["peak_bytes"] else f"{nb['peak_bytes'] / 2**20:.0f}"
        problems = len(nb["errors"]) + bool(nb["stopped"])
        lines.append(f"| {nb['notebook']} | {nb['seconds']:.1f} | {peak} | {problems or 'none'} | {passed} of {len(cells)} |")
    for nb in notebooks:
        bad = {cid: v for cid, v in nb["cuda_cells"].items() if v != "passed"}
        if nb["stopped"] or nb["errors"] or bad or nb["stderr"]:
            lines += ["", f"### {nb['notebook']}", ""]
            lines += [f"- stopped: {nb['stopped']}"] if nb["stopped"] else []
            lines += [f"- cell `{cid}` failed: {message}" for cid, message in nb["errors"].items()]
            lines += [f"- CUDA cell `{cid}`: {v}" for cid, v in bad.items() if cid not in nb["errors"]]
            lines += [f"- cell `{cid}` wrote to stderr: {text.splitlines()[0][:150] if text else ''}"
                      for cid, text in nb["stderr"].items()]
    lines += ["", "## Tests with a CUDA branch", ""]
    if tests:
        lines += ["| test | outcome | time (s) | message |", "|---|---|---:|---|"]
        lines += [f"| `{t['test']}` | {t['outcome']} | {t.get('seconds', 0):.1f} | {t['message'].replace('|', '/')} |"
                  for t in tests]
    else:
        lines.append("none found")
    lines += ["", *capstone] if capstone else []
    failed_nb = sum(bool(nb["errors"] or nb["stopped"]) for nb in notebooks)
    failed_tests = sum(t["outcome"] in ("failed", "error") for t in tests)
    lines += ["", f"**Summary:** {len(notebooks) - failed_nb} of {len(notebooks)} notebooks ran cleanly; "
              f"{sum(t['outcome'] == 'passed' for t in tests)} CUDA tests passed, {failed_tests} failed, "
              f"{sum(t['outcome'] == 'skipped' for t in tests)} skipped.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where to write the report (default: a new file in the temporary folder)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds a notebook cell may run (default 1200)")
    parser.add_argument("--only", nargs="*", default=None, help="assignments to run (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run at once (default 1: times undisturbed)")
    parser.add_argument("--executed", type=Path, help="a folder to keep each notebook in, with its outputs")
    args = parser.parse_args(argv)
    why = refusal()
    if why:
        print(why, file=sys.stderr)
        return 2
    import torch
    device = f"{torch.cuda.get_device_name(0)} ({torch.cuda.device_count()} GPU(s)), torch {torch.__version__}, CUDA {torch.version.cuda}"
    if args.jobs > 1:
        device += f"; {args.jobs} notebooks and the tests ran at once: each time includes the others' load"
    print("gpu-check on", device, flush=True)
    if args.executed:
        args.executed.mkdir(parents=True, exist_ok=True)
    nodes = cuda_tests()
    with tempfile.TemporaryDirectory() as folder:
        pytest_run = start_tests(nodes, Path(folder)) if nodes and args.jobs > 1 else None
        # spawn, not fork: this process has made a CUDA context (get_device_name above)
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            runs = [pool.apply_async(run_notebook, (source_path(a), args.timeout, args.executed))
                    for a in args.only or assignments()]
            notebooks = []
            for run in runs:
                notebooks.append(run.get())
                print(f"  {notebooks[-1]['notebook']}: {notebooks[-1]['seconds']:.1f} s, "
                      f"{len(notebooks[-1]['errors'])} failing cells", flush=True)
        print(f"  running {len(nodes)} tests with a CUDA branch", flush=True)
        if nodes:
            (pytest_run or start_tests(nodes, Path(folder))).wait()
        tests = read_outcomes(nodes, Path(folder))
    out = args.out or Path(tempfile.gettempdir()) / f"gpu-check-{time.strftime('%Y%m%d-%H%M%S')}.md"
    capstone, masked = [], {}
    if "08_capstone" in (args.only or assignments()):
        print("  notebook 08: masked rows on each SDPA kernel, a memory snapshot", flush=True)
        masked = capstone_gpu.masked_rows("cuda")
        snapshot = capstone_gpu.memory_snapshot("cuda", out.with_suffix(".snapshot.pickle"))
        table = next((nb["table"] for nb in notebooks if "08_capstone" in nb["notebook"]), None)
        alone = capstone_gpu.masked_rows("cuda", capstone_gpu.sdpa_alone)  # reported, fails nothing
        capstone = capstone_gpu.report_lines(masked, snapshot, table, alone)
    out.write_text(report(device, notebooks, tests, capstone))
    print(f"report: {out}")
    failed = any(nb["errors"] or nb["stopped"] for nb in notebooks) or any(t["outcome"] in ("failed", "error") for t in tests)
    return 1 if failed or capstone_gpu.failed(masked) else 0


if __name__ == "__main__":
    sys.exit(main())
