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
    # PyTorch's reproducibility notes (docs: notes/randomness) reseed `random` and NumPy so; reseeding the dataset's
    # own `rng` is the course's addition. The DataLoader has already seeded each worker (torch/utils/data/_utils/
    # worker.py, _worker_loop): `random` and torch with base_seed + worker_id, where base_seed is one number drawn from
    # the loader's generator when it starts its workers, and NumPy's global generator with _generate_state(base_seed,
    # worker_id), four 32-bit words mixed from both. The two reseeds below replace those seeds with base_seed +
    # worker_id cut to 32 bits: other numbers, still one seed per worker and still repeatable. What the DataLoader
    # cannot reach is a generator the dataset holds (a numpy Generator as `self.rng`): each worker gets a copy in the
    # same state and draws the same numbers, unless it is reseeded here.
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)
    info = get_worker_info()
    if info is not None and hasattr(info.dataset, "rng"):
        info.dataset.rng = np.random.default_rng(worker_seed)


class WorkerDraws(Dataset):
    """Item i: the worker that fetched it, that worker's torch seed (`torch.initial_seed()`, -1 in the main process)
    and one number from each generator (`random`, NumPy, torch, its own rng)."""

    def __init__(self, n: int, seed: int = 0):
        self.n = n
        self.rng = np.random.default_rng(seed)  # a generator of its own, copied into every worker

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        info = get_worker_info()
        return {"worker": -1 if info is None else info.id, "seed": -1 if info is None else torch.initial_seed(),
                "random": random.random(), "numpy": float(np.random.random()),
                "torch": torch.rand(()).item(), "own rng": float(self.rng.random())}
