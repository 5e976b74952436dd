"""Values judged outside the student's kernel: the test cells as a grading runs them, and the verdict on what came out.

A test cell's `expect(label, got, want)` compares in the kernel wherever a student runs it. A grading runs the cell
with every `want` removed (`as_graded`): the kernel computes only the student's values and sends them out as plain
data (torchcourse/values.py); the expected values are what the solution's run of the same cells sent, once per
batch (`reference`); the comparison and the verdict happen here. So the student's kernel never holds an expected value,
a comparison or a verdict of these tests. What a test still checks inside the kernel (a function refused, gradcheck,
shared storage) is only observed there: integrity.py watches for tampering with it, and README.md says its limits.
"""

import ast

from torchcourse.values import MIME, judge, kind_of

CALL = "expect"  # torchcourse.testing.expect, as the test cells import it


def wants(source: str) -> list[tuple[int, int]]:
    """UTF-8 byte spans of the expected values (third argument, or want=) of each `expect(...)` call in `source`,
    each from the end of the argument before it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line.encode()))

    def end(node) -> int:  # ast's columns count UTF-8 bytes
        return starts[node.end_lineno - 1] + node.end_col_offset

    spans = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == CALL):
            continue
        if len(node.args) >= 3:
            spans.append((end(node.args[1]), end(node.args[2])))
        for k, keyword in enumerate(node.keywords):
            if keyword.arg == "want":
                spans.append((end(node.args[-1] if not k else node.keywords[k - 1].value), end(keyword.value)))
    return spans


def as_graded(source: str) -> str:
    """`source` with the expected value of each `expect(...)` call removed, the rest of its text as written."""
    data = source.encode()
    for start, stop in sorted(wants(source), reverse=True):
        data = data[:start] + data[stop:]
    return data.decode()


def sent(outputs: list) -> tuple[list[dict], list]:
    """The values a test cell's kernel sent, and its other outputs."""
    found, others = [], []
    for output in outputs:
        record = output.get("data", {}).get(MIME) if output.get("output_type") == "display_data" else None
        (found if record is not None else others).append(record if record is not None else output)
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
        except (KeyError, TypeError, ValueError, AttributeError) as error:  # data no plain value could give
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
