"""report.html: the class at a glance for the instructor: statuses, each exercise's points and failures, similar
answers, slow hand-ins.

One self-contained page (inline CSS and SVG, no script). Student ids and messages come from hand-ins, so every piece
of text is escaped, and the page's policy lets no script run: the instructor opens this page in a browser.
"""

import html
import io
import re
from collections import Counter
from pathlib import Path

import nbformat

from torchcourse.format import answer_cells, grading, test_cells

from .execute import SKIPPED
from .feedback import NOT_ANSWERED, PAGE_POLICY, TIMED_OUT
from .notebook import exercise_name, unanswered
from .results import STATUSES, formgraders_mean, full_name, shown_id
from .similarity import clusters

TOP_FAILURES = 5  # failure messages listed per exercise
SLOWEST = 5  # hand-ins listed by grading time
SIMILAR_SHOWN = 20  # clusters of similar answers shown per exercise, closest first (the rest are counted)
# A test's error that says nothing of the answer but how its run ended, as the group it is listed under: the time
# limit's (the kernel's KeyboardInterrupt when interrupted, nbgrader's CellTimeoutError, a test not run after another
# of its exercise was stopped); an answer left as released is feedback.NOT_ANSWERED.
STOPPED = "stopped at the time limit (or not run, as another test of the exercise was)"
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td.number { text-align: right; }
section.exercise { border-top: 1px solid #ccc; margin-top: 1.5em; }
figure.distribution { margin: 0.5em 0; }
figure.distribution svg { max-width: 28em; height: auto; }
code { background: #f4f4f4; padding: 0 0.2em; white-space: pre-wrap; word-break: break-word; }
section.similar { border-top: 1px solid #ccc; margin-top: 1.5em; }
table.side-by-side { table-layout: fixed; width: 100%; }
pre.answer { margin: 0; font-size: 0.85em; white-space: pre-wrap; word-break: break-word; }
mark { background: #ffd966; }
"""


def text(value) -> str:
    """Anything from a hand-in (an id, a message), as HTML text that cannot open a tag."""
    return html.escape(str(value), quote=True)


def who_is(row: dict) -> str:
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


def students(n: int) -> str:
    """'1 student', '2 students'."""
    return f"{n} student{'' if n == 1 else 's'}"


def exercises(source: Path) -> list[tuple[str, str, list[str], float]]:
    """(answer grade_id, name, its test cells' grade_ids, points) of each exercise of the source notebook, in order."""
    nb = nbformat.read(source, as_version=4)
    found = []
    for answer in answer_cells(nb):
        tests = test_cells(nb, grading(answer)["grade_id"])
        found.append((grading(answer)["grade_id"], exercise_name(nb, answer), [grading(t)["grade_id"] for t in tests],
                      sum(float(grading(t).get("points", 0)) for t in tests)))
    return found


def points_on(row: dict, tests: list[str]) -> float:
    """A student's points on one exercise: the sum over its test cells (a cell absent from the row scores 0)."""
    return sum(float(row.get("cells", {}).get(gid, {}).get("score", 0)) for gid in tests)


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


def status_table(rows: list[dict]) -> str:
    """Counts by status, with the students behind each."""
    lines = ['<table class="statuses"><tr><th>status</th><th>students</th><th>who</th></tr>']
    for status in STATUSES:
        who = sorted(who_is(r) for r in rows if r["status"] == status)
        if who:
            lines.append(f'<tr data-status="{status}" data-count="{len(who)}"><td>{status}</td>'
                         f'<td class="number">{len(who)}</td><td>{", ".join(text(s) for s in who)}</td></tr>')
    return "\n".join(lines + ["</table>"])


def exercise_section(gid: str, name: str, tests: list[str], best: float, rows: list[dict]) -> str:
    """One exercise: the distribution of points, full / partial / none, and the most common failures."""
    points = [points_on(r, tests) for r in rows]
    kinds = Counter("full" if p >= best else "none" if p <= 0 else "partial" for p in points)
    full, partial, none = kinds["full"], kinds["partial"], kinds["none"]
    failures: dict[str, set[str]] = {}  # group -> the students behind it, each once however many tests it failed
    for r in rows:
        for t in tests:
            if message := r.get("cells", {}).get(t, {}).get("message", ""):
                failures.setdefault(failure_group(message), set()).add(who_is(r))
    groups = sorted(failures.items(), key=lambda item: (-len(item[1]), item[0]))
    top, rest = groups[:TOP_FAILURES], groups[TOP_FAILURES:]
    listed = "\n".join(f'<li data-count="{len(who)}"><code>{text(message)}</code> ({students(len(who))}: '
                       f'{", ".join(text(w) for w in sorted(who))})</li>' for message, who in top)
    more = (f"<p>and {len(rest)} other message{'' if len(rest) == 1 else 's'}, each from as many students or fewer "
            "(grades.csv has every test's)</p>\n" if rest else "")
    return (f'<section class="exercise" data-exercise="{text(gid)}" data-full="{full}" data-partial="{partial}" '
            f'data-none="{none}" data-students="{len(rows)}">\n<h3>{text(name)}</h3>\n'
            f'<figure class="distribution">{distribution_svg(f"report-{gid}", points, best)}'
            f"<figcaption>students by points on {text(gid)}</figcaption></figure>\n"
            f"<p>full marks {full}, partial {partial}, none {none} (of {students(len(rows))}; {best:g} points)</p>\n"
            + (f'<h4>most common failures</h4>\n<ol class="failures">\n{listed}\n</ol>\n{more}' if top
               else "<p>no test of this exercise failed</p>\n") + "</section>")


def percent(share: float) -> str:
    return f"{100 * share:.0f}%"


def similar_pair(pair, who: dict[str, str]) -> str:
    """Two students' answers side by side, what matches marked (copydetect's highlighting, escaped)."""
    (a, b), (share_a, share_b) = [text(who[s]) for s in pair.students], pair.similarities
    return (f'<div class="pair" data-score="{pair.score:.2f}">\n<p><b>{a}</b> and <b>{b}</b>: {percent(pair.score)} '
            f"({percent(share_a)} of {a}'s answer is found in {b}'s, {percent(share_b)} of {b}'s in {a}'s)</p>\n"
            f'<table class="side-by-side"><tr><th>{a}</th><th>{b}</th></tr>\n<tr><td><pre class="answer">'
            f'{pair.marked[0]}</pre></td><td><pre class="answer">{pair.marked[1]}</pre></td></tr></table>\n</div>')


def similar_cluster(cluster, who: dict[str, str]) -> str:
    """A cluster of students whose answers are similar: who, its closest pair side by side, its other pairs listed."""
    others = ", ".join(f'<span data-score="{p.score:.2f}">{text(who[p.students[0]])} and {text(who[p.students[1]])} '
                       f"{percent(p.score)}</span>" for p in cluster.pairs[1:])
    return (f'<div class="cluster" data-students="{len(cluster.students)}" data-pairs="{len(cluster.pairs)}">\n'
            f"<p>{students(len(cluster.students))}: {', '.join(text(who[s]) for s in cluster.students)}; "
            f"the closest pair:</p>\n{similar_pair(cluster.pairs[0], who)}\n"
            + (f'<p class="pairs">The other pairs of this cluster: {others}.</p>\n' if others else "")
            + "</div>")


def similar_section(found, name: str, who: dict[str, str], threshold: float) -> str:
    """One exercise's similar answers, in clusters, or one line saying there are none."""
    counted = (f"{found.answers} answers ({found.short} too short to judge; passages in more than {found.common} "
               "answers left out)")
    above = f"above {percent(threshold)}"
    grouped = clusters(found.pairs)
    shown = grouped[:SIMILAR_SHOWN]
    said = (f"<p>{counted}: {len(found.pairs)} pair{'' if len(found.pairs) == 1 else 's'} {above}, in "
            f"{len(grouped)} cluster{'' if len(grouped) == 1 else 's'} (students similar to one another, directly "
            "or through others)" + (f", the {len(shown)} closest shown" if len(shown) < len(grouped) else "") + ".</p>"
            if found.pairs else f"<p>{counted}: no pair {above}.</p>")
    return (f'<section class="similar" data-exercise="{text(found.grade_id)}" data-pairs="{len(found.pairs)}" '
            f'data-answers="{found.answers}" data-short="{found.short}" data-clusters="{len(grouped)}">\n'
            f"<h3>{text(name)}</h3>\n{said}\n"
            + "".join(similar_cluster(cluster, who) + "\n" for cluster in shown) + "</section>")


def similar_answers(findings, rows: list[dict], names: dict[str, str]) -> list[str]:
    """The "Similar answers" part of the page: how answers were compared, then each exercise's clusters."""
    settings, who = findings.settings, {r["student_id"]: who_is(r) for r in rows}
    if findings.problem:
        return ["<h2>Similar answers</h2>", f'<p class="left-out">{text(findings.problem)}</p>']
    left_out = ([f'<p class="left-out" data-count="{len(findings.left_out)}">Not compared: the notebook of '
                 f"{', '.join(text(who.get(s, s)) for s in findings.left_out)} could not be read as answers "
                 "(the report's messages on the terminal say why).</p>"] if findings.left_out else [])
    return ["<h2>Similar answers</h2>", *left_out,
            "<p>Each exercise's answers compared two by two with copydetect (MOSS's fingerprints: names, strings and "
            f"comments do not count, nor does the starter code every student was given). A pair is listed when at "
            f"least {percent(settings.threshold)} of each answer is found in the other, in passages of "
            f"{settings.noise} characters or more of code (c.Similarity in nbgrader_config.py). A match is a reason to "
            "look, not a verdict: short exercises have few ways to be answered.</p>",
            *(similar_section(found, names.get(found.grade_id, found.grade_id), who, settings.threshold)
              for found in findings.exercises)]


def slowest_table(rows: list[dict]) -> str:
    """The hand-ins that took longest to grade, with how much of it was running their cells."""
    slow = sorted(rows, key=lambda r: (-r.get("seconds", 0), r["student_id"]))[:SLOWEST]
    lines = ['<table class="slowest"><tr><th>student</th><th>status</th><th>grading (s)</th>'
             "<th>running its cells (s)</th></tr>"]
    lines += [f"<tr><td>{text(who_is(r))}</td><td>{text(r['status'])}</td>"
              f'<td class="number">{r.get("seconds", 0):.1f}</td>'
              f'<td class="number">{r.get("execute_seconds", 0):.1f}</td></tr>' for r in slow]
    return "\n".join(lines + ["</table>"])


def summary(rows: list[dict]) -> str:
    """The class in a sentence: students, the mean score as formgrader computes it, late hand-ins."""
    late = sorted((r for r in rows if r.get("seconds_late", 0) > 0), key=lambda r: r["student_id"])
    said = f"<p>{students(len(rows))}"
    if rows:
        best, before = max(r["max_score"] for r in rows), formgraders_mean(rows)
        penalised = sum(r.get("late_penalty", 0) for r in rows) > 0
        said += (f"; mean score {before:.2f} of {best:g} points over all {len(rows)}, as formgrader's mean counts "
                 "them (every student of this table with the points recorded for them: 0 for a missing or unreadable "
                 "hand-in, a stopped one's other tests counted"
                 + (f"; late penalties not taken off: {sum(r['score'] for r in rows) / len(rows):.2f} with them)"
                    if penalised else ")"))
    said += ".</p>"
    if late:
        who = ", ".join(f"{text(who_is(r))} (−{r.get('late_penalty', 0):g})" for r in late)
        said += (f'\n<p class="late" data-count="{len(late)}">{len(late)} late, their scores with the late '
                 f"penalty taken off: {who}</p>")
    return said


def write_report(path: Path, rows: list[dict], source: Path, similar=None) -> None:
    """report.html for the instructor, from grades.csv's rows and the assignment's source notebook, with the similar
    answers found in the class (similarity.Findings) where given; replaced whole."""
    assignment = rows[0]["assignment"] if rows else source.parent.name
    present = [r for r in rows if r["status"] != "missing"]
    missing = len(rows) - len(present)
    found = exercises(source)
    sections = [exercise_section(gid, name, tests, best, present) for gid, name, tests, best in found]
    page = "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', PAGE_POLICY,
        f"<title>{text(assignment)}: grading report</title><style>{STYLE}</style></head><body>",
        f"<h1>{text(assignment)}</h1>", summary(rows),
        "<h2>Statuses</h2>", status_table(rows),
        "<h2>Exercises</h2>",
        *([f"<p>{students(missing)} with no notebook (missing) left out of these statistics.</p>"] if missing else []),
        *sections,
        *(similar_answers(similar, rows, {gid: name for gid, name, _, _ in found}) if similar else []),
        "<h2>Slowest hand-ins</h2>", slowest_table(rows),
        "</body></html>", ""])
    tmp = path.with_name(f".{path.name}.tmp")  # whole or not at all, as grades.csv
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
