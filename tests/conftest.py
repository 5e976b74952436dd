"""pytest settings for the course's tests."""

import os
import shutil
import tempfile

import pytest


def pytest_configure(config):
    """One OpenMP thread per process: kernels and nbgrader runs inherit it. The run's folder for the shipped course
    (tests/shipped.py), made once by the main process: xdist's workers inherit its name."""
    from shipped import PLACE_VARIABLE
    if not hasattr(config, "workerinput") and PLACE_VARIABLE not in os.environ:
        os.environ[PLACE_VARIABLE] = config.course_place = tempfile.mkdtemp(prefix="pytorch-course-tests-", dir="/tmp")
        os.chmod(config.course_place, 0o755)  # every account of the tests may enter it, as /tmp's own folders
    # The suite runs several kernels at once on 2 cores. With torch's default of one thread per core they
    # oversubscribe the CPU, and OpenMP threads waiting on each other slowed notebook 04's training cell
    # from 0.6 s to 37 s (measured on this 2-core machine).
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_unconfigure(config):
    if getattr(config, "course_place", None):
        shutil.rmtree(config.course_place, ignore_errors=True)


def pytest_runtest_setup(item):
    """Tests marked `sandbox` grade in bubblewrap sandboxes, those marked `postgres` use a PostgreSQL server: where
    one cannot start, skip, but fail in CI."""
    if item.get_closest_marker("sandbox"):
        from autograder.kernel.manager import sandbox_problem
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


@pytest.fixture
def fork_server():
    """Stops multiprocessing's fork server and resource tracker after a test that started them (torchcourse.launch
    beside a GPU does): they would otherwise live as long as the test's process."""
    yield
    from multiprocessing import forkserver, resource_tracker
    forkserver._forkserver._stop()
    resource_tracker._resource_tracker._stop()
