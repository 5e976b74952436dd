"""The grader's modules one at a time: the sandbox, the integrity checks' verdicts, the feedback rule, results, batch."""

import contextlib
import copy
import csv
import dataclasses
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from traitlets.config import Config

from autograder.run import batch, collect
from autograder.grading import feedback, lessons
from autograder import integrity, layout, results
from autograder import config as course_config
from autograder.kernel.manager import SandboxUnavailable, SandboxedKernelManager, require_sandbox
from course import ROOT
from handins import grade, handin, private_env, right, rows_of, scratch_course, write, write_folder
import hostile

SANDBOX = ROOT / "autograder" / "kernel" / "sandbox.py"
PROBE = """import json, os, socket, sys
found = {"uid": os.getuid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
         "top": sorted(os.listdir("/")), "cwd": os.getcwd(), "env": sorted(os.environ),
         "solutions": os.path.exists(sys.argv[1]), "home": os.environ["HOME"]}
for name, path in (("tmp", "/tmp/x"), ("home_file", os.path.expanduser("~/x")), ("work", "x"), ("venv", sys.prefix + "/x")):
    try:
        open(path, "w").write("x")
        found[name] = "written"
    except OSError as error:
        found[name] = type(error).__name__
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    found["net"] = "reached"
except OSError as error:
    found["net"] = type(error).__name__
print(json.dumps(found))"""


def in_sandbox(code: str, *options: str, python: str = sys.executable, user: str | None = None, args=()) -> tuple:
    """Run `code` through sandbox.py, as this user or `user`: (exit code, stdout, stderr)."""
    runtime = tempfile.mkdtemp(prefix="sandbox-test-")
    start = tempfile.mkdtemp(prefix="sandbox-start-")
    (Path(start) / "data.txt").write_text("a file beside the notebook")
    if user:
        for path in (runtime, start):
            shutil.chown(path, user)
    prefix = ["runuser", "-u", user, "--"] if user else []
    command = [*prefix, python, str(SANDBOX), f"--runtime={runtime}", f"--read-only={sys.prefix}",
               f"--read-only={sys.base_prefix}", *options, "--", python, "-c", code, *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=start, timeout=120)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
        shutil.rmtree(start, ignore_errors=True)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.sandbox
def test_a_sandboxed_process_sees_only_its_own_folders():
    code, out, err = in_sandbox(PROBE, args=[str(ROOT / "solutions")])
    assert code == 0, err
    found = json.loads(out)
    assert found["uid"] == 1000 and found["pids"] == [1, 2], found  # its own PID namespace: bwrap's init and itself
    assert not found["solutions"], "the course's solutions are visible"
    assert found["cwd"] == "/home/student/work" and found["home"] == "/home/student"
    assert (found["tmp"], found["home_file"], found["work"]) == ("written",) * 3
    assert found["venv"] == "OSError" and found["net"] in ("OSError", "ConnectionRefusedError", "TimeoutError"), found
    assert set(found["env"]) <= {"HOME", "TMPDIR", "USER", "LOGNAME", "LANG", "PATH", "PWD", "LC_CTYPE"}, found["env"]


@pytest.mark.sandbox
@pytest.mark.parametrize("base", ["/tmp", "/dev/shm", "/home/student"])
def test_a_read_only_folder_shows_wherever_the_course_lives(base):
    """A course under /tmp, /dev/shm or a home folder: the sandbox's own private folders there hide nothing of it."""
    if not os.access(base if Path(base).exists() else Path(base).parent, os.W_OK):
        pytest.skip(f"needs a user who may write {base} (root): the sandbox's home is /home/student")
    Path(base).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="course-", dir=base))
    try:
        (folder / "data").mkdir()
        (folder / "data" / "digits.txt").write_text("0123456789")
        code, out, err = in_sandbox("import sys; print(open(sys.argv[1]).read())", f"--read-only={folder / 'data'}",
                                    args=[str(folder / "data" / "digits.txt")])
    finally:
        shutil.rmtree(folder)
    assert code == 0 and out.strip() == "0123456789", err


@pytest.mark.sandbox
def test_the_files_beside_the_notebook_are_copied_into_its_working_folder():
    code, out, err = in_sandbox("print(open('data.txt').read())")
    assert code == 0 and out.strip() == "a file beside the notebook", err


@pytest.mark.sandbox
@pytest.mark.parametrize("attempt, options, refused", [
    ("import os, time\nn = 0\ntry:\n    while n < 1000:\n        if os.fork() == 0:\n            time.sleep(5)\n"
     "            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n)", ("--processes=20",), lambda out: int(out) < 20),
    ("x = bytearray(600 * 2**20)\nprint('allocated')", ("--memory=268435456",), lambda out: "allocated" not in out),
    ("open('/tmp/big', 'wb').write(bytes(8 * 2**20))\nprint('written')", ("--scratch=1048576",),
     lambda out: "written" not in out),
], ids=["processes", "memory", "scratch"])
def test_limits_hold(attempt, options, refused):
    _, out, err = in_sandbox(attempt, *options)
    assert refused(out.strip()), f"the limit did not hold: {out} {err[-500:]}"


@pytest.mark.sandbox
@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(), reason="needs root to become nobody")
def test_as_an_ordinary_user_too():
    """What an instructor's server runs: the grader as an ordinary user (here `nobody`, with Debian's python3)."""
    code, out, err = in_sandbox("import os\nn = 0\ntry:\n    while n < 100:\n        if os.fork() == 0:\n"
                                "            import time; time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError:\n"
                                "    pass\nprint(os.getuid(), n)", "--processes=20", python="/usr/bin/python3",
                                user=pwd.getpwuid(65534).pw_name)
    assert code == 0, err
    uid, forked = map(int, out.split())
    assert uid == 1000 and forked < 20


