"""The linter, as pyproject.toml configures it, finds nothing in the course's code and notebook sources; the grader's
imports go downward only."""

import ast
import functools
import subprocess
import sys

from course import ROOT


def test_ruff_finds_nothing():
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format=concise", ROOT],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


WINGS = ("kernel", "grading", "reports", "run")  # the grader's wings, lowest first; the base (autograder/*.py) below
MAX_FLOORS = 5  # __main__ -> run -> grading or gradebook -> kernel or results -> a module importing nothing of ours


def grader_imports() -> dict[str, set[str]]:
    """Each module of autograder/ (dotted, without the package's name) -> the modules of ours it imports, anywhere."""
    root = ROOT / "autograder"
    modules = {".".join(p.relative_to(root).with_suffix("").parts): p for p in root.rglob("*.py")
               if p.name != "__init__.py" and "in_kernel" not in p.parts}  # in_kernel: code the kernel runs
    imports = {}
    for name, path in modules.items():
        package, found = name.split(".")[:-1], set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[:len(package) - node.level + 1]
                stem = base + (node.module.split(".") if node.module else [])
                found |= {".".join(stem)} | {".".join(stem + [a.name]) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autograder."):
                stem = node.module.split(".")[1:]
                found |= {".".join(stem)} | {".".join(stem + [a.name]) for a in node.names}
        imports[name] = {m for m in found if m in modules and m != name}
    return imports


def wing(module: str) -> int:
    """0 for the base, then each wing upward; the command line on top."""
    return len(WINGS) + 1 if module == "__main__" else WINGS.index(module.split(".")[0]) + 1 if "." in module else 0


def test_the_graders_imports_go_downward_only():
    """No wing imports from a wing above it, and no chain of imports is taller than MAX_FLOORS modules."""
    imports = grader_imports()
    assert not [(m, t) for m, ts in imports.items() for t in ts if wing(t) > wing(m)]

    @functools.cache
    def floors(module: str) -> int:  # a cycle would recurse without end: RecursionError fails the test too
        return 1 + max((floors(t) for t in imports[module]), default=0)

    tallest = max(imports, key=floors)
    assert floors(tallest) <= MAX_FLOORS, f"{tallest} stands {floors(tallest)} floors high"
