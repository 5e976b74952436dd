"""Plain sequential nbgrader against `python -m autograder grade`, on two classes, with equal scores.

    make bench-grade        (JOBS=N to change the parallel jobs; default: the number of cores)
    python tests/benchmark_grading.py --class big|small|both        (default: both)

The small class is today's: 13 hand-ins of each of notebooks 02 and 03, bound by the batch's start and its infinite
loop more than by a hand-in's cost. The big class is one of realistic size: 60 hand-ins of notebook 03, two infinite
loops and two truncated files among them, where a hand-in's cost shows. For each class it prints the wall times and
their ratio, the per-submission cost split into running cells and overhead, where that overhead goes (nbgrader's
autograde, the integrity checks, kernel start, feedback, the rest), and the machine's cores and load average while
it ran. With the small class it also prints the same class sent to a Dask scheduler with one local worker against
the local run, and a projection for a term (1000 students, 7 notebooks) from one graded solution of each notebook.
Fails when the scores of plain nbgrader and of this grader differ.
"""

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook

sys.path.insert(0, str(Path(__file__).parent))
from classroom import course_class  # noqa: E402
from handins import write_folder  # noqa: E402
from course import ROOT, assignments, nbgrader, scratch_course, source_path  # noqa: E402

TIMEOUT = "20"


@dataclass(frozen=True)
class Cohort:
    """A class to grade: its notebooks, and how many hand-ins of each kind (tests/classroom.py) per notebook."""
    assignments: tuple[str, ...]
    mix: dict[str, int]
    what: str  # why it is in the bench


COHORTS = {
    "small": Cohort(("02_autograd", "03_modules"),
                    {"right": 5, "wrong": 4, "tests_edited": 1, "unedited": 1, "loop": 1, "truncated": 1},
                    "today's class: bound by the batch's start and its loop"),
    # 03's graded cells run in about 0.15 s beside the set-up cell's import of torch (02's in 1.7 s, 01's in 0.7 s:
    # 02's hidden GELU test alone takes 1.1 s), so this class measures the grader's cost per hand-in, not the cells'.
    "big": Cohort(("03_modules",),
                  {"right": 44, "wrong": 8, "tests_edited": 2, "unedited": 2, "loop": 2, "truncated": 2},
                  "a class of realistic size: one infinite loop and one truncated file in 30"),
}


def make_class(assignment: str, mix: dict[str, int], folder: Path) -> None:
    base = course_class(assignment)
    write_folder(folder, {f"{kind}{k}": base[kind] for kind, n in mix.items() for k in range(n)},
                 source_path(assignment).name)


def stock_nbgrader(course: Path) -> Path:
    """The course's settings, but nbgrader's own grading steps: no sandbox, no checks (plain nbgrader)."""
    from nbgrader.converters import Autograde, GenerateFeedback
    named = {name: [f"{c.__module__}.{c.__qualname__}" for c in cls.class_traits()[trait].default()]
             for name, cls, trait in (("Autograde.autograde_preprocessors", Autograde, "autograde_preprocessors"),
                                      ("GenerateFeedback.preprocessors", GenerateFeedback, "preprocessors"))}
    with open(course / "nbgrader_config.py", "a") as f:
        f.write("".join(f"\nc.{name} = {steps!r}" for name, steps in named.items()) + "\n")
        f.write('c.GenerateFeedback.exporter_class = "nbconvert.exporters.HTMLExporter"\n')
        f.write("c.HTMLExporter.sanitize_html = False\nc.HTMLExporter.filters = {}\n")  # nbconvert's own page
    return course


def plain_nbgrader(course: Path, classes: dict[str, Path]) -> tuple[float, dict]:
    """nbgrader autograde and generate_feedback, as documented, one assignment after the other."""
    for assignment, folder in classes.items():
        nbgrader("generate_assignment", assignment, "--force", cwd=course)  # set-up, not timed
        for student in folder.iterdir():
            if any(student.iterdir()):
                shutil.copytree(student, course / "autograder" / "submitted" / student.name / assignment)
    start = time.perf_counter()
    for assignment in classes:
        # nbgrader exits with an error when any submission fails (the truncated file): the others are graded.
        subprocess.run([sys.executable, "-m", "nbgrader", "autograde", assignment, "--create",
                        f"--Execute.timeout={TIMEOUT}"], cwd=course, capture_output=True)
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", assignment], cwd=course,
                       capture_output=True)
    seconds = time.perf_counter() - start
    scores = {}
    with Gradebook(f"sqlite:///{course}/autograder/gradebook.db") as gb:
        for assignment in classes:
            for submission in gb.assignment_submissions(assignment):
                graded = (course / "autograder" / "autograded" / submission.student.id / assignment).exists()
                scores[(assignment, submission.student.id)] = submission.score if graded else None
    return seconds, scores


