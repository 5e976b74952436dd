"""What notebook 07's visible tests and hidden tests share: gradient checkpointing seen from outside a model, and a
DCP checkpoint saved on N ranks. A test imports them from here rather than reading an earlier cell's globals, which
the answer it calls could bind to something else; a grading checks that nothing was set here (autograder/README.md).
torch is imported where it is used: a grading loads this module before the notebook runs, and torch loads as the
notebook chooses."""

from __future__ import annotations

import os
import tempfile
import warnings
from functools import cache


def seeded(model, seed: int):
    """The model with weights drawn by the test (each scaled by 1/fan-in): its values then depend on forward alone."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return model


def outputs_and_grads(model, x, seed: int, run) -> list:
    """run(model, x) from the RNG state `seed`, then backward of its sum of squares: [output, x.grad, weights' .grad]."""
    import torch

    model.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(x.requires_grad)
    torch.manual_seed(seed)
    y = run(model, x)
    y.pow(2).sum().backward()
    return [y.detach(), x.grad, [p.grad for p in model.parameters()]]


def blocks_one_by_one(model, x):
    """`model.blocks` run one after another: what a checkpointed forward must equal."""
    for block in model.blocks:
        x = block(x)
    return x


def blocks_rerun_in_backward(model, x) -> tuple[list[int], list[list[int]]]:
    """The indices of `model.blocks` that forward runs, and the groups of consecutive blocks that backward runs again."""
    log = []
    handles = [b.register_forward_pre_hook(lambda module, args, i=i: log.append(i)) for i, b in enumerate(model.blocks)]
    try:
        out = model(x)
        forward, log[:] = list(log), []
        out.sum().backward()
    finally:
        for h in handles:
            h.remove()
    groups = []
    for i in log:
        if groups and i == groups[-1][-1] + 1:
            groups[-1].append(i)
        else:
            groups.append([i])
    return forward, groups


# Exercise 6: a small model trained a few steps, on N ranks (sharded) or in one process, on the same 24 samples
@cache
def data() -> tuple:
    """The 24 samples (x of width 8, y of width 4)."""
    import torch

    g = torch.Generator().manual_seed(6)
    return torch.randn(24, 8, generator=g), torch.randn(24, 4, generator=g)


def net(seed: int):
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def optimizer_of(kind: str, model):
    import torch

    if kind == "adam":
        return torch.optim.Adam(model.parameters(), lr=0.05)
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train(model, optimizer, x, y, steps: int) -> None:
    import torch.nn.functional as F

    for _ in range(steps):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()


def ranks_train_and_save(rank: int, world_size: int, path, kind: str, steps: int, save_distributed) -> None:
    """One rank: the model sharded over a CPU mesh, `steps` steps on this rank's share of the batch, save_distributed."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = net(0)
    fully_shard(model, mesh=init_device_mesh("cpu", (world_size,)))
    optimizer = optimizer_of(kind, model)
    x, y = data()
    train(model, optimizer, x.chunk(world_size)[rank], y.chunk(world_size)[rank], steps)
    save_distributed(path, model, optimizer)


def resumed(path, kind: str, more: int, load_single) -> list:
    """load_single into a plain model with other weights, `more` steps on the whole batch: [weights, optimizer state]."""
    model = net(1)
    optimizer = optimizer_of(kind, model)
    load_single(path, model, optimizer)
    train(model, optimizer, *data(), more)
    return [[p.detach() for p in model.parameters()], [optimizer.state[p] for p in model.parameters()]]


def one_process(kind: str, steps: int) -> list:
    """One process, every sample in each step, from the same weights: [weights, optimizer state]."""
    model = net(0)
    optimizer = optimizer_of(kind, model)
    train(model, optimizer, *data(), steps)
    return [[p.detach() for p in model.parameters()], [optimizer.state[p] for p in model.parameters()]]


def saved_names(path) -> list[str]:
    """The names of the tensors and values in a DCP checkpoint, as its .metadata lists them."""
    import torch.distributed.checkpoint as dcp

    return sorted(dcp.FileSystemReader(path).read_metadata().state_dict_metadata)


def names_one_process_saves(kind: str) -> list[str]:
    """The names a one-process dcp.save of {"model": ..., "optimizer": ...}, get_state_dict's two dicts, writes."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model = net(0)
    model_state, optimizer_state = get_state_dict(model, optimizer_of(kind, model))
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=folder, no_dist=True)
        return saved_names(folder)


def writers(path) -> list:
    """.metadata in the folder, and the ranks that wrote a data file (DCP names them __RANK_N.distcp)."""
    files = sorted(os.listdir(path))
    return [".metadata" in files, sorted({f.split("_")[2] for f in files if f.endswith(".distcp")})]
