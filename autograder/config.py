"""The course: its nbgrader configuration (and the settings of ours it holds beside nbgrader's), read once from the course folder and handed down to every step; working
from that folder; an assignment by its name or number.

Relative paths in it mean the course folder. They are made absolute here, where the file is read: nbgrader's
converters change into other folders (a scratch course per hand-in) before their steps read them.
"""

import os
import sys
from pathlib import Path

from nbgrader.coursedir import CourseDirectory
from sqlalchemy.engine import make_url
from traitlets import Float, Integer, TraitError
from traitlets.config import Config, Configurable, PyFileConfigLoader


FILE = "nbgrader_config.py"


class Similarity(Configurable):
    """The report's "Similar answers" section, set in nbgrader_config.py (c.Similarity.threshold = 0.8)."""
    threshold = Float(0.8, min=0.0, max=1.0,
                      help="list a pair when at least this share of each of its two answers is found in the "
                           "other (copydetect's similarity, after starter code and common passages)").tag(config=True)
    noise = Integer(15, min=2, help="shortest match counted, in characters of the filtered code (names as one letter, "
                                    "no spaces or comments): copydetect's noise threshold, k of its k-grams"
                    ).tag(config=True)
    shortest = Integer(25, min=1, help="answers with fewer fingerprints than this, once the starter code and common "
                                       "passages are taken out, are too short to judge and not compared"
                       ).tag(config=True)
    common_share = Float(0.05, min=0.0, max=1.0,
                         help="a passage in more than this share of the answers (and more than common_min of them) "
                              "is ignored: much of the class wrote it").tag(config=True)
    common_min = Integer(10, min=2, help="a passage is common only when more than this many answers hold it"
                         ).tag(config=True)


def load(course: Path, settings: dict) -> Config:
    """The course's settings (its nbgrader_config.py) with the command line's on top, every path resolved against the
    course folder; SystemExit naming a read-only folder that does not exist, or a report setting out of range."""
    course = Path(course).resolve()
    path = course / FILE
    config = PyFileConfigLoader(FILE, path=str(course)).load_config() if path.exists() else Config()
    config.merge(Config(settings))
    config.CourseDirectory.root = str(course)
    folders = [str(course / p) for p in config.SandboxedKernelManager.get("read_only", [])]
    missing = [p for p in folders if not os.path.isdir(p)]  # here, not through the kernel: configuration sits below it
    if missing:
        raise SystemExit(f"{path}: SandboxedKernelManager.read_only names {', '.join(missing)}, which "
                         f"{'is not a folder' if len(missing) == 1 else 'are not folders'}: the kernels could not "
                         "read what the notebooks import. Relative paths there mean the course folder.")
    config.SandboxedKernelManager.read_only = folders
    try:
        Similarity(config=config)  # refused now, not once the class is graded and its report drawn
    except TraitError as error:
        raise SystemExit(f"{path}: c.Similarity: {error}") from None
    url = config.CourseDirectory.get("db_url", "")
    if url and make_url(url).get_backend_name() == "sqlite" and make_url(url).database \
            and not os.path.isabs(make_url(url).database):
        config.CourseDirectory.db_url = f"sqlite:///{course / make_url(url).database}"
    return config


def enter(course: Path) -> None:
    """Work from the course folder, as nbgrader expects: its paths (the gradebook's among them) are relative to it,
    and it runs `alembic` from this environment."""
    os.chdir(course)
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def resolve(cd: CourseDirectory, name: str) -> tuple[str, Path]:
    """An assignment named in full or by its number ('02'), and its one notebook in the sources."""
    source = Path(cd.root) / cd.source_directory
    names = sorted(p.name for p in source.iterdir() if p.is_dir()) if source.is_dir() else []
    matches = [n for n in names if n == name or n.split("_")[0] == name]
    if len(matches) != 1:
        raise SystemExit(f"no assignment '{name}' in {source}; there are: {', '.join(names) or 'none'}")
    notebooks = sorted((source / matches[0]).glob("*.ipynb"))
    if len(notebooks) != 1:
        raise SystemExit(f"{source / matches[0]} must hold exactly one notebook (it holds {len(notebooks)})")
    return matches[0], notebooks[0]