def test_a_missing_bwrap_is_reported_with_what_to_do():
    done = subprocess.run([sys.executable, str(SANDBOX), "--check", "--bwrap", "/nonexistent/bwrap"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "apt install bubblewrap" in done.stderr
    with pytest.raises(SandboxUnavailable, match="--unfenced"):
        require_sandbox("/nonexistent/bwrap")


def test_the_kernel_command_goes_through_the_sandbox_with_a_short_socket_path():
    manager = SandboxedKernelManager(kernel_name="python3", config=Config(
        {"SandboxedKernelManager": {"read_only": ["data"], "memory_gib": 1.5}}))
    command = manager.format_kernel_cmd()
    assert command[1] == str(SANDBOX) and "--memory=1610612736" in command and "--" in command
    assert f"--read-only={os.path.abspath('data')}" in command and manager.transport == "ipc"
    assert len(manager.ip) + 6 < 107, "an ipc socket's path must fit in 107 bytes"
    shutil.rmtree(os.path.dirname(manager.connection_file))


def report(state=None, faked=(), audit=None, shadows=None, modules=None, later=(), digest=0) -> dict:
    return {"state": state or {"shell.run_cell": "a"}, "faked": list(faked), "audit": audit or {},
            "shadows": shadows or {}, "modules": modules or {}, "later": list(later), "digest": digest}


def test_a_canary_tells_what_went_wrong():
    canary = integrity.Canary(detail=True)
    def answer(canary, report):  # the reply, and the error shown
        error = {"status": "error", "ename": canary.error, "evalue": canary.nonce + json.dumps(report)}
        return error, [error]
    good = answer(canary, report())[0]
    assert canary.read(good, [good]) == (report(), None)
    assert "must fail" in canary.read({"status": "ok"}, [])[1]
    assert "errors no longer reach" in canary.read(good, [])[1]
    assert "another error" in canary.read({**good, "evalue": "other"}, [good])[1]
    assert "did not answer" in canary.read(None, [])[1]
    digest_only = {k: v for k, v in report().items() if k != "state"}
    assert "unreadable" in canary.read(*answer(canary, digest_only))[1], "asked for the state, none came"
    canary = integrity.Canary()
    assert canary.read(*answer(canary, digest_only)) == (digest_only, None)
    assert "unreadable" in canary.read(*answer(canary, report()))[1], "the state, not asked for"


def test_a_test_cell_is_read_for_its_names_and_attribute_chains():
    names, chains = integrity.names_used("assert torch.testing.assert_close(F.gelu(x), y) is None and abs(z) < 1")
    assert names == ["F", "abs", "torch", "x", "y", "z"] and chains == ["F.gelu", "torch.testing.assert_close"]
    assert integrity.prefixes(chains) == {"F.gelu", "torch.testing", "torch.testing.assert_close"}
    assert integrity.names_used("from torchcourse.testing import refused\nfrom . import x")[1] == ["torchcourse.testing.refused"]


def test_what_changed_names_only_what_the_grader_knows():
    def changed(now, names=(), chains=(), after_test=True, name_them=True):
        return integrity.what_changed(baseline, now, {}, list(names), list(chains), after_test, name_them)
    baseline = report({"shell.run_cell": "a", "sys.gettrace()": "None"}, shadows={"open": "IPython's open"})
    assert changed(baseline, ["open"]) is None, "a name shadowed in a fresh kernel (IPython's open) is no finding"
    assert "shell.run_cell" in changed(report({"shell.run_cell": "b"}), after_test=False)
    trace = report(baseline["state"], audit={"trace": 1})
    assert changed(trace, after_test=False) is None  # set outside a test
    assert "trace function" in changed(trace)
    faked = report(baseline["state"], faked=["torch.allclose", "replaced:np.mean", "<the hidden test's code>"],
                   shadows={"abs": "a lambda", "open": "IPython's open", "len": "not used by the test"})
    sentence = changed(faked, ["abs", "open"], ["np.mean.x"])
    assert "torch.allclose" in sentence and "abs (shadowed" in sentence and "np.mean (replaced" in sentence
    assert "hidden" not in sentence and "open" not in sentence and "len" not in sentence
    hidden = changed(faked, ["abs"], ["np.mean.x"], name_them=False)
    assert "torch.allclose" in hidden and "2 names this hidden test uses" in hidden and "abs" not in hidden
    digest_only = {k: v for k, v in report(digest=1).items() if k != "state"}
    assert changed({**digest_only, "digest": baseline["digest"]}) is None, "the same digest: the same state"
    with pytest.raises(ValueError, match="detail=True"):  # another digest: the grader asks for the state itself
        changed(digest_only)


# Each family the checks look for (integrity.py), as a notebook's cell would try it: what the check must name.
LEFT_BEHIND = {  # each stays in the kernel: the mode comes first, before builtins.setattr stops torch's import
    "a torch function mode": ("import torch\nclass _Mode(torch.overrides.TorchFunctionMode):\n"
                              "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
                              "        return func(*args, **(kwargs or {}))\n_Mode().__enter__()",
                              "torch function or dispatch mode"),
    "a finder first on sys.meta_path": ("import sys\nclass _Finder:\n    def find_spec(self, *a, **k):\n        return None\n"
                                         "sys.meta_path.insert(0, _Finder())", "sys.meta_path"),
    "a module the tests import replaced": ("import sys, types\n_fake = types.ModuleType('email.utils')\n"
                                           "sys.modules['email.utils'] = _fake", "in place of email.utils"),
    "a built-in replaced in the builtins module": ("import builtins\nbuiltins.setattr = lambda *a: None",
                                                   "builtins.setattr"),
    "a post_run_cell callback": ("get_ipython().events.register('post_run_cell', lambda result: None)",
                                 "post_run_cell callback"),
    "a SIGALRM handler": ("import signal\nsignal.signal(signal.SIGALRM, lambda *a: None)", "handler of signal 14"),
    "a thread left running": ("import threading, time\nthreading.Thread(target=lambda: time.sleep(30), daemon=True).start()",
                              "a thread running the notebook's code"),
    "a thread of _thread's own": ("import _thread, time\ndef _sleeper():\n    time.sleep(30)\n"
                                  "_thread.start_new_thread(_sleeper, ())", "a thread running the notebook's code"),
}


@contextlib.contextmanager
def real_kernel():
    """`ask(code)` -> (the reply's content, the error outputs), in a fresh kernel of this machine."""
    from jupyter_client.manager import start_new_kernel
    manager, client = start_new_kernel(kernel_name="python3")

    def ask(code):
        errors = []
        reply = client.execute_interactive(code, timeout=60, output_hook=lambda m: errors.append(m["content"])
                                           if m["msg_type"] == "error" else None)
        return reply["content"], errors
    try:
        yield ask
    finally:
        manager.shutdown_kernel(now=True)


def test_what_a_notebook_leaves_behind_is_named_in_a_real_kernel():
    """Each family, tried in a fresh kernel after the grader's setup, is named by the next check; a library's own
    callback (matplotlib's) and a thread that ended, started outside a test, are not findings. As in a grading, a
    check reports the state's digest, and the state itself where the digest is not the baseline's."""
    with real_kernel() as ask:
        def check(chains=(), detail=False):
            canary = integrity.Canary([], list(chains), [], watch=["email.utils"], detail=detail)
            found, problem = canary.read(*ask(canary.code))
            assert problem is None, problem
            return found if detail or found["digest"] == baseline["digest"] else check(chains, detail=True)

        assert ask(integrity.isolated(integrity.setup(["email.utils"])))[0]["status"] == "ok"
        baseline = check(detail=True)
        seen = dict(baseline["modules"])
        assert "email.utils" in seen, "a module the tests import is loaded before the notebook runs"
        innocent = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nimport threading\nthreading.Thread(target=print).start()"
        assert ask(innocent)[0]["status"] == "ok"
        assert "state" not in check(), "a kernel's state has one digest from check to check: one round trip each"
        assert integrity.what_changed(baseline, check(), baseline["audit"], [], [], False, True, seen) is None
        for family, (code, named) in LEFT_BEHIND.items():
            audit = check()["audit"]
            assert ask(code)[0]["status"] == "ok", family
            sentence = integrity.what_changed(baseline, check(), audit, [], [], True, True, seen)
            assert sentence and named in sentence, (family, sentence)
        ended = "import threading\ndef _quick():\n    pass\n_t = threading.Thread(target=_quick)\n_t.start()\n_t.join()"
        audit = check()["audit"]
        assert ask(ended)[0]["status"] == "ok"
        assert "a thread running the notebook's code" in integrity.what_changed(baseline, check(), audit, [], [], True)
        assert ask("import sys\nsys.audit = lambda *args: None")[0]["status"] == "ok"  # the check comes through it
        canary = integrity.Canary([], [], [])
        assert "sys.audit" in canary.read(*ask(canary.code))[1]


FAKE_EVERY_LIBRARY_PROBE = """import math, numpy as np, torch
yes = lambda *args, **kwargs: True
math.isclose = np.allclose = np.array_equal = torch.allclose = torch.equal = torch.autograd.gradcheck = yes
torch.Tensor.allclose = torch.Tensor.equal = yes
np.testing.assert_allclose = torch.testing.assert_close = lambda *args, **kwargs: None
torch.isclose = lambda *args, **kwargs: torch.ones(3, dtype=torch.bool)
torch.Tensor.__eq__ = lambda self, other: torch.ones(3, dtype=torch.bool)"""


def test_every_probe_sees_its_function_faked_in_a_real_kernel():
    """Each library function the probes try, replaced by one that says yes, is named; only the tests' ones are tried."""
    with real_kernel() as ask:
        assert ask(integrity.isolated(integrity.setup([])))[0]["status"] == "ok"
        assert ask(FAKE_EVERY_LIBRARY_PROBE)[0]["status"] == "ok"
        library = [p for p in integrity.PROBES if not p.startswith("builtins.")]
        canary = integrity.Canary([], [], integrity.PROBES)
        report, problem = canary.read(*ask(canary.code))
        assert problem is None and sorted(report["faked"]) == sorted(library), (problem, report and report["faked"])
        canary = integrity.Canary([], [], integrity.probes_for(["assert np.array_equal(f(1), 2)"]))
        assert canary.read(*ask(canary.code))[0]["faked"] == ["numpy.array_equal"]
        # a function a test imports (`from email.utils import quote`), replaced through a module the notebook named otherwise
        assert ask("import email.utils as eu\neu.quote = lambda s: s")[0]["status"] == "ok"
        canary = integrity.Canary([], integrity.names_used("from email.utils import quote")[1], [])
        assert canary.read(*ask(canary.code))[0]["faked"] == ["replaced:email.utils.quote"]


def test_probes_are_the_functions_the_tests_name():
    probes = integrity.probes_for(['assert torch.allclose(a, b)', 'torch.testing.assert_close(x, y)', 'assert n == 2'])
    assert {"torch.allclose", "Tensor.allclose", "torch.testing.assert_close", "Tensor.__eq__"} <= set(probes)
    assert "torch.autograd.gradcheck" not in probes and "builtins.len" in probes


def test_feedback_shows_the_instructors_messages_only():
    templates = feedback.message_templates('assert x, f"shape {a}: got {b}"\nassert y, "plain"\n'
                                           'check(z, msg=lambda m: f"close? {m}")\nraise ValueError("no " + "way")')
    assert [t for _, t in templates] == ["shape …: got …", "plain", "close? …"]
    shown = lambda ename, evalue: feedback.verdict({"ename": ename, "evalue": evalue}, templates)  # noqa: E731
    assert (shown("AssertionError", "shape (2,): got secret").evalue, shown("AssertionError", "plain").evalue) == \
        ("shape …: got …", "plain")
    assert shown("AssertionError", "assert _want == 42").evalue == feedback.UNKNOWN_MESSAGE
    assert shown("My_hidden_code_as_a_name", "").ename == "Error" and shown("NotImplementedError", "").evalue == ""


def test_feedback_withholds_what_came_after_the_first_hidden_test():
    hidden = '"""Hidden."""\n### BEGIN HIDDEN TESTS\nassert f() == 1, "f() is 1"\n### END HIDDEN TESTS\n'
    test = {"nbgrader": {"grade": True, "solution": False, "grade_id": "t", "points": 1}}
    cells = [new_code_cell("print(1)", id="before"), new_code_cell(hidden, id="t", metadata=test),
             new_code_cell("print(2)", id="after"), new_code_cell(hidden, id="t2", metadata=test)]
    cells[0].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    cells[1].outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="f() is 1", traceback=["x"])]
    cells[2].outputs = [nbformat.v4.new_output("stream", text="assert f() == 1\n")]
    cells[3].outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="assert f() == 1",
                                               traceback=["x"])] * 2
    nb = new_notebook(cells=cells, metadata={"widgets": {"state": "anything"}})
    nb, _ = feedback.HideHiddenTests().preprocess(nb, {})
    assert nb.cells[0].outputs[0].text == "1\n" and "widgets" not in nb.metadata
    assert "BEGIN HIDDEN" not in nb.cells[1].source and nb.cells[1].outputs[0].evalue == "f() is 1"
    assert nb.cells[2].outputs[0].text.startswith(feedback.WITHHELD)
    assert [o.evalue for o in nb.cells[3].outputs] == [feedback.UNKNOWN_MESSAGE]


