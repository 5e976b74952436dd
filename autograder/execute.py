"""nbgrader's Execute step, guarded: a fenced kernel, cells that must not run again, and tests that cannot be faked."""

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from nbgrader.utils import is_grade

SANDBOX = Path(__file__).with_name("sandbox.py")

# Run in the kernel before each test cell, in a namespace of its own: do the functions tests rely on still tell
# different things apart? An answer that patches one of them to always pass would otherwise pass every test after it.
PROBE = r'''
import math, builtins, numpy, torch
_z, _o, _faked = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), []
def _raises(f, *a):
    try:
        f(*a)
    except AssertionError:
        return True
    return False
class _Wrong(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * x
    @staticmethod
    def backward(ctx, g):
        return g
for _name, _ok in [
        ("torch.allclose", not torch.allclose(_z, _o)), ("torch.equal", not torch.equal(_z, _o)),
        ("torch.isclose", not bool(torch.isclose(_z, _o).any())), ("Tensor.allclose", not _z.allclose(_o)),
        ("Tensor.__eq__", not bool((_z == _o).any())), ("Tensor.equal", not _z.equal(_o)),
        ("torch.testing.assert_close", _raises(torch.testing.assert_close, _z, _o)),
        ("numpy.allclose", not numpy.allclose(0.0, 1.0)), ("numpy.array_equal", not numpy.array_equal([0], [1])),
        ("numpy.testing.assert_allclose", _raises(numpy.testing.assert_allclose, 0.0, 1.0)),
        ("math.isclose", not math.isclose(0.0, 1.0)), ("builtins.isinstance", not builtins.isinstance(1, str)),
        ("builtins.abs", builtins.abs(-1) == 1), ("builtins.all", not builtins.all([False])),
        ("builtins.any", not builtins.any([False])), ("builtins.len", builtins.len([0, 0]) == 2),
        ("torch.autograd.gradcheck", not torch.autograd.gradcheck(
            _Wrong.apply, (torch.ones(2, dtype=torch.float64, requires_grad=True),), raise_exception=False))]:
    if not _ok:
        _faked.append(_name)
if _faked:
    raise RuntimeError("replaced by the notebook: " + ", ".join(_faked))
'''
PROBE_CALL = f"exec(compile({PROBE!r}, '<autograder>', 'exec'), {{}})"


@dataclass
class Guard:
    """What one grading run needs (set before it) and what it saw (read after it)."""
    memory: int = 4 << 30
    protect: list[str] = field(default_factory=list)
    writable: list[str] = field(default_factory=list)
    skip: dict[int, str] = field(default_factory=dict)  # cell index -> why that cell is not run again
    running: int | None = None  # index of the cell being executed
    faked: tuple[int, str] | None = None  # first test cell found faked, and what was replaced
    kernel_exit: int | None = None
    execute_seconds: float = 0.0  # time spent running cells, the rest of a grading being overhead


GUARD = Guard()


def error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class FencedKernelManager(AsyncKernelManager):
    """Starts the kernel through sandbox.py: memory limit, course files read-only."""

    def format_kernel_cmd(self, extra_arguments=None):
        fence = [f"--memory={GUARD.memory}"] + [f"--protect={p}" for p in GUARD.protect] + \
                [f"--writable={p}" for p in GUARD.writable]
        return [sys.executable, str(SANDBOX), *fence, "--", *super().format_kernel_cmd(extra_arguments)]


class GuardedExecute(Execute):
    """nbgrader's Execute, which also skips cells that killed the kernel, and checks tests are not faked."""

    def __init__(self, **kw):
        super().__init__(kernel_manager_class=FencedKernelManager, shutdown_kernel="immediate", **kw)

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        if cell.cell_type != "code":
            return cell
        GUARD.running = cell_index
        if cell_index in GUARD.skip:
            cell.outputs = [error_output("GradingStopped", GUARD.skip[cell_index])]
            return cell
        if is_grade(cell) and cell.source.strip() and not await self._tests_trustworthy(cell, cell_index):
            return cell
        start = time.perf_counter()
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except (DeadKernelError, CellTimeoutError):
            process = getattr(getattr(self.km, "provisioner", None), "process", None)
            GUARD.kernel_exit = process.poll() if process is not None else None
            raise
        finally:
            GUARD.execute_seconds += time.perf_counter() - start

    execute_cell = run_sync(async_execute_cell)  # nbclient binds its own coroutine here, not the override

    async def _tests_trustworthy(self, cell, cell_index) -> bool:
        """Run the probe; if the notebook replaced a function tests rely on, fail this test cell without running it."""
        msg_id = self.kc.execute(PROBE_CALL, silent=True, store_history=False)
        reply = await self.async_wait_for_reply(msg_id, cell)
        content = (reply or {}).get("content", {})
        if content.get("status") == "ok":
            return True
        what = content.get("evalue") or "the grader's check could not run"
        GUARD.faked = GUARD.faked or (cell_index, what)
        cell.outputs = [error_output("TestsFaked", f"{what}: this test cannot be trusted and scores 0")]
        return False
