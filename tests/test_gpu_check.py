"""`make gpu-check` (tests/gpu_check.py): it refuses on a machine without CUDA, finds the CUDA branches, reports, and
runs notebook 08's own checks (tests/capstone_gpu.py) where it can on the CPU."""

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import capstone_gpu
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


def test_capstone_masked_rows_are_zeros_on_the_cpu_kernels():
    """The check `make gpu-check` runs on CUDA's kernels, run on the CPU's: the math kernel and the CPU's flash one."""
    rows = capstone_gpu.masked_rows("cpu")
    assert rows["default float32"] == rows["MATH float32"] == rows["FLASH_ATTENTION float32"] == "zeros", rows
    assert rows["EFFICIENT_ATTENTION float32"].startswith("not run: "), rows  # a CUDA kernel: refused, and said so
    assert capstone_gpu.failed(rows) == []


def test_capstone_masked_rows_see_nan_and_nonzero_rows(monkeypatch):
    """The check can fail, on any kernel: an attention that leaves NaN in the rows with no key, one that averages every
    value; and it tells what the kernel gives alone."""
    names = capstone_gpu.capstone()

    def softmax_over_nothing(q, k, v, key_mask=None):  # -inf everywhere in a row: NaN, the bug of pytorch#110213
        allowed = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).tril() & key_mask[:, None, None, :]
        scores = (q @ k.transpose(-2, -1)).masked_fill(~allowed, float("-inf"))
        return scores.softmax(dim=-1) @ v

    def no_mask(q, k, v, key_mask=None):
        return F.scaled_dot_product_attention(q, k, v) + 0 * key_mask.sum()

    for attention, verdict in ((softmax_over_nothing, "NaN"), (no_mask, "not zeros")):
        monkeypatch.setattr(capstone_gpu, "capstone", lambda: {**names, "attention": attention})
        rows = capstone_gpu.masked_rows("cpu")
        assert rows["default float32"] == rows["MATH float32"] == verdict, rows
        assert {"default float32", "MATH float32"} <= set(capstone_gpu.failed(rows))
    alone = capstone_gpu.masked_rows("cpu", capstone_gpu.sdpa_alone)
    assert alone["MATH float32"] in ("zeros", "NaN", "not zeros"), alone
    lines = capstone_gpu.report_lines(rows, None, None, alone)
    assert f"| MATH float32 | not zeros | {alone['MATH float32']} |" in lines, lines


def test_capstone_snapshot_and_table_in_the_report(tmp_path):
    assert capstone_gpu.memory_snapshot("cpu", tmp_path / "s.pickle") == {
        "skipped": "no snapshot on cpu: the allocator history is CUDA's"}
    assert not (tmp_path / "s.pickle").exists()
    executed = {"cells": [
        {"id": "payoff-table-code", "outputs": [{"output_type": "stream", "name": "stdout", "text": "eager fp32  1,000\n"},
                                                {"output_type": "stream", "name": "stderr", "text": "a warning\n"}]},
        {"id": "payoff-why-code", "outputs": [{"output_type": "stream", "name": "stdout", "text": ["- torch.compile: ", "2.00x\n"]}]},
        {"id": "train-code", "outputs": [{"output_type": "stream", "name": "stdout", "text": "step 1\n"}]}]}
    table = capstone_gpu.table_text(executed)
    assert table == "eager fp32  1,000\n- torch.compile: 2.00x\n"
    snapshot = {"path": "/tmp/r.snapshot.pickle", "bytes": 3 * 2**20, "peak_bytes": 40 * 2**20}
    rows = {"default float16": "zeros", "CUDNN_ATTENTION float16": "zeros", "FLASH_ATTENTION float16": "not run: no"}
    alone = {"default float16": "not zeros", "CUDNN_ATTENTION float16": "NaN", "FLASH_ATTENTION float16": "not run: no"}
    assert capstone_gpu.failed(rows) == []  # what the kernel gives alone, or cannot run: reported, not failed
    lines = capstone_gpu.report_lines(rows, snapshot, table, alone)
    text = gpu_check.report("a GPU", [], [], lines)
    assert "| default float16 | zeros | not zeros |" in text and "| CUDNN_ATTENTION float16 | zeros | NaN |" in text
    assert "`/tmp/r.snapshot.pickle` (3.0 MiB; peak allocated 40 MiB)" in text
    assert "```\neager fp32  1,000\n- torch.compile: 2.00x\n```" in text
    assert "printed nothing" in "\n".join(capstone_gpu.report_lines(None, None, ""))


def test_the_capstone_check_names_cells_the_notebook_has():
    ids = {cell.id for cell in read(source_path("08_capstone")).cells}
    assert set(capstone_gpu.LESSON_CELLS) <= ids and set(capstone_gpu.TABLE_CELLS) <= ids
