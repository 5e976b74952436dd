"""The code the grader runs inside a student's kernel (autograder/grading/in_kernel/), as code: its functions on examples, and
the text integrity.py sends, run here without a kernel. The checks in real kernels: test_grading_units.py."""

import ast
import functools
import json
import math
import subprocess
import sys
import time
import types

import pytest

from autograder.grading import integrity
from autograder.grading.in_kernel import check, notebooks_own
from course import ROOT


def own_function(space: dict, source: str = "def f(*args):\n    return args"):
    """A function as a notebook's cell defines it: its globals are the notebook's namespace `space`."""
    exec(compile(source, "/tmp/ipykernel_1/123.py", "exec"), space)
    return space["f"]


def test_the_kernel_gets_each_module_with_its_siblings_code_in_place_of_their_import():
    """In the kernel the package cannot be imported: what integrity.py sends imports nothing relative, and defines each
    function of the module and of the siblings it imports, without their docstrings, and without annotations."""
    def functions(*trees):
        return {node.name for tree in trees for node in tree.body if isinstance(node, ast.FunctionDef)}
    read = {name: ast.parse((integrity.IN_KERNEL / f"{name}.py").read_text())
            for name in ("check", "start", "notebooks_own")}
    for text, made_of in ((integrity.CHECK, ("check", "notebooks_own")),
                          (integrity.START, ("start", "notebooks_own"))):
        tree = ast.parse(text)
        assert not [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level]
        assert functions(tree) == functions(*(read[name] for name in made_of))
        assert not [node for node in ast.walk(tree) if isinstance(node, (ast.Module, ast.FunctionDef))
                    and ast.get_docstring(node) is not None]
        assert not [node for node in ast.walk(tree) if isinstance(node, ast.arg) and node.annotation
                    or isinstance(node, ast.FunctionDef) and node.returns or isinstance(node, ast.AnnAssign)], \
            "nothing evaluated in the kernel beyond what the check does"


def test_notebooks_own_tells_the_notebooks_code_from_a_librarys():
    space = {}
    f = own_function(space)
    assert notebooks_own.notebooks_own(f, space)
    assert notebooks_own.notebooks_own(functools.partial(f, 1), space), "a partial of the notebook's function"
    assert notebooks_own.notebooks_own(types.MethodType(f, object()), space), "a method of it"
    assert notebooks_own.notebooks_own(eval("lambda: 0", {}), space), "compiled from a string: no file on disk"
    assert notebooks_own.notebooks_own(exec, space), "a built-in standing in for code"
    assert not notebooks_own.notebooks_own(json.dumps, space) and not notebooks_own.notebooks_own(math.sqrt, space)
    assert not notebooks_own.notebooks_own(functools.partial(json.dumps, 1), space)
    Callable = type("Callable", (), {"__call__": f, "__module__": "builtins"})
    assert notebooks_own.notebooks_own(Callable(), space), "an instance whose __call__ is the notebook's"
    assert notebooks_own.notebooks_own(type("Mine", (), {"__module__": "__main__"})(), space), "a class of the notebook"
    assert notebooks_own.unwrapped(functools.partial(types.MethodType(f, 1))) is f


def test_probes_are_the_questions_the_check_asks():
    """integrity.PROBES, read from check.py's code, names each function the check tries where every library is loaded,
    and with the real libraries each question is answered right."""
    pytest.importorskip("numpy")
    pytest.importorskip("torch")
    assert tuple(check.questions(set(integrity.PROBES))) == integrity.PROBES
    assert check.faked_functions(set(integrity.PROBES)) == []
    assert list(check.questions({"builtins.len"})) == [p for p in integrity.PROBES if p.startswith(("builtins.", "math."))]


def test_a_function_faked_answers_its_question_wrong(monkeypatch):
    """Each library function the probes try, replaced by one that says yes, is named; a probe not asked for is not."""
    np, torch = pytest.importorskip("numpy"), pytest.importorskip("torch")
    yes = lambda *args, **kwargs: True  # noqa: E731
    for holder, name in ((math, "isclose"), (np, "allclose"), (np, "array_equal"), (torch, "allclose"),
                         (torch, "equal"), (torch.autograd, "gradcheck"), (torch.Tensor, "allclose"),
                         (torch.Tensor, "equal")):
        monkeypatch.setattr(holder, name, yes)
    monkeypatch.setattr(np.testing, "assert_allclose", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.testing, "assert_close", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch, "isclose", lambda *args, **kwargs: torch.ones(3, dtype=torch.bool))
    monkeypatch.setattr(torch.Tensor, "__eq__", lambda self, other: torch.ones(3, dtype=torch.bool))
    faked = check.faked_functions(set(integrity.PROBES))
    assert sorted(faked) == sorted(p for p in integrity.PROBES if not p.startswith("builtins."))
    assert check.faked_functions({"numpy.array_equal", "builtins.len"}) == ["numpy.array_equal"]


