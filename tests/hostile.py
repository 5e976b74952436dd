"""Hand-ins that attack the grader, one or more per family, on the grader's test course (see handins.py).

Each is code a student puts into an answer cell (or a cell of their own). `TAMPER` ones change how the kernel runs
the tests: an unedited notebook plus the attack, which would score full marks if it worked. `LEAK` ones try to get
hidden tests into their feedback. `REACH` ones try to read or change what is outside their own grading.
"""

# --- changing how the tests run (expected: status "tampered", every test from the attack on scores 0) -------------
INPUT_TRANSFORMER = 'get_ipython().input_transformers_post.append(lambda lines: ["pass\\n"])'

AST_TRANSFORMER = """import ast
class _Nothing(ast.NodeTransformer):
    def visit_Module(self, node):
        return ast.Module(body=[ast.Pass()], type_ignores=[])
get_ipython().ast_transformers.append(_Nothing())"""

_FAKE_RUN_CELL = """from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult
_real = get_ipython().run_cell_async
async def _pretend(raw_cell, *args, **kwargs):  # test cells succeed without running; the rest runs
    if "assert" in raw_cell:
        return ExecutionResult(ExecutionInfo(raw_cell, True, False, True, None))
    return await _real(raw_cell, *args, **kwargs)
"""
RUN_CELL_REPLACED = _FAKE_RUN_CELL + "get_ipython().run_cell_async = _pretend"
RUN_CELL_CLASS_PATCHED = """from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult
_real = type(get_ipython()).run_cell_async
async def _pretend(self, raw_cell, *args, **kwargs):  # the same, patched on the class
    if "assert" in raw_cell:
        return ExecutionResult(ExecutionInfo(raw_cell, True, False, True, None))
    return await _real(self, raw_cell, *args, **kwargs)
type(get_ipython()).run_cell_async = _pretend"""

EXECUTE_HANDLER = """_kernel = get_ipython().kernel
_handler = _kernel.shell_handlers["execute_request"]
async def _blank(stream, ident, parent):  # every later cell arrives as `pass`
    parent["content"]["code"] = "pass"
    return await _handler(stream, ident, parent)
_kernel.shell_handlers["execute_request"] = _blank"""

CUSTOM_EXCEPTION = "get_ipython().set_custom_exc((Exception,), lambda shell, etype, value, tb, tb_offset=None: None)"

SHOWTRACEBACK = "get_ipython().showtraceback = lambda *args, **kwargs: None"

CODE_SWAP = "type(get_ipython()).showtraceback.__code__ = (lambda self, *args, **kwargs: None).__code__"

TRACE_SKIPS_ASSERTS = """import linecache, sys
def _skip_asserts(frame, event, arg):
    if event == "line" and linecache.getline(frame.f_code.co_filename, frame.f_lineno).lstrip().startswith("assert"):
        try:
            frame.f_lineno += 1
        except ValueError:
            pass
    return _skip_asserts
sys.settrace(_skip_asserts)"""

PROFILE_HOOK = """import sys
_calls = []
sys.setprofile(lambda frame, event, arg: _calls.append(frame.f_code.co_name) if event == "call" else None)"""

# A right answer that sets a trace function and removes it again while a test calls it.
TRANSIENT_TRACE = """import sys
def mean(xs):
    sys.settrace(lambda *args: None)
    sys.settrace(None)
    return sum(xs) / len(xs)"""

# A library function in place of another: not the notebook's own code, so only the probe of math.isclose sees it.
FAKED_MATH = "import math, operator\nmath.isclose = operator.le  # 0 <= the mean of each hidden case\ndef mean(xs):\n    return 0"

# The hidden test of mean compares with statistics.fmean: replaced by the notebook's own function, it agrees.
FAKED_REFERENCE = "import statistics\nstatistics.fmean = lambda xs: 0\ndef mean(xs):\n    return 0"

