"""Whether a callable was made by the notebook (defined in it, compiled from a string, or a built-in such as exec or
setattr standing in for code) rather than by a library installed on disk: the callbacks, signal handlers and threads
a notebook leaves are judged by it. `space`: the notebook's namespace. A library's own code passes."""
import functools
import os
import types


def unwrapped(f):
    """The function behind partials and methods."""
    for _ in range(8):
        if isinstance(f, functools.partial):
            f = f.func
        elif isinstance(f, (types.MethodType, staticmethod, classmethod)):
            f = f.__func__
        else:
            break
    return f


def of_builtins(f):
    """Whether `f` is a built-in of the `builtins` module (exec, setattr, min), which can stand in for code."""
    return isinstance(f, types.BuiltinFunctionType) and \
        getattr(getattr(f, "__self__", None), "__name__", None) == "builtins"


def runs_in(code, globals_, space):
    """Whether code running with these globals is the notebook's: run in its namespace `space`, or compiled from a
    cell (ipykernel names a cell's file ipykernel_*) or a string (no file)."""
    path = code.co_filename
    return globals_ is space or not os.path.isfile(path) or "ipykernel_" in path


def notebooks_own(f, space, depth=0):
    """Whether `f` is the notebook's code. Nothing of it runs: its type's own dict is read past any descriptor."""
    f = unwrapped(f)
    if isinstance(f, types.FunctionType):
        return runs_in(f.__code__, f.__globals__, space)
    if isinstance(f, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return of_builtins(f)
    if type.__dict__["__dict__"].__get__(type(f)).get("__module__") == "__main__":
        return True
    call = type.__dict__["__dict__"].__get__(type(f)).get("__call__") if depth == 0 else None  # a callable instance
    return isinstance(call, types.FunctionType) and notebooks_own(call, space, 1)
