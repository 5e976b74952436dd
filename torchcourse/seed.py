"""Making runs repeatable."""

import random

import numpy as np
import torch


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and torch (all devices); return a torch Generator seeded the same."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return torch.Generator().manual_seed(seed)


def seed_worker(worker_id: int) -> None:
    """DataLoader `worker_init_fn`: seed NumPy and `random` in each worker from the seed torch gave it."""
    # torch seeds each worker as base_seed + worker_id (base_seed drawn from the loader's generator),
    # but NumPy and `random` would otherwise start from the parent's state in every worker.
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)
