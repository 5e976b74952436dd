"""Do the tests run as the instructor wrote them? The checks the grader sends around each test cell, and their verdict.

A notebook's code runs in the kernel that then runs its tests, so it can change how that kernel runs later cells:
input and AST transformers, a replaced run_cell or execute handler, a custom exception handler or showtraceback,
a trace or profile function, functions the tests call replaced or shadowed. Each check is a canary: a cell, sent
as test cells are sent, that must fail with a fresh random value, carrying a report of the kernel's state. If it
does not fail, fails otherwise, or its error does not reach the grader the way a failing test's would, or the state
differs from the kernel's state before the notebook ran, the tests from there on cannot be trusted. The check after a
test is the test cell's own last line (Canary.after): it runs in the test's own request, before anything the test left
to run later can run, and a test that passes is itself the canary (its error is the canary's, taken out of the cell's
outputs); after a test that failed, it is a cell of its own. The code the kernel runs is Python of its own in
in_kernel/: start.py once before the notebook's first cell (the set-up cell, `setup`; a kernel forked from a warm
parent runs it as it starts, `setup_parts`), check.py in each check.

These checks stop tampering in general, not an attack written against this file: code in the kernel sees every
check it is sent. What they do not cover is written down in README.md ("What the grader defends against").
"""

import ast
import functools
import json
import os
import random
import re
import secrets
import sys
from collections import Counter
from pathlib import Path

from .judge import as_graded
from .notebook import is_test

IN_KERNEL = Path(__file__).parent / "in_kernel"  # the code the kernel runs, as Python modules of their own


@functools.cache
def in_kernel(module: str) -> ast.Module:
    """A module of in_kernel/ as the kernel runs it: each `from .other import ...` replaced by the other's code (the
    kernel cannot import the grader's package, nor trust a module the notebook could replace), and without docstrings:
    the set-up cell carries it as text, which IPython tokenizes twice (1 ms more for the docstrings and comments)."""
    tree = ast.parse((IN_KERNEL / f"{module}.py").read_text())
    tree.body = inlined(tree.body, {module})
    return tree


def inlined(body: list[ast.stmt], seen: set[str]) -> list[ast.stmt]:
    """`body` with each `from .other import ...` replaced by the other's statements, each module's once."""
    found = []
    for node in without_docstring(body):
        if not (isinstance(node, ast.ImportFrom) and node.level == 1):
            found.append(node)
        elif node.module not in seen:
            seen.add(node.module)
            found += inlined(ast.parse((IN_KERNEL / f"{node.module}.py").read_text()).body, seen)
    return found


def without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    """A module's or a function's statements without its docstring, nor those of the functions and classes in it."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            node.body = without_docstring(node.body)
    docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
        and isinstance(body[0].value.value, str)
    return body[docstring:] or [ast.Pass()]


# Each runs in a namespace of its own, which nothing of the notebook's reaches, and ends in a call of its module's
# function: get_ipython (IPython's built-in), PARAMETERS (the check's cell's, `raising`) and CLOCK (the set-up's hook's)
# exist only there.
CHECK = ast.unparse(in_kernel("check")) + "\nEXCEPTION = canary(get_ipython(), PARAMETERS, CLOCK)\n"
START = ast.unparse(in_kernel("start")) + "\n"


def setup(preload: list[str]) -> str:
    """The set-up cell's code (in_kernel/start.py): the hook, with CHECK compiled once, then the modules `preload`."""
    return f"{START}start(get_ipython(), {CHECK!r}, {list(preload)!r})\n"


def setup_parts(preload: list[str]) -> dict:
    """The set-up's parts, for a forked kernel that runs them as it starts (warm.set_up): start.py's code, which defines
    `start`, the check's code, and the modules to import."""
    return {"start": START, "check": CHECK, "modules": list(preload)}


def isolated(code: str) -> str:
    """A cell that runs `code` in a namespace of its own, leaving nothing in the notebook's."""
    return f"exec(compile({code!r}, '<autograder>', 'exec'), {{}})"


def raising(parameters: dict) -> str:
    """A cell that runs CHECK, as the set-up cell compiled it, with `parameters` (in_kernel/check.py's), then raises the
    EXCEPTION it made. Raised from the cell itself, the traceback IPython formats has one frame. The parameters come as
    one string of JSON: IPython tokenizes each cell twice, 0.7 ms for their Python literals, 0.2 ms for the string."""
    return ("raise (lambda g: (__import__('sys').audit('autograder.check', g), exec(g.pop('CODE'), g), "
            f"g['EXCEPTION'])[2])({{'PARAMETERS': {json.dumps(parameters)!r}}})")


PLAIN_TRACEBACKS = "--InteractiveShell.xmode=Plain"  # how a grading's kernel shows errors (execute.py)


