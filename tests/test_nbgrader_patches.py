"""Each run-time patch of nbgrader (autograder/nbgrader_patches.py) still reaches what nbgrader runs and gives what its
own code gives: these fail when an nbgrader release changes the name a patch replaces or what it computes."""

import os
import sys
from pathlib import Path

import jsonschema
import nbformat
import nbgrader.api
import nbgrader.nbgraderformat.common
import pytest
from nbgrader.api import Gradebook
from nbgrader.nbgraderformat import MetadataValidator

from autograder import nbgrader_patches


def test_the_schema_version_read_in_process_is_the_one_nbgraders_alembic_command_gives(monkeypatch):
    """nbgrader runs `alembic heads` for the version it writes into a new gradebook; ours reads the same scripts."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert nbgrader.api.get_alembic_version is nbgrader_patches.alembic_head, "the patch is not applied on import"
    assert nbgrader_patches.alembic_head() == nbgrader_patches.NBGRADERS_ALEMBIC_VERSION()


def test_a_grading_opens_one_engine_per_gradebook(tmp_path, monkeypatch):
    """nbgrader's Gradebook makes its engine through its module's create_engine, the name share_engines replaces."""
    monkeypatch.setattr(nbgrader.api, "create_engine", nbgrader.api.create_engine)  # put back after the test
    monkeypatch.setattr(nbgrader_patches, "ENGINES", {})
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    nbgrader_patches.share_engines()
    with Gradebook(url) as first, Gradebook(url) as second:
        assert first.engine is second.engine is nbgrader_patches.ENGINES[url]
    nbgrader_patches.forget_engines()
    assert nbgrader_patches.ENGINES == {}


def test_nbgraders_metadata_validator_checks_each_cell_through_the_schema_checked_once(monkeypatch):
    """nbgrader's validator calls its module's `jsonschema.validate` at each cell: the patched one, which still
    refuses bad metadata and keeps one checked validator for the schema."""
    monkeypatch.setattr(nbgrader.nbgraderformat.common, "jsonschema", jsonschema)  # put back after the test
    monkeypatch.setattr(nbgrader_patches, "VALIDATORS", {})
    nbgrader_patches.schema_checked_once()
    validator = MetadataValidator()
    cell = nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {
        "schema_version": 3, "grade": True, "solution": False, "locked": True, "grade_id": "t", "points": 1,
        "task": False}})
    validator.validate_cell(cell)
    assert len(nbgrader_patches.VALIDATORS) == 1, "nbgrader no longer validates through jsonschema.validate"
    cell.metadata.nbgrader["points"] = "one"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate_cell(cell)
    assert len(nbgrader_patches.VALIDATORS) == 1