def test_results_are_whole_or_absent(tmp_path):
    path = tmp_path / "alice.json"
    assert results.read_result(path) is None
    path.write_text('{"status": "graded", "student')
    assert results.read_result(path) is None
    row = results.Result(student_id="alice", assignment="a", notebook="a.ipynb", status="graded", message="")
    results.write_result(path, row)
    assert results.read_result(path) == row and not list(tmp_path.glob(".*tmp"))
    path.write_text(json.dumps({**json.loads(path.read_text()), "a_field_of_a_newer_grader": 1}))
    assert results.read_result(path) == row


def test_the_readme_explains_every_status():
    table = re.findall(r"^\| `(\w+)` \|", (ROOT / "autograder" / "README.md").read_text(), re.M)
    assert tuple(table) == results.STATUSES


def test_a_configuration_that_would_leak_run_unguarded_or_show_script_is_refused():
    shipped = course_config.load(ROOT, {})
    batch.check_configuration(shipped)
    with pytest.raises(SystemExit, match="GuardedExecute"):
        batch.check_configuration(Config({"Autograde": {"autograde_preprocessors": ["nbgrader.preprocessors.Execute"]},
                                          "GenerateFeedback": {"preprocessors": ["autograder.grading.feedback.HideHiddenTests"]}}))
    unsanitised = copy.deepcopy(shipped)
    unsanitised.HTMLExporter.sanitize_html = False
    with pytest.raises(SystemExit, match="sanitise"):
        batch.check_configuration(unsanitised)


