"""Which lesson cells a grading may skip: tagged as not needed, as released, and needed by nothing that runs after.

A cell is skipped only when all three hold, so that a hand-in is graded as it would run top to bottom: a lesson cell
the student edited runs, and so does a released one whose names a later cell that runs (an answer of the student's
own, say) reads. What a cell does besides defining names (seeding, writing files) is not seen here: the course's
tests prove, by grading the solutions with these cells skipped, that the exercises do not depend on it.
"""

import ast
import builtins
import re
import symtable
from functools import lru_cache

from IPython.core.inputtransformer2 import TransformerManager

from torchcourse.format import SKIP_TAG, grading

# A cell calling one of these can read any name: nothing before it is skipped.
DYNAMIC = {"exec", "eval", "globals", "locals", "vars", "__import__", "compile"}
# Statements that, once past, have bound their names for sure (a loop may not run, a branch may not be taken).
UNCONDITIONAL = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                 ast.Import, ast.ImportFrom)
MAGICS = {"run_line_magic", "run_cell_magic", "system", "getoutput"}  # their code is a string to Python
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def named_in_globals(nodes: list[ast.AST]) -> tuple[set[str], bool]:
    """Names read as `globals().get("x")` or `globals()["x"]` in a statement's `nodes`, and whether every `globals()`
    is read so (a test may look a student's function up this way; any other use of globals() can read anything)."""
    calls = [node for node in nodes if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
             and node.func.id == "globals"]
    found, resolved = set(), set()
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
            inner, key = node.func.value, node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            inner, key = node.value, node.slice
        else:
            continue
        if any(inner is call for call in calls) and isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.add(key.value)
            resolved.add(id(inner))
    return found, len(resolved) == len(calls)


def scope_names(statement: ast.stmt) -> tuple[set[str], set[str]]:
    """Global names one statement reads and binds, inside its functions, classes and comprehensions too."""
    reads, binds, tables = set(), set(), [symtable.symtable(ast.unparse(statement), "<cell>", "exec")]
    while tables:
        table = tables.pop()
        tables += table.get_children()
        module = table.get_type() == "module"
        for symbol in table.get_symbols():
            if symbol.is_referenced() and (module or symbol.is_global()):
                reads.add(symbol.get_name())
            if (symbol.is_assigned() or symbol.is_imported()) and (module or symbol.is_declared_global()):
                binds.add(symbol.get_name())
    nodes = list(ast.walk(statement))  # walked once, read three times (the walk is most of a cell's reading)
    looked_up, only_so = named_in_globals(nodes)
    reads |= looked_up
    if only_so:
        reads.discard("globals")
    if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
        reads.add(statement.target.id)  # `n += 1` reads n (in a function, n is local, or `global` and rare)
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MAGICS:
            for arg in node.args:  # `%timeit f(x)`: every word of a magic's code may be a name
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    reads |= set(IDENTIFIER.findall(arg.value))
    return reads, binds


def targets(target: ast.expr) -> set[str]:
    """Names an assignment target binds (`a, (b, c)`); none for an attribute or an item."""
    return {node.id for node in ast.walk(target) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


def follow(statements: list, bound: set[str], reads: set[str]) -> set[str]:
    """Walk statements in the order they run, adding to `reads` the global names read while not yet bound for sure;
    return the names bound for sure after them (a loop's body may not run, a branch may not be taken)."""
    bound = set(bound)
    for st in statements:
        if isinstance(st, (ast.For, ast.AsyncFor)):
            reads |= scope_names(ast.Expr(st.iter))[0] - bound
            follow(st.body, bound | targets(st.target), reads)
            follow(st.orelse, bound, reads)
        elif isinstance(st, (ast.If, ast.While)):
            reads |= scope_names(ast.Expr(st.test))[0] - bound
            taken, other = follow(st.body, bound, reads), follow(st.orelse, bound, reads)
            if isinstance(st, ast.If):
                bound |= taken & other
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            for item in st.items:
                reads |= scope_names(ast.Expr(item.context_expr))[0] - bound
                if item.optional_vars is not None:
                    bound |= targets(item.optional_vars)
            bound = follow(st.body, bound, reads)
        elif isinstance(st, ast.Try):
            follow(st.body + st.orelse, bound, reads)
            for handler in st.handlers:
                if handler.type is not None:
                    reads |= scope_names(ast.Expr(handler.type))[0] - bound
                follow(handler.body, bound | ({handler.name} if handler.name else set()), reads)
            bound = follow(st.finalbody, bound, reads)
        else:
            got, made = scope_names(st)
            reads |= got - bound
            if isinstance(st, UNCONDITIONAL):
                bound |= made
    return bound


@lru_cache(maxsize=4096)
def names(source: str) -> tuple[frozenset[str] | None, frozenset[str], frozenset[str]]:
    """What a cell needs from the cells above (the global names it reads before binding them for sure; None: any
    name, when it calls exec or globals()), the names it binds for sure, and every global name it may bind.
    IPython's syntax is read as the calls it becomes; a cell that does not parse fails at once, reading and binding
    nothing."""
    try:
        tree = ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError):
        return frozenset(), frozenset(), frozenset()
    reads: set[str] = set()
    bound = follow(tree.body, set(), reads)
    binds = set().union(*(scope_names(st)[1] for st in tree.body))
    everything = bool(reads & DYNAMIC)  # checked before the built-ins go: exec and globals are built-ins
    return (None if everything else frozenset(reads - set(dir(builtins)))), frozenset(bound), frozenset(binds)


def tagged(cell) -> bool:
    return cell.cell_type == "code" and SKIP_TAG in cell.get("metadata", {}).get("tags", [])


def skippable(nb, release) -> set[str]:
    """Ids of the cells of `nb` that need not run: released as tagged, unchanged, and unread by any later cell run."""
    released = {cell.source.rstrip() for cell in release.cells if tagged(cell) and not grading(cell)}
    needed: set[str] | None = set()  # what the cells that run after the one looked at need from above; None: all
    skipped = set()
    for cell in reversed(nb.cells):
        if cell.cell_type != "code":
            continue
        reads, bound, binds = names(cell.source)
        if not grading(cell) and cell.source.rstrip() in released and needed is not None and reads is not None \
                and not binds & needed:  # (a cell calling exec may bind anything)
            skipped.add(cell.id)
            continue
        if needed is not None:
            needed = None if reads is None else (needed - bound) | reads
    return skipped
