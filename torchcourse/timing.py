"""Timing code that runs on a GPU: wait for the device before reading the clock."""

import math
import statistics
import time
from dataclasses import dataclass

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


NOISE_FLOOR = 0.02  # two timings of one thing can agree by chance: closer than 2% is never called a difference


@dataclass
class Comparison:
    """Seconds per call of each candidate (the least of interleaved rounds) and how much a timing moves on its own."""

    seconds: dict[str, float]
    noise: float  # |t1 / t2 - 1| for the first candidate timed twice in every round: the machine's own wobble

    def speedup(self, faster: str, slower: str) -> float:
        """How many times as fast `faster` ran as `slower` (below 1: it was slower)."""
        return self.seconds[slower] / self.seconds[faster]

    def direction(self, ratio: float) -> int:
        """1 where a speed ratio (new over old) is above 1 beyond the noise, -1 below it, 0 where the noise cannot tell."""
        noise = max(self.noise, NOISE_FLOOR)
        return 0 if abs(ratio - 1) <= noise else 1 if ratio > 1 else -1

    def verdict(self, new: str, old: str) -> str:
        """A sentence on `new` against `old` that claims a difference only where it is beyond the noise."""
        ratio, noise = self.speedup(new, old), max(self.noise, NOISE_FLOOR)
        if not self.direction(ratio):
            return f"{new} and {old} differ by no more than the noise ({noise:.0%}) here"
        return f"{new} runs at {ratio:.2f}x the speed of {old} here (noise {noise:.0%})"


def compare(candidates: dict, device, *, rounds: int = 5, min_time: float = 0.02, warmup: int = 2) -> Comparison:
    """Time each of `candidates` (name -> function of no arguments) in `rounds` interleaved rounds.

    Interleaved (a, b, a', a, b, a', ...) so that a busy moment of the machine slows every candidate rather than one;
    the least time of the rounds, since other programs only ever add time; a' is the first candidate timed again,
    and its difference from a is the noise a claim must beat. Each round runs enough calls to last about `min_time`
    seconds, timed by `time_it` (which waits for a GPU). torch.utils.benchmark.Timer is not used here: each of its
    `timeit` calls runs two warm-up calls first, which would triple the time of a slow step.
    """
    if not candidates or rounds < 1:
        raise ValueError("compare needs at least one candidate and one round")
    number = {}
    for name, fn in candidates.items():
        one_call = time_it(fn, device, warmup=warmup, repeat=1)  # warm-up: allocation, autotuning, compilation
        number[name] = max(1, math.ceil(min_time / max(one_call, 1e-9)))
    first = next(iter(candidates))
    timed, number[_AGAIN] = {**candidates, _AGAIN: candidates[first]}, number[first]
    least = {name: math.inf for name in timed}
    for _ in range(rounds):
        for name, fn in timed.items():
            least[name] = min(least[name], time_it(fn, device, warmup=0, repeat=1, number=number[name]))
    noise = abs(least[_AGAIN] / least[first] - 1)
    return Comparison(seconds={name: least[name] for name in candidates}, noise=noise)


_AGAIN = object()  # the key of the first candidate's second timing: no candidate's name can be it
