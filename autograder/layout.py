"""Where the grader's files go, named once: a batch's output folder, a hand-in's scratch course, the files beside."""

import fcntl
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

# The output folder (<course>/autograder/grades/<assignment> unless --out names one) holds one file per student in
# each of these folders, <out>/<folder>/<student_id><suffix>, and the class's files beside them.
OUTPUTS = {"results": ".json", "feedback": ".html", "autograded": ".ipynb", "logs": ".log", "submitted": ".ipynb"}
RETURNED = ("feedback", "autograded", "logs")  # what a grading writes besides its row (a Dask worker sends them back)
TABLE, REPORT, SOLUTION_LOG, LOCK = "grades.csv", "report.html", "solution.log", ".lock"
# A scratch course (the batch's template, and each hand-in's copy of it): nbgrader's folders under one root
SCRATCH_FOLDERS = {"source_directory": "source", "release_directory": "release", "submitted_directory": "submitted",
                   "autograded_directory": "autograded", "feedback_directory": "feedback"}
SCRATCH_GRADEBOOK, EXPECTED = "gradebook.db", "expected.json"  # in a scratch course: its gradebook, the solution's values
# A scratch course's one student, whoever handed in: its gradebook, copied from the batch's template, holds the
# student's submission rows made once (grade_one.warm_up), not for each hand-in (nbgrader's add_submission: 7-9 ms)
SCRATCH_STUDENT = "student"
# What nbgrader's exchange keeps beside a hand-in: when it was submitted, and the secret its feedback is released under
TIMESTAMP_FILE, SECRET_FILE = "timestamp.txt", "submission_secret.txt"


def default_out(course: Path, assignment: str) -> Path:
    return Path(course) / "autograder" / "grades" / assignment


def output(out, folder: str, student_id: str) -> Path:
    """A student's file in one of the output folder's OUTPUTS."""
    return Path(out) / folder / f"{student_id}{OUTPUTS[folder]}"


def scratch_gradebook(root) -> str:
    """The database URL of a scratch course's gradebook."""
    return f"sqlite:///{Path(root) / SCRATCH_GRADEBOOK}"


def in_scratch(root, folder: str, assignment: str, notebook: str) -> Path:
    """A notebook in a scratch course's nbgrader folder ('submitted', 'autograded', 'feedback'), as nbgrader puts it."""
    return Path(root) / folder / SCRATCH_STUDENT / assignment / notebook


def replace_file(target: Path, content: bytes | None = None, source: Path | None = None) -> None:
    """`target` replaced whole by `content` or a copy of `source`, mode 0644 whatever the old file's: nbgrader leaves
    the notebooks it grades read-only (0444), which only root may write over."""
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.unlink(missing_ok=True)
    if source is not None:
        shutil.copyfile(source, tmp)
    else:
        tmp.write_bytes(content)
    tmp.chmod(0o644)
    os.replace(tmp, target)


def write_exchange_files(folder: Path, timestamp: str, secret: str) -> None:
    """timestamp.txt and submission_secret.txt beside a notebook, those known ("" is not written)."""
    for name, content in ((TIMESTAMP_FILE, timestamp), (SECRET_FILE, secret)):
        if content:
            replace_file(folder / name, content.encode())


def write_expected(values: dict, template: Path) -> None:
    (Path(template) / EXPECTED).write_text(json.dumps(values))


def read_expected(template: Path) -> dict[str, list[dict]]:
    return json.loads((Path(template) / EXPECTED).read_text())


@contextmanager
def exclusive(path: Path, busy: str | None = None):
    """Hold a lock on `path` (a file) for the block: wait for it, or with `busy`, SystemExit(busy) if it is held."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (fcntl.LOCK_NB if busy else 0))
        except BlockingIOError:
            raise SystemExit(busy) from None
        yield
