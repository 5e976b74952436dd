"""The two set-up commands and the files behind them agree with each other."""

import re
import subprocess
from importlib.metadata import version

import yaml

from course import ROOT


def pins() -> dict[str, str]:
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    return dict(line.split("==") for line in lines if line)


def test_requirements_are_all_pinned_and_installed():
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    unpinned = [line for line in lines if line and not re.fullmatch(r"[A-Za-z0-9_.\-]+==[\w.]+", line)]
    assert not unpinned, f"pin every requirement with ==: {unpinned}"
    assert pins()["torch"] == "2.13.0", "torch 2.13.0 is the CPU wheel this course is tested with"
    drift = {name: (pinned, version(name)) for name, pinned in pins().items() if version(name).split("+")[0] != pinned}
    assert not drift, f"the environment differs from requirements.txt (pinned, installed): {drift}; run `make setup`"


def test_conda_environment_uses_the_same_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"]
    (pip_section,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    assert "-r requirements.txt" in pip_section, "environment.yml must take its versions from requirements.txt"
    assert "==" not in (ROOT / "environment.yml").read_text(), "versions belong in requirements.txt only"


def test_ci_runs_the_readme_commands():
    readme, ci = (ROOT / "README.md").read_text(), (ROOT / ".ci" / "run").read_text()
    for command in ("make setup", "make test"):
        assert command in readme and re.search(rf"^{command}$", ci, re.M), command


def test_make_help_is_the_default_and_lists_every_target():
    shown = subprocess.run(["make", "--no-print-directory"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    for target in phony:
        assert re.search(rf"^  make {target} +\S", shown, re.M), f"`make help` does not describe {target}"


def test_make_lab_takes_a_port_a_token_and_a_role_and_echoes_no_comment():
    """What `make lab` would run (make -n; setup taken as done): the port and token given, a student's Jupyter
    configuration path (jupyter/student) unless ROLE=instructor, and no comment echoed as if it were a command."""
    def lab(*settings: str) -> str:
        return subprocess.run(["make", "--no-print-directory", "-n", "-o", ".venv/.installed", "lab", *settings],
                              cwd=ROOT, capture_output=True, text=True, check=True).stdout
    student, instructor = lab("PORT=4321", "TOKEN=s3cret"), lab("ROLE=instructor")
    assert "--ServerApp.port=4321" in student and "--IdentityProvider.token=s3cret" in student, student
    assert f"JUPYTER_CONFIG_PATH={ROOT}/jupyter/student " in student and "JUPYTER_CONFIG_PATH" not in instructor
    assert "#" not in student + instructor, f"make echoes a comment:\n{student}"
    refused = subprocess.run(["make", "-n", "-o", ".venv/.installed", "lab", "ROLE=teacher"], cwd=ROOT,
                             capture_output=True, text=True)
    assert refused.returncode and "ROLE is student" in refused.stderr
