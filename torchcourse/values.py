"""Values as plain data, and the one judge of them.

A test's `expect(label, got, want)` (testing.py) turns both values into plain data and judges them here. When the
grader runs the tests it removes `want` from the cell first: the kernel then sends `got` out as plain data, and the
grader judges it against the value the solution gave, in its own process, with this same code and these messages.
Plain data is JSON: a dict tagged with the value's type, so that a tuple is never a list and an int never a bool.
"""

import base64
import collections
import math
import sys

import numpy as np

MIME = "application/vnd.pytorch-course.value+json"  # the display type a value leaves a grading kernel in

# dtype name -> (numpy dtype of its bytes, how the grader reads those bytes as numbers)
DTYPES = {"float64": "<f8", "float32": "<f4", "float16": "<f2", "bfloat16": "<u2", "complex128": "<c16",
          "complex64": "<c8", "int64": "<i8", "int32": "<i4", "int16": "<i2", "int8": "i1", "uint8": "u1", "bool": "?"}
SHOWN = 8  # at most this many numbers of a tensor are written into a message


class Raised:
    """What a call raised (testing.outcome), or an exception class a test expects: a call that raised a subclass of
    the class expected passes. `message`: the error's text, for a test to look into."""

    def __init__(self, error: BaseException | type):
        builtin = [k.__name__ for k in (error if isinstance(error, type) else type(error)).__mro__
                   if k.__module__ == "builtins" and issubclass(k, BaseException)]
        self.kind, self.bases, self.message = builtin[0], builtin, "" if isinstance(error, type) else str(error)

    def __repr__(self):
        return f"Raised({self.kind}({self.message!r}))"


def type_name(value) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def plain(value, depth: int = 0) -> dict:
    """`value` as tagged plain data. Only these types are plain, exactly (no subclass): None, bool, int, float, str,
    tuple, list, dict (or OrderedDict, as state_dict() gives) with str or int keys, torch.device, torch.dtype,
    torch.Tensor (as a plain tensor's dtype, shape and bytes), Raised. Anything else becomes
    {"t": "other", "v": its type's name}, which no expected value equals."""
    kind = type(value)
    if value is None:
        return {"t": "None"}
    if kind in (bool, int, str):
        return {"t": kind.__name__, "v": value}
    if kind is float:
        return {"t": "float", "v": value if math.isfinite(value) else repr(value)}  # JSON has no nan or inf
    if kind in (tuple, list) and depth < 20:
        return {"t": kind.__name__, "v": [plain(v, depth + 1) for v in value]}
    if kind in (dict, collections.OrderedDict) and depth < 20 and all(type(k) in (str, int) for k in value):
        return {"t": "dict", "v": [[k, plain(v, depth + 1)] for k, v in value.items()]}
    if kind is Raised:
        return {"t": "raised", "v": value.kind, "bases": value.bases, "message": value.message}
    torch = sys.modules.get("torch")
    if torch is not None and kind in (torch.device, torch.dtype):  # neither can be subclassed
        return {"t": kind.__name__, "v": str(value)}
    tensor = plain_tensor(value)
    return tensor if tensor is not None else {"t": "other", "v": type_name(value)}


def plain_tensor(value) -> dict | None:
    """A tensor (of any subclass) as a plain torch.Tensor sees it; None if `value` is none."""
    torch = sys.modules.get("torch")  # a value can only be a tensor if torch was imported
    if torch is None or not isinstance(value, torch.Tensor):
        return None
    try:
        # neither a subclass's __torch_function__ or __torch_dispatch__ nor a mode the notebook left active runs here
        with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
            t = torch.Tensor.as_subclass(value, torch.Tensor).detach().cpu()
            name = str(t.dtype).removeprefix("torch.")
            if name not in DTYPES:
                return {"t": "other", "v": f"a tensor of dtype {t.dtype}"}
            data = t.clone(memory_format=torch.contiguous_format).reshape(-1).view(torch.uint8).numpy().tobytes()
    except Exception as error:  # a wrapper subclass without storage, a meta tensor
        return {"t": "other", "v": f"{type_name(value)} ({type(error).__name__}: {error})"}
    return {"t": "tensor", "dtype": name, "shape": list(t.shape), "data": base64.b64encode(data).decode()}


def numbers(p: dict) -> np.ndarray:
    """A plain tensor's values as a numpy array (bfloat16 widened to float32)."""
    array = np.frombuffer(base64.b64decode(p["data"]), dtype=DTYPES[p["dtype"]])
    if p["dtype"] == "bfloat16":
        array = (array.astype("<u4") << 16).view("<f4")
    return array.reshape(p["shape"])


