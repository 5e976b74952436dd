"""The check each Canary's cell runs in the kernel (integrity.py): a report of the kernel's state, of the functions the
tests rely on, and of the code the notebook left to run later, carried by the exception the cell raises.

start.py compiles it once, before the notebook runs; each check runs it afresh in a namespace of its own, ended by
`EXCEPTION = canary(get_ipython(), PARAMETERS, CLOCK)` (integrity.CHECK), in a cell of its own or as a test cell's
last line (integrity.Canary.after). PARAMETERS: the Canary's, as one string of JSON: NONCE, ERROR (the name of the
built-in exception to raise), NAMES, CHAINS, PROBED, MODULES, DETAIL (whether to report the state itself, not only
its digest), IMPORTED. Nothing here runs the notebook's code: its objects are read past descriptors, and their kinds
by their types (notebooks_own.is_a: isinstance would read `obj.__class__`, which the notebook can define).
"""
import builtins
import functools
import gc
import json
import math
import re
import signal
import sys
import threading
import types
import weakref

from .notebooks_own import is_a, module_of, notebooks_own, of_builtins, runs_in, unwrapped

# The kernel's state that decides how a cell runs and how its errors are reported: identities of these callables
# (their function and code objects), the transformer lists, and the hooks.
SHELL = ("run_cell", "run_cell_async", "_run_cell", "should_run_async", "transform_cell", "transform_ast",
         "run_ast_nodes", "run_code", "showtraceback", "_showtraceback", "showsyntaxerror", "get_exception_only",
         "set_custom_exc", "CustomTB", "ex", "ev")
KERNEL = ("do_execute", "execute_request", "dispatch_shell", "send_response", "interrupt_request")
MISSING = object()