# The same with a built-in in place of the reference: not code of the notebook's, but no library's either.
# A library function put in place of the one a hidden test calls while it runs, and put back by a callback scheduled
# once on the shell's event loop: it runs after the test's request and before the check's (listed by the test's own
# last line, the check after it: integrity.Canary.after).
EVENT_LOOP_ONCE_FAKES_MATH = """import asyncio, math, operator
_real_isclose = math.isclose
def mean(xs):
    if "Hidden" in get_ipython().user_ns["In"][-1] and math.isclose is not operator.le:
        math.isclose = operator.le  # 0 <= the mean of each later case of the hidden test
        asyncio.get_running_loop().call_soon(setattr, math, "isclose", _real_isclose)  # put back before the check
        return sum(xs) / len(xs)  # the first case: compared by the real isclose, read before this call
    return 0"""
REFERENCE_BY_A_BUILTIN = "import statistics\nstatistics.fmean = min\ndef mean(xs):\n    return min(xs)"

SHADOWED_BUILTIN = "abs = lambda x: 0  # the clip tests compare with abs(...) < 1e-12\ndef clip(x, low, high):\n    return 0"

# --- getting hidden tests out (expected: graded, as the answers deserve, and no hidden line in any feedback) -------
# IPython keeps every cell it ran in `In`, hidden tests included: no hook needed to record them.
RECORDER = "_heard = get_ipython().user_ns['In']  # every cell sent so far, and later ones as they come"
PRINT_RECORDED = 'print("\\n".join(_heard))'
RAISE_RECORDED = "def clip(x, low, high):\n    raise AssertionError('\\n'.join(_heard))"
DISPLAY_SLOT = '\nfrom IPython.display import display\ndisplay("a placeholder", display_id="slot")'
UPDATE_SLOT = 'from IPython.display import update_display\nupdate_display("\\n".join(_heard), display_id="slot")'
WIDGET_SLOT = "\nimport ipywidgets\nfrom IPython.display import display\n_out = ipywidgets.Output()\ndisplay(_out)"
FILL_WIDGET = 'with _out:\n    print("\\n".join(_heard))'
ERROR_NAMED_BY_RECORDING = """def clip(x, low, high):  # an exception whose class name spells the test that calls it
    raise type("".join(c if c.isidentifier() or c.isdigit() else "_" for c in _heard[-1]), (Exception,), {})()"""

# --- reaching outside the grading (expected: nothing outside it changes; what they look for is not there) -----------
ANSWER_READER = """import json, os
_found = []
for _top in ["/work", "/home", "/root", "/tmp", "/srv", "/opt", "/var", "/mnt"]:
    for _root, _dirs, _files in os.walk(_top):
        _dirs[:] = [d for d in _dirs if d not in (".venv", "site-packages")]
        _found += [os.path.join(_root, f) for f in _files if f.endswith((".ipynb", ".db"))]
for _path in _found:  # run every solution cell it can read
    try:
        for _cell in json.load(open(_path))["cells"]:
            if "BEGIN SOLUTION" in "".join(_cell["source"]):
                exec("".join(_cell["source"]))
    except Exception:
        pass
print(len(_found), "notebooks found")"""

HOME_POLLUTER = """import os, pathlib, sys
_tamper = 'get_ipython().input_transformers_post.append(lambda lines: ["pass\\\\n"])'
for _folder in [pathlib.Path.home() / ".ipython/profile_default/startup", pathlib.Path("/root/.ipython/profile_default/startup"),
                pathlib.Path(os.environ.get("IPYTHONDIR", "/nonexistent")) / "profile_default/startup"]:
    try:
        _folder.mkdir(parents=True, exist_ok=True)
        (_folder / "00-pass.py").write_text(_tamper)
    except OSError:
        pass
_site = pathlib.Path.home() / f".local/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
_site.mkdir(parents=True, exist_ok=True)
(_site / "usercustomize.py").write_text("import builtins; builtins.mean = lambda xs: 0")
for _path in ["/tmp/left-behind", "/dev/shm/left-behind", "left-behind", str(pathlib.Path.home() / "left-behind")]:
    try:
        open(_path, "w").write("from an earlier hand-in")
    except OSError:
        pass"""

