"""Similar answers across a class (autograder/reports/similarity.py) and their section of report.html: answer texts compared
directly, no grading; the batch's report step on hand-ins laid out as a graded class leaves them."""

import io
import itertools
import json
from dataclasses import replace
import re
import tokenize
from collections import Counter
from keyword import iskeyword

import pytest
from traitlets.config import Config

from autograder.run import batch
from autograder import config as course_config
from autograder.results import Result
from autograder.reports.similarity import Similarity, similar_pairs
from course import assignments, read, release_path, solution_answers, wrong_answers
from handins import ASSIGNMENT, COURSE, FIRST, NOTEBOOK, SECOND, html_text, right, write
from torchcourse.format import answer_cells, grading

pytestmark = pytest.mark.xdist_group("similarity")  # the report's tests share one report, written once

def released(assignment: str) -> dict[str, str]:
    """grade_id -> the answer cell as the students got it (notebooks/)."""
    return {grading(c)["grade_id"]: c.source for c in answer_cells(read(release_path(assignment)))}


PAD = released("04_training")["ex2_pad_collate"]
SIGNATURE = "\n".join(PAD.splitlines()[:2]) + "\n"  # def pad_collate(...) and its docstring, as released
# A student's own answer, and a copy of it with every name changed, statements reordered, comments reworded.
ORIGINAL = SIGNATURE + '''    seqs = [item[0] for item in batch]
    ys = [item[1] for item in batch]
    longest = max(seq.shape[0] for seq in seqs)
    lens = torch.tensor([seq.shape[0] for seq in seqs])
    out = seqs[0].new_zeros((len(seqs), longest))
    # copy each sequence into its row, the rest stays 0
    for i in range(len(seqs)):
        out[i, : seqs[i].shape[0]] = seqs[i]
    mask = torch.zeros(len(seqs), longest, dtype=torch.bool)
    for i in range(len(seqs)):
        mask[i, : lens[i]] = True
    labels = torch.tensor(ys, dtype=torch.long)
    return out, lens.long(), mask, labels
'''
COPY = SIGNATURE + '''    targets = [pair[1] for pair in batch]
    sequences_list = [pair[0] for pair in batch]
    sizes = torch.tensor([x.shape[0] for x in sequences_list])
    t_max = max(x.shape[0] for x in sequences_list)
    labels_out = torch.tensor(targets, dtype=torch.long)
    result = sequences_list[0].new_zeros((len(sequences_list), t_max))
    for k in range(len(sequences_list)):
        result[k, : sequences_list[k].shape[0]] = sequences_list[k]  # fill the row
    pad_mask = torch.zeros(len(sequences_list), t_max, dtype=torch.bool)
    for k in range(len(sequences_list)):
        pad_mask[k, : sizes[k]] = True
    return result, sizes.long(), pad_mask, labels_out
'''
# Written another way: torch's own padding.
PAD_SEQUENCE = SIGNATURE + '''    xs, ys = zip(*batch)
    lengths = torch.tensor([x.numel() for x in xs])
    padded = torch.nn.utils.rnn.pad_sequence(list(xs), batch_first=True, padding_value=0)
    mask = torch.arange(padded.size(1)).expand(len(xs), -1) < lengths.unsqueeze(1)
    return padded, lengths, mask, torch.as_tensor(ys)
'''
HOSTILE = '</pre></td></tr></table></section><script>alert("similar")</script><mark>'


def flagged(found) -> set[tuple[str, str]]:
    return {pair.students for pair in found.pairs}


def test_a_shared_answer_with_names_changed_and_lines_reordered_is_flagged():
    """Two students' answers, one a copy of the other with every name changed, statements reordered and comments
    reworded, are the one pair flagged in a class where the others answered their own way (the solution, torch's
    pad_sequence)."""
    answers = {"ana": ORIGINAL, "ben": COPY, "chloe": PAD_SEQUENCE,
               "dev": solution_answers("04_training")["ex2_pad_collate"]}
    found = similar_pairs("ex2_pad_collate", answers, PAD, Similarity())
    assert (found.answers, found.short) == (4, 0)
    assert flagged(found) == {("ana", "ben")}
    (pair,) = found.pairs
    assert pair.score >= Similarity().threshold and min(pair.similarities) == pair.score
    assert "<mark>" in pair.marked[0] and "<mark>" in pair.marked[1]


