"""nbgrader, patched at run time where it is slow, each patch with why and the test that fails when nbgrader's behaviour
changes under it (tests/test_nbgrader_patches.py). Each replaces one name nbgrader looks up when it runs (a module's,
or `create_all` of its tables' metadata); none changes what nbgrader writes.

- `alembic_head`: the schema version of a new gradebook, read in this process (applied on import).
- `share_engines`: one SQLAlchemy engine for the scratch gradebooks of a grading's process, its connection and the
  gradebook's tables checked kept from one opening to the next of the same file (applied by a grading, and for its
  rehearsal in the batch's process by `shared_engine`).
- `schema_checked_once`: nbgrader's metadata schema checked once per process, not at each cell (applied by a grading).
"""

import json
import sqlite3
import types
from contextlib import contextmanager

import jsonschema
import nbgrader.api
import nbgrader.nbgraderformat.common
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import QueuePool

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


# a grading's one engine, the gradebook file it opens, and the file whose tables nbgrader has checked (share_engines)
SHARED: dict = {"engine": None, "file": None, "tables": None}


def one_engine(url, **kw):
    """nbgrader.api's `create_engine` in a process that shares one engine: that engine, its connections opened on
    the SQLite file `url` names (connections to another file closed first)."""
    url = make_url(url)
    database = url.database
    if url.get_backend_name() != "sqlite" or not database:
        raise ValueError(f"a grading's gradebooks are SQLite files, not {url.render_as_string()}")
    engine = SHARED["engine"]
    if engine is None:  # SQLAlchemy's pysqlite dialect, its connections made here: on the file of the moment
        engine = SHARED["engine"] = create_engine(
            "sqlite://", creator=lambda: sqlite3.connect(SHARED["file"], check_same_thread=False), poolclass=QueuePool,
            **kw)
        # a scratch gradebook is read once and deleted: its commits (about 40 a grading) need not reach the disk, nor
        # their rollback journal be a file made and deleted at each (35 us a commit)
        event.listen(engine, "connect", lambda connection, _: connection.executescript(
            "PRAGMA synchronous = OFF; PRAGMA journal_mode = MEMORY;"))
        # nbgrader's Gradebook.close disposes of its engine, closing its connections: here the next opening of the same
        # file takes the connection up again (forget_engines and a change of file close it)
        engine.dispose = lambda close=True: None
    if SHARED["file"] != database:
        if engine.pool.checkedout():
            raise RuntimeError("a grading opened a second gradebook while one was in use: they would share connections")
        Engine.dispose(engine)
        SHARED["file"] = database
    return engine


def tables_checked_once(create_all):
    """nbgrader's `Base.metadata.create_all`, which its Gradebook runs at each opening (a query for each of its 15
    tables), run once per file on the shared engine: the tables it made or found stay, since only nbgrader makes them."""
    def create(bind, **kw):
        if bind is not SHARED["engine"] or SHARED["tables"] != SHARED["file"]:
            create_all(bind=bind, **kw)
            if bind is SHARED["engine"]:
                SHARED["tables"] = SHARED["file"]
    create.once = True
    return create


def share_engines() -> None:
    """From now on in this process (a grading's, whose gradebooks are scratch copies, opened one at a time): one
    SQLAlchemy engine for them all. nbgrader opens a Gradebook a dozen times in a grading, each with an engine of its
    own, and SQLAlchemy compiles every statement again for each engine (it keeps compiled SQL per engine: 0.02-0.04 s
    a grading); made in the batch's process by its rehearsal (`shared_engine`), the engine a grading inherits has
    them compiled. An opening of the file opened last takes its connection up again, its tables checked (about 1 ms
    of the 2 an opening costs). `forget_engines` before a gradebook's file is replaced."""
    nbgrader.api.create_engine = one_engine
    if not getattr(nbgrader.api.Base.metadata.create_all, "once", False):
        nbgrader.api.Base.metadata.create_all = tables_checked_once(nbgrader.api.Base.metadata.create_all)


@contextmanager
def shared_engine():
    """share_engines for a while (the batch's rehearsal of a grading), then nbgrader's own engines again: the course's
    gradebook, which a batch's later steps open, keeps its engine and its writes reach the disk. The one engine stays,
    its connections closed, for the gradings the batch forks."""
    before = nbgrader.api.create_engine
    share_engines()
    try:
        yield
    finally:
        nbgrader.api.create_engine = before
        forget_engines()


def forget_engines() -> None:
    """Close the shared engine's connections (the file they were open on is about to be replaced, or the process to
    fork); its compiled statements stay."""
    if SHARED["engine"] is not None:
        Engine.dispose(SHARED["engine"])
    SHARED["file"] = SHARED["tables"] = None


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
