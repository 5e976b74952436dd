"""Do the tests run as the instructor wrote them? The checks the grader sends around each test cell, and their verdict.

A notebook's code runs in the kernel that then runs its tests, so it can change how that kernel runs later cells:
input and AST transformers, a replaced run_cell or execute handler, a custom exception handler or showtraceback,
a trace or profile function, functions the tests call replaced or shadowed. Each check is a canary: a cell, sent
as test cells are sent, that must fail with a fresh random value, carrying a report of the kernel's state. If it
does not fail, fails otherwise, or its error does not reach the grader the way a failing test's would, or the state
differs from the kernel's state before the notebook ran, the tests from there on cannot be trusted.

These checks stop tampering in general, not an attack written against this file: code in the kernel sees every
check it is sent. What they do not cover is written down in README.md ("What the grader defends against").
"""

import ast
import functools
import json
import random
import re
import secrets
import sys
from collections import Counter

# Whether a callable was made by the notebook (defined in it, compiled from a string, or a built-in such as exec or
# setattr standing in for code) rather than by a library installed on disk: the callbacks, signal handlers and
# threads a notebook leaves are judged by it. `space`: the notebook's namespace. A library's own code passes.
NOTEBOOKS_OWN = r"""
import functools as _functools, os as _os, types as _types
def unwrapped(f):
    # the function behind partials and methods
    for _ in range(8):
        if isinstance(f, _functools.partial):
            f = f.func
        elif isinstance(f, (_types.MethodType, staticmethod, classmethod)):
            f = f.__func__
        else:
            break
    return f
def notebooks_own(f, space, depth=0):
    f = unwrapped(f)
    if isinstance(f, _types.FunctionType):
        path = f.__code__.co_filename
        return f.__globals__ is space or not _os.path.isfile(path) or "ipykernel_" in path
    if isinstance(f, (_types.BuiltinFunctionType, _types.BuiltinMethodType)):
        return getattr(getattr(f, "__self__", None), "__name__", None) == "builtins"
    if type.__dict__["__dict__"].__get__(type(f)).get("__module__") == "__main__":
        return True
    call = type.__dict__["__dict__"].__get__(type(f)).get("__call__") if depth == 0 else None
    return isinstance(call, _types.FunctionType) and notebooks_own(call, space, 1)
"""

# Run once in the fresh kernel, before the notebook's first cell: an audit hook (it cannot be removed) that counts
# trace and profile functions being set, code objects of the kernel's machinery being swapped, and threads started to
# run the notebook's own code, so that a hook set and removed, or a thread started and ended, within one test cell
# is still seen. `sys.audit("autograder.audit", d)` copies the counts into d; `sys.audit("autograder.check", d)` puts
# the check (CHECK, compiled here once: 4-5 ms a check otherwise) into d["CODE"]. Then the modules the tests import,
# so that the checks know them before the notebook could put others in their place (`setup`).
SETUP = NOTEBOOKS_OWN + r'''
import sys, threading
def _install(space, check):
    counts, watched = {}, {"sys.settrace": "trace", "sys.setprofile": "profile",
                           "sys.monitoring.register_callback": "monitoring", "sys.monitoring.use_tool_id": "monitoring"}
    machinery = ("IPython", "ipykernel", "jupyter_client", "zmq", "comm", "traitlets")
    def started(args, Thread=threading.Thread, own=notebooks_own):
        f = args[0] if args else None
        thread = getattr(f, "__self__", None)
        if isinstance(thread, Thread):  # threading's own start: what the thread object will run
            return any(g is not None and own(g, space) for g in
                       (getattr(thread, "_target", None), getattr(thread, "function", None), type(thread).run))
        return own(f, space)
    def hook(event, args, counts=counts, watched=watched, machinery=machinery):
        kind = watched.get(event)
        if kind is None and event == "object.__setattr__" and len(args) > 1 and args[1] == "__code__" \
                and str(getattr(args[0], "__module__", "")).startswith(machinery):
            kind = "code"
        if kind is None and event == "_thread.start_new_thread" and started(args):
            kind = "thread"
        if kind is None and event == "sys.addaudithook":  # a hook of the notebook's sees every cell run
            kind = "audithook"
        if kind is not None:
            counts[kind] = counts.get(kind, 0) + 1
        elif event == "autograder.audit" and args and isinstance(args[0], dict):
            args[0].update(counts)
        elif event == "autograder.check" and args and isinstance(args[0], dict):
            args[0]["CODE"] = check
    sys.addaudithook(hook)
_install(get_ipython().user_ns, compile(CHECK, "<autograder>", "exec"))
for _name in PRELOAD:
    try:
        __import__(_name)
    except Exception:  # the notebook's own import will say why
        pass
'''