def ours(course: Path, classes: dict[str, Path], jobs: int, *args: str) -> tuple[float, dict, list[dict]]:
    start = time.perf_counter()
    for assignment, folder in classes.items():
        done = subprocess.run([sys.executable, "-m", "autograder", "grade", assignment, str(folder), "--jobs", str(jobs),
                               "--timeout", TIMEOUT, "--course", str(course), *args], cwd=ROOT, capture_output=True,
                               text=True)
        if done.returncode:  # what the grader said (a missing sandbox, say), not only that it failed
            sys.exit(f"make grade of {assignment} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    seconds = time.perf_counter() - start
    scores, results = {}, []
    for assignment in classes:
        out = course / "autograder" / "grades" / assignment
        for row in csv.DictReader(open(out / "grades.csv")):
            scores[(assignment, row["student_id"])] = float(row["score"]) if row["status"] != "invalid" else None
        results += [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    return seconds, scores, results


@contextmanager
def dask_cluster(folder: Path, threads: int):
    """A dask.distributed scheduler and one worker with `threads` threads on the loopback address: its address."""
    folder.mkdir(parents=True)
    file = folder / "scheduler.json"
    dask = [str(Path(sys.executable).parent / "dask")]
    quiet = dict(cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    scheduler = subprocess.Popen(dask + ["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                         "--scheduler-file", str(file)], **quiet)
    worker = subprocess.Popen(dask + ["worker", "--scheduler-file", str(file), "--nthreads", str(threads),
                                      "--no-dashboard", "--no-nanny"], **quiet)
    try:
        from distributed import Client
        while not file.exists():
            time.sleep(0.2)
        address = json.loads(file.read_text())["address"]
        with Client(address, timeout=60) as client:
            client.wait_for_workers(1, timeout=120)
        yield address
    finally:
        for process in (worker, scheduler):
            os.killpg(process.pid, signal.SIGTERM)
            process.wait()


def projection(folder: Path, jobs: int) -> list[tuple[str, float, float]]:
    """(assignment, seconds, cells' seconds) of grading a right hand-in of each notebook, `jobs` copies at once (so
    that each grading has one core, as in a class): the core-seconds one hand-in costs."""
    found = []
    course = scratch_course(folder / "course", ROOT / "solutions")
    for assignment in assignments():
        hand_in = folder / assignment
        right = course_class(assignment)["right"]
        write_folder(hand_in, {f"right{k}": right for k in range(jobs)}, source_path(assignment).name)
        _, _, results = ours(course, {assignment: hand_in}, jobs)
        found.append((assignment, sum(r["seconds"] for r in results) / len(results),
                      sum(r["execute_seconds"] for r in results) / len(results)))
    return found


def load() -> str:
    """The machine's load average over 1, 5 and 15 minutes."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def print_overhead(results: list[dict]) -> None:
    """Per hand-in graded without a problem: its cells' time, and where the rest of its grading process's time went."""
    graded = [r for r in results if r["status"] == "graded" and r.get("execute_seconds")]
    n = max(1, len(graded))
    run = sum(r.get("execute_seconds", 0) for r in graded) / n
    overhead = sum(r["seconds"] - r.get("execute_seconds", 0) for r in graded) / n
    checks = sum(r.get("check_seconds", 0) for r in graded) / n
    print(f"per submission ({len(graded)} graded without a problem), in a grading process: {run:.2f} s running cells, "
          f"{overhead:.2f} s beyond that ({100 * overhead / max(run, 1e-9):.0f}% of the cells' time; of it {checks:.2f} s "
          f"of integrity checks; target: at most 0.3 s)")
    phases = {}
    for r in graded:
        for name, seconds in r.get("phases", {}).items():
            phases[name] = phases.get(name, 0.0) + seconds / n
    rest = overhead - sum(phases.values())
    print("where the overhead goes, per submission: " + ", ".join(
        f"{name} {seconds:.2f} s" for name, seconds in sorted(phases.items(), key=lambda p: -p[1])) +
          f", the rest of the grading process {rest:.2f} s")


def bench_class(name: str, cohort: Cohort, folder: Path, jobs: int) -> tuple[dict[str, Path], float, dict, bool]:
    """Grade one class with plain nbgrader and with this grader, print the comparison: the class's folders, this
    grader's wall time and scores, and whether all scores agree."""
    classes = {}
    for assignment in cohort.assignments:
        classes[assignment] = folder / "class" / assignment
        make_class(assignment, cohort.mix, classes[assignment])
    n = sum(len(list(f.iterdir())) for f in classes.values())
    print(f"\n{name} class, {cohort.what}: {n} submissions of {', '.join(cohort.assignments)} "
          f"({', '.join(f'{k}×{v}' for k, v in cohort.mix.items())} each)")
    loads = [load()]
    base_s, base = plain_nbgrader(stock_nbgrader(scratch_course(folder / "plain", ROOT / "solutions",
                                                                cohort.assignments)), classes)
    loads.append(load())
    our_s, our, results = ours(scratch_course(folder / "ours", ROOT / "solutions", cohort.assignments), classes, jobs)
    loads.append(load())
    print(f"plain nbgrader, sequential (autograde + generate_feedback): {base_s:6.1f} s  ({base_s / n:.2f} s per submission)")
    print(f"python -m autograder grade --jobs {jobs}:                    {our_s:6.1f} s  ({our_s / n:.2f} s per submission)")
    print(f"ratio vs plain nbgrader: {base_s / our_s:.2f} (target: at least 5)")
    print_overhead(results)
    inside = sum(r.get("seconds", 0) for r in results) / n
    print(f"per submission in the batch: {our_s * jobs / n:.2f} core-seconds (wall time x jobs / submissions), "
          f"{inside:.2f} s of it in its grading process, {our_s * jobs / n - inside:.2f} s outside any (the batch's start "
          f"and end, its report, starting each grading process, slots left idle by the last hand-ins)")
    print(f"machine: {os.cpu_count()} cores, load average (1/5/15 min) {loads[0]} at the start, {loads[1]} after plain "
          f"nbgrader, {loads[2]} at the end")
    differ = {k: (base.get(k), our.get(k)) for k in our if base.get(k) != our.get(k)}
    print("scores: " + ("all agree" if not differ else f"{len(differ)} differ (plain nbgrader, ours): {differ}"))
    return classes, our_s, our, not differ


def bench_dask(folder: Path, classes: dict[str, Path], jobs: int, local_s: float, local: dict) -> bool:
    """The same class on a Dask scheduler against the local run: print the ratio; whether the scores agree."""
    with dask_cluster(folder / "dask", jobs) as address:
        dask_s, on_dask, _ = ours(scratch_course(folder / "on-dask", ROOT / "solutions", tuple(classes)), classes, jobs,
                                  "--scheduler", address)
    print(f"the same class on a Dask scheduler, one local worker with {jobs} threads: {dask_s:6.1f} s; "
          f"ratio to the local run: {local_s / dask_s:.2f}")
    wrong = {k: (local.get(k), on_dask.get(k)) for k in local if local.get(k) != on_dask.get(k)}
    print("scores on Dask: " + ("agree" if not wrong else f"{len(wrong)} differ (local, Dask): {wrong}"))
    return not wrong


def print_projection(folder: Path, jobs: int) -> None:
    term = projection(folder, jobs)
    core_seconds = sum(seconds for _, seconds, _ in term)
    print(f"a right hand-in of each notebook, {jobs} graded at once: " +
          ", ".join(f"{a.split('_')[0]} {s:.1f} s ({c:.1f} s cells)" for a, s, c in term))
    print(f"projection, 1000 students x {len(term)} notebooks on 16 cores (one grading per core, this machine's "
          f"per-core speed): {1000 * core_seconds / 16 / 60:.0f} min (target: under 10); on this machine's {os.cpu_count()} cores: "
          f"{1000 * core_seconds / (os.cpu_count() or 1) / 3600:.1f} h")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--class", dest="which", choices=(*COHORTS, "both"), default="both",
                        help="the class to grade (default: both)")
    names = list(COHORTS) if (which := parser.parse_args().which) == "both" else [which]
    jobs = int(os.environ.get("JOBS") or os.cpu_count() or 1)
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # nbgrader runs alembic
    print(f"{os.cpu_count()} cores, {jobs} jobs")
    agree = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            folder = Path(tmp) / name
            classes, our_s, our, same = bench_class(name, COHORTS[name], folder, jobs)
            agree &= same
            if name == "small":  # today's extras, on today's class
                agree &= bench_dask(folder, classes, jobs, our_s, our)
                print_projection(folder / "projection", jobs)
    if not agree:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