def normalised_lines(code: str) -> Counter:
    """The code's lines with every name as V and every string as S (Python's own tokenizer): what two answers share
    line for line, names aside, whatever their order."""
    lines = {}
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type in (tokenize.NAME, tokenize.STRING, tokenize.NUMBER, tokenize.OP):
            name = token.type == tokenize.NAME and not iskeyword(token.string)
            word = "V" if name else "S" if token.type == tokenize.STRING else token.string
            lines.setdefault(token.start[0], []).append(word)
    return Counter(" ".join(words) for words in lines.values())


def line_overlap(a: str, b: str) -> float:
    """The share of the shorter answer's lines (names aside) that the other holds too."""
    la, lb = normalised_lines(a), normalised_lines(b)
    return sum((la & lb).values()) / max(1, min(sum(la.values()), sum(lb.values())))


def independent_answers(assignment: str, gid: str) -> list[str]:
    """The exercise's answers in the course's catalogue that were written independently of each other.

    The solution, then each catalogued entry that shares less than half its lines (names aside) with every answer
    kept so far. A WRONG entry is mostly the catalogue's right answer changed by one flaw (tests/course.py `changed`)
    and an ALSO_RIGHT one often a right answer with a print or a warning added: near-copies by construction, of each
    other or of the solution, which a detector ought to find similar, so they are left out here. What remains is what
    honest students turn in: one question answered in different ways.
    """
    catalogue = wrong_answers(assignment)
    entries = [*catalogue["WRONG"].get(gid, {}).values(), *catalogue["ALSO_RIGHT"].get(gid, {}).values()]
    kept = [solution_answers(assignment)[gid]]
    for entry in entries:
        if all(line_overlap(entry, other) < 0.5 for other in kept):
            kept.append(entry)
    return kept


def test_answers_written_independently_are_not_flagged():
    """Per exercise of every notebook, a class of the answers the course's catalogue holds written independently (the
    solution and the entries written another way) has no pair flagged."""
    pairs, judged = [], 0
    for assignment in assignments():
        starters = released(assignment)
        for gid, starter in starters.items():
            answers = {f"answer{k}": code for k, code in enumerate(independent_answers(assignment, gid))}
            found = similar_pairs(gid, answers, starter, Similarity())
            judged += (found.answers - found.short) * (found.answers - found.short - 1) // 2
            pairs += [(assignment, gid, pair.students, round(pair.score, 2)) for pair in found.pairs]
    assert judged >= 20, "too few pairs of independent answers long enough to judge: the test would prove nothing"
    assert pairs == []


def test_the_starter_code_alone_does_not_make_everyone_similar():
    """A class whose every answer is the released cell (a class skeleton with two methods) with one line written in
    it: no pair flagged; compared without knowing the starter code, most pairs of that class would be."""
    gelu = released("02_autograd")["ex3_gelu"]
    stub = "        # YOUR CODE HERE\n        raise NotImplementedError()"
    assert gelu.count(stub) == 2
    lines = ["return x * 0.5 * (1 + torch.erf(x / math.sqrt(2)))", "return 0.5 * x * (1.0 + torch.erf(x / 2 ** 0.5))",
             "return x * torch.distributions.Normal(0, 1).cdf(x)", "return torch.nn.functional.gelu(x)",
             "return x * (1 + torch.erf(x * 0.7071067811865476)) / 2", "return F.gelu(x, approximate='none')"]
    answers = {f"s{k}": gelu.replace(stub, f"        {line}", 1) for k, line in enumerate(lines)}
    found = similar_pairs("ex3_gelu", answers, gelu, Similarity())
    assert found.answers == len(lines) and found.pairs == []
    unknown = similar_pairs("ex3_gelu", answers, "", Similarity())
    assert len(unknown.pairs) > len(lines) * (len(lines) - 1) // 4