def setup(preload: list[str]) -> str:
    """The SETUP cell, importing the modules in `preload` after the hook."""
    return f"PRELOAD, CHECK = {list(preload)!r}, {CHECK!r}\n{SETUP}"


# The kernel's state that decides how a cell runs and how its errors are reported: identities of these callables
# (their function and code objects), the transformer lists, and the hooks.
SHELL = ("run_cell", "run_cell_async", "_run_cell", "should_run_async", "transform_cell", "transform_ast",
         "run_ast_nodes", "run_code", "showtraceback", "_showtraceback", "showsyntaxerror", "get_exception_only",
         "set_custom_exc", "CustomTB", "ex", "ev")
KERNEL = ("do_execute", "execute_request", "dispatch_shell", "send_response", "interrupt_request")

# The check, compiled once by SETUP and run by each Canary's cell with its parameters as JSON in PARAMETERS: NONCE,
# ERROR (the name of the built-in exception to raise), NAMES, CHAINS, PROBED, MODULES, DETAIL (whether to report the
# state itself, not only its digest). Read here, by the json module the check reports with, not by the cell.
CHECK = f"SHELL, KERNEL = {SHELL!r}, {KERNEL!r}\n" + NOTEBOOKS_OWN + r'''
import builtins, json, math, re, signal, sys, threading, types
_p = json.loads(PARAMETERS)
NONCE, NAMES, CHAINS, DETAIL = _p["NONCE"], _p["NAMES"], _p["CHAINS"], _p["DETAIL"]
ERROR, PROBED, MODULES = builtins.__dict__[_p["ERROR"]], set(_p["PROBED"]), set(_p["MODULES"])
def who(thing):
    f = getattr(thing, "__func__", thing)
    code = getattr(f, "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    return f"{getattr(f, '__qualname__', type(f).__qualname__)}@{where}#{id(f)}#{id(code)}"
ip = get_ipython()
kernel = getattr(ip, "kernel", None)
state = {f"shell.{n}": who(getattr(ip, n, None)) for n in SHELL}
state.update({f"kernel.{n}": who(getattr(kernel, n, None)) for n in KERNEL})
state["kernel.shell_handlers['execute_request']"] = who(getattr(kernel, "shell_handlers", {}).get("execute_request"))
state["kernel.session.send"] = who(getattr(getattr(kernel, "session", None), "send", None))
state["shell.compile"] = who(ip.compile)
state["shell.compile.ast_parse"] = who(getattr(ip.compile, "ast_parse", None))
state["shell.displayhook.session.send"] = who(getattr(getattr(ip.displayhook, "session", None), "send", None))
state.update({f"shell.{n}": [who(t) for t in getattr(ip, n)] for n in
              ("input_transformers_cleanup", "input_transformers_post", "ast_transformers")})
state["shell.input_transformer_manager"] = who(ip.input_transformer_manager)
state["shell.custom_exceptions"] = repr(ip.custom_exceptions)
state.update({f"builtins.{n}": who(v) for n, v in vars(builtins).items() if callable(v)})  # replaced, not shadowed
state["sys.modules['builtins']"] = who(sys.modules.get("builtins"))
state["sys.meta_path"] = [who(f) for f in sys.meta_path]  # a finder put first could serve any module a test imports
state["sys.path_hooks"] = [who(f) for f in sys.path_hooks]
# (sys.modules holds 2,000 modules once torch is imported: looked through in C, 1 ms a check in Python)
modules = {n: id(m) for n in MODULES.union(filter(re.compile("torchcourse").match, list(sys.modules)))
           if (m := sys.modules.get(n)) is not None}
state["sys.gettrace()"] = repr(sys.gettrace())
state["sys.getprofile()"] = repr(sys.getprofile())
state["threading.gettrace()"] = repr(threading.gettrace())
state["threading.getprofile()"] = repr(threading.getprofile())
if hasattr(sys, "monitoring"):
    state["sys.monitoring tools"] = repr([sys.monitoring.get_tool(i) for i in range(6)])
audit = {}
sys.audit("autograder.audit", audit)

def raises(f, *a):
    try:
        f(*a)
    except AssertionError:
        return True
    return False
checks = {"builtins.isinstance": lambda: not builtins.isinstance(1, str), "builtins.len": lambda: builtins.len([0, 0]) == 2,
          "builtins.abs": lambda: builtins.abs(-1) == 1, "builtins.all": lambda: not builtins.all([False]),
          "builtins.any": lambda: not builtins.any([False]), "math.isclose": lambda: not math.isclose(0.0, 1.0)}
# Only what this notebook's tests call is probed: a warm kernel has numpy and torch imported before any notebook runs,
# and a first torch operation may start threads (which a kernel at its process limit cannot)
if "numpy" in sys.modules and any(p.startswith("numpy.") for p in PROBED):
    np = sys.modules["numpy"]
    checks.update({"numpy.allclose": lambda: not np.allclose(0.0, 1.0), "numpy.array_equal": lambda: not np.array_equal([0], [1]),
                   "numpy.testing.assert_allclose": lambda: raises(np.testing.assert_allclose, 0.0, 1.0)})
if "torch" in sys.modules and any(p.startswith(("torch.", "Tensor.")) for p in PROBED):
    torch = sys.modules["torch"]
    z, o = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    def wrong_gradient_passes():
        class Wrong(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * x
            @staticmethod
            def backward(ctx, g):
                return g
        return torch.autograd.gradcheck(Wrong.apply, (torch.ones(2, dtype=torch.float64, requires_grad=True),),
                                        raise_exception=False)
    checks.update({
        "torch.allclose": lambda: not torch.allclose(z, o), "torch.equal": lambda: not torch.equal(z, o),
        "torch.isclose": lambda: not bool(torch.isclose(z, o).any()), "Tensor.allclose": lambda: not z.allclose(o),
        "Tensor.__eq__": lambda: not bool((z == o).any()), "Tensor.equal": lambda: not z.equal(o),
        "torch.testing.assert_close": lambda: raises(torch.testing.assert_close, z, o),
        "torch.autograd.gradcheck": lambda: not wrong_gradient_passes()})
faked = []
for name, ok in checks.items():
    if name not in PROBED:  # only what this notebook's tests call: a first gradcheck imports sympy (0.5 s)
        continue
    try:
        good = ok()
    except Exception:
        good = False
    if good is not True:
        faked.append(name)
namespace = ip.user_ns
MISSING = object()
# What the notebook left to run later, which could undo what it changed before a check looks: its own IPython
# event callbacks, signal handlers and threads (named by the notebook's own code they run), and torch modes.
later = [f"IPython {event} callback {who(f)}" for event, fs in ip.events.callbacks.items() for f in fs
         if notebooks_own(f, namespace)]
later += [f"a gc callback {who(f)}" for f in __import__("gc").callbacks if notebooks_own(f, namespace)]
for number in signal.valid_signals():
    try:
        handler = signal.getsignal(number)
    except (ValueError, OSError):
        continue
    if callable(handler) and notebooks_own(handler, namespace):
        later.append(f"a handler of signal {int(number)} ({who(handler)})")
threads = {t.ident: t for t in threading.enumerate()}
for ident, frame in sys._current_frames().items():
    if ident == threading.get_ident():
        continue
    thread = threads.get(ident)
    runs = [getattr(thread, "_target", None), getattr(thread, "function", None), type(thread).run] if thread else []
    mine = any(f is not None and notebooks_own(f, namespace) for f in runs)
    while frame is not None and thread is None and not mine:  # a thread of _thread's own: the code on its stack
        path = frame.f_code.co_filename
        mine = frame.f_globals is namespace or not _os.path.isfile(path) or "ipykernel_" in path
        frame = frame.f_back
    if mine:
        later.append(f"a thread running the notebook's code ({getattr(thread, 'name', 'started with _thread')})")
if "torch" in sys.modules:
    torch_C = sys.modules["torch"]._C
    if torch_C._len_torch_function_stack() or torch_C._len_torch_dispatch_stack():
        later.append("an active torch function or dispatch mode")

def own(value):
    """The notebook's own code: a function defined in it (or a partial or method of one), one of its classes or their
    instances. Nothing of it runs: a student's object may do anything when asked for an attribute."""
    value = unwrapped(value)
    if isinstance(value, types.FunctionType):
        return value.__globals__ is namespace
    kind = value if isinstance(value, type) else type(value)
    return type.__dict__["__dict__"].__get__(kind).get("__module__") == "__main__"

def stored(holder, name):
    """An attribute as stored in a module or a library class (its MRO), without running any descriptor."""
    if isinstance(holder, types.ModuleType):
        return types.ModuleType.__dict__["__dict__"].__get__(holder).get(name, MISSING)
    for klass in type.__dict__["__mro__"].__get__(holder):
        found = type.__dict__["__dict__"].__get__(klass)
        if name in found:
            return found[name]
    return MISSING

# Names the next test cell uses (all built-in names, for the first check): a built-in shadowed by a callable, as
# reported to compare with a fresh kernel (IPython puts its own `open` into every namespace), and a module swapped.
shadows = {}
for name in NAMES if NAMES is not None else [n for n in vars(builtins) if not n.startswith("_")]:
    value = namespace.get(name, MISSING)
    if value is not MISSING and hasattr(builtins, name) and value is not getattr(builtins, name) and callable(value):
        shadows[name] = who(value)
    elif isinstance(value, types.ModuleType) and sys.modules.get(value.__name__) is not value:
        faked.append(f"module:{name}")
# Attributes the next test cell reads from a module or a library class (`torch.testing.assert_close`, `F.gelu`): none
# may be the notebook's own code.
for chain in CHAINS:
    root, *rest = chain.split(".")
    holder = namespace.get(root, MISSING)
    if holder is MISSING:  # a chain a test imports from (`from a.b import c`) starts at the imported module
        holder = sys.modules.get(root, MISSING)
    for k, part in enumerate(rest, 2):
        if not (isinstance(holder, types.ModuleType) or isinstance(holder, type) and not own(holder)):
            break
        holder = stored(holder, part)
        if holder is MISSING:
            break
        if own(holder):
            faked.append("replaced:" + ".".join(chain.split(".")[:k]))
            break
# The state (16 kB) only when asked for: its digest tells whether it changed (hash(): the same in one process)
found = {"digest": hash(json.dumps(state, sort_keys=True)), "audit": audit, "faked": faked, "shadows": shadows,
         "modules": modules, "later": later}
if DETAIL:
    found["state"] = state
EXCEPTION = ERROR(NONCE + json.dumps(found))
'''

