"""Find each student's notebook in a folder of submissions or in a zip file exported from an LMS."""

import hashlib
import os
import re
import shutil
import time
import urllib.parse
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..grading.handin import MAX_BYTES
from ..layout import SECRET_FILE, TIMESTAMP_FILE

SPARE_BYTES = 256 << 20  # what unpacking a zip leaves free on the disk at least, for the grading itself
MAX_NOTE_BYTES = 1024  # a timestamp.txt or submission_secret.txt is a line; more is not read
MAX_NAME = 120  # characters of a student's file name (file systems allow 255 bytes, with room left for suffixes)
# How each LMS's "download all submissions" zip names a notebook, as regular expressions on its path in the zip: the
# group student_id is the id the LMS's gradebook import matches rows by; name is the student's name as the LMS wrote
# it; late is Canvas's LATE_ marker. Canvas: lib/content_zipper.rb in instructure/canvas-lms (<lastfirst>: the last and
# first names, lowercased, with spaces and punctuation removed). Moodle: download_submissions in mod/assign/locallib.php
# (the full name, with "_" made a space, then the participant id; a folder per student, or that prefix on each file).
CANVAS_PATTERN = r"^(?P<name>[^/]+?)_(?P<late>LATE_)?(?P<student_id>\d+)_\d+_"
MOODLE_PATTERN = r"^(?P<name>[^_/]+)_(?P<student_id>\d+)_assignsubmission_file_"
PLAIN_PATTERN = r"^(?P<student_id>[^/]+?)(?:/|\.ipynb$)"  # alice/<anything>.ipynb or alice.ipynb
SUGGESTED_PATTERN = r"(?P<student_id>[^_/]+)_[^/]*$"  # what a refusal proposes: a file name's part before its first _


@dataclass
class Submission:
    """One student's hand-in: the notebook found for them, or why none was."""
    student_id: str  # the name of the student's files and gradebook entry (file_name_of the id as given)
    path: Path | None  # None: nothing to grade, see `message`
    message: str = ""
    timestamp: str = ""  # from nbgrader's exchange: when it was submitted (timestamp.txt), as the student's side wrote it
    secret: str = ""  # and the submission's secret (submission_secret.txt), which names its feedback in the exchange
    given_id: str = ""  # the id as the folder, file or LMS gave it ("" where it is student_id itself)
    status: str = "missing"  # the row's status when path is None: "invalid" where what was handed in is unusable
    first_name: str = ""  # the student's name, where the LMS's file names give one
    last_name: str = ""
    marked_late: str = ""  # who said it was handed in late, without saying when ("Canvas marked it LATE_"), or ""


@dataclass(frozen=True)
class Layout:
    """How a zip names who handed in each notebook, recognised from all its notebooks' names."""
    name: str  # for people: "Canvas's", "Moodle's", "one folder or notebook per student", "--pattern's"
    pattern: str  # reads student_id (and name or first_name/last_name, and late) from a notebook's path in the zip
    inside: str = ""  # the one folder every notebook of the zip is in ("" if none), which names no student

    def read(self, path: str) -> re.Match | None:
        return re.search(self.pattern, path[len(self.inside):])


def file_name_of(student: str) -> str:
    """A name for a student's files and gradebook entry, distinct for distinct ids: the id itself where it is made of
    letters, digits and @+._- alone, else its other characters percent-encoded (UTF-8); never . or .., never longer
    than MAX_NAME (a longer one is cut and ends in ~ and a hash of the whole id, and ~ appears nowhere else)."""
    name = urllib.parse.quote(student, safe="@+").replace("~", "%7E") or "%"
    if name[0] in ".+-@=":  # hidden files, command-line options, spreadsheet formulas: never first
        name = f"%{ord(name[0]):02X}{name[1:]}"
    if len(name) > MAX_NAME:
        name = f"{name[:MAX_NAME - 17]}~{hashlib.sha256(student.encode()).hexdigest()[:16]}"
    return name


