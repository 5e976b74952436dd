"""Similar answers across a graded class: per exercise, the pairs of hand-ins whose answer cells match beyond a threshold.

The comparison is copydetect's (https://github.com/blingenf/copydetect), the method of MOSS: each answer is tokenised
by pygments, with names written as V, F or O, strings as S and comments and spaces dropped (so renaming variables or
rewording comments hides nothing), and fingerprinted by hashing its k-grams. Chosen over pycode-similar, which compares
two files' syntax trees at a time (nothing to index for a class, no matched regions to show), and over our own
tokeniser, which would be copydetect again, untested: copydetect is maintained, pure Python on pygments and numpy
(both here already), and gives the matched regions of both answers for the report.

copydetect's own driver compares every pair of files (compare_files): 500,000 pairs per exercise for 1,000 hand-ins,
too slow. Here each answer is fingerprinted once (CodeFingerprint, every k-gram kept: a window of 1), the
fingerprints go into an inverted index (fingerprint -> answers), and pairs are counted through the index only:
  - what every hand-in was given (the released answer cell: its signature, docstring, stub) is taken out of each
    answer's fingerprints, as copydetect's boilerplate;
  - so is a fingerprint that more than max(common_min, common_share x answers) answers hold: a passage much of the
    class wrote is no evidence of copying (MOSS's rule);
  - an answer left with fewer than `shortest` fingerprints is too short to judge, and is not compared;
  - a pair sharing at least PREFILTER x threshold of the smaller answer's fingerprints is compared with compare_files,
    which returns both answers' similarity (the share of its code covered by passages also in the other) and the
    matched regions, highlighted for the report with highlight_overlap.
A pair's score is the smaller of its two similarities: a pair is listed when most of both answers match, not when a
short answer is a part of a long one (that too is what honest answers to one question look like). The defaults were
set on the course's own answers: those its catalogue holds written independently score at most 0.72, a copy with its
names changed and lines reordered 0.94 (tests/test_similarity.py).

copydetect hashes k-grams with Python's hash(), salted per process: winnowing with a window over 1 would keep other
fingerprints at every run. With every k-gram kept, the pairs and scores are the same at every run.
"""

import html
import io
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import numpy as np
from traitlets.config import Config

from torchcourse.format import answer_cells, grading

from ..grading import handin
from ..config import Similarity

MAX_CHARS = 20_000  # an answer is compared on its first 20,000 characters: a class's answers are tens of lines
# A pair goes to compare_files when the fingerprints it shares, counted through the index, are at least this fraction
# of the threshold times the smaller answer's. A copy's share of fingerprints is below its similarity (the code its
# matches cover): reordered lines cut its matches into runs little longer than k, each covering k characters and
# more with its first fingerprint. At a quarter, a class's flagged pairs are those of comparing every pair that shares
# a fingerprint (`make bench-similarity` checks it: --exhaustive), in half the time.
PREFILTER = 0.25


@dataclass(kw_only=True)
class Pair:
    """Two students whose answers to one exercise match: their ids, score, similarities and highlighted answers."""
    students: tuple[str, str]  # student_id (gradebook id) of each, in order
    score: float  # the smaller of the two similarities
    similarities: tuple[float, float]  # the share of each answer's code found in the other
    marked: tuple[str, str]  # each answer as HTML text, the matched passages in <mark>


@dataclass(kw_only=True)
class Exercise:
    """What one exercise's comparison found."""
    grade_id: str
    pairs: list[Pair] = field(default_factory=list)  # score above the threshold, highest first
    answers: int = 0  # hand-ins holding this answer cell
    short: int = 0  # of which too short to judge (an unanswered cell among them)
    common: int = 0  # a passage in more answers than this was left out


@dataclass(kw_only=True)
class Findings:
    """The class's similar answers, with the settings that found them (for the report to say)."""
    settings: Similarity
    exercises: list[Exercise]
    left_out: list[str] = field(default_factory=list)  # students whose answers could not be compared (an error)
    problem: str = ""  # why no answer could be compared at all (the report says it instead)