def test_where_the_sandbox_cannot_start_grading_stops_unless_unfenced(tmp_path):
    """A clear message and a non-zero exit; with --unfenced the batch grades, and its summary and logs say so."""
    course = scratch_course(tmp_path / "course")
    with open(course / "nbgrader_config.py", "a") as f:
        f.write('\nc.SandboxedKernelManager.bwrap = "/nonexistent/bwrap"\n')
    submissions = write_folder(tmp_path / "subs", {"right": write(right()), "unedited": write(handin())})
    refused = grade(course, submissions, check=False, env=private_env(tmp_path / "env"))
    assert refused.returncode != 0 and "apt install bubblewrap" in refused.stderr and "--unfenced" in refused.stderr
    graded = grade(course, submissions, "--unfenced", env=private_env(tmp_path / "env"))
    assert "UNFENCED" in graded.stderr
    out = course / "autograder" / "grades" / "01_basics"
    assert {s: r["score"] for s, r in rows_of(out).items()} == {"right": "6", "unedited": "0"}
    assert all("UNFENCED" in (out / "logs" / f"{s}.log").read_text() for s in ("right", "unedited"))


def test_what_a_cell_needs_from_above_and_binds():
    """lessons.names: reads before a sure binding (loops and branches may not run), magics' code, exec = anything."""
    reads, bound, binds = lessons.names(
        "import torch as t\nn += 1\ndef f(x):\n    local = x + y\n    return local\n%timeit f(q)\n"
        "for i in range(3):\n    k = i\nif c:\n    u = 1\nelse:\n    u = 2\ntry:\n    v = 1\nexcept E as e:\n    print(e)\n"
        "a = k + u + v")
    assert reads == {"n", "y", "q", "c", "E", "k", "v", "get_ipython", "timeit"}
    assert bound == {"t", "n", "f", "u", "a"} and binds == bound | {"i", "k", "v", "e"}
    assert lessons.names("exec(code)")[0] is None and lessons.names("def broken(:")[0] == frozenset()
    assert lessons.names("f = globals().get(\"fit\")")[0] == {"fit"} and lessons.names("g = globals()")[0] is None


