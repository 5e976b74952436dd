"""The instructor's path as the README gives it, on the repository as shipped: a fresh copy of its files under /tmp,
its own nbgrader_config.py untouched, `make setup` and `make grade` run by an ordinary user, students who are other
ordinary users on a Hub, and an LMS export holding every awkward thing one can hold.

Run as root (as CI is), the test makes its accounts (`useradd`) and drops to them for every command: nothing the
course does may need root, and root ignores the file modes an ordinary user meets. Run as an ordinary user, every
person is that user with a home folder of their own, and each student's nbgrader settings give their id (nbgrader
otherwise names a submitter by their account).
"""

import csv
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from course import (ROOT, answer_ids, assignments, grading, graded_cells_of, hidden_test_lines, read, release_path, solution_answers,
                    source_path, with_answers, wrong_answers)
from handins import html_text, leaked

pytestmark = [pytest.mark.sandbox, pytest.mark.slow, pytest.mark.xdist_group("as-shipped")]
PASSED = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CERT", "PIP_DEFAULT_TIMEOUT",
          "PIP_DISABLE_PIP_VERSION_CHECK", "LANG")  # what a machine's own set-up gives every user
AS_ROOT = os.geteuid() == 0
HUB = "01_tensors"  # the assignment of the Hub's term and of the LMS export: the quickest to grade


@dataclass
class Account:
    """A person at this machine: an ordinary user with a home of their own."""
    name: str
    home: Path

    def run(self, command: str, cwd: Path, check: bool = True, timeout: int = 1200) -> subprocess.CompletedProcess:
        """`command` in a login-like environment of this user's (no variable of the test's but the package index)."""
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


def account(name: str, place: Path) -> Account:
    """The account `name` (made, as root); as an ordinary user, the test's own, with a home of its own in `place`."""
    if not AS_ROOT:
        home = place / "homes" / name
        home.mkdir(parents=True, exist_ok=True)
        return Account(pwd.getpwuid(os.getuid()).pw_name, home)
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
    return Account(name, Path(pwd.getpwnam(name).pw_dir))


