"""notebooks/ is exactly what `make release` makes from solutions/, and gives nothing away."""

import filecmp

import pytest

from course import ROOT, assignments, hidden_test_lines, nbgrader, read, release_path, source_path


def test_notebooks_equal_a_fresh_release(tmp_path):
    nbgrader("generate_assignment", "*", "--force", "--no-db", f"--CourseDirectory.release_directory={tmp_path}", cwd=ROOT)
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(p.relative_to(ROOT / "notebooks") for p in (ROOT / "notebooks").rglob("*") if p.is_file())
    assert committed == fresh, "notebooks/ holds other files than a release would: run `make release`"
    stale = [str(p) for p in fresh if not filecmp.cmp(tmp_path / p, ROOT / "notebooks" / p, shallow=False)]
    assert not stale, f"out of date with solutions/: {stale}; run `make release`"


@pytest.mark.parametrize("assignment", assignments())
def test_student_version_hides_solutions_and_hidden_tests(assignment):
    source, release = read(source_path(assignment)), read(release_path(assignment))
    text = release_path(assignment).read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in text
    hidden, visible = hidden_test_lines(source)
    released = {line.strip() for cell in release.cells for line in cell.source.splitlines()}
    leaked = [line for line in hidden if line not in visible and line in released]  # `else:` is no secret
    assert not leaked, f"hidden test lines appear in the student notebook: {leaked[:3]}"


@pytest.mark.parametrize("assignment", assignments())
def test_answer_cells_keep_their_signature_above_the_stub(assignment):
    for cell in read(release_path(assignment)).cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            before_stub = cell.source.split("# YOUR CODE HERE")[0]
            assert "# YOUR CODE HERE" in cell.source and ("def " in before_stub or "class " in before_stub), cell.id
