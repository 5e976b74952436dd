"""What the exercises' tests share: `expect` for values, `outcome` for a call that may raise, `refused` for a
function an answer must not call, `AllReduceRecorder` for the collectives a rank's own code makes."""

import contextlib
import inspect

from . import values
from .values import Raised  # noqa: F401 (what tests expect of a call that raises)

_ABSENT = object()


def expect(label: str, got, want=_ABSENT, *, rtol: float = 0.0, atol: float = 0.0) -> None:
    """Check that `got` is `want` (floats and tensors within rtol and atol, types exactly), else AssertionError.

    In a grading the grader removes `want` (and any function of the cell named `_want...`, a reference that computes
    expected values) before the cell runs (autograder/judge.py): `got` is then sent out as plain data and judged by
    the grader, against what the solution gave, with the same message."""
    got = values.plain(got)
    if want is _ABSENT:
        _send({"label": str(label), "value": got, "rtol": rtol, "atol": atol})
        return
    problem = values.judge(values.plain(want), got, rtol, atol)
    if problem:
        raise AssertionError(f"{label}: {problem}")


_pending: list[dict] = []  # values a grading's test cell sent, until the cell ends


def _send(record: dict) -> None:
    """Send `record` to the grader with the others of the same cell, in one message when the cell ends: a hidden test
    may check hundreds of values, and each message costs the grader about a millisecond."""
    from IPython import get_ipython
    shell = get_ipython()
    if shell is None:  # no cell to end: sent now
        _pending.append(record)
        return _flush()
    if _flush not in shell.events.callbacks["post_run_cell"]:
        shell.events.register("post_run_cell", _flush)  # runs when the cell ends, whether or not it failed
    _pending.append(record)


def _flush(result=None) -> None:
    if _pending:
        from IPython.display import display
        records = _pending.copy()
        _pending.clear()
        display({values.MIME: records}, raw=True)


def outcome(function, *args, **kwargs):
    """What `function(*args, **kwargs)` returned, or values.Raised for what it raised (to expect either)."""
    try:
        return function(*args, **kwargs)
    except AssertionError:  # a test's own verdict (`refused`): it stays a failure
        raise
    except Exception as error:
        return values.Raised(error)


@contextlib.contextmanager
def refused(why: str, *targets: tuple[object, str]):
    """While the block runs, each `owner.name` in `targets` raises AssertionError(why); restored afterwards."""
    def refuse(*args, **kwargs):
        raise AssertionError(why)

    # vars(), not getattr: a method inherited from a base class (Tensor.unfold) is restored by deleting the patch
    saved = [(owner, name, vars(owner).get(name, _ABSENT)) for owner, name in targets]
    for owner, name, _ in saved:
        setattr(owner, name, refuse)
    try:
        yield
    finally:
        for owner, name, original in saved:
            if original is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


class AllReduceRecorder:
    """Stands in for `dist.all_reduce` inside a rank, to see when and how the rank's own code communicates.

        with AllReduceRecorder() as recorder:   # dist.all_reduce is the recorder until the block ends
            recorder.during = "backward"        # a label of what runs now, copied into each call
            loss.backward()
            recorder.during = ""

    Each call is recorded in `calls` as {"elements", "during", "async_op", "waited"} and passed on to the real
    all_reduce; "waited" turns True when the handle an asynchronous call returned is waited on (`work.wait()`).
    Only Python calls of `dist.all_reduce` are seen: DDP's own reducer communicates from C++."""

    def __init__(self):
        self.calls, self.during, self._real = [], "", None

    def __enter__(self):
        import torch.distributed as dist  # here: importing the tests' helpers costs no distributed set-up

        self._real, dist.all_reduce = dist.all_reduce, self
        return self

    def __exit__(self, *exc):
        import torch.distributed as dist

        dist.all_reduce = self._real

    def __call__(self, tensor, *args, **kwargs):
        bound = inspect.signature(self._real).bind(tensor, *args, **kwargs).arguments  # async_op, by name or place
        call = {"elements": tensor.numel(), "during": self.during, "async_op": bool(bound.get("async_op", False)),
                "waited": False}
        self.calls.append(call)
        work = self._real(tensor, *args, **kwargs)
        return _WaitRecorded(work, call) if work is not None else None


class _WaitRecorded:
    """An asynchronous collective's handle that notes in its call's record when it is waited on."""

    def __init__(self, work, call: dict):
        self._work, self._call = work, call

    def wait(self, *args, **kwargs):
        self._call["waited"] = True
        return self._work.wait(*args, **kwargs)

    def __getattr__(self, name):  # is_completed, get_future, ...: the real handle's
        return getattr(self._work, name)