def own_line(traceback, nonce: str) -> bool:
    """Whether a check's error, as the kernel showed it (IPython's plain traceback, PLAIN_TRACEBACKS: a heading, one
    entry per frame with the line it ran, the error), was raised in one frame, the cell's, by the check's own line (it
    holds the check's `nonce`): at the top level, after the test's last statement (Canary.after). Raised from a
    function the test called (an answer that read the check's line from `In` and raised its error, to end the test
    early as if it had passed), it has the caller's frame, at one of the test's lines, and its own. (The line's
    number is not compared: IPython drops a cell's leading blank lines before it numbers them.)"""
    return isinstance(traceback, list) and len(traceback) == 3 and isinstance(traceback[1], str) \
        and nonce in re.sub(r"\x1b\[[0-9;]*m", "", traceback[1])


# A check that raised in the kernel (out of threads, say): its report says so, and the grader asks again
FAILED = "the grader's check failed in the kernel"
CANARIES = ("ValueError", "RuntimeError", "TypeError", "LookupError", "ArithmeticError", "OSError")


def probed_by(check: ast.Module) -> tuple[str, ...]:
    """The functions a check tries, by name: the keys of the questions its `questions` asks, in their order."""
    asks = next(node for node in check.body if isinstance(node, ast.FunctionDef) and node.name == "questions")
    keys = [key for node in ast.walk(asks) if isinstance(node, ast.Dict) for key in node.keys]
    return tuple(key.value for key in sorted(keys, key=lambda key: (key.lineno, key.col_offset)))


PROBES = probed_by(in_kernel("check"))


def probes_for(sources: list[str]) -> list[str]:
    """The probes worth running for tests with these sources: the built-ins, and each function a test names."""
    words = set(re.findall(r"\w+", "\n".join(sources))) | ({"__eq__"} if any("==" in s for s in sources) else set())
    return [p for p in PROBES if p.startswith("builtins.") or p.rsplit(".", 1)[-1] in words]


