"""The grading wing one module at a time: the integrity checks' verdicts, feedback, lessons, execute."""

import contextlib
import copy
import json
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from traitlets.config import Config

from autograder.grading import feedback, lessons
from autograder.grading import integrity
from autograder import config as course_config
from course import ROOT


def shown(canary) -> list[str]:
    """A check's error as the kernel shows it: IPython's plain traceback of a raise in the check's own line."""
    return ["Traceback (most recent call last):\n", f"  Cell In[3], line 9\n    {canary.code}\n", "ValueError: ...\n"]


def report(state=None, faked=(), audit=None, shadows=None, modules=None, later=(), digest=0, course=None) -> dict:
    return {"state": state or {"shell.run_cell": "a"}, "faked": list(faked), "audit": audit or {},
            "shadows": shadows or {}, "modules": modules or {}, "later": list(later), "digest": digest,
            "course": course or {}, "seconds": 0.001}


def test_a_canary_tells_what_went_wrong():
    canary = integrity.Canary(detail=True)
    def answer(canary, report):  # the reply, and the error shown
        error = {"status": "error", "ename": canary.error, "evalue": canary.nonce + json.dumps(report),
                 "traceback": shown(canary)}
        return error, [error]
    good = answer(canary, report())[0]
    assert canary.read(good, [good]) == (report(), None)
    assert "must fail" in canary.read({"status": "ok"}, [])[1]
    assert "errors no longer reach" in canary.read(good, [])[1]
    assert "another error" in canary.read({**good, "evalue": "other"}, [good])[1]
    called = ["  Cell In[3], line 2\n    expect('a', f(1))\n", "  Cell In[3], line 4 in f\n    raise ...\n"]
    deeper = {**good, "traceback": [good["traceback"][0], *called, good["traceback"][-1]]}
    assert "not by the check's own line" in canary.read(good, [deeper])[1], "raised by a function the cell called"
    elsewhere = {**good, "traceback": [good["traceback"][0], called[0], good["traceback"][-1]]}
    assert "not by the check's own line" in canary.read(good, [elsewhere])[1], "raised at another line of the cell"
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
    manager, client = start_new_kernel(kernel_name="python3", extra_arguments=[integrity.PLAIN_TRACEBACKS])

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



# What a notebook can leave waiting on the kernel's event loops, each tried in a kernel of its own
ON_EVENT_LOOPS = {
    "a callback that schedules itself again": "def again():\n    asyncio.get_running_loop().call_later(0.01, again)\n"
                                              "asyncio.get_running_loop().call_soon(again)",
    "tornado's PeriodicCallback": "import tornado.ioloop\ntornado.ioloop.PeriodicCallback(lambda: None, 5).start()",
    "a built-in to put a function back": "asyncio.get_running_loop().call_later(60, setattr, math, 'isclose', math.isclose)",
    "a task": "async def waits():\n    await asyncio.sleep(60)\nasyncio.ensure_future(waits())",
    "another thread's loop": "_there = get_ipython().kernel.control_thread.io_loop\n"
                             "def again_there():\n    _there.call_later(0.01, again_there)\n_there.add_callback(again_there)",
}


@pytest.mark.parametrize("family", ON_EVENT_LOOPS)
def test_what_a_notebook_leaves_on_an_event_loop_is_named_in_a_real_kernel(family):
    """After the grader's setup, a fresh kernel's loops hold nothing of a notebook's; each family is then named by
    the next check, by its kind."""
    with real_kernel() as ask:
        def later():
            canary = integrity.Canary([], [], [])
            found, problem = canary.read(*ask(canary.code))
            assert problem is None, problem
            return [integrity.later_kind(entry) for entry in found["later"]]

        assert ask(integrity.isolated(integrity.setup([])) + "\nimport asyncio, math")[0]["status"] == "ok"
        assert later() == [], "a fresh kernel"
        assert ask(ON_EVENT_LOOPS[family])[0]["status"] == "ok"
        found = later()
        assert found and set(found) <= {"an event loop callback", "an asyncio task"}, found

