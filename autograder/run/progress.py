"""The batch's progress on stderr, while hand-ins are graded: how many are done, by status, and how long the slowest
one running has run, so that a hand-in at its time limit shows its time instead of a frozen line.

On a terminal: tqdm's bar, redrawn every second or so (the pool's `tick`). Elsewhere (a log, CI): a line per hand-in
graded, and a "still grading" line every `every` seconds while some run, since a log keeps no redrawn line.
"""

import sys
from collections import Counter
from time import monotonic

from tqdm import tqdm

from ..results import STATUSES, Result

RUNNING_SHOWN = 3  # hand-ins named in a "still grading" line, slowest first (the rest are counted)


def clock(seconds: float) -> str:
    """'2:30', '1:02:05': a duration as a person reads it."""
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class Progress:
    """The batch's progress on `stream`: `update` for each hand-in graded, `tick` with the ones running."""

    def __init__(self, total: int, every: float = 30.0, stream=None):
        self.stream = stream or sys.stderr
        self.total, self.done, self.counts, self.every = total, 0, Counter(), every
        self.start = self.logged = monotonic()
        self.tty = self.stream.isatty()
        self.running: dict[str, float] = {}  # student -> when their grading started (time.monotonic)
        self.bar = tqdm(total=total, file=self.stream, unit="hand-in", dynamic_ncols=True, disable=not self.tty)

    def counted(self) -> str:
        return " ".join(f"{s} {self.counts[s]}" for s in STATUSES if self.counts[s])

    def slowest(self, now: float) -> list[tuple[str, float]]:
        """(student, seconds) of the hand-ins running, longest first."""
        return sorted(((s, now - started) for s, started in self.running.items()), key=lambda item: (-item[1], item[0]))

    def update(self, result: Result) -> None:
        """A hand-in graded: counted, and on a log one line saying so."""
        self.done += 1
        self.counts[result.status] += 1
        self.running.pop(result.student_id, None)
        if self.tty:
            self.bar.set_postfix_str(self.postfix(), refresh=False)
            self.bar.update(1)
            if self.done >= self.total:
                self.bar.close()
            return
        elapsed = monotonic() - self.start
        left = elapsed / self.done * (self.total - self.done)
        bar = "#" * round(20 * self.done / self.total)
        print(f"[{bar:<20}] {self.done}/{self.total}  {self.counted()}  ETA {clock(left)}  ({result.student_id})",
              file=self.stream, flush=True)

    def postfix(self) -> str:
        slowest = self.slowest(monotonic())[:1]
        running = f"slowest running: {slowest[0][0]} {clock(slowest[0][1])}" if slowest else ""
        return "  ".join(part for part in (self.counted(), running) if part)

    def tick(self, running: dict[str, float]) -> None:
        """The hand-ins running now (student -> when their grading started, time.monotonic): the terminal's line
        redrawn with the slowest one's time; on a log, a line every `every` seconds naming the slowest ones."""
        self.running = dict(running)
        now = monotonic()
        if self.tty:
            self.bar.set_postfix_str(self.postfix())  # redraws the line, its elapsed time too
            return
        if not running or now - self.logged < self.every:
            return
        self.logged = now
        slowest = self.slowest(now)
        named = ", ".join(f"{s} {clock(seconds)}" for s, seconds in slowest[:RUNNING_SHOWN])
        more = f" and {len(slowest) - RUNNING_SHOWN} more" if len(slowest) > RUNNING_SHOWN else ""
        print(f"still grading: {named}{more}  ({self.done}/{self.total} done)", file=self.stream, flush=True)