@dataclass(kw_only=True)
class Cluster:
    """Students whose answers to one exercise are similar, directly or through one another: the pairs found among
    them, closest first (the first is the pair the report shows side by side)."""
    students: list[str]  # student_id of each, in order
    pairs: list[Pair]


def clusters(pairs: list[Pair]) -> list[Cluster]:
    """The pairs of one exercise grouped into clusters: students joined by a pair are in one cluster (five answers
    copied from one are one cluster of ten pairs, not ten findings). Closest cluster first (by its closest pair)."""
    parent: dict[str, str] = {}

    def root(student: str) -> str:
        while parent.setdefault(student, student) != student:
            student = parent[student]
        return student

    for pair in pairs:
        parent[root(pair.students[0])] = root(pair.students[1])
    grouped = defaultdict(list)
    for pair in pairs:
        grouped[root(pair.students[0])].append(pair)
    found = [Cluster(students=sorted({s for p in group for s in p.students}),
                     pairs=sorted(group, key=lambda p: (-p.score, p.students))) for group in grouped.values()]
    return sorted(found, key=lambda c: (-c.pairs[0].score, c.students))


def released_answers(source: Path, config: Config) -> dict[str, str]:
    """grade_id -> each answer cell as the students got it: made from the source by nbgrader's ClearSolutions with the
    course's settings, as generate_assignment makes the student version (a merge and the grader's own test course
    have no release folder to read)."""
    from nbgrader.preprocessors import ClearSolutions

    nb = nbformat.read(source, as_version=4)
    nb, _ = ClearSolutions(config=config).preprocess(nb, {})
    return {grading(cell)["grade_id"]: cell.source for cell in answer_cells(nb)}


def fingerprint(text: str, noise: int):
    """copydetect's fingerprint of an answer: every k-gram of its filtered code (a window of 1)."""
    from copydetect import CodeFingerprint  # imports matplotlib: only where the report is drawn

    return CodeFingerprint("answer.py", noise, 1, language="python", fp=io.StringIO(text[:MAX_CHARS]))


def leave_out(fp, hashes: set) -> None:
    """Take these fingerprints out of an answer's, with their places and the code they covered.

    Done on CodeFingerprint's documented attributes, not with its `boilerplate` argument: copydetect 0.5.0 removes
    boilerplate with np.intersect1d(..., assume_unique=True) on hashes that may repeat, which also drops the first
    place of every k-gram an answer holds twice."""
    from copydetect.utils import get_token_coverage

    gone = fp.hashes & hashes
    if gone:
        fp.hashes -= gone
        for h in gone:
            del fp.hash_idx[h]
        fp.token_coverage = get_token_coverage(fp.hash_idx, fp.k, len(fp.filtered_code))


