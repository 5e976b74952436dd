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

from .handin import MAX_BYTES
from .results import SECRET_FILE, TIMESTAMP_FILE

SPARE_BYTES = 256 << 20  # what unpacking a zip leaves free on the disk at least, for the grading itself
MAX_NOTE_BYTES = 1024  # a timestamp.txt or submission_secret.txt is a line; more is not read
MAX_NAME = 120  # characters of a student's file name (file systems allow 255 bytes, with room left for suffixes)


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


def from_folder(folder: Path, wanted: str) -> list[Submission]:
    """`alice/<anything>/02_x.ipynb` or `alice.ipynb`: one entry per student. A student's folder or notebook that is
    a link is not followed: their row says so."""
    by_student: dict[str, list[Path]] = {}
    links: dict[str, list[str]] = {}
    for entry in sorted(folder.iterdir()):
        if hidden(entry.name) or not (entry.is_dir() or entry.suffix == ".ipynb"):
            continue
        given = entry.name if entry.is_dir() else entry.stem
        by_student.setdefault(given, [])
        if entry.is_symlink():
            links.setdefault(given, []).append(f"{entry.name} is a link, which the grader does not follow: hand in "
                                               "the notebook itself")
        elif entry.is_dir():
            by_student[given] += notebooks_under(entry)
        else:
            by_student[given].append(entry)
    return [handed_in(given, paths, wanted, links.get(given, [])) for given, paths in by_student.items()]


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


def from_zip(archive: Path, wanted: str, pattern: str | None, scratch: Path) -> list[Submission]:
    """Unpack the notebooks of an LMS export safely, then group them by student.

    Without `pattern`, the zip holds the folder layout. With it, each notebook's path inside the zip is matched
    against the regular expression, whose group `student_id` names the student (as nbgrader's zip_collect does).
    Members are unpacked one at a time, each bounded by its declared size (zipfile reads no more); one that cannot be
    unpacked (damaged, over MAX_BYTES) costs its student's row alone. No total is fixed: a class of notebooks with
    plots is gigabytes. Only a disk that would fill stops it, naming how much more it needs.
    """
    regex = re.compile(pattern) if pattern else None
    by_student: dict[str, list[Path]] = {}
    problems: dict[str, list[str]] = {}
    with zipfile.ZipFile(archive) as z:
        members = []
        for info in z.infolist():
            name = info.filename
            if info.is_dir() or not name.endswith(".ipynb") or any(hidden(part) for part in Path(name).parts):
                continue
            if regex:
                match = regex.search(name)
                if not match:
                    continue
                given = match.group("student_id")
            else:
                parts = Path(name).parts
                given = parts[0] if len(parts) > 1 else Path(name).stem
            members.append((given, info))
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
    return [handed_in(given, paths, wanted, problems.get(given, [])) for given, paths in by_student.items()]


def room_for(folder: Path, size: int, archive: Path, left: list[int]) -> None:
    """SystemExit, saying how much room the rest of the zip needs, where unpacking `size` bytes more into `folder`
    would leave less than SPARE_BYTES free: the instructor's disk, not any student's hand-in."""
    free = shutil.disk_usage(folder).free
    if free - size < SPARE_BYTES:
        raise SystemExit(f"{archive}: the disk holding {folder} is full: {free / 2**20:.0f} MiB free, and the "
                         f"notebooks left to unpack from the zip need {sum(left) / 2**20:.0f} MiB (and "
                         f"{SPARE_BYTES >> 20} MiB kept free to grade). Free some space (or set TMPDIR to a larger "
                         "disk) and run the same command again")


def collect(submissions: Path, wanted: str, pattern: str | None, scratch: Path) -> list[Submission]:
    """Every student found in SUBMISSIONS (a folder, a zip file, or one notebook), sorted by student id."""
    if submissions.suffix == ".ipynb" and submissions.is_file():
        found = [handed_in(submissions.stem, [submissions], submissions.name)]
    elif zipfile.is_zipfile(submissions):
        found = from_zip(submissions, wanted, pattern, scratch)
    elif submissions.is_dir():
        found = from_folder(submissions, wanted)
    else:
        raise SystemExit(f"{submissions}: not a folder of submissions, a zip file, nor a notebook")
    return sorted(found, key=lambda s: s.student_id)
