"""Choosing the device a notebook runs on."""

import torch


def default_device() -> torch.device:
    """The best available device: cuda, then mps (Apple), then cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
