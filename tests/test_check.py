"""The students' self-check: visible tests only, one line per exercise."""

import subprocess
import sys

import nbformat

from course import ROOT, read, release_path, solution_answers, source_path, with_answers, wrong_answers
from torchcourse.check import check
from torchcourse.format import grading, test_cells as graded_cells  # aliased: pytest would collect a test_* name


def test_reports_each_exercise_and_never_runs_hidden_tests(tmp_path):
    source = read(source_path("01_tensors"))  # a copy of the sources: hidden tests included
    stub = {c.id: c.source for c in read(release_path("01_tensors")).cells}["ex2_storage_index"]
    wrong = next(iter(wrong_answers("01_tensors")["WRONG"]["ex1_row_major_strides"].values())).strip()
    nb = with_answers(source, {**solution_answers("01_tensors"), "ex1_row_major_strides": wrong, "ex2_storage_index": stub})
    for cell in nb.cells:
        if cell.id == "ex4_sliding_window_hidden":  # would fail ex4 if hidden tests ran
            cell.source = cell.source.replace("### BEGIN HIDDEN TESTS\n", "### BEGIN HIDDEN TESTS\nraise AssertionError('hidden')\n")
    nbformat.write(nb, tmp_path / "copy.ipynb")
    reports = {r.name: r for r in check(tmp_path / "copy.ipynb")}
    assert [r.status for r in reports.values()] == ["failed", "not attempted", "passed", "passed"], reports
    assert reports["ex1_row_major_strides"].message.startswith("AssertionError")
    points = {name: sum(grading(c)["points"] for c in graded_cells(source, name)) for name in reports}
    assert {name: r.points for name, r in reports.items()} == points


def test_command_line_takes_a_number_and_explains_a_broken_file(tmp_path):
    run = subprocess.run([sys.executable, "-m", "torchcourse.check", "01"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.count("not attempted") == 4, run.stdout + run.stderr
    (tmp_path / "broken.ipynb").write_text('{"cells": [')
    run = subprocess.run([sys.executable, "-m", "torchcourse.check", str(tmp_path / "broken.ipynb")], capture_output=True, text=True)
    assert run.returncode != 0 and "cannot read this notebook" in run.stderr, run.stderr