def test_a_callback_a_test_schedules_once_is_seen_by_the_check_that_ends_the_test_in_a_real_kernel():
    """An event loop callback the answer schedules once while a test runs (to undo what it changed) runs after the
    test's request and before a check in a request of its own: the check that is the test's own last line
    (Canary.after) names it; a check of its own, as a control, is blind to it. A test that passes is itself the
    canary: its reply is the check's error, which the cell's outputs then leave out; a test that fails never reaches
    its last line."""
    once = ("import asyncio, math\n_real = math.isclose\nmath.isclose = lambda *args, **kwargs: True\n"
            "def _undo():\n    math.isclose = _real\nasyncio.get_running_loop().call_soon(_undo)")
    with real_kernel() as ask:
        def check():
            canary = integrity.Canary([], [], [])
            found, problem = canary.read(*ask(canary.code))
            assert problem is None, problem
            return found

        assert ask(integrity.isolated(integrity.setup([])))[0]["status"] == "ok"
        baseline = check()
        assert baseline["later"] == [] and baseline["seconds"] > 0
        assert ask(once)[0]["status"] == "ok"
        assert integrity.what_changed(baseline, check(), baseline["audit"], [], [], True) is None, "the control"
        canary = integrity.Canary([], [], [])
        reply, errors = ask(canary.after(once))
        assert canary.raised(reply) and canary.taken_out([{"output_type": "error", **e} for e in errors]) == []
        found, problem = canary.read(reply, errors)
        assert problem is None, problem
        said = integrity.what_changed(baseline, found, baseline["audit"], [], [], True)
        assert said == "left code to run later: an event loop callback", said
        canary = integrity.Canary([], [], [])
        reply, errors = ask(canary.after("assert 1 == 2, 'the test failed'"))
        assert not canary.raised(reply) and [e["ename"] for e in errors] == ["AssertionError"]


def test_a_checks_error_counts_only_from_its_own_line_in_a_real_kernel():
    """The check that ends a test reports only from its own line: so it does in a test cell that starts with blank
    lines (IPython drops them before it numbers the lines), and an answer the test calls that raises the check's error
    itself (read from `In`, and genuine: the kernel's state is clean), to skip the rest of the test, is found: the
    values course's hostile answer (tests/hostile.py)."""
    import hostile

    with real_kernel() as ask:
        assert ask(integrity.isolated(integrity.setup([])) + "\n" + hostile.ENDS_TEST_EARLY)[0]["status"] == "ok"
        canary = integrity.Canary([], [], [])
        reply, errors = ask(canary.after("\n\n# a test that starts with blank lines\nx = 1"))
        assert canary.raised(reply) and canary.read(reply, errors)[1] is None
        canary = integrity.Canary([], [], [])
        reply, errors = ask(canary.after("count_positive([1, -2])\nassert False, 'the rest of the test'"))
        assert canary.raised(reply), "the answer raised the check's own error"
        assert "not by the check's own line" in canary.read(reply, errors)[1]


