"""Launch after launch: every cell of 06 and 07 that calls `launch`, run again and again in one notebook kernel.

    .venv/bin/python tests/benchmark_launch.py                     # 06 and 07, 10 rounds each, quiet
    .venv/bin/python tests/benchmark_launch.py --rounds 20 --load 2 06_ddp   # 2 busy processes beside it
    .venv/bin/python tests/benchmark_launch.py --rounds 100 --only fsdp-step-code 06_ddp    # one cell, 200 launches

Each notebook runs top to bottom once in a fresh kernel (its lesson, answers and tests defined, as a student's kernel
has them); then, for each round, every cell that names `launch` runs again, each under the grader's cell limit. A
cell that raises or outlives the limit is a failure: its error (launch's own, naming the rank and what it waited
on) is printed. The kernel counts the launches, and the groups that failed to form (launch then starts every rank
again: the worker had run on none). Prints, per cell: runs, failures, median and slowest seconds; then the launches,
each formation failure, and the machine's load average; exits 1 when any cell failed.
Not a test: minutes, not seconds.
"""

import argparse
import ast
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from jupyter_client.manager import KernelManager

sys.path.insert(0, str(Path(__file__).parent))
from course import read, source_path  # noqa: E402

ASSIGNMENTS = ("06_ddp", "07_checkpointing")
CELL_LIMIT_S = 120  # the grader's per-cell limit (nbgrader_config.py): a cell that needs longer has hung
SETUP_LIMIT_S = 300  # the whole notebook, once: 06's scaling cell alone trains 3 times


def counting(namespace: dict) -> None:
    """Run in the kernel: wrap the notebook's `launch` (the cells call it by that global name, directly or as
    outcome(launch, ...)) to count the launches, and launch's tries to keep each group that failed to form (the ranks
    then start again): `_benchmark` holds [launches], [why each formation failed]."""
    import torchcourse.launch as launcher
    launches, unformed = [0], []
    notebooks_launch, one_try = namespace["launch"], launcher._Ranks.run

    def launch(*args, **kwargs):
        launches[0] += 1
        return notebooks_launch(*args, **kwargs)

    def counted_try(self, *args, **kwargs):
        try:
            return one_try(self, *args, **kwargs)
        except launcher._Unformed as error:
            unformed.append(f"{error}{error.details}"[-400:])
            raise

    launcher._Ranks.run = counted_try
    namespace.update(launch=launch, _benchmark=(launches, unformed))


def names_launch(source: str) -> bool:
    """True if the cell's code reads the name `launch` (calls it, or hands it to outcome), not just imports it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # an IPython magic: none of the launching cells has one
        return False
    return any(isinstance(node, ast.Name) and node.id == "launch" for node in ast.walk(tree))


class Kernel:
    """A notebook kernel started in the notebook's folder, as Jupyter starts it; `run` executes one cell."""

    def __init__(self, folder: Path):
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(cwd=str(folder))
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def run(self, code: str, limit: float) -> tuple[str | None, float]:
        """Execute `code`; return (None, seconds) when it succeeded, else (what went wrong, seconds)."""
        start = time.perf_counter()
        try:
            reply = self.client.execute_interactive(code, timeout=limit, output_hook=lambda message: None)
        except TimeoutError:
            self.manager.interrupt_kernel()  # as the grader does at its limit: launch then stops the ranks
            try:
                self.client.execute_interactive("", timeout=30, output_hook=lambda message: None)
            except TimeoutError:
                self.manager.restart_kernel(now=True)
                return f"hung past {limit:g} s, and the interrupt did not stop it (kernel restarted)", limit
            return f"hung past {limit:g} s (interrupted)", time.perf_counter() - start
        seconds = time.perf_counter() - start
        content = reply["content"]
        if content["status"] != "ok":
            return f"{content.get('ename')}: {content.get('evalue')}", seconds
        return None, seconds

    def value(self, expression: str) -> str:
        """repr of an expression evaluated in the kernel."""
        reply = self.client.execute_interactive("", user_expressions={"v": expression}, timeout=30,
                                                output_hook=lambda message: None)
        return reply["content"]["user_expressions"]["v"]["data"]["text/plain"]

    def close(self):
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def busy(processes: int) -> list[subprocess.Popen]:
    """`processes` CPU-bound processes beside the benchmark (stress-ng where installed), for a loaded machine."""
    if processes and shutil.which("stress-ng"):
        return [subprocess.Popen(["stress-ng", "--cpu", str(processes), "--quiet"])]
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]