def shipped_files() -> list[str]:
    """The repository's files as a clone has them (and the work in progress git does not ignore)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    return [f for f in listed.split("\0") if f and (ROOT / f).exists()]


@pytest.fixture(scope="module")
def place():
    """A folder under /tmp that every account of the test may enter (as /tmp's own folders are)."""
    folder = Path(tempfile.mkdtemp(prefix="pytorch-course-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def instructor(place):
    return account("course-instructor", place)


@pytest.fixture(scope="module")
def course(place, instructor):
    """The repository copied under /tmp, owned by the instructor, set up by them with `make setup`."""
    folder = place / "pytorch-course"
    for name in shipped_files():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, folder / name)
    instructor.give(folder)
    instructor.run("make setup", cwd=folder)
    return folder


def make_grade(instructor: Account, course: Path, assignment: str, submissions: Path | None = None,
               args: str = "", check: bool = True) -> subprocess.CompletedProcess:
    given = f" SUBMISSIONS={shlex.quote(str(submissions))}" if submissions else ""
    extra = f" ARGS={shlex.quote(args)}" if args else ""
    return instructor.run(f"make grade ASSIGNMENT={assignment[:2]}{given}{extra}", cwd=course, check=check)


def table(path: Path) -> dict[str, dict]:
    with open(path, newline="") as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


def exported(instructor: Account, course: Path, assignment: str) -> dict[str, float]:
    """gradebook id -> score, as `nbgrader export` gives the course's gradebook."""
    instructor.run(".venv/bin/nbgrader export --to=export.csv", cwd=course)
    with open(course / "export.csv", newline="") as f:
        return {r["student_id"]: float(r["score"]) for r in csv.DictReader(f) if r["assignment"] == assignment}


def hand_ins(assignment: str) -> dict[str, nbformat.NotebookNode]:
    """As students write them: the solution's code without nbgrader's markers, the release unedited, and the first
    catalogued wrong answer of the first exercise (the other answers right)."""
    release, right = read(release_path(assignment)), solution_answers(assignment)
    first = answer_ids(release)[0]
    wrong = next(iter(wrong_answers(assignment)["WRONG"][first].values())).strip()
    return {"solution": with_answers(release, right), "unedited": release,
            "wrong": with_answers(release, {**right, first: wrong})}


def write_hand_ins(folder: Path, notebooks: dict, name: str, owner: Account) -> Path:
    for student, nb in notebooks.items():
        (folder / student).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / student / name)
    owner.give(folder)
    return folder


def exercise_points(row: dict, assignment: str) -> dict[str, tuple[float, float]]:
    """answer grade_id -> (points earned, points possible), from a row of grades.csv."""
    source = read(source_path(assignment))
    points = {grading(c)["grade_id"]: float(grading(c)["points"]) for c in source.cells if grading(c).get("grade")}
    return {answer: (sum(float(row[t]) for t in graded_cells_of(source, answer)),
                     sum(points[t] for t in graded_cells_of(source, answer))) for answer in answer_ids(source)}


@pytest.fixture(scope="module")
def graded(course, place, instructor):
    """graded(assignment) -> grades.csv's rows after `make grade` on its three hand-ins (once per assignment)."""
    done = {}

    def grade(assignment):
        if assignment not in done:
            submissions = write_hand_ins(place / "hand-ins" / assignment, hand_ins(assignment),
                                         source_path(assignment).name, instructor)
            result = make_grade(instructor, course, assignment, submissions)
            rows = table(course / "autograder" / "grades" / assignment / "grades.csv")
            print(f"{assignment}: " + ", ".join(f"{s} {r['score']}/{r['max_score']} {r['status']}"
                                                  for s, r in rows.items()))
            done[assignment] = rows, result
        return done[assignment]
    return grade


@pytest.mark.parametrize("assignment", assignments())
def test_make_grade_as_shipped(graded, assignment):
    """Full marks for the solution's code, 0 for the release, and a catalogued wrong answer loses points of its own
    exercise alone: `make grade` by an ordinary user, on a copy of the repository under /tmp."""
    rows, _ = graded(assignment)
    assert sorted(rows) == ["solution", "unedited", "wrong"]
    assert all(r["status"] == "graded" for r in rows.values()), {s: r["message"] for s, r in rows.items()}
    solution, unedited, wrong = rows["solution"], rows["unedited"], rows["wrong"]
    assert float(solution["score"]) == float(solution["max_score"]) > 0, solution
    assert float(unedited["score"]) == 0, unedited
    first = answer_ids(read(source_path(assignment)))[0]
    for answer, (got, best) in exercise_points(wrong, assignment).items():
        assert (got < best) if answer == first else (got == best), (answer, got, best)


def test_a_regrade_by_the_same_user_grades_only_what_changed(graded, course, place, instructor):
    """One hand-in changed, `make grade` again by the same (ordinary) user: nbgrader left its notebooks read-only,
    yet only that hand-in is graded again, and grades.csv, the gradebook and `nbgrader export` agree."""
    assignment = "02_autograd"
    before, _ = graded(assignment)
    name = source_path(assignment).name
    write_hand_ins(place / "hand-ins" / assignment, {"wrong": hand_ins(assignment)["solution"]}, name, instructor)
    again = make_grade(instructor, course, assignment, place / "hand-ins" / assignment)
    assert "3 students, 1 to grade" in again.stderr, again.stderr
    rows = table(course / "autograder" / "grades" / assignment / "grades.csv")
    assert float(rows["wrong"]["score"]) == float(rows["wrong"]["max_score"]) > float(before["wrong"]["score"])
    assert {s: float(r["score"]) for s, r in rows.items()} == exported(instructor, course, assignment)


def test_the_hub_term_with_students_as_other_users(course, place, instructor):
    """The README's Hub flow, each person an account of their own: release, fetch, submit, collect, `make grade`
    with no SUBMISSIONS, release_feedback, fetch_feedback."""
    exchange = place / "exchange"
    exchange.mkdir()
    exchange.chmod(0o777)  # as a Hub's administrator makes it
    names = ("course-alice", "course-bob")
    students = [account(n, place) for n in names]
    settings = f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\nc.CourseDirectory.course_id = 'pytorch-course'\n"
    for person, name in ((instructor, None), *zip(students, names)):  # the Hub's settings, as its administrator writes
        (person.home / ".jupyter").mkdir(exist_ok=True)
        (person.home / ".jupyter" / "nbgrader_config.py").write_text(
            settings + (f"c.CourseDirectory.student_id = {name!r}\n" if name and not AS_ROOT else ""))
        person.give(person.home / ".jupyter")
    nbgrader = f". {course}/.venv/bin/activate && nbgrader"  # as the README says: nbgrader runs alembic from there
    instructor.run(f"{nbgrader} generate_assignment {HUB} --force && nbgrader release_assignment {HUB}", cwd=course)
    right, name = solution_answers(HUB), source_path(HUB).name
    for k, student in enumerate(students):
        work = student.home / "work"
        work.mkdir(exist_ok=True)
        student.give(work)
        student.run(f"{nbgrader} fetch_assignment {HUB}", cwd=work)
        path = work / HUB / name
        nb = nbformat.read(path, as_version=4)  # alice answers everything, bob nothing
        nbformat.write(with_answers(nb, right) if k == 0 else nb, path)
        student.give(path)
        student.run(f"{nbgrader} submit {HUB}", cwd=work)
    instructor.run(f"{nbgrader} collect {HUB}", cwd=course)
    make_grade(instructor, course, HUB)
    instructor.run(f"{nbgrader} release_feedback {HUB}", cwd=course)
    rows = table(course / "autograder" / "grades" / HUB / "grades.csv")
    alice, bob = (rows[name] for name in names)
    assert float(alice["score"]) == float(alice["max_score"]) > 0 and float(bob["score"]) == 0, rows
    hidden = [line for line in hidden_test_lines(read(source_path(HUB)))[0] if len(line) >= 20]
    assert hidden
    for student, marker in zip(students, ("alice", "bob")):
        student.run(f"{nbgrader} fetch_feedback {HUB}", cwd=student.home / "work")
        pages = sorted((student.home / "work" / HUB / "feedback").glob("*/*.html"))
        assert len(pages) == 1, pages
        assert not leaked(html_text(pages[0]), hidden)


AWKWARD = {  # student id as the LMS gives it -> what they handed in ("release": the unedited notebook)
    "+alice": "release", "-bob": "release", "@carol": "release", "=dave": "release",
    "José": "release", "Josè": "release", "张伟": "release", "王芳": "release",
    "bob smith": "release", "bob\nsmith": "release", "x" * 250: "release",
}


def awkward_folder(folder: Path, owner: Account) -> Path:
    """A folder of hand-ins with awkward names, a link to another student's folder, and a student who handed in two
    copies, the newer of them broken."""
    release = nbformat.writes(read(release_path(HUB)))
    name = source_path(HUB).name
    for student in AWKWARD:
        (folder / student).mkdir(parents=True)
        (folder / student / name).write_text(release)
    (folder / "mallory").symlink_to(folder / "José")
    (folder / "twice" / "old").mkdir(parents=True)
    (folder / "twice" / "old" / name).write_text(release)
    (folder / "twice" / name).write_text(release[:1000])
    os.utime(folder / "twice" / "old" / name, (1e9, 1e9))
    owner.give(folder)
    return folder


def test_awkward_hand_ins_in_a_folder_each_get_their_own_row(course, place, instructor):
    """Every id kept as given (one row each, no two students merged), no cell a spreadsheet would run, a link not
    followed, two copies said."""
    folder = awkward_folder(place / "awkward", instructor)
    out = place / "awkward-out"
    make_grade(instructor, course, HUB, folder, f"--out {out}")
    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    print("\n".join(f"{r['student_id']!r} -> {r.get('gradebook_id')}: {r['status']} {r['message'][:100]}" for r in rows))
    ids = [r["student_id"] for r in rows]
    shown = {s: f"'{s}" if s[0] in "+-@=" else s for s in AWKWARD}
    assert sorted(ids) == sorted([*shown.values(), "mallory", "twice"]), ids
    assert len({r["gradebook_id"] for r in rows}) == len(rows)
    assert all(r["student_id"][0] not in "+-@=\t\r" and r["message"][:1] not in ("+", "-", "@", "=") for r in rows)
    by_id = {r["student_id"]: r for r in rows}
    assert all(by_id[shown[s]]["status"] == "graded" for s in AWKWARD), rows
    assert by_id["mallory"]["status"] == "invalid" and "link" in by_id["mallory"]["message"]
    assert by_id["twice"]["status"] == "invalid" and "2 copies" in by_id["twice"]["message"], by_id["twice"]
    for r in rows:
        assert (out / "results" / f"{r['gradebook_id']}.json").exists()


def test_an_lms_zip_with_a_damaged_member_and_a_bomb(course, place, instructor):
    """A Canvas zip: a member with a bad CRC costs its student's row alone; a zip expanding past the cap is refused
    whole, naming the cap, before anything is unpacked."""
    release = nbformat.writes(read(release_path(HUB)))
    good = place / "canvas.zip"
    with zipfile.ZipFile(good, "w", zipfile.ZIP_DEFLATED) as z:
        for k, student in enumerate(("ana", "ben", "chloé")):
            z.writestr(f"{student}_{100 + k}_{500 + k}_{HUB}.ipynb", release)
    damaged = good.read_bytes()
    crc = damaged.rindex(b"PK\x01\x02", 0, damaged.rindex(b"ben_101")) + 16  # ben's CRC in the central directory
    damaged = damaged[:crc] + bytes(b ^ 0xFF for b in damaged[crc:crc + 4]) + damaged[crc + 4:]
    good.write_bytes(damaged)
    bomb = place / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        for k in range(23):  # 23 x 48 MiB of zeros: 1.1 GiB expanded, about 1 MiB zipped
            with z.open(f"student{k}_{k}_{k}_{HUB}.ipynb", "w", force_zip64=True) as member:
                for _ in range(48):
                    member.write(bytes(2**20))
    instructor.give(good)
    instructor.give(bomb)
    pattern = r"--pattern '^(?P<student_id>[^_]+)_\d+_\d+_'"
    out = place / "canvas-out"
    make_grade(instructor, course, HUB, good, f"{pattern} --out {out}")
    rows = table(out / "grades.csv")
    print("\n".join(f"{s!r}: {r['status']} {r['message'][:120]}" for s, r in rows.items()))
    assert sorted(rows) == ["ana", "ben", "chloé"]
    assert rows["ana"]["status"] == rows["chloé"]["status"] == "graded"
    assert rows["ben"]["status"] == "invalid" and "could not be unpacked" in rows["ben"]["message"], rows["ben"]
    refused = make_grade(instructor, course, HUB, bomb, f"{pattern} --out {place / 'bomb-out'}", check=False)
    assert refused.returncode != 0 and "1 GiB a zip of hand-ins may hold" in refused.stderr, refused.stderr[-2000:]
    print(f"bomb ({bomb.stat().st_size / 2**20:.1f} MiB zipped): {refused.stderr.strip().splitlines()[-2]}")
