"""The kernel of one grading: started through sandbox.py, reached over ipc sockets in a runtime folder of its own."""

import os
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Bool, Float, Integer, List, Unicode, default

from . import processes

SANDBOX = Path(__file__).with_name("sandbox.py")
# What the kernel may know of the grader's environment; everything else (passwords, tokens, paths) stays out.
PASSED_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NBGRADER_EXECUTION", "CUDA_VISIBLE_DEVICES")
UNFENCED_WARNING = ("UNFENCED: this kernel runs without the sandbox (--unfenced); student code can read, change and "
                    "signal everything the grader's user can")


class SandboxUnavailable(RuntimeError):
    """bwrap cannot start a sandbox on this machine; the message says why and what to do."""


@cache
def sandbox_problem(bwrap: str = "bwrap") -> str | None:
    """Why a sandbox cannot start here, or None. Asked once per process."""
    result = subprocess.run([sys.executable, str(SANDBOX), "--check", "--bwrap", bwrap], capture_output=True, text=True)
    return (result.stderr.strip() or f"exit code {result.returncode}") if result.returncode else None


def require_sandbox(bwrap: str = "bwrap") -> None:
    """Raise SandboxUnavailable, with what the instructor can do, where bwrap cannot start."""
    problem = sandbox_problem(bwrap)
    if problem:
        raise SandboxUnavailable(
            f"student code cannot be sandboxed on this machine: {problem}. Install bubblewrap (Debian, Ubuntu: "
            "apt install bubblewrap), or grade without a sandbox, knowing that student code then runs with your "
            "permissions: --unfenced (make grade ARGS=--unfenced), or SandboxedKernelManager.unfenced = True")


def not_folders(paths: list[str]) -> list[str]:
    """The paths that are not folders (read_only must name folders that exist)."""
    return [p for p in paths if not os.path.isdir(p)]


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel in a bubblewrap sandbox (see sandbox.py), with limits on memory, processes and scratch space."""

    memory_gib = Float(4.0, help="GiB of memory a kernel may use (data, not address space)").tag(config=True)
    processes = Integer(256, help="processes and threads a kernel may run at once").tag(config=True)
    scratch_mib = Integer(512, help="MiB of each private folder (home with the working folder, /tmp, /dev/shm), "
                                    "and of any one file").tag(config=True)
    read_only = List(Unicode(), help="folders the kernel may read, besides the Python environment; relative paths "
                                     "mean the course folder").tag(config=True)
    unfenced = Bool(False, help="start kernels without the sandbox, only with the limits: for machines where "
                                "bubblewrap cannot run; student code can then reach all the grader can").tag(config=True)
    bwrap = Unicode("bwrap", help="the bubblewrap command (Debian's package `bubblewrap`)").tag(config=True)
    @default("transport")
    def _ipc(self):
        return "ipc"  # a sandboxed kernel has no network: its sockets are files in its runtime folder

    @default("connection_file")
    def _short_connection_file(self):
        # A folder of its own (mode 0700) for the connection file and sockets; a socket's path may not exceed 107
        # bytes, so a long temporary folder gives way to /tmp.
        base = tempfile.gettempdir() if len(tempfile.gettempdir()) <= 60 else "/tmp"
        return os.path.join(tempfile.mkdtemp(prefix="autograder-kernel-", dir=base), "k.json")

    @default("ip")
    def _socket_prefix(self):
        return os.path.splitext(self.connection_file)[0] + "-ipc"

    def environment_read_only(self) -> list[str]:
        """The Python environment (its packages and interpreter) and the configured folders, which must exist.

        `make grade` hands down absolute paths (config.load); plain `nbgrader autograde` runs in the course folder."""
        folders = [os.path.abspath(p) for p in self.read_only]
        missing = not_folders(folders)
        if missing:
            raise ValueError(f"SandboxedKernelManager.read_only names {', '.join(missing)}: not a folder")
        return [sys.prefix, sys.base_prefix, sys.exec_prefix, *folders]

    def format_kernel_cmd(self, extra_arguments=None):
        if self.unfenced:
            self.log.warning(UNFENCED_WARNING)
        else:
            require_sandbox(self.bwrap)
        self.kernel_spec.interrupt_mode = "message"  # a signal would stop bwrap, not the kernel inside
        options = [f"--bwrap={self.bwrap}", f"--runtime={os.path.dirname(self.connection_file)}", f"--memory={int(self.memory_gib * 2**30)}",
                   f"--processes={self.processes}", f"--scratch={self.scratch_mib << 20}",
                   *[f"--read-only={p}" for p in self.environment_read_only()],
                   *[f"--env={name}={os.environ[name]}" for name in PASSED_ENV if name in os.environ],
                   *(["--unfenced"] if self.unfenced else [])]
        return [sys.executable, str(SANDBOX), *options, "--", *super().format_kernel_cmd(extra_arguments)]

    def processes_inside(self) -> int:
        """How many processes run in the sandbox besides the kernel (and bwrap's own init)."""
        process = getattr(self.provisioner, "process", None)
        if process is None or process.poll() is not None:
            return 0
        below = processes.running(processes.descendants(process.pid))
        return max(0, len(below) - (1 if self.unfenced else 2))

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart:
            shutil.rmtree(os.path.dirname(self.connection_file), ignore_errors=True)

    cleanup_resources = _async_cleanup_resources
