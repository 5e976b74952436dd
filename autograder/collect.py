"""Find each student's notebook in a folder of submissions or in a zip file exported from an LMS."""

import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .results import SECRET_FILE, TIMESTAMP_FILE

MAX_BYTES = 50 * 2**20  # a notebook larger than this is not a course notebook (and a zip bomb stops here)
MAX_NOTE_BYTES = 1024  # a timestamp.txt or submission_secret.txt is a line; more is not read
SAFE_ID = re.compile(r"[A-Za-z0-9@._+-]+")


@dataclass
class Submission:
    """One student's hand-in: the notebook found for them, or why none was."""
    student_id: str
    path: Path | None  # None: nothing to grade, see `message`
    message: str = ""
    timestamp: str = ""  # from nbgrader's exchange: when it was submitted (timestamp.txt), as the student's side wrote it
    secret: str = ""  # and the submission's secret (submission_secret.txt), which names its feedback in the exchange


def student_id_of(name: str) -> str:
    """A student id usable in paths and in nbgrader's gradebook: unsafe characters become '_'."""
    cleaned = "_".join(SAFE_ID.findall(name.strip()))
    return cleaned if cleaned.strip("._") else "unnamed"


def pick(student_id: str, notebooks: list[Path], wanted: str) -> Submission:
    """The notebook to grade among a student's files: the one with the assignment's file name, else the only one."""
    if not notebooks:
        return Submission(student_id, None, f"no notebook was handed in (expected {wanted})")
    named = [p for p in notebooks if p.name == wanted]
    if named or len(notebooks) == 1:
        chosen = max(named or notebooks, key=lambda p: p.stat().st_mtime)  # several copies: the newest
        note = f"{len(named)} copies of {wanted} were handed in; the newest was graded" if len(named) > 1 else ""
        return Submission(student_id, chosen, note)
    names = ", ".join(sorted(p.name for p in notebooks))
    return Submission(student_id, None, f"no notebook named {wanted}, and several others ({names}): which one is it?")


def notebooks_under(folder: Path) -> list[Path]:
    """The notebooks in a student's folder; a link is not one (it could name another student's hand-in)."""
    return [p for p in sorted(folder.rglob("*.ipynb")) if p.is_file() and not p.is_symlink()
            and not any(part.startswith((".", "__MACOSX")) for part in p.relative_to(folder).parts)]


def from_folder(folder: Path, wanted: str) -> list[Submission]:
    """`alice/<anything>/02_x.ipynb` or `alice.ipynb`: one entry per student."""
    by_student: dict[str, list[Path]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith((".", "__MACOSX")):
            continue
        if entry.is_dir():
            by_student.setdefault(student_id_of(entry.name), []).extend(notebooks_under(entry))
        elif entry.suffix == ".ipynb":
            by_student.setdefault(student_id_of(entry.stem), []).append(entry)
    return [pick(sid, paths, wanted) for sid, paths in by_student.items()]


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
        s = pick(student_id_of(entry.name), notebooks_under(folder), wanted)
        s.timestamp, s.secret = note(folder, TIMESTAMP_FILE), note(folder, SECRET_FILE)
        found.append(s)
    return sorted(found, key=lambda s: s.student_id)


def from_zip(archive: Path, wanted: str, pattern: str | None, scratch: Path) -> list[Submission]:
    """Unpack the notebooks of an LMS export safely, then group them by student.

    Without `pattern`, the zip holds the folder layout. With it, each notebook's path inside the zip is matched
    against the regular expression, whose group `student_id` names the student (as nbgrader's zip_collect does).
    """
    regex = re.compile(pattern) if pattern else None
    by_student: dict[str, list[Path]] = {}
    with zipfile.ZipFile(archive) as z:
        for i, info in enumerate(z.infolist()):
            name = info.filename
            if info.is_dir() or not name.endswith(".ipynb") or any(
                    part.startswith((".", "__MACOSX")) for part in Path(name).parts):
                continue
            if regex:
                match = regex.search(name)
                if not match:
                    continue
                sid = student_id_of(match.group("student_id"))
            else:
                parts = Path(name).parts
                sid = student_id_of(parts[0] if len(parts) > 1 else Path(name).stem)
            # Never trust the names inside a zip as paths: each file is written under a name we choose.
            target = scratch / f"{i:05d}" / Path(name).name
            target.parent.mkdir(parents=True)
            if info.file_size > MAX_BYTES:
                target.write_bytes(b"")  # graded as invalid, with the reason, rather than unpacked
            else:
                with z.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, MAX_BYTES)
            by_student.setdefault(sid, []).append(target)
    return [pick(sid, paths, wanted) for sid, paths in sorted(by_student.items())]


def collect(submissions: Path, wanted: str, pattern: str | None, scratch: Path) -> list[Submission]:
    """Every student found in SUBMISSIONS (a folder, a zip file, or one notebook), sorted by student id."""
    if submissions.suffix == ".ipynb" and submissions.is_file():
        found = [Submission(student_id_of(submissions.stem), submissions)]
    elif zipfile.is_zipfile(submissions):
        found = from_zip(submissions, wanted, pattern, scratch)
    elif submissions.is_dir():
        found = from_folder(submissions, wanted)
    else:
        raise SystemExit(f"{submissions}: not a folder of submissions, a zip file, nor a notebook")
    return sorted(found, key=lambda s: s.student_id)