def test_a_passage_much_of_the_class_wrote_is_no_evidence():
    """Twelve students of fourteen open with the same five lines, then each goes their own way: no pair flagged, for
    a passage in more than common_min (10) answers is left out; counted, it would make many of the twelve alike."""
    shared = ("    sequences, labels = zip(*batch)\n"
              "    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.int64)\n"
              "    padded = torch.zeros(len(sequences), int(lengths.max()), dtype=sequences[0].dtype)\n"
              "    for row, s in enumerate(sequences):\n"
              "        padded[row, :len(s)] = s\n")
    endings = ["mask = torch.arange(padded.shape[1]) < lengths[:, None]", "mask = padded != 0",
               "mask = torch.zeros_like(padded, dtype=torch.bool)|for r, n in enumerate(lengths):|    mask[r, :n] = True",
               "mask = (torch.arange(int(lengths.max()))[None, :] < lengths[:, None]).bool()",
               "mask = torch.stack([torch.arange(padded.size(1)) < n for n in lengths])",
               "mask = torch.ones_like(padded).bool()|mask[padded == 0] = False",
               "idx = torch.arange(padded.shape[-1]).unsqueeze(0)|mask = idx.lt(lengths.unsqueeze(-1))",
               "mask = torch.tensor([[j < n for j in range(padded.shape[1])] for n in lengths.tolist()])",
               "mask = lengths.view(-1, 1) > torch.arange(padded.shape[1]).view(1, -1)",
               "positions = torch.arange(padded.shape[1]).repeat(len(lengths), 1)|mask = positions < lengths[:, None]",
               "mask = torch.sequence_mask(lengths) if hasattr(torch, 'sequence_mask') else padded.ne(0)",
               "mask = torch.zeros(padded.shape, dtype=torch.bool).index_fill_(1, torch.tensor([0]), True)"]
    returns = ["return padded, lengths, mask, torch.tensor(labels)", "return padded, lengths, mask, torch.as_tensor(labels)",
               "return padded, lengths, mask.bool(), torch.tensor(list(labels), dtype=torch.long)"]
    answers = {f"common{k}": SIGNATURE + shared + "".join(f"    {part}\n" for part in ending.split("|"))
               + f"    {returns[k % 3]}\n" for k, ending in enumerate(endings)}
    alike = set(itertools.combinations(sorted(answers), 2))
    answers |= {"ana": ORIGINAL, "chloe": PAD_SEQUENCE}
    found = similar_pairs("ex2_pad_collate", answers, PAD, Similarity())
    assert (found.common, flagged(found)) == (10, set())
    counted = Similarity(config=Config({"Similarity": {"common_min": 100}}))
    assert len(flagged(similar_pairs("ex2_pad_collate", answers, PAD, counted)) & alike) > len(alike) // 4


def graded_row(student: str, **changed) -> Result:
    return replace(Result(student_id=student, assignment=ASSIGNMENT, notebook=NOTEBOOK, status="graded", message="",
                          score=6.0, max_score=6.0), **changed)


def hand_in(folder, student: str, answers: dict[str, str]) -> Result:
    """A graded student's notebook where the batch keeps it (submitted/<gradebook id>.ipynb), and their row."""
    (folder / "submitted" / f"{student}.ipynb").write_text(write(right(**answers)))
    return graded_row(student)


MEAN = '''def mean(xs):
    """The arithmetic mean of a non-empty list."""
    total, count = 0, 0
    for x in xs:
        total += x
        count += 1
    if count == 0:
        raise ValueError("HOSTILE")
    return total / count
'''
MEAN_COPY = '''def mean(xs):
    """The arithmetic mean of a non-empty list."""
    s, n = 0, 0
    for v in xs:
        n += 1
        s += v
    if n == 0:
        raise ValueError("HOSTILE")
    return s / n
'''


# JSON in a notebook's clothes, every field of the wrong type; the last cell is an answer of sorts (the one before,
# whose source is no text, is not: a grading would not read it either).
GARBLED = {"cells": [5, {"metadata": {"nbgrader": "x"}}, {"metadata": {"nbgrader": {"grade_id": [FIRST]}}},
                     {"metadata": [], "cell_type": "code"},
                     {"cell_type": "code", "source": [1, 2], "metadata": {"nbgrader": {"grade_id": SECOND}}},
                     {"cell_type": "code", "source": ["x = ", "1"], "metadata": {"nbgrader": {"grade_id": FIRST}}}]}