def shell(user_ns: dict) -> types.SimpleNamespace:
    """What the check reads of IPython's shell, for a kernel-free run (a real InteractiveShell takes over sys.modules'
    __main__); the kernel's own parts are absent, as getattr allows."""
    return types.SimpleNamespace(
        user_ns=user_ns, events=types.SimpleNamespace(callbacks={"pre_run_cell": [], "post_run_cell": []}),
        compile=types.SimpleNamespace(ast_parse=ast.parse), displayhook=object(), input_transformers_cleanup=[],
        input_transformers_post=[], ast_transformers=[], input_transformer_manager=object(), custom_exceptions=(),
        run_cell=print, showtraceback=print)


def ask(canary: integrity.Canary, ip) -> tuple[dict | None, str | None]:
    """The check's code as the kernel gets it (integrity.CHECK), run with `canary`'s parameters and read by it."""
    space = {"PARAMETERS": json.dumps(canary.parameters), "get_ipython": lambda: ip, "CLOCK": time.perf_counter}
    exec(compile(integrity.CHECK, "<autograder>", "exec"), space)
    error = {"status": "error", "ename": type(space["EXCEPTION"]).__name__, "evalue": str(space["EXCEPTION"]),
             "traceback": ["Traceback (most recent call last):\n", f"  Cell In[1], line 1\n    {canary.code}\n", "Error\n"]}
    return canary.read(error, [error])


def test_the_checks_report_names_what_the_notebook_changed():
    """A kernel-free run of integrity.CHECK on a stand-in shell: a report the grader reads, whose digest follows the
    state, and which names a shadowed built-in, a swapped module, an attribute replaced, a callback left behind."""
    namespace = {"json": json}
    ip = shell(namespace)
    baseline, problem = ask(integrity.Canary(detail=True), ip)
    assert problem is None and baseline["state"]["shell.run_cell"].startswith("print@")
    assert ask(integrity.Canary(), ip)[0]["digest"] == baseline["digest"]
    ip.run_cell = own_function(namespace)
    changed = ask(integrity.Canary(detail=True), ip)[0]
    assert changed["digest"] != baseline["digest"] and changed["state"]["shell.run_cell"].startswith("f@/tmp/ipykernel")
    namespace.update(abs=own_function(namespace), math=types.ModuleType("math"))
    ip.events.callbacks["post_run_cell"].append(own_function(namespace))
    json_module = types.ModuleType("json")  # as the test's `json.dumps` reads it, replaced by the notebook's
    json_module.dumps = own_function(namespace)
    namespace["json"] = json_module
    found, problem = ask(integrity.Canary(["abs", "len", "math"], ["json.dumps"], [], watch=["json"]), ip)
    assert problem is None, problem
    assert list(found["shadows"]) == ["abs"] and found["faked"] == ["module:math", "replaced:json.dumps"]
    assert [entry.split(" f@")[0] for entry in found["later"]] == ["IPython post_run_cell callback"]
    assert found["modules"]["json"] == id(json)


