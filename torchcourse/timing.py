"""Timing code that runs on a GPU: wait for the device before reading the clock."""

import statistics
import time

import torch


def synchronize(device) -> None:
    """Wait until `device` has finished all the work queued on it (nothing to wait for on the CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def time_it(fn, device, *, warmup: int = 1, repeat: int = 5, number: int = 1, reduce=statistics.median) -> float:
    """Seconds per call of `fn()`, measured `repeat` times over `number` calls each, after `warmup` calls.

    CUDA and MPS calls return as soon as the work is queued, so the clock is read only after `synchronize`:
    before starting (so earlier work is not counted) and before stopping (so this work is). The `repeat`
    measurements are summarised by `reduce`: the median by default; `min` on a busy machine, where other programs
    only ever add time.
    """
    if repeat < 1 or number < 1:
        raise ValueError("repeat and number must be at least 1")
    for _ in range(warmup):  # first calls pay for allocation, autotuning, compilation
        fn()
    times = []
    for _ in range(repeat):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(number):
            fn()
        synchronize(device)
        times.append((time.perf_counter() - start) / number)
    return reduce(times)