def kind_of(p: dict) -> str:
    """The name of a plain value's type, as messages give it."""
    if p["t"] == "tensor":
        return f"a tensor of dtype torch.{p['dtype']}"
    if p["t"] == "raised":
        return f"an error ({p['v']})"
    if p["t"] == "other":
        return p["v"] if p["v"].startswith("a ") else f"an object of type {p['v']}"
    return "None" if p["t"] == "None" else f"{'an' if p['t'][0] in 'aeiou' else 'a'} {p['t']}"


def shown(p: dict) -> str:
    """A plain value written as Python would show it (a tensor: its shape, and its first numbers)."""
    t = p["t"]
    if t in ("tuple", "list"):
        inner = ", ".join(shown(v) for v in p["v"])
        return f"({inner}{',' if len(p['v']) == 1 else ''})" if t == "tuple" else f"[{inner}]"
    if t == "dict":
        return "{" + ", ".join(f"{k!r}: {shown(v)}" for k, v in p["v"]) + "}"
    if t == "tensor":
        flat = numbers(p).reshape(-1)
        head = ", ".join(f"{x:.6g}" if flat.dtype.kind in "fc" else str(x) for x in flat[:SHOWN].tolist())
        more = ", ..." if flat.size > SHOWN else ""
        return f"tensor of shape {tuple(p['shape'])} and dtype torch.{p['dtype']} [{head}{more}]"
    if t == "raised":
        return f"{p['v']}({p['message']!r})"
    if t == "None":
        return "None"
    if t == "other":
        return kind_of(p)
    if t in ("device", "dtype"):
        return f"device({p['v']!r})" if t == "device" else p["v"]
    return repr(float(p["v"]) if t == "float" else p["v"])


def judge(want: dict, got: dict, rtol: float = 0.0, atol: float = 0.0) -> str | None:
    """None if `got` is `want` (floats and tensors within rtol and atol), else a sentence saying what differs."""
    if want["t"] != got["t"] or want["t"] == "other" or (want["t"] == "tensor" and want["dtype"] != got["dtype"]):
        return f"expected {kind_of(want)}, got {kind_of(got)}" + (f": {shown(got)}" if got["t"] != "other" else "")
    t = want["t"]
    if t == "dict":  # as Python compares dicts: the same keys, in any order, with equal values
        w, g = dict(map(tuple, want["v"])), dict(map(tuple, got["v"]))
        if set(w) != set(g):
            return f"expected the keys {sorted(w, key=repr)}, got {sorted(g, key=repr)}"
        return next((f"at [{k!r}]: {inner}" for k in sorted(w, key=repr) if (inner := judge(w[k], g[k], rtol, atol))), None)
    if t in ("tuple", "list"):
        if len(want["v"]) != len(got["v"]):
            return f"expected {shown(want)}, got {shown(got)} (length {len(got['v'])}, not {len(want['v'])})"
        for k, (w, g) in enumerate(zip(want["v"], got["v"])):
            inner = judge(w, g, rtol, atol)
            if inner:
                return f"at [{k}]: {inner}" if len(want["v"]) > 1 else inner
        return None
    if t == "tensor":
        if want["shape"] != got["shape"]:
            return f"expected a tensor of shape {tuple(want['shape'])}, got shape {tuple(got['shape'])}"
        w, g = numbers(want), numbers(got)
        if w.dtype.kind in "fc":
            close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        else:
            close = g == w
        if close.all():
            return None
        where = tuple(int(i) for i in np.argwhere(~close)[0])
        tolerance = f" (tolerance rtol={rtol:g}, atol={atol:g})" if rtol or atol else ""
        return (f"{int((~close).sum())} of {close.size} values differ{tolerance}; the first at index {list(where)}: "
                f"expected {w[where].item()!r}, got {g[where].item()!r}")
    if t == "float":
        w, g = float(want["v"]), float(got["v"])
        if w == g or (math.isnan(w) and math.isnan(g)) or math.isclose(g, w, rel_tol=rtol, abs_tol=atol):
            return None
        return f"expected {w!r}, got {g!r}" + (f" (tolerance rtol={rtol:g}, atol={atol:g})" if rtol or atol else "")
    if t == "raised":
        return None if want["v"] in got.get("bases", [got["v"]]) else f"expected {want['v']} to be raised, got {got['v']}"
    return None if want.get("v") == got.get("v") else f"expected {shown(want)}, got {shown(got)}"
