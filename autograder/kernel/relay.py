"""A kernel's own stdout and stderr (what the sandbox, the kernel and student code write there, outside Jupyter's
messages) relayed into the grading's log by a thread of the grading's process: each line prefixed, control characters
and terminal escapes written as visible escapes, at most LIMIT bytes, and nothing once a hidden test may be known."""

import codecs
import os
import re
import threading
import unicodedata
from multiprocessing.util import Finalize

PREFIX = "kernel: "
LIMIT = 1 << 20  # bytes of a kernel's output kept in its log
END_WAIT = 5.0  # seconds a process, as it ends, waits for its kernels' output to end (their teardown: ~50 ms)
UNPRINTABLE = re.compile(r"[^\n\t\x20-\x7e]")  # what may need escaping: a quick look before a careful one
HIDDEN_CATEGORIES = {"Cc", "Cf", "Zl", "Zp"}  # controls (ESC, BEL, C1's CSI...), bidi and zero-width, line separators


def visible(text: str) -> str:
    """`text` with every control or format character but newline and tab written as its escape (ESC as \\x1b), so
    that a terminal or an editor showing the log shows it as it is, and acts on none of it."""
    return UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii")
                           if unicodedata.category(m.group()) in HIDDEN_CATEGORIES else m.group(), text)


class Relay:
    """A pipe whose write end the kernel gets as stdout and stderr, and the thread that writes what comes through into
    `log` (a descriptor: the grading's stderr, which is its log), until every holder of the write end has ended."""

    def __init__(self, log: int = 2, limit: int = LIMIT):
        self.read_end, self.write_end = os.pipe()
        self.log, self.limit = log, limit
        self.kept = self.dropped = self.withheld = 0
        self.withholding = False
        self.thread = threading.Thread(target=self.run, name="kernel output", daemon=True)
        self.thread.start()
        # its last lines written before this process ends (not when this object is collected: that would wait for an
        # ended kernel's teardown in the middle of a grading)
        Finalize(None, self.thread.join, args=(END_WAIT,), exitpriority=0)

    def given(self) -> None:
        """The kernel has the write end (a child's copy, or the warm parent's): ours closed, so that its end is seen."""
        if self.write_end is not None:
            os.close(self.write_end)
            self.write_end = None

    def withhold(self) -> None:
        """From now on, what comes is counted, not kept: a hidden test may have reached the kernel."""
        self.withholding = True

    def run(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")  # invalid bytes as \xff
        line = ""
        while chunk := os.read(self.read_end, 1 << 16):
            if self.withholding:  # read after withhold(): it may have been written after a hidden test was sent
                self.withheld += len(chunk)
                continue
            kept = chunk[:self.limit - self.kept]
            self.kept += len(kept)
            self.dropped += len(chunk) - len(kept)
            *lines, line = (line + decoder.decode(kept)).split("\n")
            self.write(lines)
        os.close(self.read_end)
        line += decoder.decode(b"", final=True)
        self.write([line] if line else [])
        if self.dropped:
            self.write([f"({self.dropped} more bytes dropped: a kernel's log keeps {self.limit} bytes of its output)"],
                       escape=False)
        if self.withheld:
            self.write([f"({self.withheld} bytes withheld: written once a hidden test had started, they may hold it)"],
                       escape=False)

    def write(self, lines: list[str], escape: bool = True) -> None:
        text = "".join(f"{PREFIX}{visible(line) if escape else line}\n" for line in lines).encode()
        while text:
            try:
                text = text[os.write(self.log, text):]
            except OSError:  # the log is gone: nothing left to keep
                return