def isolated(code: str) -> str:
    """A cell that runs `code` in a namespace of its own, leaving nothing in the notebook's."""
    return f"exec(compile({code!r}, '<autograder>', 'exec'), {{}})"


def raising(parameters: dict) -> str:
    """A cell that runs the check SETUP compiled, with `parameters`, then raises the EXCEPTION it made. Raised from the
    cell itself, the traceback IPython formats has one frame. The parameters come as one string of JSON: IPython
    tokenizes each cell twice, 0.7 ms for their Python literals, 0.2 ms for the string."""
    return ("raise (lambda g: (__import__('sys').audit('autograder.check', g), exec(g.pop('CODE'), g), "
            f"g['EXCEPTION'])[2])({{'PARAMETERS': {json.dumps(parameters)!r}}})")


CANARIES = ("ValueError", "RuntimeError", "TypeError", "LookupError", "ArithmeticError", "OSError")
PROBES = tuple(re.findall(r'"([\w.]+)": lambda', CHECK))  # the functions the check tries, by name


def probes_for(sources: list[str]) -> list[str]:
    """The probes worth running for tests with these sources: the built-ins, and each function a test names."""
    words = set(re.findall(r"\w+", "\n".join(sources))) | ({"__eq__"} if any("==" in s for s in sources) else set())
    return [p for p in PROBES if p.startswith("builtins.") or p.rsplit(".", 1)[-1] in words]


