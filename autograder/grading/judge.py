"""Values judged outside the student's kernel: the test cells as a grading runs them, and the verdict on what came out.

A test cell's `expect(label, got, want)` compares in the kernel wherever a student runs it. A grading runs the cell
with every `want` removed (`as_graded`): the kernel computes only the student's values and sends them out as plain
data (torchcourse/values.py); the expected values are what the solution's run of the same cells sent, once per
batch (`execute.expected_values`); the comparison and the verdict happen here. So the student's kernel never holds an expected value,
a comparison or a verdict of these tests. What a test still checks inside the kernel (a function refused, gradcheck,
shared storage) is only observed there: integrity.py watches for tampering with it, and README.md says its limits.
"""

import ast
from functools import lru_cache

from torchcourse.values import MIME, judge, kind_of

CALL = "expect"  # torchcourse.testing.expect, as the test cells import it
HELPER = "_want"  # a test's function named _want... computes expected values only: a grading removes it too


def removals(source: str) -> list[tuple[int, int, bytes]]:
    """(start, stop, filler) UTF-8 byte spans a grading takes out of `source`: the expected value (third argument, or
    want=) of each `expect(...)` call, from the end of the argument before it; each `def _want...` (a reference the
    test computes expected values with), whose text becomes `pass` so that its block stays a block."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line.encode()))

    def at(line, col) -> int:  # ast's columns count UTF-8 bytes
        return starts[line - 1] + col

    spans = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name.startswith(HELPER) and not node.decorator_list:
            spans.append((at(node.lineno, node.col_offset), at(node.end_lineno, node.end_col_offset), b"pass"))
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == CALL):
            continue
        if len(node.args) >= 3:
            spans.append((at(node.args[1].end_lineno, node.args[1].end_col_offset),
                          at(node.args[2].end_lineno, node.args[2].end_col_offset), b""))
        for k, keyword in enumerate(node.keywords):
            if keyword.arg == "want":
                before = node.keywords[k - 1].value if k else node.args[-1]
                spans.append((at(before.end_lineno, before.end_col_offset),
                              at(keyword.value.end_lineno, keyword.value.end_col_offset), b""))
    # a span inside another (an expect in a _want helper) goes with it
    return [s for s in spans if not any(o is not s and o[0] <= s[0] and s[1] <= o[1] for o in spans)]


def wants(source: str) -> bool:
    """Whether a grading takes anything out of `source` (it has expected values)."""
    return bool(removals(source))


@lru_cache(maxsize=4096)
def as_graded(source: str) -> str:
    """`source` as a grading runs it: without the expected values and the `_want...` helpers, the rest as written.
    Kept: every hand-in runs the same test cells (2 ms each for 07's), read once in the batch's process
    (grade_one.warm_up), whose gradings fork from it."""
    data = source.encode()
    for start, stop, filler in sorted(removals(source), reverse=True):
        data = data[:start] + filler + data[stop:]
    return data.decode()


def sent(outputs: list) -> tuple[list, list]:
    """The values a test cell's kernel sent, and its other outputs. testing.expect sends a cell's values as one list;
    anything else a kernel sends under that type counts as one value, judged as any other."""
    found, others = [], []
    for output in outputs:
        records = output.get("data", {}).get(MIME) if output.get("output_type") == "display_data" else None
        if records is None:
            others.append(output)
        else:
            found += records if isinstance(records, list) else [records]
    return found, others


def well_formed(record) -> bool:
    return (isinstance(record, dict) and isinstance(record.get("label"), str) and isinstance(record.get("value"), dict)
            and isinstance(record["value"].get("t"), str))


def verdict(expected: list[dict], got: list[dict]) -> tuple[str | None, str | None]:
    """(None, None) if the kernel sent the solution's labels in order with values equal to the solution's; else the
    first difference as `expect` words it, and the same said without anything the kernel chose (the feedback's
    words: a value or a type name could carry what the student's code read of a hidden test). The labels and the
    tolerances are the solution's, never the kernel's."""
    for k, want in enumerate(expected):
        if k >= len(got):
            said = f"{want['label']}: no value was checked (the test stopped before it)"
            return said, said
        record = got[k]
        if not well_formed(record) or record["label"] != want["label"]:
            return (f"{want['label']}: the test sent {str(record.get('label') if isinstance(record, dict) else None)[:200]!r} "
                    "in its place: it no longer runs as written"), f"{want['label']}: the test no longer runs as written"
        try:
            problem = judge(want["value"], record["value"], want.get("rtol", 0.0), want.get("atol", 0.0))
        except Exception as error:  # data no plain value could give (nested past the stack, say): this test fails
            problem = f"the value sent could not be read ({type(error).__name__})"
        if problem:
            same_type = record["value"]["t"] == want["value"]["t"] and \
                record["value"].get("dtype", "") == want["value"].get("dtype", "")
            return f"{want['label']}: {problem}", (f"{want['label']}: not the expected value" if same_type else
                                                   f"{want['label']}: expected {kind_of(want['value'])}, got another type")
    if len(got) > len(expected):
        said = f"the test sent {len(got) - len(expected)} value(s) more than it makes: it no longer runs as written"
        return said, said
    return None, None
