"""`make gpu-check` (tests/gpu_check.py): it refuses on a machine without CUDA, finds the CUDA branches, reports."""

import subprocess
import sys

import pytest
import torch

import gpu_check
from course import ROOT, read, source_path


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: there make gpu-check runs instead")
def test_refuses_without_cuda_and_says_why():
    run = subprocess.run([sys.executable, "tests/gpu_check.py"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run
    assert "make gpu-check needs a CUDA GPU: torch.cuda.is_available() is False" in run.stderr
    assert "report:" not in run.stdout


def test_make_target_runs_the_script():
    dry = subprocess.run(["make", "-n", "gpu-check"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "tests/gpu_check.py" in dry.stdout


def test_finds_the_cuda_branches_of_notebooks_and_tests():
    assert "ex1_masked_attention_hidden" in gpu_check.cuda_cells(read(source_path("08_capstone")))
    assert "setup" in gpu_check.cuda_cells(read(source_path("08_capstone")))
    nodes = gpu_check.cuda_tests()
    assert "tests/test_launch.py::test_nccl_ranks_are_refused_once_cuda_spoiled_fork" in nodes
    assert all(node.startswith("tests/test_") and "::test" in node for node in nodes)
    assert not any("test_gpu_check" in node for node in nodes), "the check does not run its own tests"


def test_report_lists_times_memory_cells_and_tests():
    notebooks = [{"notebook": "solutions/08_capstone/08_capstone.ipynb", "seconds": 12.5, "stopped": None,
                  "errors": {"ex2_train_step_hidden": "AssertionError: on CUDA ..."}, "stderr": {},
                  "cuda_cells": {"setup": "passed", "ex2_train_step_hidden": "failed"}, "peak_bytes": 3 * 2**20,
                  "cuda_used": True}]
    tests = [{"test": "tests.test_launch::test_x", "seconds": 0.5, "outcome": "passed", "message": ""}]
    text = gpu_check.report("a GPU", notebooks, tests)
    assert "| solutions/08_capstone/08_capstone.ipynb | 12.5 | 3 | 1 | 1 of 2 |" in text
    assert "- cell `ex2_train_step_hidden` failed: AssertionError: on CUDA ..." in text
    assert "| `tests.test_launch::test_x` | passed | 0.5 |  |" in text
    assert "0 of 1 notebooks ran cleanly; 1 CUDA tests passed, 0 failed, 0 skipped." in text


@pytest.mark.slow
def test_runs_notebooks_at_once_and_keeps_each_with_its_outputs(tmp_path, monkeypatch):
    """The run itself, here on the CPU with the refusal lifted: two notebooks at once, each kept executed, one report."""
    monkeypatch.setattr(gpu_check, "refusal", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "a stand-in GPU")
    monkeypatch.setattr(gpu_check, "cuda_tests", lambda: [])
    out, kept = tmp_path / "report.md", tmp_path / "executed"
    assert gpu_check.main(["--only", "02_autograd", "03_modules", "--jobs", "2", "--executed", str(kept),
                           "--out", str(out)]) == 0
    text = out.read_text()
    assert "2 notebooks and the tests ran at once" in text and "2 of 2 notebooks ran cleanly" in text
    for name in ("02_autograd", "03_modules"):
        assert f"| solutions/{name}/{name}.ipynb |" in text
        executed = read(kept / f"{name}.ipynb")
        assert all(c.execution_count for c in executed.cells if c.cell_type == "code"), name
