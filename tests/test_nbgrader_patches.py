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


def test_a_grading_opens_its_gradebooks_one_at_a_time_through_one_engine(tmp_path, monkeypatch):
    """nbgrader's Gradebook makes its engine through its module's create_engine, the name share_engines replaces: one
    engine for every gradebook of the process, its connections on the file last named; a second file opened while a
    connection to the first is in use is refused (they would share connections)."""
    monkeypatch.setattr(nbgrader.api, "create_engine", nbgrader.api.create_engine)  # put back after the test
    monkeypatch.setattr(nbgrader_patches, "SHARED", {"engine": None, "file": None, "tables": None})
    monkeypatch.setattr(nbgrader.api.Base.metadata, "create_all", nbgrader.api.Base.metadata.create_all)
    first_url, second_url = (f"sqlite:///{tmp_path / name}" for name in ("first.db", "second.db"))
    nbgrader_patches.share_engines()
    with Gradebook(first_url) as first, Gradebook(first_url) as again:
        first.add_student("alice")
        assert first.engine is again.engine is nbgrader_patches.SHARED["engine"]
        first.find_student("alice")  # a transaction begun: a connection to the first file in use
        with pytest.raises(RuntimeError, match="second gradebook"):
            Gradebook(second_url)
    with Gradebook(second_url) as second:
        assert second.engine is first.engine
        assert [s.id for s in second.students] == [], "the second file's gradebook shows the first's students"
        second.add_student("bob")
    with Gradebook(first_url) as first:
        assert [s.id for s in first.students] == ["alice"]
    nbgrader_patches.forget_engines()
    assert nbgrader_patches.SHARED["file"] is None and nbgrader_patches.SHARED["engine"] is first.engine


def test_a_gradings_gradebook_opened_again_keeps_its_connection_and_its_tables_checked(tmp_path, monkeypatch):
    """nbgrader's Gradebook checks its tables at each opening (Base.metadata.create_all, the name share_engines
    replaces) and closes its engine's connections at each closing: through the shared engine, the second opening of a
    file connects no more and checks no table; another file, or the same one after forget_engines (replaced by a new
    attempt's copy), is connected to and checked afresh."""
    from sqlalchemy import event
    monkeypatch.setattr(nbgrader.api, "create_engine", nbgrader.api.create_engine)
    monkeypatch.setattr(nbgrader.api.Base.metadata, "create_all", nbgrader.api.Base.metadata.create_all)
    monkeypatch.setattr(nbgrader_patches, "SHARED", {"engine": None, "file": None, "tables": None})
    nbgrader_patches.share_engines()
    first_url, second_url = (f"sqlite:///{tmp_path / name}" for name in ("first.db", "second.db"))
    with Gradebook(first_url) as gb:
        gb.add_student("alice")
    seen = {"connect": 0, "table checks": 0}
    engine = nbgrader_patches.SHARED["engine"]
    event.listen(engine, "connect", lambda *_: seen.__setitem__("connect", seen["connect"] + 1))
    event.listen(engine, "before_cursor_execute", lambda _c, _cur, statement, *rest: seen.__setitem__(
        "table checks", seen["table checks"] + statement.startswith("PRAGMA main.table_info")))

    def opened(url) -> dict:
        before = dict(seen)
        with Gradebook(url) as gb:
            gb.find_student("alice") if url == first_url else gb.add_student("bob")
        return {k: seen[k] - before[k] for k in seen}

    assert opened(first_url) == {"connect": 0, "table checks": 0}
    assert opened(second_url) == {"connect": 1, "table checks": len(nbgrader.api.Base.metadata.tables)}
    nbgrader_patches.forget_engines()
    assert opened(first_url) == {"connect": 1, "table checks": len(nbgrader.api.Base.metadata.tables)}
    assert opened(first_url) == {"connect": 0, "table checks": 0}
    nbgrader_patches.forget_engines()
    assert engine.pool.checkedin() == 0, "forget_engines left a connection open"


def test_the_batchs_rehearsal_leaves_nbgraders_own_engines_and_a_compiled_engine_for_the_gradings(tmp_path, monkeypatch):
    """shared_engine: the one engine while it lasts, then nbgrader's create_engine again (the course's gradebook keeps
    an engine of its own, whose writes reach the disk); the one engine stays with what it compiled, connections closed."""
    original = nbgrader.api.create_engine
    monkeypatch.setattr(nbgrader.api, "create_engine", original)
    monkeypatch.setattr(nbgrader_patches, "SHARED", {"engine": None, "file": None, "tables": None})
    monkeypatch.setattr(nbgrader.api.Base.metadata, "create_all", nbgrader.api.Base.metadata.create_all)
    with nbgrader_patches.shared_engine():
        with Gradebook(f"sqlite:///{tmp_path / 'rehearsal.db'}") as gb:
            gb.add_student("warm-up")
    assert nbgrader.api.create_engine is original
    engine = nbgrader_patches.SHARED["engine"]
    assert engine is not None and engine.pool.checkedout() == 0 and len(engine._compiled_cache) > 0
    with Gradebook(f"sqlite:///{tmp_path / 'course.db'}") as course:
        assert course.engine is not engine


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