def test_any_traceback_a_kernel_shows_is_read_without_raising_and_only_one_shape_is_the_checks_own():
    """Generated tracebacks (Hypothesis), as a kernel may send any JSON in an error's place: `own_line` never raises,
    and says yes only to a heading, one frame that holds the check's nonce, and the error."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    nonce = integrity.Canary().nonce
    item = st.one_of(st.text(max_size=20), st.just(f"  Cell In[2], line 4\n    raise ... {nonce} ...\n"),
                     st.integers(), st.none(), st.lists(st.text(max_size=3), max_size=2))

    @settings(max_examples=300, deadline=None)
    @given(st.one_of(st.lists(item, max_size=5), st.none(), st.text(max_size=5), st.dictionaries(st.text(), item)))
    def check(traceback):
        mine = integrity.own_line(traceback, nonce)
        assert mine == (type(traceback) is list and len(traceback) == 3 and isinstance(traceback[1], str)
                        and nonce in traceback[1]), traceback
    check()


def test_a_check_that_fails_in_the_kernel_still_raises_its_error_and_says_so():
    """At a test's end, a check that raised would read as the test's own error: it raises the canary's error, whose
    report says only that it failed (the grader then checks again in a cell of its own), and a report that says so
    and more is unreadable."""
    canary = integrity.Canary([], [], [])
    for report, said in (({"failed": "RuntimeError", "seconds": 0.01}, integrity.FAILED),
                         ({"failed": "RuntimeError", "seconds": 0.01, "digest": 1}, "unreadable report"),
                         ({"failed": "RuntimeError"}, "unreadable report")):
        value = canary.nonce + json.dumps(report)
        found, problem = canary.read({"status": "error", "ename": canary.error, "evalue": value},
                                     [{"ename": canary.error, "evalue": value, "traceback": shown(canary)}])
        assert found is None and said in problem, (report, problem)


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


def test_a_report_the_kernel_forged_is_refused_not_raised():
    """A check's report whose parts are not of the types the check writes (a kernel that changed what the check
    reports with) is an unreadable report, which makes the row tampered; it never raises in the grader."""
    canary = integrity.Canary([], [], [])
    forged = {"digest": 1, "faked": [], "shadows": {}, "modules": {}, "course": {}, "later": [["not", "hashable"]],
              "seconds": 0.001}
    reply = {"status": "error", "ename": canary.error, "evalue": canary.nonce + json.dumps(forged)}
    errors = [{"ename": canary.error, "evalue": reply["evalue"], "traceback": shown(canary)}]
    report, problem = canary.read(reply, errors)
    assert report is None and "unreadable report" in problem
    forged["later"] = ["IPython post_run_cell callback <hidden test text>@x#1#2"]
    report, problem = canary.read({**reply, "evalue": canary.nonce + json.dumps(forged)},
                                  [{"ename": canary.error, "evalue": canary.nonce + json.dumps(forged),
                                    "traceback": shown(canary)}])
    baseline = {**forged, "later": [], "state": {}}
    said = integrity.what_changed(baseline, {**report, "state": {}}, {}, [], [], True)
    assert said == "left code to run later: an IPython post_run_cell callback" and "hidden" not in said


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


def test_checks_that_cannot_start_say_why_and_name_what_the_set_up_raised():
    """The set-up and the baseline check go in one request: where the set-up raised, the check never ran, and the
    error names both (a kernel that answered nothing is said too)."""
    import asyncio

    from autograder.grading.execute import GuardedExecute

    step = GuardedExecute()
    for reply, said in (({"status": "error", "ename": "NameError", "evalue": "name 'x' is not defined"},
                         "the set-up raised NameError: name 'x' is not defined"),
                        (None, "the kernel did not answer the grader's check")):
        async def ask(code, reply=reply):
            assert "start(get_ipython()," in code and code.rstrip().splitlines()[-1].startswith("raise ")
            return reply, []
        step._ask = ask
        with pytest.raises(RuntimeError, match="could not start in a fresh kernel") as raised:
            asyncio.run(step._start_checks())
        assert said in str(raised.value)


@pytest.mark.slow
def test_one_pass_in_memory_leaves_what_nbgraders_own_passes_from_the_files_leave(tmp_path):
    """grade_one.Autograded runs nbgrader's sanitize and autograde steps on the hand-in in memory, in one pass, and
    keeps the graded notebook; grade_one.Feedback makes the page from it. Graded with every test failing in place of
    the execute step (grade_one.TestsFailed, the batch's rehearsal: no kernel), on a gradebook holding the scratch
    student's submission made beforehand (grade_one.scratch_submission, as the batch's template has it): the autograded
    file, the gradebook's rows and the feedback page are those nbgrader's own Autograde (two passes, each reading the
    file, the submission made by it) and GenerateFeedback (reading autograded/) leave, and the notebook kept is the one
    written. Fails when nbgrader changes what its converters do around the steps."""
    from nbgrader.api import Gradebook
    from nbgrader.converters import Autograde, GenerateFeedback
    from nbgrader.coursedir import CourseDirectory

    from autograder import gradebook, layout
    from autograder.grading import grade_one
    from autograder.grading.notebook import Grading
    from autograder.results import Job
    from handins import ASSIGNMENT, NOTEBOOK, SECOND, scratch_course, source

    course = scratch_course(tmp_path / "course")
    config = course_config.load(course, {})
    template = tmp_path / "template"
    shutil.copytree(course / "solutions" / ASSIGNMENT, template / "source" / ASSIGNMENT)
    gradebook.generate_assignment(config, ASSIGNMENT, template, layout.scratch_gradebook(template), template / "release")
    nb = source()
    left = {}
    for way in ("nbgrader's", "ours"):
        if way == "ours":  # nbgrader's made the submission as it graded; ours finds it made, without scores
            grade_one.scratch_submission(template, ASSIGNMENT)
            with Gradebook(layout.scratch_gradebook(template)) as gb:
                made = gb.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, layout.SCRATCH_STUDENT).grades
                assert made and all(g.auto_score is None for g in made)
        job = Job(student_id="alice", assignment=ASSIGNMENT, notebook=NOTEBOOK, submitted="", template=str(template),
                  scratch=str(tmp_path / way), out=str(tmp_path / f"{way}-out"), config=config,
                  timestamp="2026-11-19 10:00:00.000000 UTC")
        root = grade_one.prepare(job, nb)
        settings = grade_one.as_if_tests_failed(grade_one.course_config(job, root))
        made = dict(coursedir=CourseDirectory(config=settings), config=settings)
        if way == "ours":
            converter = grade_one.Autograded(**made, grading=Grading(), notebook=nb)
            converter.start()
            grade_one.Feedback(**made, graded=converter.graded).start()
        else:
            Autograde(**made).start()
            GenerateFeedback(**made).start()
        graded = layout.in_scratch(root, "autograded", ASSIGNMENT, NOTEBOOK)
        page = layout.in_scratch(root, "feedback", ASSIGNMENT, Path(NOTEBOOK).with_suffix(".html").name)
        with Gradebook(layout.scratch_gradebook(root)) as gb:
            rows = {g.name: (g.auto_score, g.needs_manual_grade)
                    for g in gb.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, layout.SCRATCH_STUDENT).grades}
        left[way] = (graded.read_text(), page.read_text(), rows)
        if way == "ours":
            assert converter.graded == nbformat.read(graded, as_version=4), "the notebook kept is not the one written"
    assert left["ours"] == left["nbgrader's"]
    assert left["ours"][2][f"{SECOND}_hidden"] == (0, False) and "AssertionError" in left["ours"][1]


def test_any_report_a_kernel_forges_is_read_or_refused_and_never_quoted():
    """Generated reports (Hypothesis): any JSON the kernel puts after the nonce, what the notebook left to run later,
    the course modules' digests, the faked names and the check's own seconds included, is either refused as unreadable or read; the
    grader's sentence on a read one never raises and quotes none of the kernel's text."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    marker = "KERNEL-TEXT"
    text = st.text(max_size=12).map(lambda t: marker + t)
    json_value = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
                              lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                              max_leaves=12)
    fields = {"digest": st.integers(), "faked": st.lists(text | st.sampled_from(
                  ["rebound:expect", "replaced:torch.allclose", "module:math"]), max_size=3),
              "shadows": st.dictionaries(text | st.just("abs"), text, max_size=2),
              "modules": st.dictionaries(text | st.just("torchcourse.testing"), st.integers(), max_size=2),
              "course": st.dictionaries(text | st.just("torchcourse.testing"), st.integers(), max_size=2),
              "later": st.lists(text, max_size=3), "audit": st.dictionaries(text, st.integers(), max_size=2),
              "seconds": st.floats(min_value=0, max_value=10)}

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.fixed_dictionaries(fields), st.sampled_from([None, *fields, "failed"]), json_value)
    def check(forged, broken, junk):  # a well-formed report, or one with a field of any JSON (None: none at all)
        if broken is not None:
            forged.pop(broken, None) if junk is None else forged.update({broken: junk})
        canary = integrity.Canary(["abs", "expect"], ["torch.allclose"], [])
        value = canary.nonce + json.dumps(forged)
        report, problem = canary.read({"status": "error", "ename": canary.error, "evalue": value},
                                      [{"ename": canary.error, "evalue": value, "traceback": shown(canary)}])
        assert (report is None) != (problem is None)
        if report is None:
            return
        read.append(report)
        baseline = {"digest": 0, "faked": [], "shadows": {}, "modules": {}, "course": {}, "later": [], "state": {}}
        for name_them in (True, False):
            said = integrity.what_changed(baseline, {**report, "state": {}}, {}, ["abs", "expect"],
                                          ["torch.allclose"], True, name_them, {}, {"torchcourse.testing": 1})
            assert said is None or marker not in said, said
    read = []
    check()
    assert len(read) >= 20, "the generated reports reach the grader's sentence"


