"""The instructor's path as the README gives it, on the repository as shipped (tests/shipped.py): a regrade by the
same ordinary user, a Hub's term with students who are other users, and an LMS export holding every awkward thing one
can hold. tests/test_grading.py grades every notebook's class through the same path."""

import csv
import os
import zipfile
from pathlib import Path

import nbformat
import pytest

import shipped
from course import (answer_ids, hidden_test_lines, read, release_path, solution_answers, source_path, with_answers,
                    wrong_answers)
from handins import html_text, leaked

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]
HUB = "01_tensors"  # the Hub's assignment; its test runs beside 01's class (tests/test_grading.py), one after the other
AWKWARD = "03_modules"  # the LMS export's: graded into folders of their own


def hand_ins(assignment: str) -> dict[str, nbformat.NotebookNode]:
    """As students write them: the solution's code without nbgrader's markers, and the first catalogued wrong answer
    of the first exercise (the other answers right)."""
    release, right = read(release_path(assignment)), solution_answers(assignment)
    first = answer_ids(release)[0]
    wrong = next(iter(wrong_answers(assignment)["WRONG"][first].values())).strip()
    return {"right": with_answers(release, right), "wrong": with_answers(release, {**right, first: wrong})}


@pytest.mark.xdist_group("as-shipped")
def test_a_regrade_by_the_same_user_grades_only_what_changed():
    """One hand-in changed, `make grade` again by the same (ordinary) user: nbgrader left its notebooks read-only,
    yet only that hand-in is graded again, and grades.csv, the gradebook and `nbgrader export` agree."""
    assignment, home = "02_autograd", shipped.instructor().home
    name, notebooks = source_path(assignment).name, hand_ins(assignment)
    students = {"regrade-right": notebooks["right"], "regrade-wrong": notebooks["wrong"]}
    submissions, out = home / "regrade", home / "regrade-out"
    shipped.write_hand_ins(submissions, students, name)
    shipped.make_grade(assignment, submissions, f"--out {out}")
    before = shipped.table(out / "grades.csv")
    shipped.write_hand_ins(submissions, {"regrade-wrong": notebooks["right"]}, name)
    again = shipped.make_grade(assignment, submissions, f"--out {out}")
    assert "2 students, 1 to grade" in again.stderr, again.stderr
    rows = shipped.table(out / "grades.csv")
    right, fixed = rows["regrade-right"], rows["regrade-wrong"]
    assert float(right["score"]) == float(right["max_score"]) > 0, right
    assert float(fixed["score"]) == float(fixed["max_score"]) > float(before["regrade-wrong"]["score"]), before
    in_gradebook = shipped.exported(assignment)
    assert {s: float(r["score"]) for s, r in rows.items()} == {s: in_gradebook[s] for s in students}


@pytest.mark.xdist_group(f"grade-{HUB}")
def test_the_hub_term_with_students_as_other_users():
    """The README's Hub flow, each person an account of their own: release, fetch, submit, collect, `make grade`
    with no SUBMISSIONS, release_feedback, fetch_feedback."""
    course, instructor = shipped.course(), shipped.instructor()
    exchange = shipped.place() / "exchange"
    exchange.mkdir()
    exchange.chmod(0o777)  # as a Hub's administrator makes it
    names = ("course-alice", "course-bob")
    students = [shipped.account(n) for n in names]
    settings = f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\nc.CourseDirectory.course_id = 'pytorch-course'\n"
    for person, name in ((instructor, None), *zip(students, names)):  # the Hub's settings, as its administrator writes
        (person.home / ".jupyter").mkdir(exist_ok=True)
        # one account for everyone (the tests not run as root): each student's id given, as `submit --student` does
        (person.home / ".jupyter" / "nbgrader_config.py").write_text(
            settings + (f"c.CourseDirectory.student_id = {name!r}\n" if name and not shipped.AS_ROOT else ""))
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
    shipped.make_grade(HUB)
    instructor.run(f"{nbgrader} release_feedback {HUB}", cwd=course)
    rows = shipped.table(course / "autograder" / "grades" / HUB / "grades.csv")
    alice, bob = (rows[name] for name in names)
    assert float(alice["score"]) == float(alice["max_score"]) > 0 and float(bob["score"]) == 0, rows
    hidden, visible = hidden_test_lines(read(source_path(HUB)))
    hidden = [line for line in hidden if len(line) >= 20 and line not in visible]  # an import both share is no leak
    assert hidden
    for student in students:
        student.run(f"{nbgrader} fetch_feedback {HUB}", cwd=student.home / "work")
        pages = sorted((student.home / "work" / HUB / "feedback").glob("*/*.html"))
        assert len(pages) == 1, pages
        assert not leaked(html_text(pages[0]), hidden)