def shared_counts(index: dict, cap: int, eligible: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, second, count): how many fingerprints each pair of answers shares, counted through the index, for the
    fingerprints held by 2 to `cap` eligible answers. Postings of one size are stacked, so that numpy makes the pairs."""
    by_size = defaultdict(list)
    for who in index.values():
        who = [i for i in who if eligible[i]]
        if 2 <= len(who) <= cap:
            by_size[len(who)].append(who)
    n = len(eligible)
    codes = []
    for size, groups in by_size.items():
        members = np.array(groups, dtype=np.int64)  # answers were indexed in order: each row is increasing
        first, second = np.triu_indices(size, 1)
        codes.append((members[:, first] * n + members[:, second]).ravel())
    if not codes:
        empty = np.array([], dtype=np.int64)
        return empty, empty, empty
    pairs, counts = np.unique(np.concatenate(codes), return_counts=True)
    return pairs // n, pairs % n, counts


def marked(text: str, slices) -> str:
    """An answer as HTML text, its matched passages in <mark>: copydetect's highlight_overlap, which escapes the text
    (markupsafe) around and inside each mark; without slices it would return the text unescaped, so that case is ours."""
    from copydetect.utils import highlight_overlap

    if slices.ndim != 2 or slices.shape[1] == 0:
        return html.escape(text, quote=True)  # as the report's template escapes what a hand-in says
    return highlight_overlap(text, slices, "<mark>", "</mark>", escape_html=True)[0]


def fingerprints(answers: dict[str, str], noise: int, left_out: list[str]) -> dict:
    """student -> their answer's fingerprint; a student whose answer copydetect fails on goes into `left_out`, and the
    others are compared without it."""
    prints = {}
    for student in sorted(answers):
        try:
            prints[student] = fingerprint(answers[student], noise)
        except Exception:  # that answer's part of the page only
            left_out.append(student)
    return prints


def similar_pairs(grade_id: str, answers: dict[str, str], released: str, settings: Similarity,
                  left_out: list[str] | None = None) -> Exercise:
    """The pairs of students whose answers (student -> answer cell text) to one exercise score above the threshold;
    those whose answer could not be fingerprinted go into `left_out`."""
    from copydetect import compare_files

    by_student = fingerprints(answers, settings.noise, [] if left_out is None else left_out)
    students, prints = list(by_student), list(by_student.values())
    given = fingerprint(released, settings.noise).hashes
    index = defaultdict(list)
    for i, fp in enumerate(prints):
        leave_out(fp, given)
        for h in fp.hashes:
            index[h].append(i)
    cap = max(settings.common_min, int(settings.common_share * len(students)))
    common = {h for h, who in index.items() if len(who) > cap}
    for fp in prints:
        leave_out(fp, common)
    sizes = np.array([len(p.hashes) for p in prints], dtype=np.int64)
    eligible = sizes >= settings.shortest
    found = Exercise(grade_id=grade_id, answers=len(students), short=int((~eligible).sum()), common=cap)
    first, second, shared = shared_counts(index, cap, eligible)
    wanted = shared >= PREFILTER * settings.threshold * np.minimum(sizes[first], sizes[second])
    for i, j in zip(first[wanted].tolist(), second[wanted].tolist()):
        _, similarities, slices = compare_files(prints[i], prints[j])
        score = float(min(similarities))
        if score >= settings.threshold and score > 0:
            found.pairs.append(Pair(students=(students[i], students[j]), score=score,
                                    similarities=(float(similarities[0]), float(similarities[1])),
                                    marked=(marked(prints[i].raw_code, slices[0]), marked(prints[j].raw_code, slices[1]))))
    found.pairs.sort(key=lambda p: (-p.score, p.students))
    return found


def find(students: list[tuple[str, str]], submitted: Path, source: Path, config: Config) -> Findings:
    """Per exercise of the source notebook, the similar answers among the class's hand-ins (`students`: each one's id
    and status, a 'missing' one having handed nothing in; each hand-in as the batch keeps it, submitted/<student_id>.ipynb),
    each read as a grading reads it (handin.py). A hand-in that cannot be read or compared is left out, and named."""
    settings = Similarity(config=config)
    assignment = nbformat.read(source, as_version=4)
    released = released_answers(source, config)
    by_exercise, left_out = {gid: {} for gid in released}, []
    for student_id, status in students:
        path = submitted / f"{student_id}.ipynb"
        if status == "missing" or not path.is_file():
            continue
        try:
            answers = handin.answers(path.read_bytes(), assignment)
        except Exception:  # that hand-in's part only: the class is compared without it
            left_out.append(student_id)
            continue
        for gid, text in answers.items():
            if gid in by_exercise:
                by_exercise[gid][student_id] = text
    exercises = [similar_pairs(gid, answers, released[gid], settings, left_out) for gid, answers in by_exercise.items()]
    return Findings(settings=settings, exercises=exercises, left_out=sorted(set(left_out)))
