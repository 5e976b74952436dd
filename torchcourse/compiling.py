"""torch.compile on the reader's machine: whether Inductor can compile here, how long a first call takes, and torch's
graph-break and recompile logs cut to their first lines."""

import contextlib
import io
import re

import torch

from .timing import time_it


def inductor_problem(device) -> str | None:
    """None if Inductor can compile for `device` on this machine, else a sentence saying what is missing and why."""
    device = torch.device(device)
    if device.type == "cuda":
        from torch.utils._triton import has_triton
        return None if has_triton() else ("Inductor writes Triton kernels for a CUDA GPU, and Triton is not installed "
                                           "here (`pip install triton`)")
    if device.type != "cpu":
        return f"the compiled cells run on a CUDA GPU or on the CPU, not on {device.type}"
    try:  # Inductor's own search for a compiler (config.cpp.cxx, CXX): what it would run, or the error it would raise
        from torch._inductor.cpp_builder import get_cpp_compiler
        get_cpp_compiler()
    except Exception as error:
        return ("on a CPU Inductor writes C++ and compiles it, and it found no working C++ compiler here "
                f"({type(error).__name__}): install one (Debian or Ubuntu: `sudo apt install g++`; macOS: "
                "`xcode-select --install`; Windows: Visual Studio's C++ build tools) and run the cell again")
    return None


def first_call_seconds(fn, *args, device) -> float:
    """Seconds one call of fn(*args) takes, the device waited for: for a compiled function's first call, its compilation."""
    return time_it(lambda: fn(*args), device, warmup=0, repeat=1)


# A torch log line's header: level and date, time, process id, file:line, then bracketed tags ([0/1] [__recompiles])
_HEADER = re.compile(r"^[A-Z]\d{4} \S+ \d+ \S+\] (?:\[[^\]]*\] ?)*")


class _FirstLines(io.TextIOBase):
    """A stream for torch's log handlers that prints the first `lines` lines of each message, headers removed."""

    def __init__(self, lines: int):
        self.lines = lines

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        body = [line for line in (_HEADER.sub("", line).strip() for line in text.splitlines()) if line]
        if body:
            print("  [log] " + "\n        ".join(body[:self.lines]))
        return len(text)


@contextlib.contextmanager
def torch_logs(lines: int = 3, **artifacts):
    """torch._logging.set_logs(**artifacts) while the block runs (as TORCH_LOGS would), each message cut to its first
    `lines` lines and printed: the whole of a graph break's message holds a stack of every frame down to the notebook's
    kernel."""
    with contextlib.redirect_stderr(_FirstLines(lines)):
        torch._logging.set_logs(**artifacts)  # the handlers it makes write to what sys.stderr is now
    try:
        yield
    finally:
        torch._logging.set_logs()  # every log back to its default, written to the real stderr again