def test_what_the_check_at_a_tests_end_saw_counts_when_a_second_check_names_the_change():
    """Where the check that ends a test finds the state changed, a second check (in a cell of its own, after anything
    the test left to run later has run) names what changed; what the first listed as left to run later, or faked,
    still counts, though a callback has since run and undone it."""
    import asyncio

    from nbformat.v4 import new_code_cell, new_notebook

    from autograder.grading.execute import GuardedExecute

    step = GuardedExecute()
    step.nb = new_notebook(cells=[new_code_cell("assert f() == 1", metadata={"nbgrader": {
        "grade": True, "grade_id": "ex1_test", "points": 1, "solution": False, "locked": True}})])
    step.baseline = report(digest=0, state={"shell.run_cell": "a"})
    first = report(digest=1, later=["an event loop callback <lambda>@x#1#2"], faked=["builtins.abs"])

    async def detail(cells, detail, imported):  # the second check: the callback has run and put things back
        return report(digest=1, state={"shell.run_cell": "b"}), None

    step._report = detail
    assert not asyncio.run(step._trusted(step.nb.cells, 0, after_test=True, ran=(first, None)))
    said = step.tampered[1]
    assert "replaced shell.run_cell" in said and "left code to run later: an event loop callback" in said, said
    assert "replaced functions the tests rely on: builtins.abs" in said, said


