"""Notebook 07's ONNX export runs, with its parity check against eager outputs, wherever the pinned packages are."""

import importlib.util

import nbformat
from nbclient import NotebookClient

from course import source_path

NOTEBOOK = "07_checkpointing"
CELLS = ("setup", "export-code", "onnx-code")  # the ONNX cell uses the model and example input of export-code


def test_onnx_export_runs_and_matches_eager():
    missing = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]
    assert not missing, f"requirements.txt pins {missing}: without them the notebook skips its ONNX parity check"
    path = source_path(NOTEBOOK)
    nb = nbformat.read(path, as_version=4)
    nb.cells = [cell for cell in nb.cells if cell.get("id") in CELLS]
    assert [cell.id for cell in nb.cells] == list(CELLS), "a cell this test runs was renamed"
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    onnx_cell = nb.cells[-1]
    stdout = "".join(o.get("text", "") for o in onnx_cell.outputs if o.output_type == "stream" and o.name == "stdout")
    stderr = "".join(o.get("text", "") for o in onnx_cell.outputs if o.output_type == "stream" and o.name == "stderr")
    assert not stderr, f"the ONNX cell writes to stderr: {stderr}"
    # assert_close in the cell raises on a mismatch; these lines are printed only after it passed
    assert stdout.count("onnxruntime matches eager") == 3, f"the parity check did not run:\n{stdout}"
