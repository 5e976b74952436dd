"""The repository as an instructor gets it: a fresh copy of its files under /tmp, its own nbgrader_config.py untouched,
set up with `make setup` and graded with `make grade` by an ordinary user.

Run as root (as CI is), the tests make their accounts (`useradd`) and drop to them for every command: nothing the
course does may need root, and root ignores the file modes an ordinary user meets. Run as an ordinary user, every
person is that user with a home folder of their own.

The copy is made once per run of the suite, by the first test that needs it (under a lock: xdist's workers share it),
in the folder conftest.py makes for the run (PLACE_VARIABLE) and removes after it.
"""

import csv
import fcntl
import os
import pwd
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course import ROOT

PLACE_VARIABLE = "COURSE_TESTS_PLACE"  # the run's folder under /tmp, which every account of the tests may enter
PASSED = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CERT", "PIP_DEFAULT_TIMEOUT",
          "PIP_DISABLE_PIP_VERSION_CHECK", "LANG", "OMP_NUM_THREADS", "MKL_NUM_THREADS")  # what a machine gives every user
AS_ROOT = os.geteuid() == 0


@dataclass
class Account:
    """A person at this machine: an ordinary user with a home of their own."""
    name: str
    home: Path

    def run(self, command: str, cwd: Path, check: bool = True, timeout: int = 3600) -> subprocess.CompletedProcess:
        """`command` in a login-like environment of this user's (none of the test's variables but those in PASSED)."""
        env = {"HOME": str(self.home), "USER": self.name, "LOGNAME": self.name, "TMPDIR": "/tmp",
               "PATH": "/usr/local/bin:/usr/bin:/bin" if AS_ROOT else os.environ["PATH"],
               **{k: os.environ[k] for k in PASSED if k in os.environ}}
        prefix = ["runuser", "-u", self.name, "--"] if AS_ROOT else []
        done = subprocess.run([*prefix, "env", "-i", *[f"{k}={v}" for k, v in env.items()], "bash", "-c", command],
                              cwd=cwd, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode:
            raise AssertionError(f"{self.name}: `{command}` failed ({done.returncode}) in {cwd}:\n"
                                 f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
        return done

    def give(self, path: Path) -> None:
        """Make `path` (and all in it) this user's, as if they had made it."""
        if AS_ROOT:
            subprocess.run(["chown", "-R", f"{self.name}:", str(path)], check=True)


def place() -> Path:
    """This run's folder under /tmp, made by conftest.py."""
    return Path(os.environ[PLACE_VARIABLE])


def account(name: str) -> Account:
    """The account `name` (made, as root; as an ordinary user, the test's own), with a fresh home in this run's
    folder, so that nothing of an earlier run (nbgrader's caches, a fetched assignment) is there."""
    home = place() / "homes" / name
    home.mkdir(parents=True, exist_ok=True)
    if not AS_ROOT:
        return Account(pwd.getpwuid(os.getuid()).pw_name, home)
    with open(place() / ".accounts.lock", "w") as lock:  # xdist's workers may make the same account at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/bash", name], check=True)
    person = Account(name, home)
    person.give(home)
    return person


def instructor() -> Account:
    return account("course-instructor")


def shipped_files() -> list[str]:
    """The repository's files as a clone has them (and the work in progress git does not ignore)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    return [f for f in listed.split("\0") if f and (ROOT / f).exists()]


def course() -> Path:
    """The repository copied under /tmp, owned by the instructor and set up by them with `make setup`: once per run."""
    folder = place() / "pytorch-course"
    with open(place() / ".course.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".venv" / ".installed").exists():
            shutil.rmtree(folder, ignore_errors=True)
            for name in shipped_files():
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, folder / name)
            instructor().give(folder)
            instructor().run("make setup", cwd=folder)
    return folder


def make_grade(assignment: str, submissions: Path | None = None, args: str = "", jobs: int | None = None,
               check: bool = True) -> subprocess.CompletedProcess:
    """`make grade` by the instructor in the shipped course, as the README gives it."""
    given = f" SUBMISSIONS={shlex.quote(str(submissions))}" if submissions else ""
    extra = (f" ARGS={shlex.quote(args)}" if args else "") + (f" JOBS={jobs}" if jobs else "")
    return instructor().run(f"make grade ASSIGNMENT={assignment[:2]}{given}{extra}", cwd=course(), check=check)


def write_hand_ins(folder: Path, notebooks: dict, name: str) -> Path:
    """One sub-folder per student holding their notebook, the instructor's to read."""
    for student, nb in notebooks.items():
        (folder / student).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / student / name)
    instructor().give(folder)
    return folder


def table(path: Path) -> dict[str, dict]:
    """grades.csv's rows by student id."""
    with open(path, newline="") as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


def exported(assignment: str) -> dict[str, float]:
    """gradebook id -> score, as `nbgrader export` gives the course's gradebook."""
    instructor().run(". .venv/bin/activate && nbgrader export --to=export.csv", cwd=course())
    with open(course() / "export.csv", newline="") as f:
        return {r["student_id"]: float(r["score"]) for r in csv.DictReader(f) if r["assignment"] == assignment}