@pytest.fixture(scope="module")
def report_page(tmp_path_factory):
    """report.html as the batch's report step writes it for a class laid out as grading leaves it: mallory and
    trent share an answer holding markup (and mallory's id holds some), alice and bob answered alone, two hand-ins
    are not notebooks and one student handed in nothing."""
    out = tmp_path_factory.mktemp("graded")
    (out / "submitted").mkdir()
    hostile = {FIRST: MEAN.replace("HOSTILE", HOSTILE)}
    rows = [replace(hand_in(out, "mallory", hostile), given_id=f"<b>mallory</b>{HOSTILE}"),
            hand_in(out, "trent", {FIRST: MEAN_COPY.replace("HOSTILE", HOSTILE)}),
            hand_in(out, "alice", {}), hand_in(out, "bob", {FIRST: "def mean(xs):\n    return sum(xs) / len(xs)"}),
            replace(hand_in(out, "garbled", {}), status="invalid"), replace(hand_in(out, "not_json", {}), status="invalid"),
            replace(hand_in(out, "gone", {}), status="missing")]
    (out / "submitted" / "garbled.ipynb").write_text(json.dumps(GARBLED))
    (out / "submitted" / "not_json.ipynb").write_text("my answers: 1. the mean")
    (out / "submitted" / "gone.ipynb").unlink()
    config = course_config.load(COURSE, {})
    students = [(r.student_id, r.status) for r in rows]
    batch.Report(out, COURSE / "solutions" / ASSIGNMENT / NOTEBOOK, out, config, students).draw(rows)
    return (out / "report.html").read_text(), html_text(out / "report.html")


def section(page: str, exercise: str) -> str:
    return re.search(rf'<section class="similar" data-exercise="{exercise}".*?</section>', page, re.S).group(0)


def test_the_report_shows_each_pair_side_by_side_and_says_where_there_is_none(report_page):
    """The batch's report step lists mallory and trent under the first exercise, by their ids as given, with both
    answers and the matching parts marked; the second exercise, where nobody wrote much, says there is no pair. The
    answers counted are those of the notebooks handed in (the garbled one's last cell, not the file that is no JSON)."""
    page, shown = report_page
    first = section(page, FIRST)
    assert 'data-pairs="1" data-answers="5" data-short="3"' in first
    assert first.count('<div class="pair"') == 1 and first.count('<pre class="answer">') == 2
    assert first.count("<mark>") >= 2 and first.count("<mark>") == first.count("</mark>")
    assert "&lt;b&gt;mallory&lt;/b&gt;" in first and "trent" in first
    assert 'data-pairs="0"' in section(page, SECOND) and "no pair above 80%" in section(page, SECOND)
    assert "Similar answers" in shown


def test_a_hand_in_cannot_put_markup_into_the_report(report_page):
    """Markup in an answer and in a student id shows as text: no script, every element of the section closed as
    the report opened it."""
    page, shown = report_page
    assert "<script" not in page
    similar = page[page.index("<h2>Similar answers</h2>"):page.index("<h2>Slowest hand-ins</h2>")]
    for tag in ("section", "div", "table", "pre", "td", "mark"):
        assert similar.count(f"<{tag}") == similar.count(f"</{tag}>"), tag
    assert shown.count(HOSTILE) >= 3  # in both answers, and in mallory's id


def test_a_similarity_setting_out_of_range_is_refused_before_grading(tmp_path):
    """A threshold over 1 in nbgrader_config.py stops the grader at once, naming the setting."""
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.Similarity.threshold = 80\n")
    with pytest.raises(SystemExit, match=r"c\.Similarity.*threshold"):
        course_config.load(tmp_path, {})


