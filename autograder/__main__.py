"""python -m autograder grade ASSIGNMENT SUBMISSIONS [--jobs N] [--timeout S] [--out DIR] [--force]"""

import argparse
import os
from pathlib import Path

from .batch import Options, grade


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m autograder", description="Grade a whole class with nbgrader.")
    commands = parser.add_subparsers(dest="command", required=True)
    g = commands.add_parser("grade", help="grade every submission of one assignment",
                            description="Grade every submission of one assignment, in parallel; write grades.csv, "
                                        "feedback/<student>.html, and record the grades in the course's gradebook.")
    g.add_argument("assignment", help="assignment name or number, e.g. 02_autograd or 02")
    g.add_argument("submissions", type=Path, help="a folder (alice/02_x.ipynb or alice.ipynb) or a zip file of one")
    g.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="submissions graded at once (default: cores)")
    g.add_argument("--timeout", type=int, default=60, help="seconds a cell may run (default 60)")
    g.add_argument("--out", type=Path, help="where grades.csv and feedback/ go (default autograder/grades/ASSIGNMENT)")
    g.add_argument("--force", action="store_true", help="grade again what an earlier run already graded")
    g.add_argument("--memory", type=float, default=4.0, help="GiB of memory a student's kernel may use (default 4)")
    g.add_argument("--pattern", help=r"regex naming the student in each zip entry's path, e.g. "
                                     r"'^(?P<student_id>[^_/]+)_\d+_' for Canvas (default: alice/… or alice.ipynb)")
    g.add_argument("--course", type=Path, default=Path.cwd(), help="the course folder (default: here)")
    args = parser.parse_args()
    grade(Options(args.assignment, args.submissions, max(1, args.jobs), args.timeout, args.out, args.force,
                  args.memory, args.pattern, args.course.resolve()))


if __name__ == "__main__":
    main()
