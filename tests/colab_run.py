"""Run one notebook top to bottom as Colab would, errors kept in its outputs: the one part of `make colab-check` that
runs under Colab's Python and packages (tests/colab_check.py calls it with that environment's interpreter).

    .colab/py3.13/bin/python tests/colab_run.py NOTEBOOK TIMEOUT_PER_CELL

Only the standard library, nbformat and nbclient at Colab's versions: nothing of the course is imported here, so the
kernel meets what the notebook's set-up cell installs and nothing else.
"""

import sys

import nbformat
from nbclient import NotebookClient

path, timeout = sys.argv[1], int(sys.argv[2])
nb = nbformat.read(path, as_version=4)
try:
    NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": "."}}).execute()
finally:  # a kernel that died still leaves what ran, for the report to say where it stopped
    nbformat.write(nb, path)
