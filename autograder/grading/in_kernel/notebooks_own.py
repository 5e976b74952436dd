"""Whether a callable was made by the notebook (defined in it, compiled from a string, or a built-in such as exec or
setattr standing in for code) rather than by a library installed on disk: the callbacks, signal handlers and threads
a notebook leaves are judged by it. `space`: the notebook's namespace. A library's own code passes."""
import functools
import os
import types


def is_a(value, kind):
    """isinstance without running the value's code: isinstance reads `value.__class__`, which an object of the
    notebook's can answer with a property (and claim to be a function); its type cannot lie."""
    return issubclass(type(value), kind)


def module_of(kind):
    """The module a class says it was defined in, read from its own dict ("" where that is not a plain str: a str
    subclass of the notebook's would answer == with its own code)."""
    found = type.__dict__["__dict__"].__get__(kind).get("__module__")
    return found if type(found) is str else ""


def unwrapped(f):
    """The function behind partials and methods."""
    for _ in range(8):
        if type(f) is functools.partial:  # exact types: a subclass's attributes could run the notebook's code
            f = f.func
        elif type(f) in (types.MethodType, staticmethod, classmethod):
            f = f.__func__
        else:
            break
    return f


def of_builtins(f):
    """Whether `f` is a built-in of the `builtins` module (exec, setattr, min), which can stand in for code."""
    return is_a(f, types.BuiltinFunctionType) and \
        getattr(getattr(f, "__self__", None), "__name__", None) == "builtins"


def runs_in(code, globals_, space):
    """Whether code running with these globals is the notebook's: run in its namespace `space`, or compiled from a
    cell (ipykernel names a cell's file ipykernel_*) or a string (no file)."""
    path = code.co_filename
    return globals_ is space or not os.path.isfile(path) or "ipykernel_" in path


def notebooks_own(f, space, depth=0):
    """Whether `f` is the notebook's code. Nothing of it runs: its type's own dict is read past any descriptor."""
    f = unwrapped(f)
    if is_a(f, types.FunctionType):
        return runs_in(f.__code__, f.__globals__, space)
    if is_a(f, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return of_builtins(f)
    if module_of(type(f)) == "__main__":
        return True
    call = type.__dict__["__dict__"].__get__(type(f)).get("__call__") if depth == 0 else None  # a callable instance
    return is_a(call, types.FunctionType) and notebooks_own(call, space, 1)