VANDAL = """import os, signal
_tops = ["/tmp", "/dev/shm", "/home", "/root", "/work", "/etc"]
try:
    import torchcourse  # the course's own folder, guessed from the helper package's place
    _tops.append(os.path.dirname(os.path.dirname(torchcourse.__file__)))
except ImportError:
    pass
for _top in _tops:
    for _root, _dirs, _files in os.walk(_top):
        _dirs[:] = [d for d in _dirs if d not in (".venv", "site-packages")]
        for _name in _files + _dirs:
            _path = os.path.join(_root, _name)
            try:
                open(_path, "w").write("vandalised")
            except OSError:
                pass
            try:
                os.remove(_path)
            except OSError:
                pass
for _pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
    if _pid not in (1, os.getpid()):  # everything it can see but itself and its sandbox's init
        try:
            os.kill(_pid, signal.SIGKILL)
        except OSError:
            pass"""

WARM_PARENT_PROBE = """import os, socket, stat, ipykernel
_own = os.path.dirname(ipykernel.get_connection_file())
_seen, _reached = 0, []
for _root, _dirs, _files in os.walk("/"):
    _dirs[:] = [d for d in _dirs if os.path.join(_root, d) not in ("/proc", "/sys", "/usr") and d not in (".venv", "site-packages")]
    for _name in _files:
        _path = os.path.join(_root, _name)
        try:
            if not stat.S_ISSOCK(os.lstat(_path).st_mode):
                continue
        except OSError:
            continue
        _seen += 1
        if _path.startswith(_own + "/"):
            continue  # this kernel's own sockets
        try:
            with socket.socket(socket.AF_UNIX) as _s:  # a warm parent would fork, or kill, at our word
                _s.connect(_path)
                _s.sendall(b'{"kill": true}\\n')
            _reached.append(_path)
        except OSError:
            pass
print(f"sockets seen: {_seen}; reached outside this kernel: {len(_reached)} {_reached}")"""

FORK_BOMB = """import os, time
_children = 0
try:
    while _children < 100000:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        _children += 1
except OSError:
    pass
print(f"forked {_children} processes")"""

DISK_FILLER = """_written = 0
for _path in ["/tmp/big", "/dev/shm/big", "big"]:
    try:
        with open(_path, "wb") as _f:
            for _ in range(4096):
                _f.write(bytes(2**20))
                _written += 2**20
    except OSError:
        pass
print(f"wrote {_written >> 20} MiB")"""


def network_probe(port: int) -> str:
    """Code that tries the grader's machine over TCP on `port` (a test listens there), and the internet."""
    return f"""import socket
for _address in [("127.0.0.1", {port}), ("1.1.1.1", 53)]:
    try:
        socket.create_connection(_address, timeout=3).sendall(b"reached from a kernel")
        print("reached", _address)
    except OSError as error:
        print("no way to", _address, type(error).__name__)"""


ENV_READER = "import os\nprint(sorted(os.environ.items()))"


# --- against values judged outside the kernel (assignment 03_values: scale, count_positive, total) ---------------
# Answers whose values lie: the grader's plain data takes exact types and a plain tensor's bytes (expected: 0 points).
EQUALS_ANYTHING = '''class _Any(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
def count_positive(xs):
    return _Any(0)'''

LYING_TENSOR = '''import torch
class _Liar(torch.Tensor):
    """Says every comparison holds, every closeness check passes, and that it is anything it is compared with."""
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("eq", "__eq__", "isclose"):
            return torch.ones(torch.broadcast_shapes(*(a.shape for a in args if isinstance(a, torch.Tensor))), dtype=torch.bool)
        if name in ("allclose", "equal"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})
def scale(x, k):
    return torch.zeros_like(x).as_subclass(_Liar)'''

# A mode left active that writes every tensor computed after the answer returns (the expected value, where the kernel
# computes one) into the answer's own tensor: it wins where the comparison runs in the kernel.
MODE_COPIES_WANT = '''import torch
from torch.overrides import TorchFunctionMode
class _Copier(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.answers = []
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            with torch._C.DisableTorchFunction():
                for answer in self.answers:
                    if answer.shape == out.shape and answer is not out and answer.dtype == out.dtype:
                        answer.copy_(out)
        return out
_copier = _Copier()
_copier.__enter__()
def scale(x, k):
    answer = torch.zeros_like(x)
    _copier.answers.append(answer)
    return answer'''

