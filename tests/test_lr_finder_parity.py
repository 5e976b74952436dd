"""Notebook 04's reference lr_find and suggest_lr agree with torch-lr-finder, whose range test and steepest-gradient
suggestion the exercises follow."""

import contextlib
import io
import math

import matplotlib
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch_lr_finder import LRFinder

from course import solution_answers

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)


def reference(answer_id: str, name: str):
    """A function of the solution notebook's answer cell `answer_id`."""
    namespace = {}
    exec("import copy, math\nimport numpy as np\nimport torch", namespace)
    exec(solution_answers("04_training")[answer_id], namespace)
    return namespace[name]


def seeded_run():
    """A small classifier, SGD with momentum and a shuffling loader, the same on every call."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(200, 8), torch.randint(0, 3, (200,)))
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    loader = DataLoader(data, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(1))
    return model, optimizer, loader


def library_finder(smooth: float, end_lr: float, num_iter: int) -> LRFinder:
    """torch-lr-finder after one seeded range test, its model and optimizer reset."""
    model, optimizer, loader = seeded_run()
    finder = LRFinder(model, optimizer, F.cross_entropy, device="cpu")
    finder.range_test(loader, start_lr=1e-4, end_lr=end_lr, num_iter=num_iter, smooth_f=smooth, diverge_th=5)
    finder.reset()
    return finder


def range_test(use_library: bool, smooth: float, end_lr: float, num_iter: int):
    """One seeded range test on a small classifier, by torch-lr-finder or by the reference: (lrs, losses)."""
    if use_library:
        history = library_finder(smooth, end_lr, num_iter).history
        return history["lr"], history["loss"]
    model, optimizer, loader = seeded_run()
    return reference("ex5_lr_find", "lr_find")(model, loader, F.cross_entropy, optimizer, start_lr=1e-4, end_lr=end_lr,
                                               num_iter=num_iter, smooth=smooth, diverge=5.0)


@pytest.mark.parametrize("smooth, end_lr, num_iter", [(0.05, 10.0, 100), (0.0, 1.0, 30), (0.3, 1000.0, 80)])
def test_reference_lr_find_matches_torch_lr_finder(smooth, end_lr, num_iter):
    ours, theirs = range_test(False, smooth, end_lr, num_iter), range_test(True, smooth, end_lr, num_iter)
    assert len(ours[0]) == len(theirs[0]), f"stop point differs: {len(ours[0])} points against {len(theirs[0])}"
    assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(ours[0], theirs[0])), "learning rates differ"
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(ours[1], theirs[1])), "smoothed losses differ"


def test_the_comparison_covers_a_divergence_stop():
    lrs, _ = range_test(True, 0.3, 1000.0, 80)
    assert len(lrs) < 80, "the last case should stop early, so that stop points are compared too"


@pytest.mark.parametrize("smooth, end_lr, num_iter", [(0.05, 10.0, 100), (0.3, 1000.0, 80)])
def test_reference_suggest_lr_matches_torch_lr_finder(smooth, end_lr, num_iter):
    """On a finite curve, suggest_lr picks the point of torch-lr-finder's plot(suggest_lr=True): the steepest
    numpy.gradient of the losses left after skipping (that library does not drop non-finite losses; the exercise does)."""
    finder = library_finder(smooth, end_lr, num_iter)
    lrs, losses = finder.history["lr"], finder.history["loss"]
    assert all(math.isfinite(loss) for loss in losses), "a finite curve, where both rules apply"
    fig, ax = plt.subplots()
    with contextlib.redirect_stdout(io.StringIO()):  # the library prints its suggestion
        _, theirs = finder.plot(skip_start=10, skip_end=5, ax=ax, suggest_lr=True)
    plt.close(fig)
    assert reference("ex6_suggest_lr", "suggest_lr")(lrs, losses, skip_start=10, skip_end=5) == theirs
