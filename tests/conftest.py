"""pytest settings for the course's tests."""

import os

import pytest


def pytest_configure(config):
    """One OpenMP thread per process: kernels and nbgrader runs inherit it."""
    # The suite runs several kernels at once on 2 cores. With torch's default of one thread per core they
    # oversubscribe the CPU, and OpenMP threads waiting on each other slowed notebook 04's training cell
    # from 0.6 s to 37 s (measured on this 2-core machine).
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_runtest_setup(item):
    """Tests marked `sandbox` grade in bubblewrap sandboxes, those marked `postgres` use a PostgreSQL server: where
    one cannot start, skip, but fail in CI."""
    if item.get_closest_marker("sandbox"):
        from autograder.kernel import sandbox_problem
        require("grading needs the sandbox", sandbox_problem())
    if item.get_closest_marker("postgres"):
        import postgres
        require("the test needs a PostgreSQL server", postgres.problem())


def require(need: str, problem: str | None):
    """Skip the test where `problem` says why what it needs cannot start here; fail it in CI."""
    if problem:
        reason = f"{need}, which cannot start here ({problem})"
        if os.environ.get("CI"):  # .ci/run sets it: CI must not pass without what the tests need
            pytest.fail(reason)
        pytest.skip(reason)