@functools.lru_cache(maxsize=4096)
def parsed(source: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """A test cell's global names read, attribute chains read, and modules imported. Kept: every hand-in of a batch
    has the same test cells, read before and after each check (5 ms each for 07's, 0.3 s a hand-in), and a grading's
    process inherits what the batch's process read before it forked (grade_one.warm_up)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return (), (), ()
    names = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)})
    chains, imports = set(), set()
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
    longest = sorted(c for c in chains if not any(other.startswith(c + ".") for other in chains))
    return tuple(names), tuple(longest), tuple(sorted(imports))


def names_used(source: str) -> tuple[list[str], list[str]]:
    """Global names a test cell reads, and the attribute chains it reads from them or imports (`torch.testing.assert_close`)."""
    names, chains, _ = parsed(source)
    return list(names), list(chains)


def preload(sources: list[str]) -> list[str]:
    """Modules worth importing before the notebook runs, so that the checks know the real ones: the course's own and
    the standard library's that the tests import or read from (not torch's: it loads as the notebook chooses)."""
    found = set()
    for source in sources:
        names, _, imports = parsed(source)
        found |= set(imports) | {name for name in names if name in sys.stdlib_module_names}
    return sorted(m for m in found if m.split(".")[0] == "torchcourse" or m.split(".")[0] in sys.stdlib_module_names)


def prefixes(chains: list[str]) -> set[str]:
    """`a.b.c` -> {`a.b`, `a.b.c`}: the attributes a chain reads."""
    return {".".join(c.split(".")[:k]) for c in chains for k in range(2, c.count(".") + 2)}


class Canary:
    """One check: the code to send, and what its answer must be. `names` None: report every shadowed built-in."""

    def __init__(self, names: list[str] | None = None, chains: list[str] = (), probes: list[str] = PROBES,
                 watch: list[str] = (), detail: bool = False):
        self.nonce, self.error, self.detail = secrets.token_hex(12), random.choice(CANARIES), detail
        modules = sorted(prefixes(chains) | {c.split(".")[0] for c in chains} | set(names or ()) | set(watch))
        self.code = raising(dict(NONCE=self.nonce, ERROR=self.error, NAMES=names, CHAINS=list(chains),
                                 PROBED=sorted(probes), MODULES=modules, DETAIL=detail))

    def read(self, reply: dict | None, errors: list[dict]) -> tuple[dict | None, str | None]:
        """The kernel's report, or None and why the check failed. `errors`: the error outputs the check produced."""
        if reply is None:
            return None, "the kernel did not answer the grader's check"
        if reply.get("status") == "ok":
            return None, ("a cell that must fail passed: the kernel no longer runs the code it is sent as written "
                          "(an input or AST transformer, or a replaced run_cell or execute handler?)")
        evalue = reply.get("evalue", "")
        if reply.get("ename") != self.error or not evalue.startswith(self.nonce):
            return None, ("the kernel reported another error than the one raised: the code it is sent is changed (or "
                          "the check compiled before the notebook ran, or sys.audit), or its errors are")
        if not any(e.get("ename") == self.error and e.get("evalue") == evalue for e in errors):
            return None, ("errors no longer reach the grader as test failures do: the kernel's error display was "
                          "replaced (showtraceback, a custom exception handler, the session that sends them?)")
        try:
            report = json.loads(evalue[len(self.nonce):])
            assert isinstance(report.get("digest"), int) and isinstance(report.get("faked"), list)
            assert isinstance(report.get("state"), dict) if self.detail else "state" not in report
            assert isinstance(report.get("shadows"), dict) and isinstance(report.get("modules"), dict)
            assert isinstance(report.get("later"), list) and isinstance(report.get("audit", {}), dict)
            # every part the grader compares or counts is of the type the check writes, or the report is not its own
            assert all(isinstance(x, str) for x in [*report["later"], *report["faked"], *report["modules"]])
            assert all(isinstance(x, int) for x in [*report["modules"].values(), *report.get("audit", {}).values()])
            return report, None
        except (ValueError, AssertionError, AttributeError):
            return None, "the grader's check gave an unreadable report"


IPYTHON_EVENTS = ("pre_execute", "pre_run_cell", "post_execute", "post_run_cell", "shell_initialized")
LATER_KINDS = ("a gc callback", "a thread running the notebook's code", "an active torch function or dispatch mode")


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
                 after_test: bool, name_them: bool = True, modules_seen: dict | None = None) -> str | None:
    """A sentence naming what the notebook changed in the kernel since `baseline`, or None if nothing that matters.

    `baseline`: the report of the check run before the notebook's first cell. `audit_before`: the audit counts at
    the previous check: a trace or profile function set and removed since then counts when a test ran in between
    (`after_test`); the kernel's own code swapped, an audit hook added or a thread started to run the notebook's
    code count always. `names` and `chains`: what the next test cell reads.
    `modules_seen`: each module's identity when a check first saw it (another one in its place is a replacement).
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
    if used:
        found.append(f"replaced what this test uses: {', '.join(used)}" if name_them else
                     f"replaced {len(used)} name{'s' if len(used) > 1 else ''} this hidden test uses with the "
                     "notebook's own")
    return "; ".join(found) or None