def test_the_set_up_cells_code_hooks_what_a_cell_does_and_hands_out_the_check():
    """integrity.setup's code, run without a kernel in a process of its own (an audit hook cannot be removed): it
    imports the modules asked for; threads started to run the notebook's code (not a library's) and a trace function
    set and removed are counted; the check it compiled runs."""
    script = f"""
import builtins, json, sys, threading, types
sys.path.insert(0, {str(ROOT / "tests")!r})
from test_in_kernel import integrity, own_function, shell
space = {{}}
builtins.get_ipython = lambda: shell(space)
exec(compile(integrity.setup(["email.utils"]), "<autograder>", "exec"), {{}})
assert "email.utils" in sys.modules and set(space) == set(), "nothing in the notebook's namespace"
for target in (own_function(space), json.dumps):  # as _thread and as threading start them (not audited before 3.12)
    sys.audit("_thread.start_new_thread", target, (), {{}})
    sys.audit("_thread.start_new_thread", threading.Thread(target=target)._bootstrap, (), {{}})
sys.settrace(lambda *args: None)
sys.settrace(None)
counts, g = {{}}, {{"PARAMETERS": json.dumps(integrity.Canary().parameters)}}
sys.audit("autograder.audit", counts)
sys.audit("autograder.check", g)
exec(g.pop("CODE"), g)
print(json.dumps([counts, type(g["EXCEPTION"]).__name__]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    counts, error = json.loads(done.stdout.splitlines()[-1])
    assert counts == {"thread": 2, "trace": 2} and error in integrity.CANARIES


def test_a_builtin_in_place_of_what_a_test_reads_is_named_and_a_frozen_modules_function_is_not():
    """`statistics.fmean = min` puts no code of the notebook's in place of the reference a hidden test reads, but a
    built-in of `builtins` standing in for it; `os.path.join` (a frozen module's function, with no file) is a
    library's."""
    import os
    import statistics

    fake = types.ModuleType("statistics")
    fake.fmean, fake.median = min, statistics.median
    space = {"statistics": fake, "os": os}
    assert check.replaced(space, ["statistics.fmean", "statistics.median", "os.path.join"]) == ["replaced:statistics.fmean"]


def test_anything_set_in_the_courses_own_modules_is_named(monkeypatch):
    """What the tests import from the course's modules (refused, expect, their helpers) is loaded before the notebook
    runs; anything the notebook sets there since, in a module or in a class of it, is named by the next check,
    not a submodule imported later."""
    import contextlib

    import torchcourse.testing

    ip = shell({})
    read = lambda: ask(integrity.Canary(detail=True, watch=["torchcourse.testing", "torchcourse"]), ip)
    baseline, problem = read()
    assert problem is None and {"torchcourse", "torchcourse.testing"} <= set(baseline["course"])
    seen = dict(baseline["course"])
    monkeypatch.setattr("torchcourse.data", types.ModuleType("torchcourse.data"), raising=False)  # a submodule
    assert integrity.what_changed(baseline, read()[0], {}, [], [], True, course_seen=seen) is None
    for owner, name, value in ((torchcourse.testing, "refused", contextlib.nullcontext),
                               (torchcourse.testing.AllReduceRecorder, "__call__", print),
                               (torchcourse.testing, "added", min)):
        with monkeypatch.context() as patched:
            patched.setattr(owner, name, value, raising=False)
            sentence = integrity.what_changed(baseline, read()[0], {}, [], ["torchcourse.testing.refused"], True,
                                              course_seen=seen)
            assert sentence == "changed the contents of the course's own torchcourse.testing", (name, sentence)
    assert integrity.what_changed(baseline, read()[0], {}, [], [], True, course_seen=seen) is None


def test_a_name_the_test_imported_and_the_notebook_bound_again_is_named():
    """A test reads its helpers (no_autograd, expect) by the names its import bound, after calling the answer: the
    check after it names each that is no longer the module's (one left unbound is the test's own NameError)."""
    import contextlib

    import torchcourse.testing

    imported = integrity.bound_by_import("from torchcourse.testing import expect, no_autograd\n"
                                         "from torchcourse.testing import refused as r\nimport torch")
    assert imported == [["expect", "torchcourse.testing", "expect"], ["no_autograd", "torchcourse.testing", "no_autograd"],
                        ["r", "torchcourse.testing", "refused"]]
    space = {"no_autograd": contextlib.nullcontext, "expect": torchcourse.testing.expect}
    assert check.rebound(space, imported) == ["rebound:no_autograd"]
    baseline = {"digest": 0, "faked": [], "shadows": {}, "modules": {}, "course": {}, "later": []}
    said = integrity.what_changed(baseline, {**baseline, "faked": check.rebound(space, imported)}, {},
                                  ["expect", "no_autograd"], [], True)
    assert said == "replaced what this test uses: no_autograd (no longer what the test imported)"


def test_the_check_reads_the_notebooks_objects_without_running_their_code():
    """An object of the notebook's can answer isinstance with a `__class__` property (and claim to be a library's
    function), a partial subclass can compute `func`, a class can name its module with a str that answers == itself:
    the check reads types and dicts, so none of that code runs, and each is still the notebook's own."""
    import functools

    from autograder.grading.in_kernel import notebooks_own

    ran = []

    class Claims:
        __module__ = "__main__"

        @property
        def __class__(self):
            ran.append("__class__")
            return types.FunctionType

    class Partial(functools.partial):
        __module__ = "__main__"

        @property
        def func(self):
            ran.append("func")
            return print

    class Equal(str):
        def __eq__(self, other):
            ran.append("__eq__")
            return True

        __hash__ = str.__hash__

    lying = type("Lying", (), {"__module__": Equal("torch.nn")})
    space = {}
    assert notebooks_own.notebooks_own(Claims(), space) and check.own(Claims(), space)
    assert notebooks_own.notebooks_own(Partial(print), space)
    assert check.parts(Partial(print)) and not check.own(lying(), space)
    assert not notebooks_own.notebooks_own(lying(), space)
    module = types.ModuleType("torchcourse.fake")
    module.thing, module.Kind = Claims(), lying
    check.contents("torchcourse.fake", module)
    assert ran == [], ran