def test_an_answer_copydetect_fails_on_is_left_out_and_named(monkeypatch, tmp_path):
    """One hand-in's part of the comparison fails (here copydetect, on one answer): the others are compared without
    it, and the report names whose answers were left out."""
    from autograder.reports import similarity

    real = similarity.fingerprint
    monkeypatch.setattr(similarity, "fingerprint", lambda text, noise: real(text, noise) if "BREAKS" not in text
                        else 1 / 0)
    left_out = []
    answers = {"mallory": MEAN, "trent": MEAN_COPY, "oscar": MEAN + "# BREAKS\n"}
    found = similarity.similar_pairs(FIRST, answers, "", Similarity(), left_out)
    assert left_out == ["oscar"] and [p.students for p in found.pairs] == [("mallory", "trent")]
    (tmp_path / "submitted").mkdir()
    rows = [hand_in(tmp_path, s, {FIRST: a}) for s, a in answers.items()]
    findings = similarity.find([(r.student_id, r.status) for r in rows], tmp_path / "submitted", COURSE / "solutions" / ASSIGNMENT / NOTEBOOK, Config())
    assert findings.left_out == ["oscar"]
    from autograder.reports.report import write_report
    write_report(tmp_path / "report.html", rows, COURSE / "solutions" / ASSIGNMENT / NOTEBOOK, findings)
    assert "Not compared: the notebook of oscar" in html_text(tmp_path / "report.html")


def cluster_page(tmp_path, findings, rows) -> str:
    from autograder.reports.report import write_report
    write_report(tmp_path / "report.html", rows, COURSE / "solutions" / ASSIGNMENT / NOTEBOOK, findings)
    return (tmp_path / "report.html").read_text()


def test_five_copies_of_one_answer_are_one_cluster_in_one_box(tmp_path):
    """Five answers renamed from one (ten pairs) are one cluster: its students named once, its closest pair side by
    side, the nine other pairs listed with their similarity; an answer of one's own is in none."""
    from autograder.reports.similarity import Findings

    names = [("total", "count", "x"), ("s", "n", "v"), ("acc", "k", "item"), ("t", "c", "e"), ("summed", "seen", "y")]
    copies = {f"copy{i}": MEAN.replace("total", a).replace("count", b).replace("for x in", f"for {c} in")
              .replace("+= x", f"+= {c}") for i, (a, b, c) in enumerate(names)}
    answers = {**copies, "own": "def mean(xs):\n    import statistics\n    return statistics.fmean(list(xs)) + 0.0\n"}
    found = similar_pairs(FIRST, answers, "", Similarity())
    assert len(found.pairs) == 10, [p.students for p in found.pairs]
    rows = [graded_row(s) for s in answers]
    page = cluster_page(tmp_path, Findings(settings=Similarity(), exercises=[found]), rows)
    first = section(page, FIRST)
    assert first.count('<div class="pair"') == 1 and first.count('<pre class="answer">') == 2
    assert first.count('<div class="cluster" data-students="5" data-pairs="10">') == 1
    assert len(re.findall(r'<span data-score="1\.00">copy\d and copy\d 100%</span>', first)) == 9
    assert "5 students: copy0, copy1, copy2, copy3, copy4;" in first and "own" not in first


def test_students_similar_through_another_are_one_cluster(tmp_path):
    """a~b and b~c make one cluster of three (a and c need not be alike), d~e another; the closest cluster first,
    and in each the closest pair is the one shown side by side."""
    from autograder.reports.similarity import Exercise, Findings, Pair

    def pair(a, b, score):
        return Pair(students=(a, b), score=score, similarities=(score, score), marked=(f"{a}'s", f"{b}'s"))

    found = Exercise(grade_id=FIRST, answers=5, pairs=[pair("d", "e", 0.95), pair("b", "c", 0.9), pair("a", "b", 0.85)])
    rows = [graded_row(s) for s in "abcde"]
    first = section(cluster_page(tmp_path, Findings(settings=Similarity(), exercises=[found]), rows), FIRST)
    clusters = re.findall(r'<div class="cluster".*?<div class="pair" data-score="([\d.]+)">.*?(?=<div class="cluster"|$)',
                          first, re.S)
    assert clusters == ["0.95", "0.90"], first
    assert "2 students: d, e;" in first and "3 students: a, b, c;" in first
    assert '<span data-score="0.85">a and b 85%</span>' in first and 'data-clusters="2"' in first