def test_the_check_ending_any_test_that_passes_is_read_as_its_own_in_a_real_kernel():
    """Generated test cells (Hypothesis) that run without an error, however IPython reads their text (leading blank
    lines it drops, a leading indent it takes off, comments, docstrings, a line magic, no final newline): the check
    appended to each is raised by its own line and read, and the cell's outputs then hold no error. A cell magic's
    cell (IPython hands its text to the magic) gets a check of its own instead."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    line = st.sampled_from(["x = 1", "# a comment", '"""A docstring."""', "", "   ", "\t", "y = [1,\n     2]",
                            "if x:\n    z = 2", "%time w = 3", "def f():\n    return 4", "assert f() == 4",
                            "print('shown')", "x  # the last expression"])
    with real_kernel() as ask:
        assert ask(integrity.isolated(integrity.setup([])))[0]["status"] == "ok"
        assert ask("x = 1\ndef f():\n    return 4")[0]["status"] == "ok"  # what the lines read

        @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(st.lists(line, min_size=1, max_size=6), st.sampled_from(["", "  "]), st.sampled_from(["", "\n"]))
        def check(lines, indent, end):
            source = "\n".join(indent + piece.replace("\n", "\n" + indent) for piece in lines) + end
            canary = integrity.Canary([], [], [])
            reply, errors = ask(canary.after(source))
            assert canary.raised(reply), (source, reply)
            report, problem = canary.read(reply, errors)
            assert problem is None and report is not None, (source, problem)
            assert canary.taken_out([{"output_type": "error", **e} for e in errors]) == []
        check()
    assert integrity.Canary([], [], []).after("%%capture out\nx = 1") is None, "a cell magic's: a check of its own"
