"""What a student sees in JupyterLab, in a real browser: every solution runs from the UI (no error, nothing on stderr,
its figures and live widgets shown), and nbgrader's Validate button; what an instructor sees: report.html, and the
pages that show a hand-in (its feedback, formgrader's view of it), which run none of its script."""

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections import namedtuple
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout, sync_playwright

import colab_check
import payloads
from course import BIN, FIGURE, ROOT, WIDGET, answer_ids, free_port, assignments, graded_cells_of, read, release_path, solution_answers, source_path
from torchcourse.format import grading

# One xdist worker runs all of these, so that they share one server and one browser.
pytestmark = [pytest.mark.xdist_group("browser"), pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"  # Debian's; `playwright install` would download another one
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SHOTS = ROOT / "tests" / ".browser-screenshots"  # git-ignored; kept after the run to be looked at
VIEWPORT = {"width": 1280, "height": 900}
RUN_TIMEOUT_MS = 900_000  # a notebook takes 5 s to 8 min alone (08 trains and measures for minutes); finite
# Our lab settings: no news pop-up over the page, no autosave, which would write outputs into solutions/, and every
# cell in the page (the default windowing attaches far-off cells late: a long notebook showed 54 of its 65 cells).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}
Lab = namedtuple("Lab", "url token root frontend")

# What the browser shows instead of a live widget: the placeholder, an error, or the kernel's text repr.
NOT_A_WIDGET = re.compile(r"Loading widget|Error displaying widget|Click to show javascript error|\b\w+\(children=|\b\w+(Slider|Text|Dropdown)\(value=")

CELLS_JS = """() => [...document.querySelectorAll('.jp-NotebookPanel .jp-Cell')].map(cell => ({
  prompt: cell.querySelector('.jp-InputPrompt')?.textContent || '',
  text: [...cell.querySelectorAll('.jp-OutputArea-output')].map(o => o.textContent).join('\\n'),
  stderr: [...cell.querySelectorAll('[data-mime-type$="jupyter.stderr"], [data-mime-type$="jupyter.error"]')].map(o => o.textContent),
  images: [...cell.querySelectorAll('.jp-OutputArea-output img')].map(i => i.naturalWidth),
  widgets: cell.querySelectorAll('.jp-OutputArea-output .jupyter-widgets').length,
}))"""
# What a widget drives: its pictures and the text of its HTML and Output parts (not the control's own readout).
DRIVEN_JS = """cell => [...cell.querySelectorAll('img')].map(i => i.src).join()
  + [...cell.querySelectorAll('.widget-html-content, .widget-output')].map(e => e.textContent).join()"""
# Run All has finished: the kernel idle, a cell run, none queued or running ([*]; after an error the rest show [ ]).
DONE_JS = """() => { const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent);
  return document.querySelector('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
    && prompts.some(p => /\\[\\d+\\]/.test(p)) && !prompts.some(p => p.includes('*')) }"""
STARTED_JS = "() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].some(p => /[*\\d]/.test(p.textContent))"
STATUS_JS = """() => [document.querySelector('.jp-Notebook-ExecutionIndicator')?.getAttribute('data-status'),
  [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent).join(' ')]"""

# How a test reads and drives a notebook page, per front end: the page of a notebook (`url`, ready when `opened`
# shows), its cells (`cell`, read by `cells`), Run All (menu clicks), and its widgets' cells and controls.
Frontend = namedtuple("Frontend", "url opened cell cells outputs started done status run_all prompt widget_cells controls "
                                  "scroller")
LAB = Frontend(
    url="lab/tree/{path}?reset&token={token}", opened='.jp-Notebook-ExecutionIndicator[data-status="idle"]',
    cell=".jp-NotebookPanel .jp-Cell", cells=CELLS_JS, outputs=".jp-OutputArea-output", started=STARTED_JS,
    done=DONE_JS, status=STATUS_JS, run_all=(".lm-MenuBar-itemLabel:text-is('Run')", ".lm-Menu-itemLabel:text-is('Run All Cells')"),
    prompt=r"\[\d+\]:", widget_cells=".jp-Cell:has(.jp-OutputArea-output > .jupyter-widgets)",
    controls=".noUi-handle, input[type=text]", scroller=".jp-NotebookPanel .jp-WindowedPanel-outer")
# The classic Notebook 6 of Colab's own package list (notebook 6.5.7, widgetsnbextension 3.6.10), the front end that
# renders ipywidgets 7 as Colab does: JupyterLab 4's widget manager registers only ipywidgets 8's modules
# ("@jupyter-widgets/controls, version ^1.5.0 is not registered").
CLASSIC_PROMPTS = "[...document.querySelectorAll('.code_cell .input_prompt')].map(p => p.textContent)"
CLASSIC = Frontend(
    url="notebooks/{path}?token={token}", opened="#kernel_indicator_icon.kernel_idle_icon", cell="#notebook-container .cell",
    cells="""() => [...document.querySelectorAll('#notebook-container .cell')].map(cell => ({
  prompt: (cell.querySelector('.input_prompt')?.textContent || '').replace(/\\s/g, ''),
  text: [...cell.querySelectorAll('.output_area')].map(o => o.textContent).join('\\n'),
  stderr: [...cell.querySelectorAll('.output_stderr, .output_error')].map(o => o.textContent),
  images: [...cell.querySelectorAll('.output_area img')].map(i => i.naturalWidth),
  widgets: cell.querySelectorAll('.output_area .jupyter-widgets').length,
}))""", outputs=".output_area", started=f"() => {CLASSIC_PROMPTS}.some(p => /[*\\d]/.test(p))",
    done=f"""() => {{ const prompts = {CLASSIC_PROMPTS};
  return document.querySelector('#kernel_indicator_icon.kernel_idle_icon')
    && prompts.some(p => /\\[\\d+\\]/.test(p)) && !prompts.some(p => p.includes('*')) }}""",
    status=f"() => [document.querySelector('#kernel_indicator_icon')?.className, {CLASSIC_PROMPTS}.join(' ')]",
    run_all=("#celllink", "#run_all_cells > a"), prompt=r"In\[\d+\]:",
    widget_cells=".cell:has(.output_subarea.jupyter-widgets-view)", controls=".ui-slider-handle, input[type=text]",
    scroller="#site")



def api(lab: Lab, method: str, path: str):
    """Call the Jupyter server's REST API; the decoded JSON answer, or None."""
    request = urllib.request.Request(f"{lab.url}/{path}", method=method, headers={"Authorization": f"token {lab.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body else None


def descendants(pid: int) -> list[int]:
    """Process ids under `pid` (kernels, their workers), from /proc; [] where there is none."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            pass  # a process that ended meanwhile
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        children = [child for child, its_parent in parents.items() if its_parent == parent]
        found += children
        todo += children
    return found


def stop(server: subprocess.Popen, lab: Lab):
    """Shut the server down with its kernels, the polite way first; kill whatever is left."""
    leftovers = descendants(server.pid)
    try:
        api(lab, "POST", "api/shutdown")  # shuts the kernels down, then the server
        server.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        server.kill()
        server.wait()
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # ended as it should have


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium, headless, driven by Playwright."""
    if not Path(CHROMIUM).exists():
        reason = f"{CHROMIUM} is missing: `apt-get install chromium` (.ci/run does)"
        if os.environ.get("CI"):  # .ci/run sets it: CI must not pass without the browser test
            pytest.fail(reason)
        pytest.skip(reason)
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@contextmanager
def jupyter_lab(root: Path, home: Path, env: dict | None = None):
    """JupyterLab as `make lab` starts it, serving `root` from `root` (where nbgrader and formgrader read
    nbgrader_config.py), on a free loopback port with a random token; its settings and log under `home`; `env`: more
    environment variables for the server and its kernels."""
    for name, values in LAB_SETTINGS.items():
        (home / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
        (home / "settings" / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
    port = free_port()
    lab = Lab(f"http://127.0.0.1:{port}", secrets.token_hex(16), root, LAB)
    command = [BIN / "jupyter", "lab", f"--ServerApp.root_dir={root}", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={lab.token}", "--no-browser", "--ServerApp.open_browser=False",
               # ours, not the user's: settings, workspaces, and checkpoints (absolute: no .ipynb_checkpoints in solutions/)
               f"--LabApp.user_settings_dir={home / 'settings'}", f"--LabApp.workspaces_dir={home / 'workspaces'}",
               f"--FileCheckpoints.checkpoint_dir={home / 'checkpoints'}"]
    if os.getuid() == 0:
        command.append("--allow-root")  # as `make lab` does: containers, cloud machines
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {}))  # Validate calls the venv
    # cwd: nbgrader's Validate reads nbgrader_config.py from the server's working folder
    with serving(command, lab, home, env) as lab:
        yield lab


@contextmanager
def serving(command: list, lab: Lab, home: Path, env: dict):
    """Run a Jupyter server's `command` until it answers at `lab.url`; stop it and its kernels afterwards."""
    log = home / "server.log"
    server = subprocess.Popen(command, cwd=lab.root, env=env, stdin=subprocess.DEVNULL, stdout=log.open("w"),
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                api(lab, "GET", "api/status")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"{command[0]} did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
        yield lab
    finally:
        stop(server, lab)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The project's JupyterLab, on this repository."""
    with jupyter_lab(ROOT, tmp_path_factory.mktemp("lab")) as lab:
        yield lab


@contextmanager
def notebook_page(browser, lab: Lab, path: Path):
    """A fresh tab with the notebook at `path` open, all its cells in the page and its kernel idle; the kernel is shut
    down afterwards."""
    relative = path.relative_to(lab.root).as_posix()
    count = len(read(path).cells)
    page = browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(60_000)
    try:
        page.goto(f"{lab.url}/{lab.frontend.url.format(path=relative, token=lab.token)}")  # Lab's reset: no earlier tabs
        page.wait_for_selector(lab.frontend.opened)
        page.wait_for_function(f"() => document.querySelectorAll('{lab.frontend.cell}').length === {count}")
        yield page
    finally:
        page.close()
        for session in api(lab, "GET", "api/sessions"):
            if session["path"] == relative:
                api(lab, "DELETE", f"api/sessions/{session['id']}")


def dismiss_dialogs(page) -> list[str]:
    """Close any JupyterLab dialog over the page (its Cancel button), and say what each was: a dialog left open
    blocks the menus, and a test that fails for it must name it."""
    seen = []
    for _ in range(3):
        dialog = page.locator(".jp-Dialog")
        if not dialog.count():
            break
        seen.append(" ".join(dialog.first.inner_text().split())[:300])
        reject = dialog.first.locator("button.jp-mod-reject")
        if reject.count():
            reject.first.click()
        else:
            page.keyboard.press("Escape")
        page.wait_for_timeout(300)
    return seen


def run_all(page, frontend: Frontend = LAB):
    """Run > Run All Cells, from the menu bar; wait until every code cell has run and the kernel is idle."""
    dialogs = []
    for _ in range(3):  # now and then a first click runs nothing (the kernel still connecting?): click again
        dialogs += dismiss_dialogs(page)
        for item in frontend.run_all:
            page.click(item)
        try:
            page.wait_for_function(frontend.started, timeout=15_000)
            break
        except PlaywrightTimeout:
            pass
    try:
        page.wait_for_function(frontend.done, timeout=RUN_TIMEOUT_MS)
    except PlaywrightTimeout:
        status = page.evaluate(frontend.status)
        pytest.fail(f"Run All did not finish in {RUN_TIMEOUT_MS / 1000:.0f} s (see {screenshot(page, 'timeout', frontend)}): "
                    f"{status}" + (f"; dialogs closed on the way: {dialogs}" if dialogs else ""))
    # widgets render after their cell has run: give the placeholders time to go
    page.wait_for_function(f"() => ![...document.querySelectorAll('{frontend.outputs}')]"
                           ".some(o => o.textContent.includes('Loading widget'))")


def screenshot(page, name: str, frontend: Frontend = LAB) -> Path:
    """The whole notebook in one picture: a viewport as tall as the notebook, scrolled to the top."""
    height = page.evaluate(f"() => {{ const o = document.querySelector('{frontend.scroller}');"
                           " o.scrollTop = 0; return o.scrollHeight }")
    page.set_viewport_size({"width": VIEWPORT["width"], "height": min(height + 200, 30_000)})
    page.wait_for_timeout(500)  # layout and paint at the new size
    path = SHOTS / f"{name}.png"
    page.screenshot(path=path, full_page=True)
    page.set_viewport_size(VIEWPORT)
    return path


def problems(page, nb, stand_ins=(), frontend: Frontend = LAB) -> list[str]:
    """What is wrong in what the page shows, cell by cell; [] when nothing is. A line on stderr that holds one of
    `stand_ins` is the test machine's, not the notebook's: not counted."""
    cells = page.evaluate(frontend.cells)
    if len(cells) != len(nb.cells):
        return [f"the page shows {len(cells)} cells, the notebook has {len(nb.cells)}"]
    found = []
    for number, (cell, shown) in enumerate(zip(nb.cells, cells)):
        if cell.cell_type != "code" or not cell.source.strip():
            continue  # JupyterLab does not number an empty cell
        where = f"cell {number} ({cell.id})"
        if not re.fullmatch(frontend.prompt, shown["prompt"]):
            found.append(f"{where} did not run: prompt {shown['prompt']!r}")
        # nbgrader zeroes a test cell that writes to stderr, warnings included: the lessons set the example and write
        # none (JupyterLab renders an error output with the stderr mime type too)
        found += [f"{where} shows an error or writes to stderr:\n{text[:1500]}" for text in shown["stderr"]
                  if not any(line in text for line in stand_ins)]
        if match := NOT_A_WIDGET.search(shown["text"]):
            found.append(f"{where} shows {match.group()!r} instead of a live widget")
        if WIDGET.search(cell.source) and not shown["widgets"]:
            found.append(f"{where} shows no widget")
        if FIGURE.search(cell.source) and not shown["images"]:
            found.append(f"{where} draws a figure but shows no image")
        if "<Figure size" in shown["text"] or 0 in shown["images"]:
            found.append(f"{where} shows a figure as text or a broken image")
    return found


def poke(control):
    """Change a control as a student would: a slider one step to the right, a text box by typing at its end."""
    if "-handle" in (control.get_attribute("class") or ""):  # noUi-handle (ipywidgets 8), ui-slider-handle (7)
        control.press("ArrowRight")
    else:
        control.click()
        control.press("End")
        control.press_sequentially(", 2")  # the stride explorer's shape "3, 4" becomes "3, 4, 2"


@pytest.mark.parametrize("assignment", assignments())
def test_solution_in_jupyterlab(browser, lab, assignment):
    path = source_path(assignment)
    nb = read(path)
    with notebook_page(browser, lab, path) as page:
        run_all_and_move_widgets(page, nb, assignment)


COLAB_NOTEBOOKS = ("01_tensors", "08_capstone")  # the first and the longest; widgets, figures, training


@pytest.fixture(scope="module")
def colab_notebook(tmp_path_factory):
    """The classic Notebook of Colab's own list, run by `make colab-check`'s environment of Colab's versions (its
    interpreter in COURSE_COLAB_PYTHON), with that environment's kernel, serving a folder that holds the torchcourse
    wheel as a student's Colab session holds the one they uploaded; pip in the kernel sees no index."""
    python = os.environ.get("COURSE_COLAB_PYTHON")
    if not python:
        pytest.skip("runs from `make colab-check BROWSER=1`, which builds the environment of Colab's versions")
    home, content = tmp_path_factory.mktemp("colab-notebook"), tmp_path_factory.mktemp("content")
    colab_check.build_wheel(content)
    lab = Lab(f"http://127.0.0.1:{free_port()}", secrets.token_hex(16), content, CLASSIC)
    # nbclassic: the classic Notebook on jupyter_server, which names the notebook to its kernel (JPY_SESSION_NAME)
    command = [Path(python).parent / "jupyter-nbclassic", f"--ServerApp.root_dir={content}", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={lab.url.rsplit(':', 1)[1]}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={lab.token}", "--no-browser", *(["--allow-root"] if os.getuid() == 0 else [])]
    env = colab_check.fresh_runtime(Path(python), JUPYTER_CONFIG_DIR=str(home / "config"),
                                    JUPYTER_RUNTIME_DIR=str(home / "runtime"))
    with serving(command, lab, home, env) as lab:
        yield lab


@pytest.mark.colab
@pytest.mark.parametrize("assignment", COLAB_NOTEBOOKS)
def test_student_notebook_on_colabs_versions_in_their_classic_notebook(browser, colab_notebook, assignment):
    """A student's notebook, answered, on Colab's versions in their classic Notebook: its set-up cell installs the
    uploaded wheel, Run All shows every figure and live widget (ipywidgets 7), the widgets react, hand_in() writes it."""
    python = os.environ["COURSE_COLAB_PYTHON"]
    colab_check.fresh_runtime(Path(python))  # torchcourse uninstalled: the set-up cell installs it
    folder = colab_notebook.root / assignment  # a folder per notebook, as released: hand_in() finds the one in it
    folder.mkdir()
    shutil.copy(next(colab_notebook.root.glob("torchcourse-*.whl")), folder)  # uploaded beside the notebook
    path = colab_check.hand_in_copy(assignment, folder)
    nb = read(path)
    with notebook_page(browser, colab_notebook, path) as page:
        run_all_and_move_widgets(page, nb, f"colab-{assignment}", stand_ins=colab_check.STAND_INS, frontend=CLASSIC)
        probe = next(cell["text"] for cell in page.evaluate(CLASSIC.cells) if "COLAB-CHECK " in cell["text"])
    kernel = json.loads(probe.split("COLAB-CHECK ", 1)[1].strip())
    expected = colab_check.constraints(colab_check.FREEZE.read_text())
    assert f"torch=={kernel['torch'].split('+')[0]}" in expected and f"ipywidgets=={kernel['ipywidgets']}" in expected, kernel
    assert Path(kernel["torchcourse"]).is_relative_to(Path(python).parents[1]), "torchcourse was not installed by the cell"
    assert (path.parent / "hand-in" / path.name).exists(), "hand_in() wrote no file"


def run_all_and_move_widgets(page, nb, name: str, stand_ins=(), frontend: Frontend = LAB):
    """Run All, then move every widget's control; fail with what the page shows wrong after each (screenshots named
    after `name`; `stand_ins` as for problems())."""
    run_all(page, frontend)
    shot = screenshot(page, f"{name}-run", frontend)
    assert not (found := problems(page, nb, stand_ins, frontend)), f"{name} in the browser (see {shot}):\n" + "\n".join(found)
    widget_cells = page.locator(frontend.widget_cells)
    for index in range(widget_cells.count()):
        cell = widget_cells.nth(index)
        control = cell.locator(frontend.controls).first
        assert control.count(), f"{name}: a widget with no control this test can move (see {shot}); teach poke() its kind"
        before = cell.evaluate(DRIVEN_JS)
        poke(control)
        page.wait_for_function(f"([cell, before]) => ({DRIVEN_JS})(cell) !== before", arg=[cell.element_handle(), before],
                               timeout=60_000)
    if widget_cells.count():
        page.wait_for_function(frontend.done)  # the widget's callback has finished
        shot = screenshot(page, f"{name}-widgets", frontend)
        assert not (found := problems(page, nb, stand_ins, frontend)), \
            f"{name} after moving its widgets (see {shot}):\n" + "\n".join(found)


def test_validate_button_passes_an_answer_typed_in_the_editor(browser, lab):
    assignment = assignments()[0]
    student = read(release_path(assignment))
    typed, unanswered = answer_ids(student)[:2]  # the first exercise's tests write no stderr, which Validate counts as failing
    answer = solution_answers(assignment)[typed]
    docstring = {grading(c).get("grade_id"): c.source.splitlines()[0] for c in student.cells if grading(c).get("grade")}
    folder = Path(tempfile.mkdtemp(prefix="browser-test-", dir=ROOT))  # under the server's root; notebooks/ stays untouched
    try:
        copy = Path(shutil.copy(release_path(assignment), folder))
        with notebook_page(browser, lab, copy) as page:
            index = [grading(c).get("grade_id") for c in student.cells].index(typed)
            page.locator(".jp-NotebookPanel .jp-Cell").nth(index).locator(".cm-content").click()
            page.keyboard.press("Control+a")
            page.keyboard.insert_text(answer)  # as pasted: typing key by key would add the editor's auto-indent
            page.click(".validate-button")
            dialog = page.wait_for_selector("#validation-message", timeout=RUN_TIMEOUT_MS)
            shot = SHOTS / "validate.png"
            page.screenshot(path=shot)
            shown = dialog.inner_text()
        saved = {grading(c).get("grade_id"): c.source for c in read(copy).cells}
        assert saved[typed] == answer, f"the editor did not receive the answer as typed (see {shot})"
        assert "The following cell failed" in shown, f"Validate ran no tests (see {shot}):\n{shown}"
        for test in graded_cells_of(student, typed):
            assert docstring[test] not in shown, f"{test} fails for the solution typed in (see {shot}):\n{shown}"
        assert docstring[f"{unanswered}_tests"] in shown, f"Validate does not report the unanswered {unanswered} (see {shot})"
    finally:
        shutil.rmtree(folder)


HOSTILE_MESSAGE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
REPORT_JS = """() => ({
  scripts: document.scripts.length, pwned: window.pwned ?? null, text: document.body.innerText,
  statuses: Object.fromEntries([...document.querySelectorAll('table.statuses tr[data-status]')]
    .map(tr => [tr.dataset.status, +tr.dataset.count])),
  exercises: [...document.querySelectorAll('section.exercise')].map(s => {
    const svg = s.querySelector('figure.distribution svg'), box = svg?.getBoundingClientRect();
    return {id: s.dataset.exercise, full: +s.dataset.full, partial: +s.dataset.partial, none: +s.dataset.none,
            width: box?.width || 0, height: box?.height || 0, marks: svg ? svg.querySelectorAll('path').length : 0,
            failures: [...s.querySelectorAll('ol.failures li')].map(li => [li.querySelector('code').textContent, +li.dataset.count])};
  }),
})"""


def test_report_of_a_graded_class_in_chromium(browser, tmp_path):
    """report.html of a graded class: a plot drawn per exercise, counts that agree with grades.csv, and a failure
    message carrying markup shown as text, never run."""
    from collections import Counter

    from handins import FIRST, exercise_points, grade, handin, right, rows_of, scratch_course, write, write_folder
    class_ = {"right": write(right()), "also_right": write(right()), "unedited": write(handin()),
              "wrong": write(right(**{FIRST: "def mean(xs):\n    return 0"})),
              "hostile": write(right(**{FIRST: f"def mean(xs):\n    raise ValueError({HOSTILE_MESSAGE!r})"})),
              "not_json": "not json"}
    course = scratch_course(tmp_path / "course")
    out = tmp_path / "out"
    grade(course, write_folder(tmp_path / "submissions", class_), "--out", str(out))
    rows = rows_of(out)
    page = browser.new_page(viewport=VIEWPORT)
    try:
        page.goto((out / "report.html").as_uri())
        shown = page.evaluate(REPORT_JS)
        shot = SHOTS / "report.png"
        page.screenshot(path=shot, full_page=True)
    finally:
        page.close()
    assert shown["scripts"] == 0 and shown["pwned"] is None, f"a hand-in's message ran as code in the report ({shot})"
    assert HOSTILE_MESSAGE in shown["text"], f"the hostile message is not shown as text ({shot})"
    assert shown["statuses"] == dict(Counter(r["status"] for r in rows.values())), shot
    exercises = {e["id"]: e for e in shown["exercises"]}
    assert list(exercises) == [FIRST, "ex2_clip"], shot
    for gid, seen in exercises.items():
        assert seen["width"] > 100 and seen["height"] > 50 and seen["marks"] > 5, f"{gid}: no plot drawn ({shot})"
        points = [exercise_points(r, gid) for r in rows.values() if r["status"] != "missing"]
        expected = Counter("full" if got >= best else "none" if got == 0 else "partial" for got, best in points)
        assert (seen["full"], seen["partial"], seen["none"]) == \
            (expected["full"], expected["partial"], expected["none"]), f"{gid} ({shot})"
    failures = dict(exercises[FIRST]["failures"])
    assert any(HOSTILE_MESSAGE in message for message in failures), failures
    assert sum(failures.values()) >= 2, f"wrong and hostile fail {FIRST}, each counted ({shot})"


# --- pages that show a hand-in carrying script (tests/payloads.py) run none of it -----------------------------------
PAGE_JS = f"""() => ({{ran: window.{payloads.MARK} ?? null, title: document.title, text: document.body.innerText,
  images: [...document.images].filter(i => i.src.startsWith('data:image/')).map(i => i.naturalWidth),
  policy: document.querySelector('head meta[http-equiv="Content-Security-Policy"]')?.content ?? null}})"""
# The scores formgrader's own script loads into its page (as placeholders: no score was entered by hand)
SCORES_JS = "() => Object.fromEntries([...document.querySelectorAll('input.score')].map(i => [i.id, i.placeholder]))"


@pytest.fixture(scope="module")
def scripted_class(tmp_path_factory):
    """One hand-in whose markdown and outputs carry script (its first answer displays the outputs), its second answer
    failing, graded into a course of its own: (the course, the grader's output folder)."""
    from handins import FIRST, SECOND, grade, right, right_answers, scratch_course, write, write_folder
    folder = tmp_path_factory.mktemp("scripted")
    nb = right(**{FIRST: f"{right_answers()[FIRST]}\n\n{payloads.display_code()}",
                  SECOND: "def clip(x, low, high):\n    raise ValueError('not written yet')"})
    nb.cells.insert([cell.id for cell in nb.cells].index("lesson") + 1,
                    nbformat.v4.new_markdown_cell(payloads.MARKDOWN, id="payloads"))
    course, out = scratch_course(folder / "course"), folder / "out"
    grade(course, write_folder(folder / "submissions", {"scripted": write(nb)}), "--out", str(out))
    return course, out


def shown_by(page, url: str, name: str, ready: str = "() => true") -> dict:
    """What the page at `url` shows once `ready` holds, its folded parts opened, and its payloads had their chance, its
    script-carrying link followed (a javascript: address runs only then); a screenshot of it named `name`."""
    page.goto(url)
    page.wait_for_function(ready)
    page.evaluate(OPEN_ALL_JS)  # the feedback's lesson, folded away, opened as a student may: its payloads shown too
    link = page.get_by_text(payloads.LINK_TEXT)
    if link.count():
        link.first.click()
    try:  # an inline script or handler has run by the load event, a followed link's script soon after
        page.wait_for_function(f"() => window.{payloads.MARK}", timeout=2_000)
    except PlaywrightTimeout:
        pass
    page.screenshot(path=SHOTS / f"{name}.png", full_page=True)
    return page.evaluate(PAGE_JS)


def shows_the_lesson(shown: dict) -> list[str]:
    """What a page of the scripted hand-in fails to show of the lesson and the hand-in; [] when it shows it all: the
    lesson's text, the outputs' text, the payloads' markdown as text, and the PNG and SVG images drawn."""
    kept = ["Exercise 1. Write mean(xs)", payloads.LESSON_TEXT, payloads.HTML_OUTPUT_TEXT,
            payloads.MARKDOWN_OUTPUT_TEXT, f"<script>top.{payloads.MARK}"]
    missing = [f"text {text!r}" for text in kept if text not in shown["text"]]
    return missing + ([f"images {shown['images']}"] if len(shown["images"]) != 2 or 0 in shown["images"] else [])


@pytest.mark.sandbox
def test_the_feedback_and_report_of_a_hand_in_carrying_script_run_none_of_it(browser, scripted_class):
    _, out = scripted_class
    page = browser.new_page(viewport=VIEWPORT)
    try:
        feedback = shown_by(page, (out / "feedback" / "scripted.html").as_uri(), "scripted-feedback")
        report = shown_by(page, (out / "report.html").as_uri(), "scripted-report")
    finally:
        page.close()
    assert feedback["ran"] is None and feedback["title"] == "01_basics", f"the feedback ran {feedback['ran']}"
    assert not (missing := shows_the_lesson(feedback)), f"the feedback does not show {missing}"
    assert re.search(r"ex1_mean\b.*\t3 / 3\tpassed", feedback["text"]), feedback["text"][:2000]
    assert re.search(r"ex2_clip\b.*\t0 / 3\t\w", feedback["text"]), feedback["text"][:2000]
    assert report["ran"] is None and "graded\t1\tscripted" in report["text"], report["text"][:2000]
    for page_shown in (feedback, report):
        assert page_shown["policy"] and "default-src 'none'" in page_shown["policy"], page_shown["policy"]


@pytest.mark.sandbox
def test_formgraders_view_of_a_hand_in_carrying_script_runs_none_of_it(browser, scripted_class, tmp_path):
    """The submission as formgrader shows it to the instructor, in JupyterLab started on the graded course: none of
    the hand-in's script runs, formgrader's own does (it fills in the scores)."""
    course, _ = scripted_class
    with jupyter_lab(course, tmp_path) as lab:
        (submission,) = api(lab, "GET", "formgrader/api/submitted_notebooks/01_basics/01_basics")
        page = browser.new_page(viewport=VIEWPORT, extra_http_headers={"Authorization": f"token {lab.token}"})
        try:
            shown = shown_by(page, f"{lab.url}/formgrader/submissions/{submission['id']}/", "scripted-formgrader",
                             ready=f"() => Object.values(({SCORES_JS})()).every(value => value !== '')")
            scores = page.evaluate(SCORES_JS)
        finally:
            page.close()
    assert shown["ran"] is None and shown["title"] == "01_basics", f"formgrader's view ran {shown['ran']}"
    assert not (missing := shows_the_lesson(shown)), f"formgrader's view does not show {missing}"
    assert scores == {"ex1_mean_tests": "1", "ex1_mean_hidden": "2", "ex2_clip_tests": "0", "ex2_clip_hidden": "0"}


# --- the feedback a student reads: what failed and why, the lesson folded away, nothing fetched --------------------
EXPLAINED_JS = """() => ({text: document.body.innerText, height: document.documentElement.scrollHeight,
  first: document.querySelector('#notebook-container table')?.compareDocumentPosition(
    document.querySelector('details.lesson')) === Node.DOCUMENT_POSITION_FOLLOWING,
  padding: parseFloat(getComputedStyle(document.querySelector('#notebook-container td')).paddingLeft),
  folded: [...document.querySelectorAll('details.lesson')].filter(d => !d.open).length,
  injected: document.querySelectorAll('pre b').length})"""
OPEN_ALL_JS = """() => { document.querySelectorAll('details').forEach(d => d.open = true);
  return document.documentElement.scrollHeight }"""


@pytest.fixture(scope="module")
def explained_class(tmp_path_factory):
    """Two hand-ins graded with a 10 s limit, the second exercise failing in each: its visible test raises an error of
    the student's own (after the first hidden test), or runs past the limit. The grader's output folder."""
    from handins import SECOND, grade, right, scratch_course, write, write_folder
    folder = tmp_path_factory.mktemp("explained")
    class_ = {"raises": write(right(**{SECOND: "def clip(x, low, high):\n    raise ValueError('clip: <b>not</b> yet')"})),
              "loops": write(right(**{SECOND: "def clip(x, low, high):\n    while True:\n        pass"}))}
    out = folder / "out"
    grade(scratch_course(folder / "course"), write_folder(folder / "submissions", class_), "--out", str(out),
          "--timeout", "10")
    return out


@pytest.mark.sandbox
def test_the_feedback_explains_in_chromium(browser, explained_class):
    """As a student reads it: the visible test's own error (its markup as text), the time limit named, the summary
    first and spaced, the lesson folded (the page shorter than with it open), and no request leaving the page."""
    shown, requests = {}, []
    page = browser.new_page(viewport=VIEWPORT)
    page.on("request", lambda request: requests.append(request.url)
            if not request.url.startswith(("file:", "data:")) else None)
    try:
        for student in ("raises", "loops"):
            page.goto((explained_class / "feedback" / f"{student}.html").as_uri())
            page.wait_for_load_state("load")
            page.screenshot(path=SHOTS / f"explained-{student}.png", full_page=True)
            shown[student] = {**page.evaluate(EXPLAINED_JS), "opened": page.evaluate(OPEN_ALL_JS)}
    finally:
        page.close()
    assert not requests, f"the feedback asked for {requests}"
    for student, seen in shown.items():
        assert seen["first"] and seen["padding"] >= 8, f"{student}: the summary is not first, or not spaced"
        assert seen["folded"] >= 1 and seen["opened"] > seen["height"], f"{student}: no lesson folded away"
    raises, loops = shown["raises"], shown["loops"]
    assert raises["text"].count("ValueError: clip: <b>not</b> yet") >= 2 and raises["injected"] == 0, raises["text"]
    assert loops["text"].count("this cell ran past the 10 s time limit and was stopped") >= 2, loops["text"]
    assert "KeyboardInterrupt" not in loops["text"]