AWKWARD_IDS = ["+alice", "-bob", "@carol", "=dave", "José", "Josè", "张伟", "王芳", "bob smith", "bob\nsmith", "x" * 250]


def awkward_folder(folder: Path) -> Path:
    """A folder of hand-ins (the release, unedited) with awkward names, a link to another student's folder, and a
    student who handed in two copies, the newer of them broken."""
    release = nbformat.writes(read(release_path(AWKWARD)))
    name = source_path(AWKWARD).name
    for student in AWKWARD_IDS:
        (folder / student).mkdir(parents=True)
        (folder / student / name).write_text(release)
    (folder / "mallory").symlink_to(folder / "José")
    (folder / "twice" / "old").mkdir(parents=True)
    (folder / "twice" / "old" / name).write_text(release)
    (folder / "twice" / name).write_text(release[:1000])
    os.utime(folder / "twice" / "old" / name, (1e9, 1e9))
    shipped.instructor().give(folder)
    return folder


@pytest.mark.xdist_group("as-shipped")
def test_awkward_hand_ins_in_a_folder_each_get_their_own_row():
    """Every id kept as given (one row each, no two students merged), no cell a spreadsheet would run, a link not
    followed, two copies said."""
    home = shipped.instructor().home
    folder, out = awkward_folder(home / "awkward"), home / "awkward-out"
    shipped.make_grade(AWKWARD, folder, f"--out {out}")
    with open(out / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    print("\n".join(f"{r['student_id']!r} -> {r.get('gradebook_id')}: {r['status']} {r['message'][:100]}" for r in rows))
    shown = {s: f"'{s}" if s[0] in "+-@=" else s for s in AWKWARD_IDS}
    assert sorted(r["student_id"] for r in rows) == sorted([*shown.values(), "mallory", "twice"])
    assert len({r["gradebook_id"] for r in rows}) == len(rows)
    risky = tuple("+-@=\t\r")  # what a spreadsheet reads as the start of a formula
    assert not any(r[column].startswith(risky) for r in rows for column in r), rows
    by_id = {r["student_id"]: r for r in rows}
    assert all(by_id[shown[s]]["status"] == "graded" for s in AWKWARD_IDS), rows
    assert by_id["mallory"]["status"] == "invalid" and "link" in by_id["mallory"]["message"]
    assert by_id["twice"]["status"] == "invalid" and "2 copies" in by_id["twice"]["message"], by_id["twice"]
    for r in rows:
        assert (out / "results" / f"{r['gradebook_id']}.json").exists()


@pytest.mark.xdist_group("as-shipped")
def test_an_lms_zip_with_a_damaged_member():
    """A Canvas zip: a member with a bad CRC costs its student's row alone. (A zip of any total size is unpacked one
    member at a time: tests/test_run_units.py's test_a_zip_is_unpacked_member_by_member_whatever_its_total.)"""
    home, notebook = shipped.instructor().home, source_path(AWKWARD).name
    release = nbformat.writes(read(release_path(AWKWARD)))
    good = home / "canvas.zip"
    with zipfile.ZipFile(good, "w", zipfile.ZIP_DEFLATED) as z:
        for k, student in enumerate(("ana", "ben", "chloé")):
            z.writestr(f"{student}_{100 + k}_{500 + k}_{notebook}", release)
    damaged = good.read_bytes()
    crc = damaged.rindex(b"PK\x01\x02", 0, damaged.rindex(b"ben_101")) + 16  # ben's CRC in the central directory
    good.write_bytes(damaged[:crc] + bytes(b ^ 0xFF for b in damaged[crc:crc + 4]) + damaged[crc + 4:])
    shipped.instructor().give(good)
    pattern = r"--pattern '^(?P<student_id>[^_]+)_\d+_\d+_'"
    shipped.make_grade(AWKWARD, good, f"{pattern} --out {home / 'canvas-out'}")
    rows = shipped.table(home / "canvas-out" / "grades.csv")
    print("\n".join(f"{s!r}: {r['status']} {r['message'][:120]}" for s, r in rows.items()))
    assert sorted(rows) == ["ana", "ben", "chloé"]
    assert rows["ana"]["status"] == rows["chloé"]["status"] == "graded"
    assert rows["ben"]["status"] == "invalid" and "could not be unpacked" in rows["ben"]["message"], rows["ben"]