def handed_in(given: str, notebooks: list[Path], wanted: str, problems: list[str] = ()) -> Submission:
    """The notebook to grade among a student's files: the one with the assignment's file name, else the only one.
    `problems`: what was wrong with other files of theirs, which the row says."""
    s = pick(file_name_of(given), notebooks, wanted, list(problems))
    s.given_id = given
    return s


def pick(student_id: str, notebooks: list[Path], wanted: str, problems: list[str] = ()) -> Submission:
    """The notebook to grade among a student's files: the one with the assignment's file name, else the only one."""
    problems = list(problems)
    if not notebooks:
        if problems:
            return Submission(student_id, None, "; ".join(problems), status="invalid")
        return Submission(student_id, None, f"no notebook was handed in (expected {wanted})")
    named = [p for p in notebooks if p.name == wanted]
    if named or len(notebooks) == 1:
        chosen = max(named or notebooks, key=lambda p: p.stat().st_mtime)  # several copies: the newest
        if len(named) > 1:
            problems.insert(0, f"{len(named)} copies of {wanted} were handed in; the newest was graded")
        return Submission(student_id, chosen, "; ".join(problems))
    names = ", ".join(sorted(p.name for p in notebooks))
    return Submission(student_id, None, "; ".join([f"no notebook named {wanted}, and several others ({names}): "
                                                   "which one is it?", *problems]))


def hidden(part: str) -> bool:
    return part.startswith((".", "__MACOSX"))


def notebooks_under(folder: Path) -> list[Path]:
    """The notebooks in a student's folder; a link is not one, nor is a folder behind a link (either could name
    another student's hand-in)."""
    found = []
    for root, dirs, files in os.walk(folder):  # does not follow links to folders
        dirs[:] = sorted(d for d in dirs if not hidden(d))
        found += [Path(root, f) for f in sorted(files)
                  if f.endswith(".ipynb") and not hidden(f) and Path(root, f).is_file() and not Path(root, f).is_symlink()]
    return found


def from_folder(folder: Path, wanted: str, pattern: str | None = None) -> list[Submission]:
    """A folder laid out as a zip may be (`recognise`: an LMS's zip unpacked, `alice/<anything>/02_x.ipynb`,
    `alice.ipynb`): one entry per student. A student's folder or notebook that is a link is not followed: their row
    says so; a student's folder without a notebook is their row too."""
    paths = {p.relative_to(folder).as_posix(): p for p in notebooks_under(folder)}
    layout = recognise(sorted(paths), wanted, pattern, folder)
    by_student: dict[str, list[Path]] = {}
    facts: dict[str, Submission] = {}
    links: dict[str, list[str]] = {}
    for name, path in paths.items():
        by_student.setdefault(known(facts, whose(layout, name)), []).append(path)
    for entry in sorted(folder.iterdir()):
        if hidden(entry.name) or not (entry.is_dir() or entry.suffix == ".ipynb") or (
                not entry.is_symlink() and (layout.pattern != PLAIN_PATTERN or layout.inside or not entry.is_dir())):
            continue
        match = layout.read(f"{entry.name}/" if entry.is_dir() else entry.name)
        given = known(facts, whose(layout, entry.name, match)) if match else (
            entry.name if entry.is_dir() else entry.stem)
        facts.setdefault(given, Submission(given, None))
        by_student.setdefault(given, [])
        if entry.is_symlink():
            links.setdefault(given, []).append(f"{entry.name} is a link, which the grader does not follow: hand in "
                                               "the notebook itself")
    return [with_facts(handed_in(given, paths, wanted, links.get(given, [])), facts[given])
            for given, paths in by_student.items()]


