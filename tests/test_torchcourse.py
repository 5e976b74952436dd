"""The helper package the notebooks import."""

import html
import re
import subprocess
import sys
import time

import matplotlib
import pytest
import torch
from torch.utils.data import DataLoader

from torchcourse.plots import plot_storage, storage_positions
from torchcourse.seed import WorkerDraws, seed_everything, seed_worker
from torchcourse.testing import NO_AUTOGRAD, SDPA_KERNELS, no_autograd, refused, refused_ops
from torchcourse.timing import Comparison, compare, time_it
from torchcourse.widgets import describe, stride_explorer

matplotlib.use("Agg")


def test_import_does_no_work():
    code = ("import sys, torchcourse, torchcourse.testing, torchcourse.checkpoint_helpers; "  # a grading preloads them
            "print(sorted(m for m in ('torch', 'matplotlib', 'ipywidgets') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


VIEWS = {
    "contiguous": lambda x: x,
    "transpose": lambda x: x.t(),
    "strided slice": lambda x: x[1:, ::2],
    "column": lambda x: x[:, 2],
    "expand": lambda x: x[:, :1].expand(-1, 5),
    "permuted 3-d": lambda x: x.reshape(2, 2, 6)[:, 1:].permute(2, 0, 1),
}


@pytest.mark.parametrize("make_view", VIEWS.values(), ids=VIEWS.keys())
def test_storage_positions_match_data_pointers(make_view):
    base = torch.arange(24.0).reshape(4, 6)
    view = make_view(base)
    positions = storage_positions(view)
    assert positions.shape == view.shape
    for index in torch.cartesian_prod(*[torch.arange(s) for s in view.shape]).reshape(-1, view.dim()).tolist():
        element = view[tuple(index)]
        assert positions[tuple(index)] == (element.data_ptr() - base.data_ptr()) // base.element_size()


def test_plot_shades_exactly_the_cells_a_view_reads():
    fig = plot_storage(torch.arange(12).reshape(3, 4)[1:, ::2])
    top = fig.axes[0]
    shaded = [int(p.get_x()) for p in top.patches if p.get_facecolor()[:3] != (1.0, 1.0, 1.0)]
    assert shaded == [4, 6, 8, 10] and len(top.patches) == 12


def test_explorer_follows_the_readers_input():
    explorer = stride_explorer(shape="3, 4", view="x.t()")
    (shape_box, view_box), text, picture = explorer.children[0].children, *explorer.children[1:]
    assert "strides (1, 4)" in text.value and bytes(picture.value).startswith(b"\x89PNG")
    first_picture = picture.value
    view_box.value = "x[:, :1].expand(-1, 4)"
    assert "strides (4, 0)" in text.value and bytes(picture.value) != bytes(first_picture)
    shape_box.value = "2, 3, 4"
    view_box.value = "x.permute(2, 0, 1)"
    assert html.escape(describe(torch.arange(24).reshape(2, 3, 4).permute(2, 0, 1))) in text.value
    view_box.value = "x.view(5)"  # an impossible view is reported, not raised
    assert "RuntimeError" in text.value


def test_seed_everything_repeats_every_generator():
    first = (seed_everything(3), torch.rand(3))
    second = (seed_everything(3), torch.rand(3))
    assert torch.equal(first[1], second[1])
    assert torch.equal(torch.rand(2, generator=first[0]), torch.rand(2, generator=second[0]))



def test_workers_draw_apart_without_worker_init_fn_and_seed_worker_reaches_a_dataset_rng():
    def first_draws(seed, init=None):
        loader = DataLoader(WorkerDraws(4), batch_size=2, num_workers=2, generator=torch.Generator().manual_seed(seed),
                            worker_init_fn=init)
        return {int(b["worker"][0]): tuple(b[k][0].item() for k in ("random", "numpy", "torch", "own rng")) for b in loader}
    plain, again, seeded = first_draws(42), first_draws(42), first_draws(42, seed_worker)
    assert plain == again and seeded == first_draws(42, seed_worker), "the same generator seed must repeat every draw"
    assert all(a != b for a, b in zip(plain[0][:3], plain[1][:3])), "the DataLoader seeds random, NumPy and torch per worker"
    assert plain[0][3] == plain[1][3], "a data set's own generator is copied into each worker in the same state"
    assert seeded[0][3] != seeded[1][3], "seed_worker gives each worker's copy a seed of its own"
    assert first_draws(7, seed_worker) != seeded, "another generator seed, other draws"

def test_time_it_synchronizes_the_device_around_the_clock(monkeypatch):
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    seconds = time_it(lambda: events.append("call"), "cuda", warmup=2, repeat=3, number=2)
    assert seconds >= 0
    assert events == ["call"] * 2 + ["sync", "call", "call", "sync"] * 3
    assert time_it(lambda: time.sleep(0.01), "cpu", warmup=0, repeat=3) >= 0.009
    durations = iter([0.05, 0.0, 0.0])
    assert time_it(lambda: time.sleep(next(durations)), "cpu", warmup=0, repeat=3, reduce=min) < 0.04


def test_compare_interleaves_the_candidates_and_claims_only_beyond_the_noise():
    calls = []
    fast, slow = (lambda: calls.append("fast")), (lambda: (calls.append("slow"), time.sleep(0.004)))
    result = compare({"fast": fast, "slow": slow}, "cpu", rounds=3, min_time=0.0, warmup=0)
    timed = calls[-9:]  # one call per candidate and round, the first candidate twice (its noise)
    assert timed == ["fast", "slow", "fast"] * 3, "rounds alternate the candidates"
    assert result.speedup("fast", "slow") > 10 and "runs at" in result.verdict("fast", "slow")
    assert result.seconds["slow"] >= 0.004
    even = Comparison(seconds={"a": 1.0, "b": 1.04}, noise=0.05)
    assert "no more than the noise" in even.verdict("a", "b")
    assert "1.04x" in Comparison(seconds={"a": 1.0, "b": 1.04}, noise=0.01).verdict("a", "b")
    assert [even.direction(r) for r in (1.06, 1.04, 0.96, 0.94)] == [1, 0, 0, -1]
    assert "no more than the noise (2%)" in Comparison(seconds={"a": 1.0, "b": 1.01}, noise=0.0).verdict("a", "b")
    with pytest.raises(ValueError):
        compare({}, "cpu")


def test_refused_raises_inside_the_block_and_restores_own_and_inherited_attributes():
    own, inherited = torch.autograd.grad, torch.Tensor.unfold
    with pytest.raises(AssertionError, match="not here"):
        with refused("not here", (torch.autograd, "grad"), (torch.Tensor, "unfold")):
            torch.arange(4.0).unfold(0, 2, 1)
    assert torch.autograd.grad is own and torch.Tensor.unfold is inherited and "unfold" not in vars(torch.Tensor)


def test_no_autograd_refuses_the_engine_by_every_name_and_allows_a_backward_called_directly():
    """Every way into autograd's engine raises inside the block (issue 40: `_engine_run_backward` passed a refusal by
    name); the same arithmetic by hand and a Function's backward applied directly run; the dispatch modes are left
    as they were, and a block that takes the watch off fails."""
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    engine = torch.autograd.variable.Variable._execution_engine
    ways_in = {
        "Tensor.backward": lambda: (x * x).sum().backward(),
        "torch.autograd.grad": lambda: torch.autograd.grad((x * x).sum(), x),
        "graph._engine_run_backward": lambda: torch.autograd.graph._engine_run_backward(
            ((x * x).sum(),), (torch.ones((), dtype=torch.float64),), False, False, (), True, True),
        "the engine itself": lambda: engine.run_backward(((x * x).sum(),), (torch.ones((), dtype=torch.float64),),
                                                         False, False, (), True, True),
        "torch.func.grad": lambda: torch.func.grad(lambda t: (t * t).sum())(x.detach()),
    }
    for way, run in ways_in.items():
        with pytest.raises(AssertionError, match=re.escape(NO_AUTOGRAD)):
            with no_autograd():
                run()
        assert torch._C._len_torch_dispatch_stack() == 0, way

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t * t

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return 2 * t * g

    y = Square.apply(x)
    with torch.no_grad(), no_autograd():
        by_hand = 2 * (1 - torch.tanh(x) ** 2)
        applied = y.grad_fn.apply(torch.ones(3, dtype=torch.float64))
    assert torch.equal(applied, 2 * x.detach()) and by_hand.shape == (3,)
    with pytest.raises(AssertionError, match="no autograd here: the block changed torch's dispatch modes"):
        with no_autograd():
            torch._C._pop_torch_dispatch_stack(None)
            torch._C._push_on_torch_dispatch_stack(torch.utils._python_dispatch.TorchDispatchMode())
    while torch._C._len_torch_dispatch_stack():
        torch._C._pop_torch_dispatch_stack(None)


def test_refused_ops_refuses_an_operator_by_every_name():
    """unfold through Tensor, TensorBase and torch.ops; scaled dot-product attention through F, torch.ops and its math
    path; what is written out by hand runs. Every kernel named is one this torch has."""
    import torch.nn.functional as F

    assert all(hasattr(torch.ops.aten, name) for name in SDPA_KERNELS)
    x = torch.arange(6.0)
    for run in (lambda: x.unfold(0, 2, 1), lambda: torch._C.TensorBase.unfold(x, 0, 2, 1),
                lambda: torch.ops.aten.unfold(x, 0, 2, 1)):
        with pytest.raises(AssertionError, match="not unfold"):
            with refused_ops("not unfold", "unfold"):
                run()
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    mask = torch.ones(4, 4, dtype=torch.bool).tril()
    for run in (lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                lambda: torch.ops.aten.scaled_dot_product_attention(q, k, v, is_causal=True),
                lambda: torch.ops.aten._scaled_dot_product_attention_math(q.double(), k.double(), v.double())):
        with pytest.raises(AssertionError, match="by hand"):
            with refused_ops("by hand", *SDPA_KERNELS):
                run()
    with refused_ops("by hand", *SDPA_KERNELS, "unfold"):
        by_hand = (q @ k.transpose(-1, -2) / 8 ** 0.5).masked_fill(~mask, float("-inf")).softmax(-1) @ v
        window = x.as_strided((5, 2), (1, 1))
    assert by_hand.shape == (1, 2, 4, 8) and window.shape == (5, 2) and torch._C._len_torch_dispatch_stack() == 0