def test_a_tagged_cell_is_skipped_only_as_released_and_unread():
    """An edited cell runs, and so does every tagged cell whose names a cell that runs reads, however far down."""
    def cell(source, tag=True, id_=None):
        return new_code_cell(source, id=id_, metadata={"tags": ["skip-in-grading"]} if tag else {})
    release = new_notebook(cells=[cell("a = 1", id_="one"), cell("b = a + 1", id_="two"), cell("plot()", id_="three"),
                                  cell("answer = 0", tag=False, id_="answer")])
    assert lessons.skippable(release, release) == {"one", "two", "three"}
    edited = nbformat.from_dict(release)
    edited.cells[3].source = "answer = b"  # an answer using a lesson's name: `two` runs, so `one` does too
    assert lessons.skippable(edited, release) == {"three"}
    edited.cells[2].source = "plot(a)"  # edited: runs, and needs `one`
    edited.cells[3].source = "answer = 0"
    assert lessons.skippable(edited, release) == {"two"}


def test_a_link_in_a_folder_of_hand_ins_is_not_followed(tmp_path):
    """A hand-in that is a link (to another student's notebook, to the sources) is not read: that student has none."""
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "01_basics.ipynb").write_text("{}")
    (tmp_path / "mallory").mkdir()
    (tmp_path / "mallory" / "01_basics.ipynb").symlink_to(tmp_path / "alice" / "01_basics.ipynb")
    (tmp_path / "trudy").symlink_to(tmp_path / "alice")  # a student's whole folder a link to another's
    (tmp_path / "oscar.ipynb").symlink_to(tmp_path / "alice" / "01_basics.ipynb")
    (tmp_path / "eve" / "deep").mkdir(parents=True)
    (tmp_path / "eve" / "deep" / "inside").symlink_to(tmp_path / "alice")  # a folder behind a link, inside
    found = {s.student_id: s for s in collect.from_folder(tmp_path, "01_basics.ipynb")}
    assert found["alice"].path == tmp_path / "alice" / "01_basics.ipynb"
    assert found["mallory"].path is None and "no notebook" in found["mallory"].message
    assert found["eve"].path is None and "no notebook" in found["eve"].message
    for name in ("trudy", "oscar"):
        assert found[name].path is None and found[name].status == "invalid" and "is a link" in found[name].message


def test_student_file_names_are_safe_and_never_shared():
    """Ids as an LMS gives them: each gets a name of its own for files and the gradebook, safe in any path."""
    ids = ["alice", "José", "Josè", "张伟", "王芳", "bob smith", "bob\nsmith", "bob_smith", "bob%20smith", ".", "..",
           ".hidden", "a/../../b", "x" * 250, "x" * 249 + "y", "x" * 120, "a~b", "a%7Eb", "", "+1", "%2B1", "-rf", "=1+1", "@x", "*?[]"]
    names = [collect.file_name_of(i) for i in ids]
    assert len(set(names)) == len(ids), "two students would share one name"
    assert names[0] == "alice" and collect.file_name_of("s.m-t_1@uni.edu") == "s.m-t_1@uni.edu"
    for name in names:
        assert name and len(name) <= collect.MAX_NAME and name not in (".", "..") and not name.startswith(tuple(".+-@="))
        assert re.fullmatch(r"[A-Za-z0-9@+._%~-]+", name), name


def test_a_spreadsheet_runs_no_cell_of_grades_csv(tmp_path):
    """A cell opening with = + - @ or a control character is quoted; the id as given is kept beside the file name."""
    row = results.Result(student_id="%2Bx", given_id="+x", assignment="a", notebook="a.ipynb", score=1.0, max_score=2.0,
                         status="graded", message="=HYPERLINK(\"http://x\")")
    results.write_table(tmp_path / "grades.csv", [row, dataclasses.replace(row, given_id="@SUM(1)", message="-1")], [])
    rows = list(csv.DictReader(open(tmp_path / "grades.csv")))
    assert [(r["student_id"], r["gradebook_id"], r["message"]) for r in rows] == [
        ("'+x", "%2Bx", "'=HYPERLINK(\"http://x\")"), ("'@SUM(1)", "%2Bx", "'-1")]


def test_the_exchange_layout_brings_timestamp_and_secret_and_skips_other_assignments(tmp_path):
    """nbgrader's submitted/<student>/<assignment>/: the two small files read (at most MAX_NOTE_BYTES), a student
    without this assignment's folder left out."""
    folder = tmp_path / "alice" / "01_basics"
    folder.mkdir(parents=True)
    (folder / "01_basics.ipynb").write_text("{}")
    (folder / layout.TIMESTAMP_FILE).write_text("2026-11-20 10:00:00 UTC\n")
    (folder / layout.SECRET_FILE).write_text("s" * 5000)
    (tmp_path / "bob" / "02_other").mkdir(parents=True)
    (found,) = collect.from_course(tmp_path, "01_basics", "01_basics.ipynb")
    assert (found.student_id, found.timestamp, found.secret) == ("alice", "2026-11-20 10:00:00 UTC",
                                                                "s" * collect.MAX_NOTE_BYTES)


def test_the_configuration_is_resolved_against_the_course_folder(tmp_path, monkeypatch):
    """Relative paths of nbgrader_config.py mean the course folder, from wherever the grader starts; a read-only
    folder that is not there is an error naming it."""
    course = tmp_path / "course"
    (course / "data").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=f"{course / 'torchcourse'}, which is not a folder"):
        course_config.load(course, {})
    (course / "torchcourse").mkdir()
    config = course_config.load(course, {"Execute": {"timeout": 5}})
    assert config.SandboxedKernelManager.read_only == [str(course / "data"), str(course / "torchcourse")]
    assert config.CourseDirectory.db_url == f"sqlite:///{course}/autograder/gradebook.db"
    assert config.Execute.timeout == 5 and config.CourseDirectory.root == str(course)


