"""Plain sequential nbgrader against `python -m autograder grade`, on the same class of notebooks 02 and 03.

    make bench-grade        (JOBS=N to change the parallel jobs; default: the number of cores)

Prints, from one run: the wall times and their ratio, the per-submission cost split into running cells and
overhead, the same class sent to a Dask scheduler with one local worker against the local run, and a projection
for a term (1000 students, 7 notebooks) from one graded solution of each notebook. Fails when the scores of plain
nbgrader and of this grader differ.
"""

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
from pathlib import Path

from nbgrader.api import Gradebook

sys.path.insert(0, str(Path(__file__).parent))
from classroom import course_class  # noqa: E402
from handins import write_folder  # noqa: E402
from course import ROOT, assignments, nbgrader, scratch_course, source_path  # noqa: E402

ASSIGNMENTS = ("02_autograd", "03_modules")
TIMEOUT = "20"
# 13 submissions per notebook: right and wrong answers, an unedited notebook, an infinite loop, a truncated file.
MIX = {"right": 5, "wrong": 4, "tests_edited": 1, "unedited": 1, "loop": 1, "truncated": 1}


def make_class(assignment: str, folder: Path) -> None:
    base = course_class(assignment)
    write_folder(folder, {f"{kind}{k}": base[kind] for kind, n in MIX.items() for k in range(n)},
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
        subprocess.run([sys.executable, "-m", "autograder", "grade", assignment, str(folder), "--jobs", str(jobs),
                        "--timeout", TIMEOUT, "--course", str(course), *args], cwd=ROOT, check=True, capture_output=True)
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


def main() -> None:
    jobs = int(os.environ.get("JOBS") or os.cpu_count() or 1)
    env_path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ["PATH"] = env_path  # nbgrader runs alembic
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        classes = {}
        for assignment in ASSIGNMENTS:
            classes[assignment] = tmp / "class" / assignment
            make_class(assignment, classes[assignment])
        n = sum(len(list(f.iterdir())) for f in classes.values())
        print(f"class: {n} submissions of {', '.join(ASSIGNMENTS)} ({', '.join(f'{k}×{v}' for k, v in MIX.items())} "
              f"each); {os.cpu_count()} cores, {jobs} jobs")
        base_s, base = plain_nbgrader(stock_nbgrader(scratch_course(tmp / "plain", ROOT / "solutions", ASSIGNMENTS)), classes)
        our_s, our, results = ours(scratch_course(tmp / "ours", ROOT / "solutions", ASSIGNMENTS), classes, jobs)
        with dask_cluster(tmp / "dask", jobs) as address:
            dask_s, on_dask, _ = ours(scratch_course(tmp / "on-dask", ROOT / "solutions", ASSIGNMENTS), classes, jobs,
                                      "--scheduler", address)
        term = projection(tmp / "projection", jobs)
    differ = {k: (base.get(k), our.get(k)) for k in our if base.get(k) != our.get(k)}
    executed = [r for r in results if r["execute_seconds"]]
    overhead = sum(r["seconds"] - r["execute_seconds"] for r in executed) / max(1, len(executed))
    run = sum(r["execute_seconds"] for r in executed) / max(1, len(executed))
    checks = sum(r.get("check_seconds", 0) for r in executed) / max(1, len(executed))
    print(f"plain nbgrader, sequential (autograde + generate_feedback): {base_s:6.1f} s  ({base_s / n:.2f} s per submission)")
    print(f"python -m autograder grade --jobs {jobs}:                    {our_s:6.1f} s  ({our_s / n:.2f} s per submission)")
    print(f"ratio vs plain nbgrader: {base_s / our_s:.2f} (target: at least 5)")
    print(f"per submission, in a grading process: {run:.2f} s running cells, {overhead:.2f} s beyond that "
          f"({100 * overhead / run:.0f}% of the cells' time; of it {checks:.2f} s of integrity checks, the rest kernel "
          f"start and stop, nbgrader's steps, feedback; target: at most 0.3 s)")
    phases = {}
    for r in executed:
        for name, seconds in r.get("phases", {}).items():
            phases[name] = phases.get(name, 0.0) + seconds / len(executed)
    rest = overhead - sum(phases.values())
    print("where the overhead goes, per submission: " + ", ".join(
        f"{name} {seconds:.2f} s" for name, seconds in sorted(phases.items(), key=lambda p: -p[1])) +
          f", the grading process's own start and end {rest:.2f} s")
    print(f"the same class on a Dask scheduler, one local worker with {jobs} threads: {dask_s:6.1f} s; "
          f"ratio to the local run: {our_s / dask_s:.2f}")
    core_seconds = sum(seconds for _, seconds, _ in term)
    print(f"a right hand-in of each notebook, {jobs} graded at once: " +
          ", ".join(f"{a.split('_')[0]} {s:.1f} s ({c:.1f} s cells)" for a, s, c in term))
    print(f"projection, 1000 students x {len(term)} notebooks on 16 cores (one grading per core, this machine's "
          f"per-core speed): {1000 * core_seconds / 16 / 60:.0f} min (target: under 10); on this machine's {os.cpu_count()} cores: "
          f"{1000 * core_seconds / (os.cpu_count() or 1) / 3600:.1f} h")
    wrong = {k: (our.get(k), on_dask.get(k)) for k in our if our.get(k) != on_dask.get(k)}
    print("scores: " + ("all agree" if not differ else f"{len(differ)} differ (plain nbgrader, ours): {differ}") +
          ("; Dask agrees" if not wrong else f"; {len(wrong)} differ on Dask (local, Dask): {wrong}"))
    if differ or wrong:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
