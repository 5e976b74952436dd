"""Finding the data sets shipped in data/, and a data set that is slow on purpose."""

import time
from pathlib import Path

import torch


def data_file(name: str) -> Path:
    """Path of a file in the repository's data/ folder, wherever the calling notebook runs."""
    # The package sits next to data/ in the repository, so this works from notebooks/, solutions/ and from
    # nbgrader's autograded copies alike.
    path = Path(__file__).resolve().parents[1] / "data" / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: data/ ships with the course repository (see data/README.md)")
    return path


class SlowDataset(torch.utils.data.Dataset):
    """Wraps tensors and sleeps `delay` seconds per item, standing in for decoding an image from disk."""

    def __init__(self, *tensors: torch.Tensor, delay: float = 0.002):
        self.tensors, self.delay = tensors, delay

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, i):
        time.sleep(self.delay)
        return tuple(t[i] for t in self.tensors)