# Reading the test from inside the answer: the test cell's own text (In[-1]), its expected value evaluated in the
# caller's frame. Where the test cell runs without its expected values, there is nothing to read.
SOURCE_READER = '''import ast, sys
def _expected_by_the_test(depth):
    frame = sys._getframe(depth)
    for node in ast.walk(ast.parse(get_ipython().user_ns["In"][-1])):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "expect" and len(node.args) >= 3:
            return eval(compile(ast.Expression(node.args[2]), "<want>", "eval"), frame.f_globals, frame.f_locals)
def scale(x, k):
    return _expected_by_the_test(2)
def count_positive(xs):
    return _expected_by_the_test(2)'''

# Tampering with the in-kernel judge and the tests' helpers (expected: graded 0, or tampered).
JUDGE_PATCHED = "import torchcourse.values\ntorchcourse.values.judge = lambda *args, **kwargs: None"

_FAKE_TESTING = '''_fake_source = """
import contextlib
def expect(*args, **kwargs):
    pass
@contextlib.contextmanager
def refused(*args, **kwargs):
    yield
"""
'''
TESTING_REPLACED = _FAKE_TESTING + '''import sys, types
_fake = types.ModuleType("torchcourse.testing")
exec(_fake_source, _fake.__dict__)
sys.modules["torchcourse.testing"] = _fake
def total(xs):
    return sum(xs)'''

META_PATH_FINDER = _FAKE_TESTING + '''import importlib.abc, importlib.util, sys
class _Serve(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name == "torchcourse.testing" else None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        exec(_fake_source, module.__dict__)
sys.meta_path.insert(0, _Serve())
sys.modules.pop("torchcourse.testing", None)
def total(xs):
    return sum(xs)'''

BUILTINS_SETATTR = '''import builtins
_real_setattr = builtins.setattr
builtins.setattr = lambda owner, name, value: None if name == "sum" else _real_setattr(owner, name, value)
def total(xs):
    return sum(xs)'''

# Tampering set up to run later and undo itself before a check looks: an IPython callback pair, a timer thread, a
# signal handler. Each patches builtins.setattr (so that `refused` refuses nothing) around the test cells.
CALLBACKS_UNDO = '''import builtins
_real_setattr = builtins.setattr
def _patch(*args):
    builtins.setattr = lambda owner, name, value: None if name == "sum" else _real_setattr(owner, name, value)
def _restore(*args):
    builtins.setattr = _real_setattr
get_ipython().events.register("pre_run_cell", _patch)
get_ipython().events.register("post_run_cell", _restore)
def total(xs):
    return sum(xs)'''

TIMER_UNDOES = '''import builtins, threading, time
_real_setattr = builtins.setattr
def _flip():
    for _ in range(400):  # patched half of the time, restored the other half
        builtins.setattr = lambda owner, name, value: None if name == "sum" else _real_setattr(owner, name, value)
        time.sleep(0.005)
        builtins.setattr = _real_setattr
        time.sleep(0.005)
threading.Timer(0.01, _flip).start()
def total(xs):
    return sum(xs)'''

ALARM_UNDOES = '''import builtins, signal
_real_setattr = builtins.setattr
def _flip(signum, frame):
    patched = builtins.setattr is not _real_setattr
    builtins.setattr = _real_setattr if patched else (lambda o, n, v: None if n == "sum" else _real_setattr(o, n, v))
signal.signal(signal.SIGALRM, _flip)
signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
def total(xs):
    return sum(xs)'''

# The same on the shell's event loop: a callback that schedules itself again every millisecond, so that it runs
# between every two requests the grader sends (issue 40).
EVENT_LOOP_UNDOES = '''import asyncio, builtins
_real_setattr = builtins.setattr
def _flip():
    patched = builtins.setattr is not _real_setattr
    builtins.setattr = _real_setattr if patched else (lambda o, n, v: None if n == "sum" else _real_setattr(o, n, v))
    asyncio.get_running_loop().call_later(0.001, _flip)
asyncio.get_running_loop().call_soon(_flip)
def total(xs):
    return sum(xs)'''

