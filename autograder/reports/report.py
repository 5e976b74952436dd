"""report.html: the class at a glance for the instructor: statuses, each exercise's points and failures, similar
answers, slow hand-ins.

One self-contained page (inline CSS and SVG, no script), drawn by templates/report.html.j2 from the plain data the
functions here compute. Student ids and messages come from hand-ins, so the template escapes every piece of text
(autoescape), and the page's policy lets no script run: the instructor opens this page in a browser.
"""

import io
import re
from collections import Counter
from pathlib import Path

import jinja2
import nbformat

from torchcourse.format import answer_cells, grading, test_cells

from ..grading.notebook import NOT_ANSWERED, PAGE_POLICY, SKIPPED, TIMED_OUT, exercise_name, unanswered
from ..results import STATUSES, formgraders_mean, full_name, shown_id
from .similarity import clusters

TOP_FAILURES = 5  # failure messages listed per exercise
SLOWEST = 5  # hand-ins listed by grading time
SIMILAR_SHOWN = 20  # clusters of similar answers shown per exercise, closest first (the rest are counted)
# A test's error that says nothing of the answer but how its run ended, as the group it is listed under: the time
# limit's (the kernel's KeyboardInterrupt when interrupted, nbgrader's CellTimeoutError, a test not run after another
# of its exercise was stopped); an answer left as released is feedback.NOT_ANSWERED.
STOPPED = "stopped at the time limit (or not run, as another test of the exercise was)"


def who_is(row) -> str:
    """A student as the report names them: the id as given, with their name where one is known."""
    name = full_name(row)
    return f"{shown_id(row)} ({name})" if name else shown_id(row)


def failure_group(message: str) -> str:
    """The group a failing test's message is listed under: the message itself, or what a time-out's or an unanswered
    exercise's bare error means."""
    ename = message.partition(":")[0]
    if ename in ("KeyboardInterrupt", TIMED_OUT, SKIPPED):
        return STOPPED
    if unanswered(message):
        return NOT_ANSWERED
    return message


def counted(n: int, noun: str) -> str:
    """'1 student', '2 students'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def percent(share: float) -> str:
    return f"{100 * share:.0f}%"


def exercises(source: Path) -> list[tuple[str, str, list[str], float]]:
    """(answer grade_id, name, its test cells' grade_ids, points) of each exercise of the source notebook, in order."""
    nb = nbformat.read(source, as_version=4)
    found = []
    for answer in answer_cells(nb):
        tests = test_cells(nb, grading(answer)["grade_id"])
        found.append((grading(answer)["grade_id"], exercise_name(nb, answer), [grading(t)["grade_id"] for t in tests],
                      sum(float(grading(t).get("points", 0)) for t in tests)))
    return found


def points_on(row, tests: list[str]) -> float:
    """A student's points on one exercise: the sum over its test cells (a cell absent from the row scores 0)."""
    return sum(float(row.cells.get(gid, {}).get("score", 0)) for gid in tests)


def distribution_svg(salt: str, points: list[float], best: float) -> str:
    """A bar plot of how many students got each number of points, as an inline <svg> element."""
    from matplotlib import rc_context  # only the report plots: the grader does not import matplotlib otherwise
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    counts = Counter(points)
    whole = best == int(best) <= 20 and all(p == int(p) and 0 <= p <= best for p in counts)  # a bar for each point
    values = [float(v) for v in range(int(best) + 1)] if whole else sorted(set(counts) | {0.0, best})
    # A salt of the figure's own keeps the ids matplotlib makes stable from run to run and distinct between figures.
    with rc_context({"svg.hashsalt": salt, "svg.fonttype": "none"}):
        fig = Figure(figsize=(4.5, 2.2))
        ax = fig.add_subplot()
        bars = ax.bar([f"{v:g}" for v in values], [counts[v] for v in values], color="#4c72b0")
        ax.bar_label(bars, fmt="%d")
        ax.set_xlabel(f"points (of {best:g})")
        ax.set_ylabel("students")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, max(counts.values(), default=0) * 1.2 + 1)
        ax.spines[["top", "right"]].set_visible(False)
        buffer = io.StringIO()
        no_metadata = {"Date": None, "Creator": None, "Format": None, "Type": None}  # a date would change every run
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata=no_metadata)
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg"):]  # inline in HTML: no XML prolog, no doctype
    # matplotlib names its elements "patch_1", "xtick_1"... in every figure alike, and nothing refers to those names:
    # one page with several figures would repeat them. The ids that are referred to are hashes, salted per figure.
    return re.sub(r' id="[\w.]+_\d+"', "", svg)


