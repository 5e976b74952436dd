"""The expected values of a batch: the solution notebook run once, by the grader's own execute step, recording what
each of its test cells sends (judge.py). Every hand-in of the batch is judged against them."""

import os
import shutil
from pathlib import Path

import nbformat

from .execute import GuardedExecute
from .judge import wants
from .lessons import skippable
from .notebook import grade_id, is_test



def expected_values(config, source: Path, release: Path, folder: Path, log: Path) -> dict[str, list[dict]] | str:
    """grade_id -> the values the solution's test cell sent, from a run of `source` in `folder` (made here); or why
    there are none: one of the solution's own tests failed, so no hand-in can be judged against it. Run in a process
    of its own (batch.py forks one): its output and the kernel's go to `log`. The lesson cells a hand-in as released
    skips (`release`: the student version) are skipped here too: a demo or a training run gives the tests nothing."""
    nb = nbformat.read(source, as_version=4)
    if not any(wants(c.source) for c in nb.cells if is_test(c)):
        return {}  # tests that compare in the kernel alone: nothing to run the solution for
    with open(log, "w") as handle:
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
    shutil.copytree(source.parent, folder, dirs_exist_ok=True)  # the files beside the notebook, as a grading has
    execute = GuardedExecute(config=config)
    execute.recording = True
    execute.lessons_skipped = skippable(nb, nbformat.read(release, as_version=4))
    execute.allow_errors = True  # every failure is reported below, not the first alone
    execute.preprocess(nb, {"metadata": {"path": str(folder)}})
    failed = [f"{grade_id(c)} ({e.ename}: {str(e.get('evalue'))[:300]})" for c in nb.cells if is_test(c)
              for e in [o for o in c.get("outputs", []) if o.output_type == "error"][:1]]
    if failed:  # (its run has no checks between cells: nothing marks it tampered with)
        return f"{source}: the solution fails its own tests, so no hand-in can be judged against it: {'; '.join(failed)}"
    return execute.sent