@functools.lru_cache(maxsize=4096)
def parsed(source: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[tuple[str, str, str], ...]]:
    """A test cell's global names read, attribute chains read, modules imported, and the names it binds by importing
    from a module, each (name, module, attribute): `from torchcourse.testing import expect` binds ("expect",
    "torchcourse.testing", "expect"). Kept: every hand-in of a batch has the same test cells, read before and after
    each check (5 ms each for 07's, 0.3 s a hand-in), and a grading's process inherits what the batch's process read
    before it forked (grade_one.warm_up)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return (), (), (), ()
    names = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)})
    chains, imports, bound = set(), set(), set()
    for node in ast.walk(tree):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if parts and isinstance(node, ast.Name):
            chains.add(".".join([node.id, *reversed(parts)]))
        elif isinstance(node, ast.ImportFrom) and node.level == 0:  # `from torchcourse.testing import refused`
            chains |= {f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*"}
        if isinstance(node, ast.Import):
            imports |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imports.add(node.module)
            bound |= {(a.asname or a.name, node.module, a.name) for a in node.names if a.name != "*"}
    longest = sorted(c for c in chains if not any(other.startswith(c + ".") for other in chains))
    return tuple(names), tuple(longest), tuple(sorted(imports)), tuple(sorted(bound))


def names_used(source: str) -> tuple[list[str], list[str]]:
    """Global names a test cell reads, and the attribute chains it reads from them or imports (`torch.testing.assert_close`)."""
    names, chains, _, _ = parsed(source)
    return list(names), list(chains)


def bound_by_import(source: str) -> list[list[str]]:
    """The names a test cell binds by importing them from a module, each [name, module, attribute]."""
    return [list(entry) for entry in parsed(source)[3]]


def preload(sources: list[str]) -> list[str]:
    """Modules worth importing before the notebook runs, so that the checks know the real ones: the course's own and
    the standard library's that the tests import or read from (not torch's: it loads as the notebook chooses)."""
    found = set()
    for source in sources:
        names, _, imports, _ = parsed(source)
        found |= set(imports) | {name for name in names if name in sys.stdlib_module_names}
    return sorted(m for m in found if m.split(".")[0] == "torchcourse" or m.split(".")[0] in sys.stdlib_module_names)


def tests_read(nb) -> tuple[list[str], list[str]]:
    """A notebook's test cells as the execute step reads them, each kept per source (parsed, judge.as_graded): the
    names each check compares, each test as the kernel gets it; and the functions worth probing, the modules to
    preload. The batch's process reads its release's tests once (grade_one.warm_up); every grading it forks finds them
    read."""
    sources = [cell.source for cell in nb.cells if is_test(cell)]
    for source in sources:
        names_used(source)
        as_graded(source)
    return probes_for(sources), preload(sources)


def prefixes(chains: list[str]) -> set[str]:
    """`a.b.c` -> {`a.b`, `a.b.c`}: the attributes a chain reads."""
    return {".".join(c.split(".")[:k]) for c in chains for k in range(2, c.count(".") + 2)}


class Canary:
    """One check: the code to send, and what its answer must be. `names` None: report every shadowed built-in."""

    def __init__(self, names: list[str] | None = None, chains: list[str] = (), probes: list[str] = PROBES,
                 watch: list[str] = (), detail: bool = False, imported: list[list[str]] = ()):
        self.nonce, self.error, self.detail = secrets.token_hex(12), random.choice(CANARIES), detail
        modules = sorted(prefixes(chains) | {c.split(".")[0] for c in chains} | set(names or ()) | set(watch))
        self.parameters = dict(NONCE=self.nonce, ERROR=self.error, NAMES=names, CHAINS=list(chains),
                               PROBED=sorted(probes), MODULES=modules, DETAIL=detail,
                               IMPORTED=[list(i) for i in imported])  # in_kernel/check.py's
        self.code = raising(self.parameters)

    def after(self, source: str) -> str | None:
        """A test cell's `source` ending in this check: a new last line, so that the test's lines keep their numbers
        (the test's last expression is no longer last, and displays nothing), indented as the cell's lines are (IPython
        takes their common indent off). Reached only where the test passed. None for a cell IPython does not run as
        Python (a cell magic's): its check is a cell of its own."""
        if source.lstrip().startswith("%%"):
            return None
        margin = os.path.commonprefix([line[:len(line) - len(line.lstrip())] for line in source.splitlines()
                                       if line.strip()])
        return f"{source}\n{margin}{self.code}\n"

    def raised(self, reply: dict | None) -> bool:
        """Whether the request's `reply` is this check's error: a test cell ending in it (`after`) ran to its end."""
        evalue = (reply or {}).get("evalue")
        return (reply or {}).get("ename") == self.error and isinstance(evalue, str) and evalue.startswith(self.nonce)

    def taken_out(self, outputs: list) -> list:
        """A cell's `outputs` without this check's error: what the test itself showed."""
        return [o for o in outputs if not (o.get("output_type") == "error" and self.raised(o))]

    def read(self, reply: dict | None, errors: list[dict]) -> tuple[dict | None, str | None]:
        """The kernel's report, or None and why the check failed. `errors`: the error outputs the check produced."""
        if reply is None:
            return None, "the kernel did not answer the grader's check"
        if reply.get("status") == "ok":
            return None, ("a cell that must fail passed: the kernel no longer runs the code it is sent as written "
                          "(an input or AST transformer, or a replaced run_cell or execute handler?)")
        evalue = reply.get("evalue", "")
        if not self.raised(reply):
            return None, ("the kernel reported another error than the one raised: the code it is sent is changed (or "
                          "the check compiled before the notebook ran, or sys.audit), or its errors are")
        shown = next((e for e in errors if e.get("ename") == self.error and e.get("evalue") == evalue), None)
        if shown is None:
            return None, ("errors no longer reach the grader as test failures do: the kernel's error display was "
                          "replaced (showtraceback, a custom exception handler, the session that sends them?)")
        if not own_line(shown.get("traceback"), self.nonce):
            return None, ("the check's error was raised by code the cell called, not by the check's own line: code that "
                          "ends a test early and has it pass")
        try:
            report = json.loads(evalue[len(self.nonce):])
            assert isinstance(report.get("seconds"), float) and report["seconds"] >= 0
            if set(report) == {"failed", "seconds"} and isinstance(report["failed"], str):
                return None, FAILED
            assert isinstance(report.get("digest"), int) and isinstance(report.get("faked"), list)
            assert isinstance(report.get("state"), dict) if self.detail else "state" not in report
            assert isinstance(report.get("shadows"), dict) and isinstance(report.get("modules"), dict)
            assert isinstance(report.get("later"), list) and isinstance(report.get("audit", {}), dict)
            assert isinstance(report.get("course"), dict) and all(isinstance(x, int) for x in report["course"].values())
            # every part the grader compares or counts is of the type the check writes, or the report is not its own
            assert all(isinstance(x, str) for x in [*report["later"], *report["faked"], *report["modules"],
                                                    *report["course"]])
            assert all(isinstance(x, int) for x in [*report["modules"].values(), *report.get("audit", {}).values()])
            return report, None
        except (ValueError, AssertionError, AttributeError):
            return None, "the grader's check gave an unreadable report"


IPYTHON_EVENTS = ("pre_execute", "pre_run_cell", "post_execute", "post_run_cell", "shell_initialized")
LATER_KINDS = ("a gc callback", "a thread running the notebook's code", "an active torch function or dispatch mode",
               "an event loop callback", "an event loop of a kind of its own", "an asyncio task")


def later_kind(entry) -> str:
    """What kind of code a check's entry of `later` names, in the grader's words: the entry's own text (a function's
    name, a thread's) is the kernel's to choose, and could carry what it read of a hidden test."""
    entry = entry if isinstance(entry, str) else ""
    event = re.match(r"IPython (\w+) callback ", entry)
    if event:
        return f"an IPython {event[1]} callback" if event[1] in IPYTHON_EVENTS else "an IPython callback"
    signal = re.match(r"a handler of signal (\d{1,2}) ", entry)
    if signal:
        return f"a handler of signal {int(signal[1])}"
    return next((kind for kind in LATER_KINDS if entry.startswith(kind)), "code of the notebook's own")


def what_changed(baseline: dict, report: dict, audit_before: dict, names: list[str], chains: list[str],
                 after_test: bool, name_them: bool = True, modules_seen: dict | None = None,
                 course_seen: dict | None = None) -> str | None:
    """A sentence naming what the notebook changed in the kernel since `baseline`, or None if nothing that matters.

    `baseline`: the report of the check run before the notebook's first cell. `audit_before`: the audit counts at
    the previous check: a trace or profile function set and removed since then counts when a test ran in between
    (`after_test`); the kernel's own code swapped, an audit hook added or a thread started to run the notebook's
    code count always. `names` and `chains`: what the next test cell reads.
    `modules_seen`: each module's identity when a check first saw it (another one in its place is a replacement);
    `course_seen`: each of the course's modules' contents when a check first saw them (the tests' own are loaded before
    the notebook runs: anything set in them since is the notebook's).
    The sentence is made of names the grader knows (the report comes from the kernel) and may reach the student's
    feedback: with `name_them` False (a hidden test's check) the names read from the test's code are only counted.
    """
    found = []
    if "state" in report:  # baseline's keys only
        changed = sorted(k for k in baseline["state"] if report["state"].get(k) != baseline["state"][k])
    elif report["digest"] == baseline["digest"]:
        changed = []
    else:
        raise ValueError("the state changed: compare a report made with detail=True")
    if changed:
        found.append(f"replaced {', '.join(changed)}")
    audit = report.get("audit", {})
    always = ("thread", "audithook", "code")  # nothing a notebook does needs these: counted wherever they happen
    kinds = ("trace", "profile", "monitoring", *always) if after_test else always
    set_between = sorted(kind for kind in kinds if audit.get(kind, 0) > audit_before.get(kind, 0))
    if set_between:
        words = {"trace": "a trace function", "profile": "a profile function", "monitoring": "a sys.monitoring tool",
                 "thread": "a thread running the notebook's code", "audithook": "an audit hook",
                 "code": "the code of the kernel's own functions"}
        found.append(f"set {', '.join(words[k] for k in set_between)}")
    known = set(baseline["modules"]) | set(names) | prefixes(chains) | {c.split(".")[0] for c in chains}
    swapped = [n for n, i in report["modules"].items() if (modules_seen or {}).get(n, i) != i]
    if swapped:  # named where the grader asked for them; a name the kernel reported alone is counted, never quoted
        named, others = sorted(n for n in swapped if n in known), sum(n not in known for n in swapped)
        found.append("put other modules in place of "
                     + ", ".join(named + ([f"{others} other module{'s' if others > 1 else ''}"] if others else [])))
    changed = [n for n, digest in report["course"].items() if (course_seen or {}).get(n, digest) != digest]
    if changed:  # named where the grader asked for them, as modules are
        named, others = sorted(n for n in changed if n in known), sum(n not in known for n in changed)
        found.append("changed the contents of the course's own "
                     + ", ".join(named + ([f"{others} other module{'s' if others > 1 else ''}"] if others else [])))
    left = Counter(later_kind(entry) for entry in set(report["later"]) - set(baseline.get("later", [])))
    if left:
        found.append("left code to run later: " + ", ".join(f"{kind}" + (f" ({n})" if n > 1 else "")
                                                             for kind, n in sorted(left.items())))
    faked = sorted({p for p in report["faked"] if p in PROBES})
    if faked:
        found.append(f"replaced functions the tests rely on: {', '.join(faked)}")
    shadows = report.get("shadows", {})
    used = [f"{n} (shadowed by the notebook)" for n in names if n in shadows and shadows[n] != baseline["shadows"].get(n)]
    used += [f"{n} (not the module it names)" for n in names if f"module:{n}" in report["faked"]]
    used += [f"{c} (replaced by the notebook's own code)" for c in sorted(prefixes(chains))
             if f"replaced:{c}" in report["faked"]]
    used += [f"{n} (no longer what the test imported)" for n in names if f"rebound:{n}" in report["faked"]]
    if used:
        found.append(f"replaced what this test uses: {', '.join(used)}" if name_them else
                     f"replaced {len(used)} name{'s' if len(used) > 1 else ''} this hidden test uses with the "
                     "notebook's own")
    return "; ".join(found) or None
