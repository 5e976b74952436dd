"""nbgrader, patched at run time where it is slow, each patch with why and the test that fails when nbgrader's behaviour
changes under it (tests/test_nbgrader_patches.py). Each replaces one name nbgrader's module looks up when it runs; none
changes what nbgrader writes.

- `alembic_head`: the schema version of a new gradebook, read in this process (applied on import).
- `share_engines`: one SQLAlchemy engine per gradebook in a grading's process (applied by a grading).
- `schema_checked_once`: nbgrader's metadata schema checked once per process, not at each cell (applied by a grading).
"""

import json
import types

import jsonschema
import nbgrader.api
import nbgrader.nbgraderformat.common
from sqlalchemy import create_engine, event

NBGRADERS_ALEMBIC_VERSION = nbgrader.api.get_alembic_version  # kept for the test that compares the two


def alembic_head() -> str:
    """The gradebook schema's version, which nbgrader writes into a new gradebook: read as `alembic heads` reads it,
    in this process. nbgrader runs the alembic command for it: 1.3 s a gradebook, and a half-made gradebook where the
    environment's bin/ is not on PATH (FileNotFoundError: 'alembic')."""
    from alembic.config import Config as AlembicConfig
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import _temp_alembic_ini

    with _temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:  # nbgrader's own scripts, as its command reads them
        return ScriptDirectory.from_config(AlembicConfig(ini)).get_current_head()


ENGINES: dict = {}  # gradebook URL -> its engine, in a process that shares them (share_engines)


def share_engines() -> None:
    """From now on in this process (a grading's, whose gradebook is its scratch copy), one engine per gradebook URL:
    nbgrader opens a Gradebook a dozen times in a grading, each with an engine of its own, and SQLAlchemy compiles
    every statement again for each (it keeps compiled SQL per engine). `forget_engines` before a gradebook's file is
    replaced. A scratch SQLite file is read once and deleted: its commits (about 40) need not reach the disk."""
    def engine_for(url, **kw):
        if str(url) not in ENGINES:
            ENGINES[str(url)] = engine = create_engine(url, **kw)
            if engine.dialect.name == "sqlite":
                event.listen(engine, "connect", lambda connection, _: connection.execute("PRAGMA synchronous = OFF"))
        return ENGINES[str(url)]

    nbgrader.api.create_engine = engine_for


def forget_engines() -> None:
    """Close the shared engines' connections: the files they were open on are about to be replaced."""
    for engine in ENGINES.values():
        engine.dispose()
    ENGINES.clear()


VALIDATORS: dict = {}  # nbgrader's metadata schema (as JSON) -> its validator, checked (schema_checked_once)


def validate_metadata(instance, schema) -> None:
    """`jsonschema.validate(instance, schema)`, as nbgrader calls it, the schema checked once per process."""
    key = json.dumps(schema, sort_keys=True)  # each MetadataValidator reads the schema's file afresh
    if key not in VALIDATORS:
        kind = jsonschema.validators.validator_for(schema)
        kind.check_schema(schema)
        VALIDATORS[key] = kind(schema)
    error = jsonschema.exceptions.best_match(VALIDATORS[key].iter_errors(instance))
    if error is not None:
        raise error


def schema_checked_once() -> None:
    """From now on in this process and those it forks: nbgrader's metadata validator checks its schema once. It calls
    `jsonschema.validate` at each graded cell, which first checks the schema itself against JSON Schema's own (2-3 ms),
    in two steps of a grading: 0.1 s of 07's. Each cell's metadata is validated by jsonschema, as before."""
    shim = types.ModuleType("jsonschema")  # the module as nbgrader's validator sees it, with that one function changed
    shim.__dict__.update(vars(jsonschema), validate=validate_metadata)
    nbgrader.nbgraderformat.common.jsonschema = shim


nbgrader.api.get_alembic_version = alembic_head  # every gradebook a batch makes (its template, the course's)
