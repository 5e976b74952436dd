"""A throwaway PostgreSQL server for the tests that need a real one: Debian's `postgresql` package, started per use."""

import glob
import os
import re
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

from course import free_port

DEBIAN_BINARIES = "/usr/lib/postgresql/*/bin"  # Debian keeps initdb and pg_ctl here, off PATH
TOOLS = ("initdb", "pg_ctl", "createdb")
SUPERUSER = "postgres"
SYSTEM_USER = "postgres"  # the account Debian's package makes: the server runs as it when the tests run as root


def version_of(folder: str) -> tuple[int, ...]:
    """/usr/lib/postgresql/15/bin -> (15,); so that 15 sorts after 9.6."""
    return tuple(int(n) for n in re.findall(r"\d+", Path(folder).parent.name))


def binaries() -> dict[str, str] | None:
    """tool -> its path: the newest Debian version holding them all, else PATH's; None where one is missing."""
    for folder in sorted(glob.glob(DEBIAN_BINARIES), key=version_of, reverse=True):
        if all(os.access(Path(folder) / tool, os.X_OK) for tool in TOOLS):
            return {tool: str(Path(folder) / tool) for tool in TOOLS}
    found = {tool: shutil.which(tool) for tool in TOOLS}
    return found if all(found.values()) else None


def problem() -> str | None:
    """Why no server can start here, or None."""
    if binaries() is None:
        return f"no {', '.join(TOOLS)} under {DEBIAN_BINARIES} or on PATH: apt-get install postgresql"
    if os.geteuid() == 0 and not shutil.which("runuser"):
        return "running as root, and no runuser to start the server as the postgres user"
    return None



def run(command: list[str], what: str, folder: Path, log: Path | None = None) -> None:
    """Run a server command as the user the server runs as; raise with its output (and the server's log) if it fails."""
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        command = ["runuser", "-u", SYSTEM_USER, "--", *command]
    # cwd: the folder, which the postgres user can enter (it may not enter root's working directory)
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=180)
    if result.returncode:
        server_log = log.read_text(errors="replace") if log and log.exists() else ""
        raise RuntimeError(f"{what} failed ({result.returncode}): {' '.join(command)}\n"
                           f"{result.stdout}\n{result.stderr}\n{server_log}".rstrip())


@contextmanager
def server(folder_hint: str):
    """A fresh server on a free loopback port, trusting every local connection; yields the URL of an empty database."""
    tools = binaries()
    if tools is None:
        raise RuntimeError(problem())
    # Not pytest's tmp_path: as root the server runs as postgres, which cannot enter root's 0700 pytest folders.
    folder = Path(tempfile.mkdtemp(prefix=f"{folder_hint}-postgres-"))
    data, sockets, log = folder / "data", folder / "sockets", folder / "server.log"
    database = re.sub(r"\W", "_", folder_hint).lower() or "test"
    port, started = free_port(), False
    try:
        sockets.mkdir()
        if os.geteuid() == 0:
            shutil.chown(folder, SYSTEM_USER)
            shutil.chown(sockets, SYSTEM_USER)
        # --no-locale: containers often lack the locales initdb would pick; --no-sync: the data is thrown away
        run([tools["initdb"], "-D", str(data), "-A", "trust", "-U", SUPERUSER, "--no-locale", "-E", "UTF8",
             "--no-sync"], "initdb", folder)
        # -l: the server writes its log there, not into pg_ctl's output (which it would keep open, blocking the run)
        run([tools["pg_ctl"], "start", "-w", "-t", "120", "-D", str(data), "-l", str(log),
             "-o", f"-p {port} -h 127.0.0.1 -k {sockets} -c fsync=off"], "pg_ctl start", folder, log)
        started = True
        run([tools["createdb"], "-h", "127.0.0.1", "-p", str(port), "-U", SUPERUSER, database], "createdb", folder, log)
        yield f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{database}"
    finally:
        try:
            if started:  # fast: disconnects the clients a test left open (the gradebook's pool, say)
                run([tools["pg_ctl"], "stop", "-w", "-m", "fast", "-D", str(data)], "pg_ctl stop", folder, log)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
