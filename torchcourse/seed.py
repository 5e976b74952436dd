"""Making runs repeatable."""

import random

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and torch (all devices); return a torch Generator seeded the same."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return torch.Generator().manual_seed(seed)


def seed_worker(worker_id: int) -> None:
    """DataLoader `worker_init_fn`: reseed `random`, NumPy and a dataset's own `rng` from this worker's torch seed."""
    # The DataLoader already seeds `random`, torch and NumPy in each worker (base_seed + worker_id, base_seed drawn
    # from the loader's generator: torch/utils/data/_utils/worker.py). It cannot reach a generator the dataset holds
    # (a numpy Generator as `self.rng`): each worker gets a copy in the same state and draws the same numbers.
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)
    info = get_worker_info()
    if info is not None and hasattr(info.dataset, "rng"):
        info.dataset.rng = np.random.default_rng(worker_seed)


class WorkerDraws(Dataset):
    """Item i: the worker that fetched it and one number from each generator (`random`, NumPy, torch, its own rng)."""

    def __init__(self, n: int, seed: int = 0):
        self.n = n
        self.rng = np.random.default_rng(seed)  # a generator of its own, copied into every worker

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        info = get_worker_info()
        return {"worker": -1 if info is None else info.id, "random": random.random(), "numpy": float(np.random.random()),
                "torch": torch.rand(()).item(), "own rng": float(self.rng.random())}