def note(folder: Path, name: str) -> str:
    """The first MAX_NOTE_BYTES of a small text file the exchange keeps beside a notebook, stripped ("" if none)."""
    try:
        with open(folder / name, "rb") as f:
            return f.read(MAX_NOTE_BYTES).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def from_course(submitted: Path, assignment: str, wanted: str) -> list[Submission]:
    """nbgrader's own layout, as `nbgrader collect` leaves it: `alice/02_autograd/02_autograd.ipynb` beside
    timestamp.txt and submission_secret.txt; students without a folder for this assignment did not hand it in."""
    if not submitted.is_dir():
        raise SystemExit(f"{submitted}: no submitted folder in the course (has `nbgrader collect` run?)")
    found = []
    for entry in sorted(submitted.iterdir()):
        folder = entry / assignment
        if entry.name.startswith(".") or not folder.is_dir():
            continue
        # nbgrader's own student ids, already the names of its folders: kept as they are
        s = pick(entry.name, notebooks_under(folder), wanted)
        s.timestamp, s.secret = note(folder, TIMESTAMP_FILE), note(folder, SECRET_FILE)
        found.append(s)
    return sorted(found, key=lambda s: s.student_id)


def kind_of(path: str) -> str:
    """Which layout one notebook's path in a zip is named by: "Canvas", "Moodle", "file" or "folder"."""
    if re.search(MOODLE_PATTERN, path):
        return "Moodle"
    if "/" in path:
        return "folder"
    return "Canvas" if re.search(CANVAS_PATTERN, path) else "file"


def examples(names: list[str]) -> str:
    return " and ".join(repr(n) for n in names[:2])


def recognise(names: list[str], wanted: str, pattern: str | None, archive: Path) -> Layout:
    """The layout of a zip whose notebooks have these paths, decided from all of them at once; SystemExit where the
    names do not say who handed in what (a layout the grader does not know, or several in one zip): nothing has been
    written then. `pattern`, the instructor's --pattern, must read a student id from every one."""
    if pattern:
        unread = [n for n in names if not re.search(pattern, n)]
        if unread:
            raise SystemExit(f"{archive}: --pattern reads no student_id from {len(unread)} of the zip's {len(names)} "
                             f"notebooks, e.g. {examples(unread)}. Nothing was graded or written: give a --pattern "
                             "that reads every notebook's student (or leave it out: Canvas's and Moodle's zips are "
                             "recognised without it)")
        return Layout(name="--pattern's", pattern=pattern)
    tops = {n.split("/")[0] for n in names}
    inside = f"{tops.pop()}/" if len(names) > 1 and len(tops) == 1 and all("/" in n for n in names) else ""
    if inside and kind_of(inside) == "Moodle":
        inside = ""  # one student's Moodle folder, not a folder around the class
    kinds: dict[str, list[str]] = {}
    for n in names:
        kinds.setdefault(kind_of(n[len(inside):]), []).append(n)
    stem = Path(wanted).stem.casefold()
    named_files = [n for n in kinds.get("file", []) if stem in Path(n).stem.casefold()]
    if named_files:  # alice.ipynb names a student; a name holding the assignment's own is an LMS's, read whole
        suggested = [m.group("student_id") for n in named_files[:2] if (m := re.search(SUGGESTED_PATTERN, n))]
        reads = "" if len(suggested) < 2 else f", which reads {examples(suggested)} from them" if len(set(
            suggested)) == 2 else f" (it reads {suggested[0]!r} from both: no student's id; write one that reads it)"
        raise SystemExit(f"{archive}: the grader cannot tell whose notebook is whose: names such as "
                         f"{examples(named_files)} hold the assignment's file name and match no layout it knows "
                         "(Canvas's lastfirst_[LATE_]<user id>_<file id>_<name>, Moodle's "
                         "<Full name>_<participant id>_assignsubmission_file_/, or one folder or notebook per student "
                         "named by the student's id). Nothing was graded or written. Give --pattern, a regular "
                         "expression whose group student_id is the student's id (and, optionally, name or "
                         f"first_name/last_name, and late), e.g. --pattern '{SUGGESTED_PATTERN}'{reads}")
    if len({"plain" if kind in ("file", "folder") else kind for kind in kinds}) > 1:
        mixed = "; ".join(f"{len(found)} {'named' if kind in ('Canvas', 'Moodle') else 'as'} "
                          f"{LAYOUT_NAMES[kind]} (e.g. {examples(found)})" for kind, found in sorted(kinds.items()))
        raise SystemExit(f"{archive}: its notebooks are named in more than one way: {mixed}. Which part of each "
                         "name is the student is unclear, so nothing was graded or written: grade each LMS's zip "
                         "on its own, or give --pattern, a regular expression whose group student_id reads every "
                         "notebook's student")
    if "Canvas" in kinds:
        return Layout(name="Canvas's (lastfirst_[LATE_]<user id>_<file id>_<name>)", pattern=CANVAS_PATTERN,
                      inside=inside)
    if "Moodle" in kinds:
        return Layout(name="Moodle's (<Full name>_<participant id>_assignsubmission_file_)", pattern=MOODLE_PATTERN,
                      inside=inside)
    shape = {("file",): "one notebook per student", ("folder",): "one folder per student"}.get(
        tuple(sorted(kinds)), "one folder or notebook per student")
    return Layout(name=shape, pattern=PLAIN_PATTERN, inside=inside)


