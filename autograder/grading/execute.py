"""nbgrader's Execute step, guarded: a sandboxed kernel, cells that must not run again, tests that run as written; and
the solution run once by it for the values its tests expect (`expected_values`)."""

import os
import queue
import shutil
import time
from pathlib import Path

import nbformat

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Float, Integer, default

from torchcourse.format import HIDDEN, answer_cells, grading, test_cells
from torchcourse.values import MIME

from .integrity import (FAILED, PLAIN_TRACEBACKS, Canary, bound_by_import, isolated, names_used, setup, setup_parts,
                        tests_read, what_changed)
from .judge import as_graded, sent, verdict, wants
from .lessons import skippable
from ..kernel.manager import SandboxedKernelManager
from .notebook import FINDINGS, SKIPPED, Grading, error_output, grade_id, is_test, not_run_output
from .step import Step

def later_tests_of_its_exercise(nb, index: int) -> list[int]:
    """Indices of the test cells after cell `index` that test the same answer as it (test_cells: named after it)."""
    gid = grading(nb.cells[index]).get("grade_id", "")
    answers = [a for c in answer_cells(nb) if gid.startswith((a := grading(c)["grade_id"]) + "_")]
    if not answers:
        return []
    tests = {id(cell) for cell in test_cells(nb, max(answers, key=len))}  # ex1_mean_x tests ex1_mean, not ex1
    return [i for i in range(index + 1, len(nb.cells)) if id(nb.cells[i]) in tests and is_test(nb.cells[i])]


def read_by(cells: list) -> tuple[list[str], list[str]]:
    """The global names and the attribute chains test `cells` read, together."""
    return tuple(sorted(set().union(*found)) for found in zip(*(names_used(c.source) for c in cells)))


class SkippedTest(str):
    """Why a test cell is not run: a test of its exercise ran past the time limit (shown as SKIPPED, not as a stop)."""


def out_of_threads(reply: dict | None) -> bool:
    """The kernel, at its limit of processes, could not start a thread while showing an error."""
    return bool(reply) and reply.get("ename") == "RuntimeError" and reply.get("evalue") == "can't start new thread"


