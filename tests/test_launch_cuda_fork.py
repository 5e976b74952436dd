"""A gloo rank forked from a process that used CUDA says that CUDA is unavailable (torchcourse/launch.py): notebook
07's distributed checkpoints run such ranks on a GPU machine, and torch.distributed.checkpoint's file writer asks
torch.cuda.is_available() before it touches CUDA, which a forked child cannot start."""

import torch

from torchcourse.launch import launch


def cuda_seen(rank, world_size):
    return torch.cuda.is_available()


def test_a_gloo_rank_forked_from_a_cuda_process_reports_no_cuda(monkeypatch):
    # As in a child of a process that used CUDA: torch marks the fork as bad, and the device count that
    # is_available() reads is remembered from the parent, so it would still say True.
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert launch(cuda_seen, 2, backend="gloo", start_method="fork", timeout=60) == [False, False]


def test_a_gloo_rank_forked_from_a_process_without_cuda_is_left_alone(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine whose parent never used CUDA
    assert launch(cuda_seen, 2, backend="gloo", start_method="fork", timeout=60) == [True, True]