def who(thing):
    """A callable's name, where its code is, and the identities of it and of its code."""
    f = getattr(thing, "__func__", thing)
    code = getattr(f, "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    return f"{getattr(f, '__qualname__', type(f).__qualname__)}@{where}#{id(f)}#{id(code)}"


def state_of(ip):
    """What decides how the shell `ip` runs a cell and reports its errors, each callable by `who`."""
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
    return state


def hooks():
    """The trace, profile and monitoring functions set now."""
    state = {"sys.gettrace()": repr(sys.gettrace()), "sys.getprofile()": repr(sys.getprofile()),
             "threading.gettrace()": repr(threading.gettrace()), "threading.getprofile()": repr(threading.getprofile())}
    if hasattr(sys, "monitoring"):
        state["sys.monitoring tools"] = repr([sys.monitoring.get_tool(i) for i in range(6)])
    return state


def identities(watched):
    """Module name -> identity, of the modules `watched` and the course's own that are loaded. (sys.modules holds 2,000
    modules once torch is imported: looked through in C, 1 ms a check in Python.)"""
    return {n: id(m) for n in watched.union(filter(re.compile("torchcourse").match, list(sys.modules)))
            if (m := sys.modules.get(n)) is not None}


def contents(name, module):
    """A course module's contents: each attribute that is not a submodule, and the attributes of the classes it defines,
    by identity (read past descriptors: nothing of them runs)."""
    found = []
    for key, value in list(types.ModuleType.__dict__["__dict__"].__get__(module).items()):
        if type(key) is not str:  # a key of another type is the notebook's: counted by what it holds
            key = ""
        if is_a(value, types.ModuleType) or key.startswith("__"):
            continue  # a submodule imported later (torchcourse.launch) is set on its package, a warning's registry too
        found.append((key, id(value)))
        if is_a(value, type) and module_of(value) == name:
            found += [(f"{key}.{k if type(k) is str else ''}", id(v))
                      for k, v in type.__dict__["__dict__"].__get__(value).items()]
    return hash(tuple(sorted(found)))


def course(watched):
    """Module name -> a digest of its contents, of the course's own modules loaded (torchcourse.*): the tests import
    expect, refused and their helpers from them, so anything put in their place would decide a test's verdict."""
    return {n: contents(n, m) for n in watched if n.split(".")[0] == "torchcourse"
            and is_a(m := sys.modules.get(n), types.ModuleType)}


def raises(f, *args):
    """Whether f(*args) fails as an assertion."""
    try:
        f(*args)
    except AssertionError:
        return True
    return False


def questions(probed):
    """Each function the check can try -> a question that a faked one answers wrong (True: answered right). A library's
    only where the notebook's tests call one of it (`probed`): a warm kernel has numpy and torch imported before any
    notebook runs, and a first torch operation may start threads (which a kernel at its process limit cannot)."""
    asked = {"builtins.isinstance": lambda: not builtins.isinstance(1, str),
             "builtins.len": lambda: builtins.len([0, 0]) == 2,
             "builtins.abs": lambda: builtins.abs(-1) == 1, "builtins.all": lambda: not builtins.all([False]),
             "builtins.any": lambda: not builtins.any([False]), "math.isclose": lambda: not math.isclose(0.0, 1.0)}
    if "numpy" in sys.modules and any(p.startswith("numpy.") for p in probed):
        np = sys.modules["numpy"]
        asked.update({"numpy.allclose": lambda: not np.allclose(0.0, 1.0),
                      "numpy.array_equal": lambda: not np.array_equal([0], [1]),
                      "numpy.testing.assert_allclose": lambda: raises(np.testing.assert_allclose, 0.0, 1.0)})
    if "torch" in sys.modules and any(p.startswith(("torch.", "Tensor.")) for p in probed):
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
        asked.update({
            "torch.allclose": lambda: not torch.allclose(z, o), "torch.equal": lambda: not torch.equal(z, o),
            "torch.isclose": lambda: not bool(torch.isclose(z, o).any()), "Tensor.allclose": lambda: not z.allclose(o),
            "Tensor.__eq__": lambda: not bool((z == o).any()), "Tensor.equal": lambda: not z.equal(o),
            "torch.testing.assert_close": lambda: raises(torch.testing.assert_close, z, o),
            "torch.autograd.gradcheck": lambda: not wrong_gradient_passes()})
    return asked


def faked_functions(probed):
    """The functions of `probed` that answer their question wrong (or fail)."""
    faked = []
    for name, answered_right in questions(probed).items():
        if name not in probed:  # only what this notebook's tests call: a first gradcheck imports sympy (0.5 s)
            continue
        try:
            right = answered_right()
        except Exception:
            right = False
        if right is not True:
            faked.append(name)
    return faked


def held_by(thing):
    """The values an object of a library's class holds in its own dict, read past any descriptor (none runs)."""
    kind = type(thing)
    if module_of(kind) == "__main__":
        return []  # the notebook's own object: named as such already
    slot = next((found for klass in type.__dict__["__mro__"].__get__(kind)
                 if (found := type.__dict__["__dict__"].__get__(klass).get("__dict__")) is not None), None)
    if type(slot).__name__ != "getset_descriptor":  # no dict, or one the class chose to compute
        return []
    held = slot.__get__(thing)
    return list(held.values()) if type(held) is dict else []


def parts(value, depth=0):
    """A callable and what it carries to call: a partial's function and arguments, a method's function and object, and
    the callables that object holds (a tornado PeriodicCallback's `callback`). Nothing of it runs."""
    found = [value]
    if depth < 3:
        if type(value) is functools.partial:  # exact: a subclass's attributes could run the notebook's code
            found += [p for v in (value.func, *value.args, *value.keywords.values()) for p in parts(v, depth + 1)]
        elif type(value) is types.MethodType:
            found += parts(value.__func__, depth + 1) + [value.__self__]
            found += [p for v in held_by(value.__self__) if callable(v) for p in parts(v, depth + 1)]
    return found


def event_loops():
    """The kernel's asyncio event loops: the one running this check (the shell's) first, then those of ipykernel's
    threads (each a tornado IOLoop, which tornado lists)."""
    loops = []
    events = sys.modules.get("asyncio.events")
    running = events._get_running_loop() if events is not None else None
    ioloop = sys.modules.get("tornado.ioloop")
    listed = stored(ioloop.IOLoop, "_ioloop_for_asyncio") if ioloop is not None else MISSING
    for loop in [running, *(list(listed) if type(listed) is dict else [])]:
        if loop is not None and all(loop is not seen for seen in loops):
            loops.append(loop)
    return loops


def on_event_loops(namespace):
    """What the kernel's event loops hold to run later that is the notebook's own: a callback (or what it carries to
    call), and a task running a coroutine of the notebook's. Each runs after a request, before the next one: a
    callback that schedules itself again runs between every check and test."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return []
    found = []
    for loop in event_loops():
        if not module_of(type(loop)).startswith("asyncio."):  # its attributes could run the notebook's code
            found.append("an event loop of a kind of its own")
            continue
        for _ in range(3):  # another thread's loop can change while it is read
            try:
                handles = [*list(loop._ready), *list(loop._scheduled)]
                break
            except RuntimeError:
                handles = []
        for handle in handles:
            if type(handle) not in (asyncio.Handle, asyncio.TimerHandle):
                found.append("an event loop callback of a kind of its own")
            elif not handle._cancelled and any(notebooks_own(p, namespace) or own(p, namespace) for p in [
                    *parts(handle._callback), *(q for a in handle._args or () for q in parts(a))]):
                found.append(f"an event loop callback ({who(handle._callback)})")
    # every loop's tasks, from asyncio's own sets (3.11's _all_tasks, 3.12's _scheduled_tasks and _eager_tasks):
    # all_tasks() would call each task's get_loop(), which a Task subclass of the notebook's could define
    module = sys.modules.get("asyncio.tasks")
    sets = [stored(module, name) for name in ("_all_tasks", "_scheduled_tasks", "_eager_tasks")] if module else []
    for task in [task for kept in sets if type(kept) in (weakref.WeakSet, set) for task in list(kept)]:
        if type(task) is not asyncio.Task:
            found.append("an asyncio task of a kind of its own")
            continue
        coroutine = task.get_coro()
        if own(coroutine, namespace):  # an awaitable of the notebook's own class: its attributes would run its code
            found.append("an asyncio task of a kind of its own")
            continue
        code, frame = getattr(coroutine, "cr_code", None), getattr(coroutine, "cr_frame", None)
        if code is not None and runs_in(code, frame.f_globals if frame is not None else None, namespace):
            found.append(f"an asyncio task ({code.co_name})")
    return found


def left_to_run_later(ip, namespace):
    """What the notebook left to run later, which could undo what it changed before a check looks: its own IPython
    event callbacks, signal handlers, threads, event loop callbacks and tasks (named by the notebook's own code they
    run), and torch modes."""
    later = [f"IPython {event} callback {who(f)}" for event, fs in ip.events.callbacks.items() for f in fs
             if notebooks_own(f, namespace)]
    later += [f"a gc callback {who(f)}" for f in gc.callbacks if notebooks_own(f, namespace)]
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
            mine = runs_in(frame.f_code, frame.f_globals, namespace)
            frame = frame.f_back
        if mine:
            later.append(f"a thread running the notebook's code ({getattr(thread, 'name', 'started with _thread')})")
    later += on_event_loops(namespace)
    if "torch" in sys.modules:
        torch_C = sys.modules["torch"]._C
        if torch_C._len_torch_function_stack() or torch_C._len_torch_dispatch_stack():
            later.append("an active torch function or dispatch mode")
    return later


def own(value, namespace):
    """The notebook's own code: a function defined in it (or a partial or method of one), one of its classes or their
    instances. Nothing of it runs: a student's object may do anything when asked for an attribute."""
    value = unwrapped(value)
    if is_a(value, types.FunctionType):
        return value.__globals__ is namespace
    kind = value if is_a(value, type) else type(value)
    return module_of(kind) == "__main__"


def stored(holder, name):
    """An attribute as stored in a module or a library class (its MRO), without running any descriptor."""
    if is_a(holder, types.ModuleType):
        return types.ModuleType.__dict__["__dict__"].__get__(holder).get(name, MISSING)
    for klass in type.__dict__["__mro__"].__get__(holder):
        found = type.__dict__["__dict__"].__get__(klass)
        if name in found:
            return found[name]
    return MISSING


def module_name(module):
    """A module's name as its own dict holds it ("" where that is not a plain str)."""
    found = stored(module, "__name__")
    return found if type(found) is str else ""


def shadowed(namespace, names):
    """Of the names the next test cell uses (all built-in names for None, the first check): each built-in shadowed by
    a callable, as reported to compare with a fresh kernel (IPython puts its own `open` into every namespace), and
    each module swapped ("module:NAME")."""
    shadows, swapped = {}, []
    for name in names if names is not None else [n for n in vars(builtins) if not n.startswith("_")]:
        value = namespace.get(name, MISSING)
        if value is not MISSING and hasattr(builtins, name) and value is not getattr(builtins, name) and callable(value):
            shadows[name] = who(value)
        elif is_a(value, types.ModuleType) and sys.modules.get(module_name(value)) is not value:
            swapped.append(f"module:{name}")
    return shadows, swapped


def replaced(namespace, chains):
    """Of the attributes the next test cell reads from a module or a library class (`torch.testing.assert_close`,
    `F.gelu`), each that is the notebook's own code or a built-in such as `min` in its place ("replaced:CHAIN")."""
    found = []
    for chain in chains:
        root, *rest = chain.split(".")
        holder = namespace.get(root, MISSING)
        if holder is MISSING:  # a chain a test imports from (`from a.b import c`) starts at the imported module
            holder = sys.modules.get(root, MISSING)
        for k, part in enumerate(rest, 2):
            if not (is_a(holder, types.ModuleType) or is_a(holder, type) and not own(holder, namespace)):
                break
            holder = stored(holder, part)
            if holder is MISSING:
                break
            # the notebook's own code, or a built-in of `builtins` standing in for it (`statistics.fmean = min`)
            if own(holder, namespace) or of_builtins(holder):
                found.append("replaced:" + ".".join(chain.split(".")[:k]))
                break
    return found


def rebound(namespace, imported):
    """Of the names the test cell just run bound by importing them ([name, module, attribute]), each the notebook has
    bound to something else since ("rebound:NAME"): a test reads its helpers by these names after calling the answer."""
    found = []
    for name, source, attribute in imported:
        module = sys.modules.get(source)
        value = stored(module, attribute) if is_a(module, types.ModuleType) else MISSING
        now = namespace.get(name, MISSING)  # unbound: the test stopped before its import, or NameError fails it
        if value is not MISSING and now is not MISSING and now is not value:
            found.append(f"rebound:{name}")
    return found


def report(ip, parameters):
    """The check's report on the kernel of shell `ip`: the state's digest (and the state itself where DETAIL asks),
    the audit hook's counts, what is faked, shadowed or left to run later, and the watched modules' identities."""
    state = state_of(ip)
    modules = identities(set(parameters["MODULES"]))
    state.update(hooks())
    audit = {}
    sys.audit("autograder.audit", audit)
    faked = faked_functions(set(parameters["PROBED"]))
    namespace = ip.user_ns
    later = left_to_run_later(ip, namespace)
    shadows, swapped = shadowed(namespace, parameters["NAMES"])
    faked += swapped + replaced(namespace, parameters["CHAINS"]) + rebound(namespace, parameters["IMPORTED"])
    # The state (16 kB) only when asked for: its digest tells whether it changed (hash(): the same in one process)
    found = {"digest": hash(json.dumps(state, sort_keys=True)), "audit": audit, "faked": faked, "shadows": shadows,
             "modules": modules, "course": course(modules), "later": later}
    if parameters["DETAIL"]:
        found["state"] = state
    return found


def canary(ip, parameters, clock):
    """The exception the check's cell raises: of the built-in type ERROR, its value NONCE and the report as JSON, with
    the seconds the check took (by `clock`, time.perf_counter as start.py found it). A check that fails still raises
    it, its report saying only how it failed ("failed": the exception's kind): at a test's end, any other error would
    read as the test's own."""
    start = clock()
    parameters = json.loads(parameters)
    error = builtins.__dict__[parameters["ERROR"]]
    try:
        found = report(ip, parameters)
    except Exception as failure:  # out of threads (a fork bomb's), say: the grader checks again, in a cell of its own
        found = {"failed": type(failure).__name__}
    return error(parameters["NONCE"] + json.dumps({**found, "seconds": clock() - start}))