class GuardedExecute(Step, Execute):
    """nbgrader's Execute, with each kernel in a sandbox (kernel.py), and checks around each test cell (integrity.py).

    From the first check that fails, test cells score 0 and nothing more runs. Once a hidden test cell has started,
    display updates and widget messages no longer change outputs already recorded, so that what the feedback shows
    of earlier cells was made before any hidden test reached the kernel.

    In nbgrader's style: its settings are traits; a grading's inputs come in the notebook's resources (a `Grading`
    under FINDINGS; without one, as in a plain `nbgrader autograde`, the tests run as written); what the run found goes
    out in the notebook's metadata (FINDINGS), for the grader and nbgrader's later steps, and the same dict into the
    Grading, where the grader reads it when nbgrader writes no notebook (a kernel lost).
    """

    check_timeout = Integer(30, help="seconds the kernel has to answer one integrity check").tag(config=True)
    output_mib = Float(4.0, help="MiB of output one cell keeps: past it, what the cell writes is dropped, with a note "
                                 "(a test's errors and the values it sends are always kept)").tag(config=True)

    @default("iopub_timeout")
    def _drain_within_the_cells_limit(self):
        # nbclient gives a cell's output 4 s to arrive after the cell's reply, and nbgrader fails the cell past that:
        # under load, a right answer that printed 200 MiB (cut at output_mib as it arrives) lost its points to it
        return max(4, self.timeout or 0)

    def __init__(self, **kw):
        kw.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(shutdown_kernel="immediate", **kw)
        self.reset(Grading())

    def reset(self, grading: Grading) -> None:
        self.skip, self.expected = grading.skip, grading.expected  # what each is: Grading
        self.recording, self.lessons_skipped = grading.recording, grading.lessons_skipped
        self.running: int | None = None  # index of the cell being run
        self.kernel_exit: int | None = None  # exit code of a kernel that died
        self.lost: str | None = None  # how the cell being run was lost: "timeout" or "died" (its kernel)
        self.start_failed: str | None = None  # why the kernel could not start
        self.output_chars: dict[int, int] = {}  # cell index -> characters of output it wrote
        self.tampered: tuple[int, str] | None = None  # first test cell that cannot be trusted, and why
        self.verdicts: dict[str, str] = {}  # cell id -> the grader's own message in that cell's outputs
        self.execute_seconds = 0.0  # running cells, the rest of a grading being overhead
        self.check_seconds = 0.0  # of the overhead: the integrity checks
        self.kernel_seconds = {"kernel start": 0.0, "kernel stop": 0.0}  # and the kernel's start and stop
        self.left_running = 0  # processes the notebook left in its sandbox
        self.out_of_memory = False  # the kernel's cgroup saw a process of it killed for want of memory
        self.memory_gib: float | None = None  # the kernel's memory limit
        self.hidden_started = False
        self.baseline: dict | None = None
        self.audit: dict = {}
        self.probes: list[str] = []  # the functions worth probing: those the notebook's tests call
        self.preload: list[str] = []  # the modules the tests import, loaded before the notebook runs
        self.modules_seen: dict[str, int] = {}  # module name -> its identity when a check first saw it
        self.course_seen: dict[str, int] = {}  # course module name -> its contents' digest when a check first saw it
        self.checked_before: int | None = None  # a test cell whose check ran right after the test before it
        self.sent: dict[str, list[dict]] = {}  # grade_id -> the values its test cell sent
        self.count = 0  # the execution count the notebook shows: the grader's, never the kernel's
        self.reply: dict | None = None  # the kernel's reply to the cell run last (its content)
        self.errors: list[dict] = []  # the errors the cell run last showed (their content)


    def preprocess(self, nb, resources=None, km=None):
        grading = (resources or {}).get(FINDINGS) or Grading()
        self.reset(grading)
        self.probes, self.preload = tests_read(nb)
        try:
            return super().preprocess(nb, resources, km)
        finally:  # a lost kernel raises, and nbgrader then writes no notebook: the grader reads the findings it was given
            nb.metadata[FINDINGS] = grading.findings = self.findings()

    def findings(self) -> dict:
        """What this run found, for the grader, the feedback (verdicts, time limit) and FlagForReview (tampered)."""
        return {"tampered": self.tampered[1] if self.tampered else None,
                "tampered_at": self.tampered[0] if self.tampered else None, "verdicts": self.verdicts,
                "timeout": self.timeout, "left_running": self.left_running,
                "unfenced": bool(getattr(self.km, "unfenced", False)), "running": self.running, "lost": self.lost,
                "kernel_exit": self.kernel_exit, "start_failed": self.start_failed, "out_of_memory": self.out_of_memory,
                "memory_gib": self.memory_gib, "execute_seconds": self.execute_seconds,
                "check_seconds": self.check_seconds, "kernel_seconds": self.kernel_seconds,
                **({"sent": self.sent} if self.recording else {})}

    def grader_says(self, cell, ename: str, evalue: str) -> None:
        cell.outputs = [error_output(ename, evalue)]
        self.verdicts[cell.id] = f"{ename}: {evalue}"

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        if cell.cell_type != "code":
            return cell
        self.running = cell_index
        if self.baseline is None:
            await self._start_checks()
        if cell_index in self.skip:
            why = self.skip[cell_index]
            self.grader_says(cell, SKIPPED if isinstance(why, SkippedTest) else "GradingStopped", why)
            return cell
        if cell.id in self.lessons_skipped:
            cell.outputs = [not_run_output()]
            return cell
        if self.tampered:
            if is_test(cell):
                self.grader_says(cell, "TestsTampered", f"not run: {self.tampered[1]}")
            return cell
        test = is_test(cell)
        if test and not self.hidden_started and HIDDEN.search(cell.source):
            self.hidden_started = True  # from now on the kernel may know hidden tests: what it writes stays out of logs
            getattr(self.km, "withhold_kernel_output", lambda: None)()
        if test:
            if self.checked_before != cell_index and not await self._trusted([cell], cell_index, after_test=False):
                return cell
        start, source = time.perf_counter(), cell.source
        judged = test and (self.expected is not None or self.recording)
        self.reply, self.errors = None, []
        cells, canary, following = self._checked_with(cell_index) if test and not self.recording else ([], None, None)
        appended = None  # the check after it as the test's own last line, run in its request where the test passed
        try:
            if judged:
                cell.source = as_graded(source)  # the expected values stay in the grader
            if canary:
                appended = canary.after(cell.source)
                cell.source = appended or cell.source
            cell = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except (DeadKernelError, CellTimeoutError) as error:
            process = getattr(getattr(self.km, "provisioner", None), "process", None)
            self.kernel_exit = process.poll() if process is not None else None
            self.lost = "died" if isinstance(error, DeadKernelError) else "timeout"
            raise
        finally:
            cell.source = source
            seconds = time.perf_counter() - start
            self.execute_seconds += seconds
            self.own_counts(cell)
        ran = None  # the check's report as the test's last line gave it, or why there is none
        if appended and (self.reply or {}).get("status") == "ok":  # its last line, which raises, did not run
            ran = canary.read(self.reply, self.errors)
        elif appended and canary.raised(self.reply):  # the test passed, and its last line reported
            cell.outputs = canary.taken_out(cell.outputs)
            ran = canary.read(self.reply, self.errors)
            own = min(max(0.0, (ran[0] or {}).get("seconds", 0.0)), seconds)
            self.execute_seconds -= own  # the check's own time in the test's request, counted as a check's
            self.check_seconds += own
        if judged:
            self.judge(cell)
        if canary:  # a test run in a tampered kernel scores 0 too; a test cell next is checked by the same check
            await self._trusted(cells, cell_index, after_test=True, ran=ran)
            self.checked_before = following
        return cell

    def _checked_with(self, cell_index: int) -> tuple[list, Canary, int | None]:
        """The cells the check after test cell `cell_index` answers for (the test, and a test cell next to it, which
        it checks before), that check, and the index of that next test cell (None where there is none)."""
        cell = self.nb.cells[cell_index]
        following = self.next_code_cell(cell_index)
        together = following is not None and following not in self.skip and is_test(self.nb.cells[following])
        cells = [cell] + ([self.nb.cells[following]] if together else [])
        return cells, self._canary(cells, detail=False, imported=bound_by_import(cell.source)), \
            following if together else None

    def _canary(self, cells: list, detail: bool, imported: list[list[str]]) -> Canary:
        """A check before (or after the first of) test `cells`: of the names and attribute chains they read."""
        return Canary(*read_by(cells), self.probes, watch=self.preload, detail=detail, imported=imported)

    async def _check_raise_for_error(self, cell, cell_index, exec_reply):
        """nbclient's, keeping the reply's content: a test whose last line is its check (Canary.after) passed where the
        reply is the check's error."""
        self.reply = (exec_reply or {}).get("content")
        return await super()._check_raise_for_error(cell, cell_index, exec_reply)

    async def _async_handle_timeout(self, timeout, cell=None):
        """nbclient's (the kernel interrupted, or a CellTimeoutError where it will not stop); a test cell's later tests
        of the same exercise are then not run: they call the same answer, and would each wait the limit again (an
        endless loop cost twice the limit). The kernel, interrupted, goes on with the other exercises."""
        if cell is not None and self.running is not None and is_test(cell):
            for later in later_tests_of_its_exercise(self.nb, self.running):
                self.skip.setdefault(later, SkippedTest(
                    f"not run: {grading(cell)['grade_id']}, a test of the same exercise, ran past the {timeout} s "
                    "time limit, and this test would have waited as long again"))
        return await super()._async_handle_timeout(timeout, cell)

    def own_counts(self, cell) -> None:
        """The cell's execution count, and its outputs' metadata and display ids, as the grader sets them: a kernel can
        send any number or data there, and the feedback shows them."""
        self.count += 1
        cell.execution_count = self.count
        for output in cell.get("outputs", []):
            if "execution_count" in output:
                output.execution_count = self.count
            if "metadata" in output:
                output.metadata = NotebookNode()
            output.pop("transient", None)

    def judge(self, cell) -> None:
        """Take the values the test cell sent out of its outputs; in a grading, fail it where they are not the
        solution's (the cell's outputs say how, the feedback as much as hides no hidden test)."""
        values, cell.outputs = sent(cell.outputs)
        gid = grade_id(cell)
        self.sent[gid] = values
        if self.recording or any(o.get("output_type") == "error" for o in cell.outputs):
            return  # an error of the cell's own already fails it, and says why
        full, safe = verdict(self.expected.get(gid, []), values)
        if full:
            cell.outputs.append(error_output("AssertionError", full))
            self.verdicts[cell.id] = f"AssertionError: {safe}"

    def next_code_cell(self, index: int) -> int | None:
        return next((i for i in range(index + 1, len(self.nb.cells)) if self.nb.cells[i].cell_type == "code"), None)

    execute_cell = run_sync(async_execute_cell)  # nbclient binds its own coroutine here, not the override

    async def async_wait_for_reply(self, msg_id, cell=None):
        """nbclient's, answered at once where the client kept the reply (the kernel_info it became ready with)."""
        kept = getattr(self.kc, "kept_reply", lambda _: None)(msg_id)
        return kept if kept is not None else await super().async_wait_for_reply(msg_id, cell)

    wait_for_reply = run_sync(async_wait_for_reply)

    async def _ask(self, code: str) -> tuple[dict | None, list[dict]]:
        """Send `code` as test cells are sent; the reply's content (None if none came) and the errors it showed."""
        start = time.perf_counter()
        try:
            return await self._send(code)
        finally:
            self.check_seconds += time.perf_counter() - start

    async def _send(self, code: str) -> tuple[dict | None, list[dict]]:
        msg_id = self.kc.execute(code, silent=False, store_history=True, allow_stdin=False, stop_on_error=False)
        deadline = time.monotonic() + self.check_timeout
        errors, idle = [], False
        try:
            while not idle:
                msg = await self.kc.get_iopub_msg(timeout=max(0.0, deadline - time.monotonic()))
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue  # late output of an earlier cell: nbclient drops those too
                if msg["msg_type"] == "error":
                    errors.append(msg["content"])
                idle = msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle"
            while True:
                reply = await self.kc.get_shell_msg(timeout=max(0.0, deadline - time.monotonic()))
                if reply["parent_header"].get("msg_id") == msg_id:
                    return reply["content"], errors
        except (queue.Empty, TimeoutError):
            return None, errors

    async def _start_checks(self) -> None:
        """Before the notebook's first cell, in one request (a round trip is 5-8 ms): the audit hook (which a forked
        kernel set up as it started), then the kernel's state to compare every check with, trying the functions the
        tests call (the others, never tried again, took 10 ms of a fresh kernel). Where the set-up fails, the check
        does not run and says so."""
        canary = Canary(probes=self.probes, watch=self.preload, detail=True)
        started_set_up = getattr(self.km, "checks_set_up", False)  # a forked kernel set them up (warm.set_up)
        reply, errors = await self._ask(canary.code if started_set_up else canary.after(isolated(setup(self.preload))))
        report, problem = canary.read(reply, errors)
        if report is None:
            raised = f"; the set-up raised {reply.get('ename')}: {reply.get('evalue')}" if reply and \
                reply.get("status") == "error" and reply.get("ename") != canary.error else ""
            raise RuntimeError(f"the grader's checks could not start in a fresh kernel ({problem}{raised})")
        self.baseline, self.audit = report, report.get("audit", {})
        self.modules_seen, self.course_seen = dict(report["modules"]), dict(report["course"])

    async def _report(self, cells: list, detail: bool, imported: list[list[str]]) -> tuple[dict | None, str | None]:
        """One check's report on the kernel, in a cell of its own, or None and why there is none."""
        for _ in range(2):  # once more after a kernel out of threads (a fork bomb's): a fresh check, nothing skipped
            canary = self._canary(cells, detail=detail, imported=imported)
            reply, errors = await self._ask(canary.code)
            report, problem = canary.read(reply, errors)
            if report is not None or not (out_of_threads(reply) or problem == FAILED):
                break
        return report, problem

    async def _trusted(self, cells: list, cell_index: int, after_test: bool,
                       ran: tuple[dict | None, str | None] | None = None) -> bool:
        """Check the kernel before the test `cells` (or after the first of them; `ran`: that check's report as the
        test's own last line gave it, or why there is none: asked again in a cell of its own where it failed in the
        kernel); if it was tampered with, say so in test cell `cell_index`, which then scores 0."""
        if self.recording:  # the solution's own run: the instructor's code, with nothing to catch (14-24 checks: 0.3 s)
            return True
        names, chains = read_by(cells)
        imported = bound_by_import(cells[0].source) if after_test else []  # what the test just run imported
        report, problem = ran if ran and ran[1] != FAILED else await self._report(cells, detail=False, imported=imported)
        if report is not None and report["digest"] != self.baseline["digest"]:  # the state changed: which of it
            first = report
            report, problem = await self._report(cells, detail=True, imported=imported)
            if report is not None:  # what the first saw at the test's end (since run, or undone) counts too
                for part in ("later", "faked"):
                    report[part] = sorted(set(first[part]) | set(report[part]))
        if report is not None and problem is None:
            hidden = any(HIDDEN.search(c.source) for c in cells)  # a hidden test's names stay hidden
            found = dict(baseline=self.baseline, report=report, audit_before=self.audit, names=names, chains=chains,
                         after_test=after_test, modules_seen=self.modules_seen, course_seen=self.course_seen)
            problem = what_changed(**found, name_them=not hidden)
            if problem:  # the instructor's log names all
                self.log.warning("tests tampered with, at %s: %s", cells[0].id, what_changed(**found))
            self.audit = report.get("audit", {})
            for seen, now in ((self.modules_seen, report["modules"]), (self.course_seen, report["course"])):
                for name, identity in now.items():
                    seen.setdefault(name, identity)
        if problem is None:
            return True
        self.tampered = (cell_index, problem)
        self.grader_says(self.nb.cells[cell_index], "TestsTampered", f"{problem}: this test and every later one score 0")
        return False

    def output(self, outs, msg, display_id, cell_index):
        """nbclient's, with what a cell writes past `output_mib` dropped: a right answer that prints hundreds of MiB
        must not hold up its grading (the notebook written, the feedback drawn) until a later test runs out of time."""
        content = msg["content"]
        data = content.get("data") if isinstance(content.get("data"), dict) else {}
        if msg["msg_type"] == "error":  # as a check reads the errors a cell showed (Canary.read)
            self.errors.append(content)
        if msg["msg_type"] == "error" or MIME in data:  # what a test's verdict is read from
            return super().output(outs, msg, display_id, cell_index)
        size = len(content.get("text", "") or "") + sum(len(v) if isinstance(v, str) else len(repr(v))
                                                        for v in data.values())
        before = self.output_chars.get(cell_index, 0)
        self.output_chars[cell_index] = before + size
        cap = int(self.output_mib * 2**20)
        if before + size <= cap:
            return super().output(outs, msg, display_id, cell_index)
        if before <= cap:
            note = f"\n[the grader kept this cell's first {self.output_mib:g} MiB of output; the rest was dropped]\n"
            outs.append(NotebookNode(output_type="stream", name="stdout", text=note))
        return None

    def _update_display_id(self, display_id, msg):
        if not self.hidden_started:  # afterwards, an update could carry hidden tests into an earlier cell's output
            super()._update_display_id(display_id, msg)

    def handle_comm_msg(self, outs, msg, cell_index):
        if not self.hidden_started:  # likewise for widgets: an Output widget can capture a later cell's output
            super().handle_comm_msg(outs, msg, cell_index)

    async def async_start_new_kernel(self, **kw):
        # Plain tracebacks whatever the course's extra_arguments say (the last setting wins): IPython's default ones
        # read and colour the source around every frame (30-60 ms an error, paid by each check, which answers with an
        # error), and a check's error is read as a plain traceback has it (integrity.own_line)
        self.extra_arguments = [*self.extra_arguments, PLAIN_TRACEBACKS]
        if isinstance(self.km, SandboxedKernelManager):  # a forked kernel runs the checks' set-up as it starts
            kw["checks_setup"] = setup_parts(self.preload)
        start = time.perf_counter()
        try:
            await super().async_start_new_kernel(**kw)
        except Exception as error:  # the machine's fault, not the hand-in's: no cell has run
            self.start_failed = f"{type(error).__name__}: {error}"
            raise
        finally:
            self.kernel_seconds["kernel start"] += time.perf_counter() - start

    async def async_start_new_kernel_client(self):
        start = time.perf_counter()  # until the kernel answers
        try:
            return await super().async_start_new_kernel_client()
        except Exception as error:
            self.start_failed = f"{type(error).__name__}: {error}"
            raise
        finally:
            self.kernel_seconds["kernel start"] += time.perf_counter() - start

    start_new_kernel = run_sync(async_start_new_kernel)  # as execute_cell: nbclient binds its own
    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    async def _async_cleanup_kernel(self):
        start = time.perf_counter()
        if self.km is not None and hasattr(self.km, "processes_inside"):
            self.left_running, self.memory_gib = self.km.processes_inside(), self.km.memory_gib
            self.out_of_memory = self.km.out_of_memory()
        await super()._async_cleanup_kernel()
        self.kernel_seconds["kernel stop"] += time.perf_counter() - start

    _cleanup_kernel = run_sync(_async_cleanup_kernel)  # as execute_cell: nbclient binds its own


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
    execute.allow_errors = True  # every failure is reported below, not the first alone
    grading = Grading(recording=True, lessons_skipped=skippable(nb, nbformat.read(release, as_version=4)))
    execute.preprocess(nb, {"metadata": {"path": str(folder)}, FINDINGS: grading})
    failed = [f"{grade_id(c)} ({e.ename}: {str(e.get('evalue'))[:300]})" for c in nb.cells if is_test(c)
              for e in [o for o in c.get("outputs", []) if o.output_type == "error"][:1]]
    if failed:  # (its run has no checks between cells: nothing marks it tampered with)
        return f"{source}: the solution fails its own tests, so no hand-in can be judged against it: {'; '.join(failed)}"
    return grading.findings["sent"]