LAYOUT_NAMES = {"Canvas": "as Canvas names hand-ins", "Moodle": "as Moodle names hand-ins",
                "file": "a notebook per student", "folder": "a folder per student"}


def notebooks_in(z: zipfile.ZipFile) -> list[zipfile.ZipInfo]:
    """The zip's notebooks: not folders, not hidden (macOS's __MACOSX copies, dot-files)."""
    return [info for info in z.infolist() if not info.is_dir() and info.filename.endswith(".ipynb")
            and not any(hidden(part) for part in Path(info.filename).parts)]


def whose(layout: Layout, path: str, match: re.Match | None = None) -> Submission:
    """Who handed in the notebook at `path` (in a zip or a folder), as the layout reads it: their id, name and
    whether the LMS marked it late (a Submission without a notebook yet)."""
    match = match or layout.read(path)
    first, last = name_of(match)
    late = "late" in match.re.groupindex and match.group("late")
    said = "" if not late else "Canvas marked it LATE_" if layout.pattern == CANVAS_PATTERN else "its name marks it late"
    return Submission(match.group("student_id"), None, first_name=first, last_name=last, marked_late=said)


def known(facts: dict[str, "Submission"], who: Submission) -> str:
    """Who's id, with what the names say of them kept in `facts` (late if any of their notebooks is marked so)."""
    seen = facts.setdefault(who.student_id, who)
    seen.marked_late = seen.marked_late or who.marked_late
    return who.student_id


def name_of(match: re.Match) -> tuple[str, str]:
    """(first name, last name) as a layout's match gives them: its groups first_name and last_name, or else its group
    name split at the last space (Moodle's full name is "First Last" unless the site orders names otherwise; Canvas's
    lastfirst has no space, and is kept whole as the last name: where it splits is unknowable)."""
    groups = match.re.groupindex
    if "first_name" in groups or "last_name" in groups:
        return tuple(((match.group(g) if g in groups else "") or "").strip() for g in ("first_name", "last_name"))
    first, _, last = ((match.group("name") if "name" in groups else "") or "").strip().rpartition(" ")
    return first.strip(), last