def bench(assignment: str, rounds: int, only: set[str]) -> tuple[list[str], int]:
    """Run the assignment's launching cells (those in `only`, if given) `rounds` times in one kernel; print a table;
    return the failures and the number of launches."""
    path = source_path(assignment)
    cells = [cell for cell in read(path).cells if cell.cell_type == "code"]
    launching = [cell for cell in cells if names_launch(cell.source) and (not only or cell.id in only)]
    kernel = Kernel(path.parent)
    failures, times = [], {cell.id: [] for cell in launching}
    try:
        start = time.perf_counter()
        for cell in cells:
            error, _ = kernel.run(cell.source, SETUP_LIMIT_S)
            if error:
                return [f"{assignment}, first run, cell {cell.id}: {error}"], 0
        print(f"{assignment}: the whole notebook ran in {time.perf_counter() - start:.1f} s; "
              f"{len(launching)} cells launch, {rounds} rounds", flush=True)
        error, _ = kernel.run(f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                              "from benchmark_launch import counting; counting(globals())", 60)
        assert error is None, error
        for round_ in range(rounds):
            for cell in launching:
                error, seconds = kernel.run(cell.source, CELL_LIMIT_S)
                times[cell.id].append(seconds)
                if error:
                    failures.append(f"{assignment}, round {round_}, cell {cell.id}: {error}")
                    print("FAILED:", failures[-1], flush=True)
        launches = int(kernel.value("_benchmark[0][0]"))
        unformed = ast.literal_eval(kernel.value("_benchmark[1]"))
    finally:
        kernel.close()
    width = max(len(cell_id) for cell_id in times)
    print(f"{'cell':{width}} {'runs':>5} {'failed':>6} {'median s':>9} {'max s':>7}")
    for cell_id, seconds in times.items():
        failed = sum(f", cell {cell_id}:" in line for line in failures)
        print(f"{cell_id:{width}} {len(seconds):5} {failed:6} {statistics.median(seconds):9.2f} {max(seconds):7.2f}")
    print(f"{assignment}: groups that failed to form (every rank started again): {len(unformed)}")
    for why in unformed:
        print("   ", why.replace("\n", " | "))
    print(f"{assignment}: {launches} launches in {sum(map(sum, times.values())):.0f} s, {len(failures)} cells failed; "
          f"load average now {os.getloadavg()[0]:.1f} (1 min), {os.getloadavg()[1]:.1f} (5 min)", flush=True)
    return failures, launches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", default=ASSIGNMENTS)
    parser.add_argument("--rounds", type=int, default=10, help="times every launching cell runs (default 10)")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the kernel (default 0: quiet)")
    parser.add_argument("--only", default="", help="ids of the launching cells to repeat, comma-separated "
                                                    "(default: all)")
    options = parser.parse_args()
    only = {cell_id for cell_id in options.only.split(",") if cell_id}
    load = busy(options.load)
    try:
        results = [bench(assignment, options.rounds, only) for assignment in options.assignments]
    finally:
        for process in load:
            process.terminate()
            process.wait()
    failures = [line for lines, _ in results for line in lines]
    print(f"all: {sum(n for _, n in results)} launches, {len(failures)} cells failed, with {options.load} busy "
          f"processes beside, on {os.cpu_count()} cores; load average {os.getloadavg()[1]:.1f} over the last 5 min")
    for line in failures:
        print("  ", line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
