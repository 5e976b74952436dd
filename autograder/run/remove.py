"""Undo a grading: students taken out of one assignment's grades, as `nbgrader db student remove --force` takes them out
of the gradebook, with their files in the grader's and nbgrader's folders; a listing first, removal with --force."""

import csv
import fnmatch
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory

from .. import config as course_config, gradebook
from ..config import enter, resolve
from ..layout import LOCK, OUTPUTS, TABLE, default_out, exclusive, output
from ..results import read_result, shown_id


@dataclass(kw_only=True)
class Removal:
    """What removing one student from one assignment takes away."""
    student_id: str  # the gradebook's id (the name of their files)
    shown: str  # as people know them: the id as given, and the name
    submission: str = ""  # their submission in the gradebook, for people ("" where it has none)
    whole_student: bool = False  # the gradebook's student goes too: no other assignment's submission is theirs
    paths: list[Path] = field(default_factory=list)  # files and folders of theirs
    table_rows: int = 0  # rows of grades.csv


def students_of(cd: CourseDirectory, assignment: str, out: Path) -> dict[str, str]:
    """Every student the assignment's grading knows (the gradebook's, with a submission, and the output folder's):
    gradebook id -> the id as given, with the name where one is known (the gradebook's first: an instructor's wins)."""
    known = {}
    if gradebook.exists(cd):
        with Gradebook(cd.db_url, cd.course_id) as gb:
            for s in gb.students:
                if any(sub.assignment.name == assignment for sub in s.submissions):
                    known[s.id] = shown(s.lms_user_id or s.id, s.first_name, s.last_name)
    for path in sorted((out / "results").glob("*" + OUTPUTS["results"])):
        if (r := read_result(path)) is not None:
            known.setdefault(r.student_id, shown(shown_id(r), r.first_name, r.last_name))
    return known


def shown(given: str, first_name: str | None, last_name: str | None) -> str:
    """A student as people know them: "101 (Marie Curie)", or the id alone."""
    name = " ".join(part for part in (first_name, last_name) if part)
    return f"{given} ({name})" if name else given


def chosen(known: dict[str, str], wanted: list[str]) -> list[str]:
    """The gradebook ids that the instructor's ids or shell-style patterns name (by gradebook id or id as given);
    SystemExit naming any that names nobody."""
    found, unmatched = [], []
    for want in wanted:
        hits = [sid for sid, shown in known.items()
                if fnmatch.fnmatchcase(sid, want) or fnmatch.fnmatchcase(shown.split(" ")[0], want)]
        found += [sid for sid in hits if sid not in found]
        if not hits:
            unmatched.append(want)
    if unmatched:
        some = ", ".join(sorted(known)[:10]) + (", ..." if len(known) > 10 else "")
        raise SystemExit(f"no student of this assignment is {' or '.join(repr(u) for u in unmatched)}: nothing was "
                         f"removed. Its students: {some or 'none'}")
    return found


def plan(cd: CourseDirectory, assignment: str, out: Path, students: list[str], known: dict[str, str]) -> list[Removal]:
    """What removing each student takes away, found without changing anything."""
    table = rows_of(out / TABLE)
    column = table[0].index("gradebook_id") if table and "gradebook_id" in table[0] else None
    removals = []
    with Gradebook(cd.db_url, cd.course_id) if gradebook.exists(cd) else nullbook() as gb:
        for sid in students:
            r = Removal(student_id=sid, shown=known[sid])
            try:
                student = gb.find_student(sid) if gb else None
                submission = gb.find_submission(assignment, sid) if gb else None
            except MissingEntry:
                student = submission = None
            if submission is not None:
                score = gradebook.exported_score(submission)
                r.submission = f"their {assignment} submission ({score:g} of {submission.max_score:g} points)"
                r.whole_student = len(student.submissions) == 1
            r.paths = [path for folder in OUTPUTS if (path := output(out, folder, sid)).exists()]
            r.paths += [path for folder in (cd.submitted_directory, cd.autograded_directory, cd.feedback_directory)
                        if (path := Path(cd.root) / folder / sid / assignment).exists()]
            r.table_rows = sum(1 for row in table[1:] if column is not None and row[column] == sid)
            removals.append(r)
    return removals


class nullbook:
    """No gradebook yet: nothing of it to remove."""
    def __enter__(self):
        return None

    def __exit__(self, *_):
        return False


def rows_of(path: Path) -> list[list[str]]:
    try:
        with open(path, newline="") as f:
            return list(csv.reader(f))
    except FileNotFoundError:
        return []


def described(r: Removal, course: Path) -> str:
    parts = [r.submission + (" and the student, who has no other submission" if r.whole_student else "")
             if r.submission else "nothing in the gradebook"]
    parts += [str(p.relative_to(course)) if p.is_relative_to(course) else str(p) for p in r.paths]
    if r.table_rows:
        parts.append(f"{r.table_rows} row of grades.csv" if r.table_rows == 1 else f"{r.table_rows} rows of grades.csv")
    return f"  {r.shown}: " + "; ".join(parts)


def carry_out(cd: CourseDirectory, assignment: str, out: Path, removals: list[Removal]) -> None:
    """Remove what `plan` found: the gradebook's entries, as `nbgrader db student remove --force` does, then the
    files, then grades.csv's rows."""
    if gradebook.exists(cd):
        with Gradebook(cd.db_url, cd.course_id) as gb:
            for r in removals:
                if r.submission:
                    gb.remove_submission(assignment, r.student_id)
                if r.whole_student:
                    gb.remove_student(r.student_id)
    for r in removals:
        for path in r.paths:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            if path.parent.name == r.student_id and not any(path.parent.iterdir()):
                path.parent.rmdir()  # nbgrader's <folder>/<student>/, left empty
    gone = {r.student_id for r in removals}
    table = rows_of(out / TABLE)
    if table and "gradebook_id" in table[0]:
        column = table[0].index("gradebook_id")
        tmp = out / f".{TABLE}.tmp"
        with open(tmp, "w", newline="") as f:
            csv.writer(f).writerows([table[0]] + [row for row in table[1:] if row[column] not in gone])
        os.replace(tmp, out / TABLE)


def remove(assignment: str, wanted: list[str], force: bool, out: Path | None, course: Path) -> list[Removal]:
    """The whole command: list what removing these students takes away; with `force`, remove it."""
    enter(course)
    cd = CourseDirectory(config=course_config.load(course, {}))
    assignment, _ = resolve(cd, assignment)
    out = (out or default_out(course, assignment)).resolve()
    with exclusive(out / LOCK, f"a grading is writing into {out}: wait for it to finish"), gradebook.lock(cd):
        known = students_of(cd, assignment, out)
        removals = plan(cd, assignment, out, chosen(known, wanted), known)
        print(f"{'Removing' if force else 'Would remove'} from {assignment}:", file=sys.stderr)
        print("\n".join(described(r, course) for r in removals), file=sys.stderr)
        if not force:
            whose = "students'" if len(removals) > 1 else "student's"
            print(f"Nothing was removed: run the same command with --force to remove {len(removals)} {whose} grades "
                  "and files.", file=sys.stderr)
            return removals
        carry_out(cd, assignment, out, removals)
    print(f"Removed {len(removals)} student{'s' if len(removals) > 1 else ''} from {assignment}; report.html still "
          "shows them until the next grading draws it again.", file=sys.stderr)
    return removals
