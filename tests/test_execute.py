"""Every solution notebook runs top to bottom, cleanly."""

import pytest

from course import assignments, execute, source_path


@pytest.mark.slow
@pytest.mark.parametrize("assignment", assignments())
def test_solution_runs_without_errors_or_stderr(assignment):
    nb, _ = execute(source_path(assignment))
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            assert output.output_type != "error", f"cell {cell.id}: {output.ename}: {output.evalue}"
            # nbgrader zeroes a test cell that writes to stderr; the lessons set the example and write none.
            assert not (output.output_type == "stream" and output.name == "stderr"), f"cell {cell.id}: {output.text}"