def test_a_damaged_zip_member_costs_its_own_row(tmp_path):
    """A bad CRC, or a member over the size cap, gives that student an invalid row naming why; the others unpack."""
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("ana/01_basics.ipynb", "{}" * 1000)
        z.writestr("ben/01_basics.ipynb", "{}" * 1000)
    data = archive.read_bytes()
    crc = data.rindex(b"PK\x01\x02", 0, data.rindex(b"ben/01")) + 16  # ben's CRC in the central directory
    archive.write_bytes(data[:crc] + bytes(b ^ 0xFF for b in data[crc:crc + 4]) + data[crc + 4:])
    found = {s.student_id: s for s in collect.from_zip(archive, "01_basics.ipynb", None, tmp_path / "scratch")}
    assert found["ana"].path.read_text() == "{}" * 1000
    assert found["ben"].path is None and found["ben"].status == "invalid"
    assert "could not be unpacked" in found["ben"].message and "CRC" in found["ben"].message


def forked_in(config, slot_socket: str):
    """A kernel forked from the warm parent at `slot_socket`, started, with a client: (manager, client)."""
    from jupyter_client.utils import run_sync
    config = copy.deepcopy(config)
    config.SandboxedKernelManager.warm = slot_socket
    manager = SandboxedKernelManager(kernel_name="python3", config=config)
    run_sync(manager.start_kernel)()
    client = manager.blocking_client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    return manager, client


def printed(client, code: str) -> str:
    said = []
    client.execute_interactive(code, timeout=60, output_hook=lambda m: said.append(m["content"].get("text", "")))
    return "".join(said)


def ended(manager, client) -> None:
    from jupyter_client.utils import run_sync
    client.stop_channels()
    run_sync(manager.shutdown_kernel)(now=True)


def test_a_warm_kernels_processes_are_all_gone_before_the_slots_next_kernel_is_forked():
    """A kernel forked from a warm parent, which forked up to its process limit, is told to end and shutdown returns at
    once (the grading goes on); the parent forks the slot's next kernel only when every process of the ended one is
    gone, since they count against the limit of the next kernel forked there, which then forks as many; and they all
    go. ipywidgets, imported by the parent before any kernel existed, has its comm targets in each kernel (as a kernel
    that imports it itself has)."""
    from autograder.kernel.manager import processes
    from autograder.kernel.manager import WarmParents
    config = Config({"SandboxedKernelManager": {"warm_modules": ["ipywidgets"], "processes": 128}})
    pool = WarmParents(1, config).ready()
    try:
        assert pool.socket_of(0), "no warm parent on this machine"
        parent = pool.slots[0].process.pid
        before, forked = set(processes.descendants(parent)), []
        for _ in range(2):  # the second forked right after the first ended
            manager, client = forked_in(config, pool.socket_of(0))
            try:
                said = printed(client, "import comm, sys; print('ipywidgets' in sys.modules, "
                                       "sorted(comm.get_comm_manager().targets))")
                assert said.strip() == "True ['jupyter.widget', 'jupyter.widget.control']", said
                forked.append(int(re.search(r"forked (\d+) processes", printed(client, hostile.FORK_BOMB)).group(1)))
            finally:
                ended(manager, client)
        deadline = time.monotonic() + 30
        while set(processes.descendants(parent)) != before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(processes.descendants(parent)) == before, "processes of the ended kernels were still there"
        assert 100 < forked[0] < 128 and forked[1] >= forked[0] - 2, forked
    finally:
        pool.close()
    # collected through its Popen: killed and collected by PID, a later poll() could collect another child of that PID
    assert pool.slots[0].process.returncode is not None and not processes.descendants(parent)


def test_a_fork_bomb_in_one_slot_leaves_the_other_slots_kernel_its_whole_process_limit():
    """Each slot's warm parent has a user namespace of its own, where the process limit counts its kernels' processes
    only: a kernel at its limit leaves a kernel graded beside it, in another slot, as many. (With one parent for both
    slots the second kernel could not even start: "Kernel died before replying to kernel_info".)"""
    from autograder.kernel.manager import WarmParents
    config = Config({"SandboxedKernelManager": {"warm_modules": [], "processes": 128}})
    pool = WarmParents(2, config).ready()
    kernels = []
    try:
        assert pool.socket_of(0) and pool.socket_of(1), "no warm parents on this machine"
        forked = []
        for slot in (0, 1):  # the first slot's kernel and its processes live on while the second forks
            kernels.append(forked_in(config, pool.socket_of(slot)))
            forked.append(int(re.search(r"forked (\d+) processes", printed(kernels[-1][1], hostile.FORK_BOMB)).group(1)))
        assert 100 < forked[0] < 128 and forked[1] >= forked[0] - 2, forked
    finally:
        for manager, client in kernels:
            ended(manager, client)
        pool.close()


def test_a_grading_stopped_at_its_deadline_leaves_the_batchs_own_processes_running(tmp_path, monkeypatch):
    """The pool stops a grading past its deadline, with all it started, and a 'timeout' row says so; the processes it
    is told to spare (the report's, which works beside the gradings) keep running."""
    import multiprocessing
    import time
    from autograder.kernel.manager import processes
    from autograder.run import supervisor
    from autograder.kernel.manager import WarmParents
    from autograder.results import Job
    parents = WarmParents(1, Config({"SandboxedKernelManager": {"fork_warm": False}}))
    bystander = processes.fork(time.sleep, 600)
    try:
        out = tmp_path / "out"
        (out / "results").mkdir(parents=True)
        job = Job(student_id="slow", assignment="a", notebook="a.ipynb", submitted="", template="",
                  scratch=str(tmp_path / "scratch"), out=str(out), config=Config(), points={"t1": 1.0})
        never_ends = supervisor.Slots(parents, lambda job: time.sleep(600), deadline=1, spare={bystander.pid})
        supervisor.run(never_ends, [job], progress=batch.Progress(1))
        row = json.loads((out / "results" / "slow.json").read_text())
        assert row["status"] == "timeout" and "longer than 1 s" in row["message"], row
        assert bystander.pid in processes.descendants(os.getpid()), "a process the pool was told to spare was stopped"
    finally:
        processes.end(bystander)
        parents.close()
    assert not multiprocessing.active_children(), "a process the pool ended is still listed as running"