def from_zip(archive: Path, wanted: str, pattern: str | None, scratch: Path) -> list[Submission]:
    """Unpack the notebooks of an LMS export safely, then group them by student.

    Without `pattern`, the layout is recognised from the names (`recognise`: Canvas's, Moodle's, a folder or a
    notebook per student). With it, each notebook's path inside the zip is matched against the regular expression,
    whose group `student_id` names the student (as nbgrader's zip_collect does); groups name (or first_name and
    last_name) and late, where it has them, give the student's name and say the LMS marked the hand-in late.
    Members are unpacked one at a time, each bounded by its declared size (zipfile reads no more); one that cannot be
    unpacked (damaged, over MAX_BYTES) costs its student's row alone. No total is fixed: a class of notebooks with
    plots is gigabytes. Only a disk that would fill stops it, naming how much more it needs.
    """
    by_student: dict[str, list[Path]] = {}
    problems: dict[str, list[str]] = {}
    facts: dict[str, Submission] = {}  # student -> their name and late marker, as the zip's names give them
    with zipfile.ZipFile(archive) as z:
        notebooks = notebooks_in(z)
        layout = recognise([info.filename for info in notebooks], wanted, pattern, archive)
        members = [(known(facts, whose(layout, info.filename)), info) for info in notebooks]
        for i, (given, info) in enumerate(members):
            by_student.setdefault(given, [])
            if info.file_size > MAX_BYTES:
                problems.setdefault(given, []).append(
                    f"{info.filename} expands to {info.file_size / 2**20:.0f} MiB, over the {MAX_BYTES >> 20} MiB a "
                    "notebook may be: not unpacked")
                continue
            # Never trust the names inside a zip as paths: each file is written under a name we choose (its own
            # last part where that is short enough).
            name = Path(info.filename).name
            target = scratch / f"{i:05d}" / (name if len(name.encode()) <= 200 else "handed-in.ipynb")
            scratch.mkdir(parents=True, exist_ok=True)
            room_for(scratch, info.file_size, archive, [size for _, later in members[i:] if (size := later.file_size)
                                                        <= MAX_BYTES])
            try:
                target.parent.mkdir(parents=True)
                with z.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)  # the declared size bounds it: zipfile reads no more
                os.utime(target, (time.mktime(info.date_time + (0, 0, -1)),) * 2)  # "the newest copy" by the zip's dates
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError) as error:
                problems.setdefault(given, []).append(f"{info.filename} could not be unpacked from the zip "
                                                      f"({type(error).__name__}: {error})")
                continue
            by_student[given].append(target)
    return [with_facts(handed_in(given, paths, wanted, problems.get(given, [])), facts[given])
            for given, paths in by_student.items()]


def with_facts(s: Submission, facts: Submission) -> Submission:
    """The hand-in with the student's name and late marker that the zip's names gave."""
    s.first_name, s.last_name, s.marked_late = facts.first_name, facts.last_name, facts.marked_late
    return s


def room_for(folder: Path, size: int, archive: Path, left: list[int]) -> None:
    """SystemExit, saying how much room the rest of the zip needs, where unpacking `size` bytes more into `folder`
    would leave less than SPARE_BYTES free: the instructor's disk, not any student's hand-in."""
    free = shutil.disk_usage(folder).free
    if free - size < SPARE_BYTES:
        raise SystemExit(f"{archive}: the disk holding {folder} is full: {free / 2**20:.0f} MiB free, and the "
                         f"notebooks left to unpack from the zip need {sum(left) / 2**20:.0f} MiB (and "
                         f"{SPARE_BYTES >> 20} MiB kept free to grade). Free some space (or set TMPDIR to a larger "
                         "disk) and run the same command again")


def layout_of(submissions: Path, wanted: str, pattern: str | None) -> Layout | None:
    """The layout of SUBMISSIONS where it is a zip or a folder (SystemExit where the grader cannot read it, before
    anything is written), else None."""
    if submissions.suffix == ".ipynb" and submissions.is_file():
        return None
    if zipfile.is_zipfile(submissions):
        with zipfile.ZipFile(submissions) as z:
            return recognise([info.filename for info in notebooks_in(z)], wanted, pattern, submissions)
    if submissions.is_dir():
        return recognise([p.relative_to(submissions).as_posix() for p in notebooks_under(submissions)], wanted,
                         pattern, submissions)
    return None


def collect(submissions: Path, wanted: str, pattern: str | None, scratch: Path) -> list[Submission]:
    """Every student found in SUBMISSIONS (a folder, a zip file, or one notebook), sorted by student id."""
    if submissions.suffix == ".ipynb" and submissions.is_file():
        found = [handed_in(submissions.stem, [submissions], submissions.name)]
    elif zipfile.is_zipfile(submissions):
        found = from_zip(submissions, wanted, pattern, scratch)
    elif submissions.is_dir():
        found = from_folder(submissions, wanted, pattern)
    else:
        raise SystemExit(f"{submissions}: not a folder of submissions, a zip file, nor a notebook")
    return sorted(found, key=lambda s: s.student_id)
