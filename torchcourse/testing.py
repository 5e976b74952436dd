"""What the exercises' tests share: `expect` for values, `outcome` for a call that may raise, `refused` for a
function an answer must not call by that name, `refused_ops` for operators it must not reach by any name,
`no_autograd` for answers that compute gradients by hand, `AllReduceRecorder` for the collectives a rank's own code
makes."""

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


NO_AUTOGRAD = "no autograd here: autograd's engine ran a backward (.backward(), torch.autograd.grad or another way in)"
# What F.scaled_dot_product_attention runs, by any name, on any device: its fused kernels, and its math path's softmax
SDPA_KERNELS = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
                "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                "_scaled_dot_product_fused_attention_overrideable", "_safe_softmax")


@contextlib.contextmanager
def _dispatch_watch(refuses, why: str):
    """While the block runs, each aten operation for which refuses(op) is true raises AssertionError(why): seen at
    torch's dispatcher, where every Python name of an operation arrives, on whichever thread runs it."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Watch(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls):  # else torch wraps the method below, and its first call imports dynamo: 1 s
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if refuses(func):
                raise AssertionError(why)
            return func(*args, **(kwargs or {}))

    with Watch() as watch:
        yield
        depth = torch._C._len_torch_dispatch_stack()  # the block may not take the watch off, nor leave a mode on top
        if not depth or torch._C._get_dispatch_stack_at(depth - 1) is not watch:
            raise AssertionError(f"{why.split(':')[0]}: the block changed torch's dispatch modes")


def no_autograd():
    """While the block runs, autograd's engine refuses every backward: each operation it runs raises
    AssertionError(NO_AUTOGRAD), whichever name started it (Tensor.backward, torch.autograd.grad, torch.func.grad,
    the engine itself). A Function's backward called directly (`y.grad_fn.apply(g)`) runs outside the engine:
    allowed."""
    import torch

    return _dispatch_watch(lambda func: torch._C._current_graph_task_id() != -1, NO_AUTOGRAD)  # -1: no backward


def refused_ops(why: str, *names: str):
    """While the block runs, each aten operator named (as torch.ops.aten names it: "unfold") raises
    AssertionError(why), whichever Python name reached it (Tensor.unfold, torch._C.TensorBase.unfold,
    torch.ops.aten.unfold). A name this torch does not have refuses nothing."""
    import torch

    packets = {getattr(torch.ops.aten, name) for name in names if hasattr(torch.ops.aten, name)}
    return _dispatch_watch(lambda func: func.overloadpacket in packets, why)


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