def statuses(rows: list) -> list[tuple[str, list[str]]]:
    """Each status some students have, with those students."""
    found = [(status, sorted(who_is(r) for r in rows if r.status == status)) for status in STATUSES]
    return [(status, who) for status, who in found if who]


def exercise(gid: str, name: str, tests: list[str], best: float, rows: list) -> dict:
    """One exercise: the distribution of points, full / partial / none, and the most common failures."""
    points = [points_on(r, tests) for r in rows]
    kinds = Counter("full" if p >= best else "none" if p <= 0 else "partial" for p in points)
    failures: dict[str, set[str]] = {}  # group -> the students behind it, each once however many tests it failed
    for r in rows:
        for t in tests:
            if message := r.cells.get(t, {}).get("message", ""):
                failures.setdefault(failure_group(message), set()).add(who_is(r))
    groups = sorted(failures.items(), key=lambda item: (-len(item[1]), item[0]))
    return {"grade_id": gid, "name": name, "best": best, "students": len(rows), "full": kinds["full"],
            "partial": kinds["partial"], "none": kinds["none"], "svg": distribution_svg(f"report-{gid}", points, best),
            "failures": [(message, sorted(who)) for message, who in groups[:TOP_FAILURES]],
            "more": len(groups[TOP_FAILURES:])}


def similar_answers(findings, rows: list, names: dict[str, str]) -> dict:
    """The "Similar answers" part of the page: how answers were compared, then each exercise's clusters."""
    who = {r.student_id: who_is(r) for r in rows}
    sections = []
    for found in findings.exercises:
        grouped = clusters(found.pairs)
        sections.append({"found": found, "name": names.get(found.grade_id, found.grade_id),
                         "clusters": len(grouped), "shown": grouped[:SIMILAR_SHOWN]})
    return {"problem": findings.problem, "left_out": [who.get(s, s) for s in findings.left_out], "who": who,
            "threshold": findings.settings.threshold, "noise": findings.settings.noise, "exercises": sections}


def slowest(rows: list) -> list:
    """The hand-ins that took longest to grade."""
    return sorted(rows, key=lambda r: (-r.seconds, r.student_id))[:SLOWEST]


def summary(rows: list) -> dict:
    """The class in numbers: students, the mean score as formgrader computes it, late hand-ins."""
    said = {"students": len(rows), "late": sorted((r for r in rows if r.seconds_late > 0),
                                                  key=lambda r: r.student_id)}
    if rows:
        penalised = sum(r.late_penalty for r in rows) > 0
        said.update(best=max(r.max_score for r in rows), mean=formgraders_mean(rows),
                    with_penalties=sum(r.score for r in rows) / len(rows) if penalised else None)
    return said


# The templates beside this file; autoescape on, and a name the template misspells is an error, not an empty string.
PAGES = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True,
                           undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                           keep_trailing_newline=True)
PAGES.filters.update(counted=counted, percent=percent, who=who_is)


def write_report(path: Path, rows: list, source: Path, similar=None) -> None:
    """report.html for the instructor, from grades.csv's rows and the assignment's source notebook, with the similar
    answers found in the class (similarity.Findings) where given; replaced whole."""
    present = [r for r in rows if r.status != "missing"]
    found = exercises(source)
    page = PAGES.get_template("report.html.j2").render(
        assignment=rows[0].assignment if rows else source.parent.name, policy=PAGE_POLICY,
        summary=summary(rows), statuses=statuses(rows), missing=len(rows) - len(present),
        exercises=[exercise(gid, name, tests, best, present) for gid, name, tests, best in found],
        similar=similar_answers(similar, rows, {gid: name for gid, name, _, _ in found}) if similar else None,
        slowest=slowest(rows))
    tmp = path.with_name(f".{path.name}.tmp")  # whole or not at all, as grades.csv
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
