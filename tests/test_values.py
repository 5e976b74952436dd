"""Values judged outside the kernel: plain data (torchcourse/values.py), `expect` (testing.py), the grading form of a
test cell and the verdict (autograder/judge.py)."""

import ast

import pytest
import torch

from autograder.grading.judge import as_graded, verdict
from torchcourse.testing import Raised, expect, outcome
from torchcourse.values import judge, plain


class EqualsAnything(tuple):
    def __eq__(self, other):
        return True


class LyingTensor(torch.Tensor):
    """Says every comparison holds and every value is one."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return torch.ones(3) if func is not torch.Tensor.__eq__ else torch.ones(3, dtype=torch.bool)


class ZerosMode(torch.overrides.TorchFunctionMode):
    """A mode that makes every tensor a torch function returns zeros."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return torch.zeros_like(out) if isinstance(out, torch.Tensor) else out


def test_a_mode_left_active_does_not_change_the_data_sent():
    """A torch function mode could make the got and the want look alike in the kernel: plain data is read without it."""
    ones, threes = torch.ones(2), torch.full((2,), 3.0)
    with ZerosMode(), pytest.raises(AssertionError, match="2 of 2 values differ"):
        expect("under a mode", ones, threes)


@pytest.mark.parametrize("got, want, says", [
    ([4, 1], (4, 1), "expected a tuple, got a list"),
    ((4, 2), (4, 1), "at [1]: expected 1, got 2"),
    (True, 1, "expected an int, got a bool"),
    (1.0, 1, "expected an int, got a float"),
    (EqualsAnything(), (4, 1), "got an object of type test_values.EqualsAnything"),
    (torch.zeros(3).as_subclass(LyingTensor), torch.ones(3), "3 of 3 values differ"),
    (torch.ones(3), torch.ones(3, dtype=torch.float64), "expected a tensor of dtype torch.float64, got a tensor of dtype torch.float32"),
    (torch.ones(2, 3), torch.ones(3, 2), "expected a tensor of shape (3, 2), got shape (2, 3)"),
    (torch.tensor([1.0, 2.5]), torch.tensor([1.0, 2.0]), "the first at index [1]: expected 2.0, got 2.5"),
    (Raised(KeyError("x")), Raised(ValueError), "expected ValueError to be raised, got KeyError"),
    (Raised(ValueError("x")), (1, 2), "expected a tuple, got an error (ValueError)"),
    ({"a": 1}, {"b": 1}, "expected the keys ['b'], got ['a']"),
    ({1: 1.0, "1": 2.0}, {1: 1.0, 2: 2.0}, "expected the keys [1, 2], got ['1', 1]"),
    (float("nan"), 1.0, "expected 1.0, got nan"),
    (torch.device("cuda", 0), torch.device("cpu"), "expected device('cpu'), got device('cuda:0')"),
    ("cpu", torch.device("cpu"), "expected a device, got a str"),
    ([torch.float32], [torch.bfloat16], "expected torch.bfloat16, got torch.float32"),
])
def test_expect_is_strict_and_says_what_differs(got, want, says):
    """Types exactly (a subclass is another type, a tensor subclass is judged by its data), then the values."""
    with pytest.raises(AssertionError) as failed:
        expect("the label", got, want)
    assert str(failed.value).startswith("the label: ") and says in str(failed.value), str(failed.value)


@pytest.mark.parametrize("got, want, tolerance", [
    ((4, 1), (4, 1), {}), (float("nan"), float("nan"), {}), (1.0 + 1e-9, 1.0, {"rtol": 1e-6}),
    (torch.ones(2, 3).t(), torch.ones(3, 2), {}), (torch.ones(2, dtype=torch.bfloat16), torch.ones(2, dtype=torch.bfloat16), {}),
    (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]), {}), (Raised(UnicodeDecodeError("utf-8", b"", 0, 1, "x")), Raised(ValueError), {}),
    (torch.ones(3, requires_grad=True) * 2, torch.full((3,), 2.0), {}), (None, None, {}), ({"a": [1, "b"]}, {"a": [1, "b"]}, {}), ({"a": 1, "b": 2}, {"b": 2, "a": 1}, {}), ({4: 0.5, 1: 1.0}, {1: 1.0, 4: 0.5}, {}),
    (torch.nn.Linear(2, 1).state_dict(), dict(torch.nn.Linear(2, 1).state_dict()), {"atol": 10.0}),
    (torch.device("cpu"), torch.device("cpu"), {}), (torch.ones(1).dtype, torch.float32, {}),
])
def test_expect_passes_equal_values(got, want, tolerance):
    """Equal values pass: views and graphs do not matter, NaN equals NaN, a ValueError subclass is a ValueError."""
    expect("equal", got, want, **tolerance)


def test_outcome_keeps_a_test_verdict_and_catches_the_rest():
    assert outcome(int, "7") == 7 and outcome(int, "x").kind == "ValueError"
    with pytest.raises(AssertionError):
        outcome(lambda: (_ for _ in ()).throw(AssertionError("refused")))


