"""pytest settings for the course's tests."""

import os


def pytest_configure(config):
    """One OpenMP thread per process: kernels and nbgrader runs inherit it."""
    # The suite runs several kernels at once on 2 cores. With torch's default of one thread per core they
    # oversubscribe the CPU, and OpenMP threads waiting on each other slowed notebook 04's training cell
    # from 0.6 s to 37 s (measured on this 2-core machine).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