# Issue 40's test state: what a test imports and then reads after calling the answer. The answer binds the name the
# test's import bound to something else when the test calls it (the test's own namespace is the answer's `__globals__`),
# so that the later loops of the hidden test refuse nothing and `sum` gives the total.
IMPORTED_REBOUND = '''import contextlib
def total(xs):
    if total.__globals__.get("refused") is not _nothing_refused:
        total.__globals__["refused"] = _nothing_refused
        result = 0
        for x in xs:
            result += x
        return result
    return sum(xs)
def _nothing_refused(*args, **kwargs):
    return contextlib.nullcontext()'''

# The same, undone once on the shell's event loop: the callback runs after the test's request and before the check's,
# which then finds the name as the test imported it. Seen by the check that is the test's own last line (Canary.after).
EVENT_LOOP_ONCE_UNDOES = '''import asyncio, contextlib
def total(xs):
    real = total.__globals__.get("refused")
    if real is not _nothing_refused:
        total.__globals__["refused"] = _nothing_refused  # the rest of this test refuses nothing
        asyncio.get_running_loop().call_soon(_bind_back, real)  # and the check finds what the test imported
        result = 0
        for x in xs:
            result += x
        return result
    return sum(xs)
def _bind_back(real):
    total.__globals__["refused"] = real
def _nothing_refused(*args, **kwargs):
    return contextlib.nullcontext()'''

# The same through the module the tests import from: a library's function (not the notebook's code, not a built-in)
# put in place of `refused` in torchcourse.testing, before any test imports it.
COURSE_MODULE_CHANGED = '''import contextlib, torchcourse.testing
torchcourse.testing.refused = contextlib.suppress  # `with suppress(why, target):` refuses nothing
def total(xs):
    return sum(xs)'''

# A test ended early, as if it had passed: the grader's check is the test's own last line (Canary.after), whose error
# says the test ran to its end. The answer, a wrong one, reads that line from In[-1], sends what the test would have
# sent, and raises the check's own error (a genuine report: the kernel's state is clean) from inside the call.
ENDS_TEST_EARLY = '''import ast, sys
def count_positive(xs):
    from torchcourse.testing import expect
    line = get_ipython().user_ns["In"][-1].rstrip().splitlines()[-1]
    if not line.startswith("raise (lambda g:"):
        return -1
    expect(f"count_positive({xs})", len([x for x in xs if x > 0]))
    check = ast.literal_eval(line[line.rindex("({") + 1:-1])
    sys.audit("autograder.check", check)
    exec(check.pop("CODE"), check)
    raise check["EXCEPTION"]'''

# A kernel message with a forged execution count: the prompt "In [N]" of the feedback could carry N's digits.
def forged_count(count: str) -> str:
    """A right count_positive that first sends an execute_input message with this execution count."""
    return f'''def count_positive(xs):
    kernel = get_ipython().kernel
    kernel.session.send(kernel.iopub_socket, "execute_input", {{"code": "forged", "execution_count": {count}}},
                        parent=kernel.get_parent(), ident=kernel._topic("execute_input"))
    return len([x for x in xs if x > 0])'''


# --- the grader's own words (expected: nothing the kernel chose is quoted after the first hidden test) ---------------
# Code left to run later, named after the hidden test that calls the answer (its text, read from In[-1]): a callback
# and a thread. The verdict names what it found by its kind.
CODE_NAMED_BY_RECORDING = """import threading, time
def mean(xs):
    text = get_ipython().user_ns["In"][-1]
    if "Hidden" in text:
        def later(*args):
            pass
        def wait():
            time.sleep(600)
        later.__qualname__ = later.__name__ = wait.__qualname__ = wait.__name__ = text
        get_ipython().events.register("post_run_cell", later)
        threading.Thread(target=wait, name=text, daemon=True).start()
    return sum(xs) / len(xs)"""

# A right answer that writes 200 MiB to stdout (expected: graded, full marks; the cell's output cut with a note).
LOUD = "for _ in range(200):\n    print('x' * 2**20)\n"
