"""Run once in a fresh kernel, before the notebook's first cell (integrity.setup's cell; a kernel forked from a warm
parent runs it as it starts, warm.set_up): an audit hook (it cannot be removed) that counts trace and profile
functions being set, code objects of the kernel's machinery being swapped, and threads started to run the notebook's
own code, so that a hook set and removed, or a thread started and ended, within one test cell is still seen.
`sys.audit("autograder.audit", d)` copies the counts into d; `sys.audit("autograder.check", d)` puts the check
(check.py, compiled here once, or by the warm parent: 4-5 ms a check otherwise) into d["CODE"], with d["CLOCK"] the
clock it times itself by (time.perf_counter, as it is before the notebook runs). Then the modules the tests import,
so that the checks know them before the notebook could put others in their place."""
import sys
import threading
import time

from .notebooks_own import is_a, notebooks_own


def install(ip, check):
    """The audit hook, judging threads by the notebook's namespace (shell `ip`'s), handing out the compiled `check`."""
    space = ip.user_ns
    counts, watched = {}, {"sys.settrace": "trace", "sys.setprofile": "profile",
                           "sys.monitoring.register_callback": "monitoring", "sys.monitoring.use_tool_id": "monitoring"}
    machinery = ("IPython", "ipykernel", "jupyter_client", "zmq", "comm", "traitlets")

    # The hook runs on every audited event of the kernel: what it reads comes in as its defaults (locals, not globals)
    def started(args, Thread=threading.Thread, own=notebooks_own):
        f = args[0] if args else None
        thread = getattr(f, "__self__", None)
        if is_a(thread, Thread):  # threading's own start: what the thread object will run
            return any(g is not None and own(g, space) for g in
                       (getattr(thread, "_target", None), getattr(thread, "function", None), type(thread).run))
        return own(f, space)

    def hook(event, args, counts=counts, watched=watched, machinery=machinery, clock=time.perf_counter):
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
        elif event == "autograder.audit" and args and type(args[0]) is dict:
            args[0].update(counts)
        elif event == "autograder.check" and args and type(args[0]) is dict:
            args[0]["CODE"], args[0]["CLOCK"] = check, clock
    sys.addaudithook(hook)


def start(ip, check, modules):
    """Compile the check's source once (a forked kernel is given it compiled), install the hook, then import `modules`
    (those the tests import)."""
    install(ip, compile(check, "<autograder>", "exec") if isinstance(check, str) else check)
    for name in modules:
        try:
            __import__(name)
        except Exception:  # the notebook's own import will say why
            pass