def test_the_grading_form_of_a_test_cell_holds_no_expected_value():
    """Every `want` goes, positional or keyword, over several lines, after non-ASCII text; the rest stays as written."""
    source = ('"""doc: é"""\n### BEGIN HIDDEN TESTS\nfor s in shapes:  # naïve\n'
              '    expect(f"shape {s} é", f(s), torch.empty(s).stride())\n'
              'expect("x", g(1,\n   2), want=(3,\n   4), rtol=1e-3)\nexpect("y", h(2))\nprint("done")\n### END HIDDEN TESTS\n')
    graded = as_graded(source)
    assert graded == ('"""doc: é"""\n### BEGIN HIDDEN TESTS\nfor s in shapes:  # naïve\n'
                      '    expect(f"shape {s} é", f(s))\nexpect("x", g(1,\n   2), rtol=1e-3)\nexpect("y", h(2))\n'
                      'print("done")\n### END HIDDEN TESTS\n')
    calls = [n for n in ast.walk(ast.parse(graded)) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "expect"]
    assert all(len(c.args) == 2 and not any(k.arg == "want" for k in c.keywords) for c in calls)


def record(label, value, **tolerance):
    return {"label": label, "value": plain(value), **tolerance}


def test_the_verdict_takes_labels_and_tolerances_from_the_solution():
    """What the kernel sends is judged against the solution's records: order, labels, the solution's tolerance."""
    expected = [record("a", 1.0, rtol=1e-3, atol=0.0), record("b", (1, 2))]
    assert verdict(expected, [record("a", 1.0005), record("b", (1, 2))]) == (None, None)
    assert verdict(expected, [record("a", 1.0005, rtol=1.0, atol=1.0) | {"rtol": 9}, record("b", (1, 3))])[0] == \
        "b: at [1]: expected 2, got 3"
    assert "no value was checked" in verdict(expected, [record("a", 1.0)])[0]
    assert "no longer runs as written" in verdict(expected, [record("b", (1, 2)), record("a", 1.0)])[0]
    assert "more than it makes" in verdict(expected, [*expected, record("c", 1)])[0]
    assert "could not be read" in verdict([record("t", torch.ones(2))],
                                          [{"label": "t", "value": {"t": "tensor", "dtype": "float32", "shape": [2], "data": "AAAA"}}])[0]
    assert verdict(expected, ["junk", record("b", (1, 2))])[0].startswith("a: ")


def test_the_feedback_form_of_a_verdict_says_nothing_the_kernel_chose():
    """A value the student's code returns could carry what it read of a hidden test: the safe sentence omits it."""
    secret = "HIDDEN-TEST-TEXT"
    for value in ((secret,), secret, Raised(ValueError(secret)), type(secret, (), {})()):
        full, safe = verdict([record("label", ("x",))], [record("label", value)])
        assert full and safe.startswith("label: ") and secret not in safe, (full, safe)
    assert secret not in verdict([record("label", 1)], [record(secret, 1)])[1]


def test_judge_is_the_same_on_both_sides():
    """The grader judges plain data, as `expect` does in the kernel: the same sentence."""
    with pytest.raises(AssertionError) as failed:
        expect("lbl", [4, 1], (4, 1))
    assert str(failed.value) == f"lbl: {judge(plain((4, 1)), plain([4, 1]))}"
    assert verdict([record("lbl", (4, 1))], [record("lbl", [4, 1])])[0] == str(failed.value)


def test_a_grading_removes_the_helpers_that_compute_expected_values():
    """A `def _want...` becomes `pass` (its block stays a block), with any expect inside it; other defs stay."""
    source = ('def _want_sum(x):\n    """doc"""\n    expect("inner", x, 1)\n    return x + 1\n\n'
              'def helper(x):\n    return x\n\nif True:\n    def _want_twice(x):\n        return 2 * x\n'
              'expect("a", helper(1), _want_sum(1))\nexpect("b", helper(2), want=_want_twice(2))\n')
    graded = as_graded(source)
    assert graded == ('pass\n\ndef helper(x):\n    return x\n\nif True:\n    pass\n'
                      'expect("a", helper(1))\nexpect("b", helper(2))\n')
    compile(graded, "cell", "exec")


def test_a_cells_values_leave_in_one_message_when_it_ends():
    """In a grading, `expect` without `want` sends what a cell checked as one display message when the cell ends,
    even when it fails (01's hidden tests check 1,485 values: a message each cost its grading about a second);
    the grader reads the values from it in order, and a cell that checks nothing sends nothing."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from autograder.grading.judge import sent
    from torchcourse.values import MIME
    shell = InteractiveShell.instance()
    try:
        with capture_output() as first:
            shell.run_cell("from torchcourse.testing import expect\nfor k in range(300):\n    expect(f'v{k}', k)\n"
                           "raise ValueError('the cell fails after its values')")
        with capture_output() as second:
            shell.run_cell("x = 1")
    finally:
        InteractiveShell.clear_instance()
    messages = [{"output_type": "display_data", "data": o.data} for o in first.outputs if MIME in o.data]
    values, others = sent(messages)
    assert len(messages) == 1 and not others
    assert [v["label"] for v in values] == [f"v{k}" for k in range(300)] and values[7]["value"] == plain(7)
    assert not any(MIME in o.data for o in second.outputs)