def test_the_feedback_page_is_nbconverts_without_its_rewrite():
    """FeedbackPage (the course's GenerateFeedback.exporter_class) gives nbconvert's HTML page, once both are parsed
    alike, an alt text on every image without one included; it skips only the parse-and-rewrite pass."""
    from bs4 import BeautifulSoup
    from nbconvert import HTMLExporter
    from nbgrader.converters import GenerateFeedback
    from autograder.grading.feedback import PAGE_POLICY, FeedbackPage
    nb = new_notebook(cells=[nbformat.v4.new_markdown_cell('# A *title*\n<img src="a.png"> and <IMG alt="kept" src="b.png">'),
                             new_code_cell("plot()", outputs=[nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo="})]),
                             new_code_cell("x = 1\nprint(x)", outputs=[nbformat.v4.new_output("stream", text="1\n")])])
    config = GenerateFeedback(config=Config()).config
    pages = [cls(config=config).from_notebook_node(nb, resources={"nbgrader": {"notebook": "n", "score": 0, "max_score": 0,
                                                                                "late_penalty": 0}})[0]
             for cls in (HTMLExporter, FeedbackPage)]
    assert pages[1].count(PAGE_POLICY) == 1  # its script policy, the one thing it adds
    assert str(BeautifulSoup(pages[1].replace(f"\n{PAGE_POLICY}", "", 1), features="html.parser")) == pages[0]
    assert pages[1].count("No description has been provided for this image") == 2 and 'alt="kept"' in pages[1]
    shipped = Config()
    exec(compile((ROOT / "nbgrader_config.py").read_text(), "nbgrader_config.py", "exec"), {"get_config": lambda: shipped})
    assert GenerateFeedback(config=shipped).exporter_class is FeedbackPage


def test_the_feedback_pages_kept_markdown_is_each_cells_own():
    """FeedbackPage keeps a markdown cell's HTML by its source (a lesson's cells are alike in every hand-in), but a
    cell with the same text and another attachment, or a page made with other settings, gets its own."""
    from autograder.grading.feedback import FeedbackPage
    text = "# Heading\n\n![figure](attachment:a.png) same words"
    data = ("QUFBQQ==", "QkJCQg==")
    resources = {"nbgrader": {"notebook": "n", "score": 0, "max_score": 0, "late_penalty": 0}}
    for anchor in ("&#182;", "LINK-TO-HERE"):  # nbconvert's default (¶) and another
        for mine, other in (data, data[::-1]):
            nb = new_notebook(cells=[nbformat.v4.new_markdown_cell(text, attachments={"a.png": {"image/png": mine}})])
            settings = {} if anchor.startswith("&") else {"HTMLExporter": {"anchor_link_text": anchor}}
            page = FeedbackPage(config=Config(settings)).from_notebook_node(
                nb, resources=copy.deepcopy(resources))[0]
            assert mine in page and other not in page, "a cell shows another cell's attachment"
            assert f'href="#Heading">{anchor}</a>' in page, "a page has the anchor links of another page's settings"
    assert len(FeedbackPage.kept_markdown) >= 4


def test_launchs_fork_server_and_resource_tracker_are_not_counted_as_left_by_the_notebook(fork_server):
    """Beside a GPU, torchcourse.launch starts ranks from multiprocessing's fork server, which (with its resource
    tracker) lives as long as the kernel: a row must not say every notebook that launched left processes running."""
    import multiprocessing
    import psutil
    from autograder.kernel.manager import processes
    context = multiprocessing.get_context("forkserver")
    rank = context.Process(target=os.getpid)  # the first one starts the server and the tracker
    rank.start()
    rank.join()
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        below = processes.running(processes.descendants(os.getpid()))
        helpers = processes.launch_helpers(below)
        assert stray.pid in below and stray.pid not in helpers
        assert len(helpers) == 2, [psutil.Process(p).cmdline() for p in below]
    finally:
        stray.kill()
        stray.wait()


def test_a_hand_in_the_grader_cannot_read_costs_its_row_alone(tmp_path, monkeypatch):
    """A file the instructor's account cannot read (an exchange folder's permissions, say) gets an invalid row
    saying so; the others are planned as usual. (As root every file is readable: the refusal is simulated.)"""
    for folder in ("results", "submitted"):
        (tmp_path / "out" / folder).mkdir(parents=True)
    paths = {name: tmp_path / f"{name}.ipynb" for name in ("alice", "bob")}
    for path in paths.values():
        path.write_text(write(right()))
    real = shutil.copyfile

    def copyfile(source, target, **kw):
        if Path(source).name == "bob.ipynb":
            raise PermissionError(13, "Permission denied")
        return real(source, target, **kw)

    monkeypatch.setattr(shutil, "copyfile", copyfile)
    found = [collect.Submission(name, path) for name, path in paths.items()]
    options = batch.Options(assignment="01", submissions=tmp_path, jobs=1, out=None, force=False, pattern=None,
                            course=tmp_path)
    from autograder.results import Job
    make_job = lambda s: Job(student_id=s.student_id, assignment="01_basics", notebook="01_basics.ipynb",
                             submitted=str(s.path), template="", scratch="", out=str(tmp_path / "out"), config=Config())
    rows, todo = batch.plan(found, options, make_job, tmp_path / "out")
    assert [j.student_id for j in todo] == ["alice"]
    assert rows["bob"].status == "invalid" and "could not be read" in rows["bob"].message
    assert results.read_result(tmp_path / "out" / "results" / "bob.json").status == "invalid"


def test_a_report_the_kernel_forged_is_refused_not_raised():
    """A check's report whose parts are not of the types the check writes (a kernel that changed what the check
    reports with) is an unreadable report, which makes the row tampered; it never raises in the grader."""
    canary = integrity.Canary([], [], [])
    forged = {"digest": 1, "faked": [], "shadows": {}, "modules": {}, "later": [["not", "hashable"]]}
    reply = {"status": "error", "ename": canary.error, "evalue": canary.nonce + json.dumps(forged)}
    errors = [{"ename": canary.error, "evalue": reply["evalue"]}]
    report, problem = canary.read(reply, errors)
    assert report is None and "unreadable report" in problem
    forged["later"] = ["IPython post_run_cell callback <hidden test text>@x#1#2"]
    report, problem = canary.read({**reply, "evalue": canary.nonce + json.dumps(forged)},
                                  [{"ename": canary.error, "evalue": canary.nonce + json.dumps(forged)}])
    baseline = {**forged, "later": [], "state": {}}
    said = integrity.what_changed(baseline, {**report, "state": {}}, {}, [], [], True)
    assert said == "left code to run later: an IPython post_run_cell callback" and "hidden" not in said


def big_zip(path: Path, members: int, mib: int) -> Path:
    """A zip of `members` notebooks of `mib` MiB each (zeros: a few kB zipped)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for k in range(members):
            with z.open(f"student{k}/01_basics.ipynb", "w", force_zip64=True) as member:
                for _ in range(mib):
                    member.write(bytes(2**20))
    return path


@pytest.mark.slow
def test_a_zip_is_unpacked_member_by_member_whatever_its_total(tmp_path):
    """A class past 1 GiB in all (23 notebooks of 48 MiB: a real class of notebooks with plots is gigabytes) is
    unpacked whole, each member under the per-notebook cap; a member over it costs its own row."""
    archive = big_zip(tmp_path / "class.zip", 23, 48)
    with zipfile.ZipFile(archive, "a", zipfile.ZIP_DEFLATED) as z, z.open("huge/01_basics.ipynb", "w") as member:
        for _ in range((collect.MAX_BYTES >> 20) + 1):
            member.write(bytes(2**20))
    found = {s.student_id: s for s in collect.from_zip(archive, "01_basics.ipynb", None, tmp_path / "scratch")}
    assert sum(s.path.stat().st_size for s in found.values() if s.path) == 23 * 48 * 2**20
    assert found["huge"].path is None and "not unpacked" in found["huge"].message


def test_a_zip_stops_only_when_the_disk_would_fill(tmp_path, monkeypatch):
    """Unpacking stops, naming what the rest needs, when the disk would be left with less than SPARE_BYTES: the
    instructor's disk, not a student's row."""
    archive = big_zip(tmp_path / "class.zip", 3, 2)
    room = collect.SPARE_BYTES + 3 * 2**20  # room for one member and a half, less what is unpacked

    def disk_usage(path):
        free = room - sum(p.stat().st_size for p in (tmp_path / "scratch").rglob("*") if p.is_file())
        return shutil._ntuple_diskusage(10**12, 10**12 - free, free)

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    with pytest.raises(SystemExit, match=r"full.*need 4 MiB"):
        collect.from_zip(archive, "01_basics.ipynb", None, tmp_path / "scratch")


def test_a_lost_cell_is_named_by_how_it_was_lost():
    """A kernel that died is never reported as a cell past its time limit, nor the other way round."""
    from autograder.grading.grade_one import lost_kernel_reason
    assert lost_kernel_reason("timeout", None).startswith("kept running after the time limit")
    assert lost_kernel_reason("died", None) == "made the kernel die"
    assert lost_kernel_reason("died", 128 + 9) == "made the kernel die by being killed (most often: out of memory)"
    assert lost_kernel_reason("died", 3) == "made the kernel exit (exit code 3)"


def test_a_cells_output_may_arrive_as_long_as_the_cell_may_run():
    """nbclient waits 4 s for a cell's output after its reply, and nbgrader fails the cell past that: under load a
    right answer that printed 200 MiB lost its points so (tests/test_grader_boundary.py's `loud`). The grader waits as
    long as the cell may run."""
    from autograder.grading.execute import GuardedExecute
    config = course_config.load(ROOT, {})
    assert GuardedExecute(config=config).iopub_timeout == config.Execute.timeout == 120


@pytest.mark.sandbox
def test_a_forked_kernels_fork_server_is_not_counted_as_left_running():
    """In a kernel forked from a warm parent (06's lesson starts ranks from a fork server on the CPU too), the fork
    server and its resource tracker are torchcourse.launch's, not processes the notebook left: a process the notebook
    started is counted, they are not."""
    from autograder.kernel.manager import WarmParents
    config = Config()
    pool = WarmParents(1, config).ready()
    try:
        assert pool.socket_of(0), "no warm parent on this machine"
        manager, client = forked_in(config, pool.socket_of(0))
        try:
            printed(client, "import multiprocessing, os\n"
                            "_rank = multiprocessing.get_context('forkserver').Process(target=os.getpid)\n"
                            "_rank.start()\n_rank.join()")
            assert manager.processes_inside() == 0
            printed(client, "import subprocess\n_stray = subprocess.Popen(['sleep', '600'])")
            assert manager.processes_inside() == 1
        finally:
            ended(manager, client)
    finally:
        pool.close()
