"""python -m autograder grade ASSIGNMENT [SUBMISSIONS] [--jobs N] [--out DIR] [--shard K/N] [--scheduler ADDRESS] ...
python -m autograder merge OUT_1 OUT_2 ... [--out DIR]
python -m autograder export ASSIGNMENT --lms canvas|moodle [--out FILE] [--title TITLE]
python -m autograder remove ASSIGNMENT STUDENT... [--force]"""

import argparse
import os
import sys
from pathlib import Path

from .run.batch import BatchFailed, Options, grade, merge
from .reports.lms import LMS, export
from .run.remove import remove


def settings(args) -> dict:
    """The command line's options as nbgrader settings, on top of the course's nbgrader_config.py."""
    found = {}
    for given, section, name in ((args.timeout, "Execute", "timeout"),
                                 (args.memory, "SandboxedKernelManager", "memory_gib"),
                                 (args.processes, "SandboxedKernelManager", "processes"),
                                 (args.unfenced or None, "SandboxedKernelManager", "unfenced")):
        if given is not None:
            found.setdefault(section, {})[name] = given
    return found


def shard(text: str) -> tuple[int, int]:
    """'K/N', with 1 <= K <= N."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N (e.g. 2/8)") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"{text!r}: K must be 1 to N")
    return k, n


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m autograder", description="Grade a whole class with nbgrader.")
    commands = parser.add_subparsers(dest="command", required=True)
    g = commands.add_parser("grade", help="grade every submission of one assignment",
                            description="Grade every submission of one assignment, in parallel; write grades.csv, "
                                        "feedback/<student>.html, and record the grades in the course's gradebook. "
                                        "Limits not given here are the course's nbgrader_config.py's.")
    g.add_argument("assignment", help="assignment name or number, e.g. 02_autograd or 02")
    g.add_argument("submissions", type=Path, nargs="?",
                   help="a folder (alice/02_x.ipynb or alice.ipynb), a zip file of one, or one notebook (to grade, "
                        "or debug, one student: its log is logs/<student>.log); left out: what `nbgrader collect` put "
                        "in the course's submitted folder, with the exchange's timestamps")
    g.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="submissions graded at once (default: cores)")
    g.add_argument("--out", type=Path, help="where grades.csv and feedback/ go (default autograder/grades/ASSIGNMENT)")
    g.add_argument("--force", action="store_true", help="grade again what an earlier run already graded")
    g.add_argument("--pattern", help="regex naming the student in each zip entry's path by its group student_id (and "
                                     "optionally name, or first_name and last_name, and late: the LMS marked it late); "
                                     "needed only where the zip's layout is none the grader recognises: Canvas's, "
                                     "Moodle's, a folder or a notebook per student")
    g.add_argument("--course", type=Path, default=Path.cwd(), help="the course folder (default: here)")
    g.add_argument("--timeout", type=int, help="seconds a cell may run (Execute.timeout)")
    g.add_argument("--memory", type=float, help="GiB of memory a kernel may use (SandboxedKernelManager.memory_gib)")
    g.add_argument("--processes", type=int, help="processes and threads a kernel may run at once")
    g.add_argument("--shard", type=shard, metavar="K/N",
                   help="grade only the K-th of N fixed parts of the class (by student id), for job arrays; "
                        "then `merge` the N output folders")
    g.add_argument("--scheduler", metavar="ADDRESS",
                   help="send each submission to the workers of this dask.distributed scheduler (tcp://host:8786)")
    g.add_argument("--unfenced", action="store_true",
                   help="grade without the sandbox where bubblewrap cannot run: student code then runs with your "
                        "permissions, and can read the answers and change other students' grades")
    m = commands.add_parser("merge", help="merge the output folders of a sharded grading",
                            description="Merge the output folders of `grade --shard K/N` runs into one grades.csv, "
                                        "feedback folder and gradebook entry, as one run would have made them.")
    m.add_argument("folders", type=Path, nargs="+",
                   help="the shards' output folders, or one folder holding them")
    m.add_argument("--out", type=Path, help="where the merged grades.csv and feedback/ go "
                                            "(default autograder/grades/ASSIGNMENT)")
    m.add_argument("--course", type=Path, default=Path.cwd(), help="the course folder (default: here)")
    e = commands.add_parser("export", help="write an assignment's grades for an LMS's gradebook import",
                            description="Write one assignment's grades from the course's gradebook (scores entered "
                                        "by hand and late penalties included, as `nbgrader export`) as the CSV file "
                                        "Canvas's gradebook import or Moodle's grading worksheet upload takes, each "
                                        "student by the LMS id `grade --pattern` read from the LMS's zip.")
    e.add_argument("assignment", help="assignment name or number, e.g. 02_autograd or 02")
    e.add_argument("--lms", required=True, choices=LMS, help="the LMS whose import the file is for")
    e.add_argument("--out", type=Path, help="the file to write (default autograder/grades/ASSIGNMENT/LMS.csv)")
    e.add_argument("--title", help="Canvas: the assignment's column, as Canvas names it, 'Title (assignment id)' "
                                   "(default: ASSIGNMENT, which Canvas creates unless an assignment has that title)")
    e.add_argument("--course", type=Path, default=Path.cwd(), help="the course folder (default: here)")
    r = commands.add_parser("remove", help="take students out of an assignment's grades (a wrong run's, say)",
                            description="List what removing these students from one assignment takes away: their "
                                        "submission in the course's gradebook (and the student, where they have no "
                                        "other), their files in the grader's output folder and nbgrader's submitted/, "
                                        "autograded/ and feedback/ folders, their rows of grades.csv. With --force, "
                                        "remove it, as `nbgrader db student remove --force` does.")
    r.add_argument("assignment", help="assignment name or number, e.g. 02_autograd or 02")
    r.add_argument("students", nargs="+", metavar="STUDENT",
                   help="a student id as grades.csv shows it, or a shell-style pattern in quotes ('*_02_autograd')")
    r.add_argument("--force", action="store_true", help="remove (without it: only list what would be removed)")
    r.add_argument("--out", type=Path, help="the grading's output folder (default autograder/grades/ASSIGNMENT)")
    r.add_argument("--course", type=Path, default=Path.cwd(), help="the course folder (default: here)")
    args = parser.parse_args()
    if args.command == "merge":
        merge(args.folders, args.out, args.course.resolve(), {})
        return
    if args.command == "remove":
        remove(args.assignment, args.students, args.force, args.out, args.course.resolve())
        return
    if args.command == "export":
        export(args.assignment, args.lms, args.out, args.course.resolve(), args.title)
        return
    try:
        grade(Options(assignment=args.assignment, submissions=args.submissions, jobs=max(1, args.jobs), out=args.out,
                      force=args.force, pattern=args.pattern, course=args.course.resolve(), settings=settings(args),
                      shard=args.shard, scheduler=args.scheduler))
    except BatchFailed as error:
        print(f"\ngrading stopped: {error}.\nThe rows graded before that are in grades.csv; run the same command "
              "again to grade the rest.", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
