"""torchcourse.handin: a student's hand-in from Jupyter or Colab is the assignment's notebook, named as the grader
expects, with what is attempted said; another notebook, or one missing its test cells, is refused before anything is
written."""

import json
import sys
import types

import nbformat
import pytest

from course import assignments, read, release_path, solution_answers, with_answers
from torchcourse import handin



def test_the_manifest_is_that_of_the_released_notebooks():
    assert json.loads(handin.MANIFEST.read_text()) == handin.manifest(release_path(assignments()[0]).parents[1]), \
        "torchcourse/assignments.json is stale: run `make release`"


def first_answered(assignment: str):
    """The released notebook with its first exercise answered (the solution's), the others as released."""
    first, *_ = solution_answers(assignment).items()
    return with_answers(read(release_path(assignment)), dict([first])), first[0]


@pytest.fixture
def in_jupyter(tmp_path, monkeypatch):
    """Put `nb` where a Jupyter kernel's JPY_SESSION_NAME points, working in tmp_path; returns the writer."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)

    def place(nb, name="my copy.ipynb"):
        nbformat.write(nb, tmp_path / name)
        monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / name))
    return place


@pytest.mark.parametrize("assignment", [assignments()[1], assignments()[-1]])
def test_jupyter_hand_in_names_the_file_and_says_what_is_attempted(in_jupyter, tmp_path, capsys, assignment):
    nb, answered = first_answered(assignment)
    in_jupyter(nb)
    path = handin.hand_in(assignment[:2])
    assert path == handin.Path(handin.OUT) / release_path(assignment).name and (tmp_path / path).is_file()
    assert read(tmp_path / path).cells == nb.cells
    said = capsys.readouterr().out
    answers = list(json.loads(handin.MANIFEST.read_text())[assignment]["answers"])
    assert f"1 of {len(answers)} exercises attempted" in said
    for answer in answers:
        assert f"{answer:32} {'attempted' if answer == answered else 'not attempted (the released stub)'}" in said


def test_colab_hand_in_reads_the_live_notebook_and_downloads_it(tmp_path, monkeypatch, capsys):
    """Colab's API gives the notebook as JSON with list-of-lines sources; `files.download` gets the written file."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    nb, answered = first_answered(assignments()[0])
    ipynb = json.loads(nbformat.writes(nb))  # cells' sources as lists of lines, as the browser keeps them
    assert any(isinstance(c["source"], list) for c in ipynb["cells"])
    downloads, requests = [], []
    message = types.SimpleNamespace(blocking_request=lambda kind, **kw: requests.append(kind) or {"ipynb": ipynb})
    colab = types.ModuleType("google.colab")
    colab._message, colab.files = message, types.SimpleNamespace(download=downloads.append)
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    path = handin.hand_in()
    assert requests == ["get_ipynb"] and downloads == [str(path)]
    assert read(tmp_path / path).cells == nb.cells
    assert "read from Colab" in capsys.readouterr().out


def test_another_assignments_notebook_or_lost_test_cells_are_refused(in_jupyter, tmp_path):
    nb, _ = first_answered(assignments()[0])
    in_jupyter(nb)
    with pytest.raises(ValueError, match=f"this notebook is {assignments()[0]}'s, not {assignments()[1][:2]}'s"):
        handin.hand_in(assignments()[1][:2])
    nb.cells = [c for c in nb.cells if not c.metadata.get("nbgrader", {}).get("grade_id", "").endswith("_tests")]
    in_jupyter(nb)
    with pytest.raises(ValueError, match=r"the test cells \['ex1_\w+_tests'.* are gone from this notebook"):
        handin.hand_in()
    nb.cells = [c for c in nb.cells if not c.metadata.get("nbgrader", {}).get("solution")][:3]
    in_jupyter(nb)
    with pytest.raises(ValueError, match="not a course notebook as released: it lacks the answer cells"):
        handin.hand_in()
    assert not (tmp_path / handin.OUT).exists()


def test_nothing_happens_under_nbgrader_and_an_unknown_kernel_is_told_what_to_do(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert handin.hand_in() is None
    monkeypatch.delenv("NBGRADER_EXECUTION")
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    with pytest.raises(RuntimeError, match="cannot tell which notebook this kernel runs"):
        handin.hand_in()
    assert not (tmp_path / handin.OUT).exists()


def test_a_folder_named_by_the_classic_notebook_holding_one_notebook_hands_that_one_in(monkeypatch, tmp_path):
    """The classic Notebook (and nbclassic) sends the server no file name: JPY_SESSION_NAME is then the folder. Its
    one notebook is the one running; with two it cannot tell, and says so."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("JPY_SESSION_NAME", str(folder) + "/")
    nb, _ = first_answered(assignments()[0])
    nbformat.write(nb, folder / "mine.ipynb")
    assert handin.hand_in().resolve() == folder / handin.OUT / release_path(assignments()[0]).name
    nbformat.write(nb, folder / "mine-Copy1.ipynb")
    with pytest.raises(RuntimeError, match="holds 2 notebooks"):
        handin.hand_in()


def test_a_kernel_that_jupyters_server_started_hands_in_the_notebook_it_runs(tmp_path):
    """A real Jupyter server and a session for a renamed copy in a sub-folder: the kernel learns its notebook's path
    from the server (JPY_SESSION_NAME) and hand_in writes the file under the assignment's own name."""
    import glob
    import os
    import socket
    import subprocess
    import time
    import urllib.request

    from jupyter_client import BlockingKernelClient

    nb, _ = first_answered(assignments()[0])
    (tmp_path / "work").mkdir()
    nbformat.write(nb, tmp_path / "work" / "my copy.ipynb")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    env.pop("NBGRADER_EXECUTION", None)
    server = subprocess.Popen([sys.executable, "-m", "jupyter_server", "--no-browser", f"--port={port}",
                               "--IdentityProvider.token=t", f"--ServerApp.root_dir={tmp_path}", "--allow-root"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = f"http://127.0.0.1:{port}/api"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{api}?token=t")
                break
            except OSError:
                time.sleep(0.5)
        body = {"path": "work/my copy.ipynb", "name": "my copy.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
        ask = urllib.request.Request(f"{api}/sessions?token=t", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        kernel = json.loads(urllib.request.urlopen(ask).read())["kernel"]["id"]
        client = BlockingKernelClient(connection_file=glob.glob(str(tmp_path / "runtime" / f"kernel-{kernel}.json"))[0])
        client.load_connection_file()
        client.start_channels()
        client.wait_for_ready(timeout=120)
        said = []
        reply = client.execute_interactive("from torchcourse.handin import hand_in\nhand_in()", timeout=120,
                                           output_hook=lambda m: said.append(m["content"].get("text", "")))
        client.stop_channels()
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert f"read from {tmp_path / 'work' / 'my copy.ipynb'}" in "".join(said)
    handed = tmp_path / "work" / handin.OUT / release_path(assignments()[0]).name
    assert read(handed).cells == nb.cells
