"""`make lab` as students and instructors start it: nbgrader's own switches by role (a student's Lab has Validate
alone: no formgrader, Create Assignment, Assignment List or Courses, which need an instructor or an exchange), the port
and token given, kernels on CurveZMQ (no "running over TCP without encryption" in the terminal), a hidden-test cell
that shows nothing when run; and the Lab page in Chromium, as each sees it."""

import asyncio
import html
import json
import os
import re
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from tornado.websocket import websocket_connect

from course import HIDDEN, ROOT, free_port, grading, read, release_path, source_path

pytestmark = [pytest.mark.xdist_group("lab-roles"), pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"  # Debian's; `playwright install` would download another one
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
# nbgrader's Lab plugins and server pages that only an instructor (or a course with an exchange) has use for
INSTRUCTOR_PLUGINS = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                      "@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:course-list", "@jupyter/nbgrader:menu"}
INSTRUCTOR_PAGES = ("formgrader", "assignments", "formgraders")  # formgrader's, assignment_list's, course_list's
VALIDATE = "assignments/validate"  # validate_assignment's: the one nbgrader server extension a student keeps
NOTICES = ("without encryption", "Ctrl-C will not work", "To connect another client")  # kernels' terminal notices
NOTEBOOK = "01_tensors"  # whose first hidden-test cell a student runs


def served(url: str) -> bool:
    """Whether the server has a page at `url` (a page that refuses a bare GET still is one)."""
    return get(url)[0] not in (0, 404)


def get(url: str) -> tuple[int, str]:
    """Status and body of a GET; status 0 where nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""
    except OSError:
        return 0, ""


@contextmanager
def make_lab(role: str, home: Path):
    """`make lab ROLE=role PORT=... TOKEN=...` on this repository (setup taken as done), with a HOME of its own; its
    address with the token, and its log. Stopped through the API, else its process group killed."""
    port, token = free_port(), secrets.token_hex(16)
    log = home / "server.log"
    command = ["make", "--no-print-directory", "-o", ".venv/.installed", "lab", f"ROLE={role}", f"PORT={port}",
               f"TOKEN={token}", f"ARGS=--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port_retries=0 "
               f"--LabApp.workspaces_dir={home / 'workspaces'}"]
    server = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ, HOME=str(home)), stdin=subprocess.DEVNULL,
                              stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while get(f"{url}/api/status?token={token}")[0] != 200:
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"make lab did not serve on port {port} with its token:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url, token, log
    finally:
        try:
            urllib.request.urlopen(urllib.request.Request(f"{url}/api/shutdown?token={token}", method="POST"),
                                   timeout=10)
            server.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    with make_lab("student", tmp_path_factory.mktemp("student")) as lab:
        yield lab


@pytest.fixture(scope="module")
def instructor(tmp_path_factory):
    with make_lab("instructor", tmp_path_factory.mktemp("instructor")) as lab:
        yield lab


def disabled_plugins(url: str, token: str) -> set[str]:
    """The Lab plugins the page is told not to load (its jupyter-config-data)."""
    status, page = get(f"{url}/lab?token={token}")
    assert status == 200
    data = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S)
    return set(json.loads(html.unescape(data.group(1))).get("disabledExtensions", []))


async def execute(url: str, token: str, kernel: str, code: str) -> list[dict]:
    """Run `code` in the kernel over the server's websocket, as the Lab does; what the cell shows (its outputs)."""
    socket = await websocket_connect(f"{url.replace('http', 'ws')}/api/kernels/{kernel}/channels?token={token}")
    msg_id = uuid.uuid4().hex
    socket.write_message(json.dumps({
        "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "", "session": uuid.uuid4().hex,
                   "version": "5.3", "date": ""},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False}}))
    shown = []
    while True:
        message = json.loads(await asyncio.wait_for(socket.read_message(), timeout=120))
        if message.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if message["msg_type"] in ("stream", "execute_result", "display_data", "error"):
            shown.append(message["content"])
        if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            socket.close()
            return shown


def hidden_test_cell() -> str:
    """The released text of the notebook's first hidden-test cell: what a student runs."""
    hidden = next(grading(c)["grade_id"] for c in read(source_path(NOTEBOOK)).cells if HIDDEN.search(c.source))
    return next(c.source for c in read(release_path(NOTEBOOK)).cells if grading(c).get("grade_id") == hidden)


def test_a_students_lab_has_nbgrader_validate_alone(student):
    url, token, _ = student
    for page in INSTRUCTOR_PAGES:
        assert not served(f"{url}/{page}?token={token}"), f"a student's Lab serves nbgrader's /{page}"
    assert served(f"{url}/{VALIDATE}?token={token}"), "a student's Lab lost nbgrader's Validate"
    assert INSTRUCTOR_PLUGINS <= disabled_plugins(url, token)


def test_an_instructors_lab_has_every_nbgrader_extension(instructor):
    url, token, _ = instructor
    for page in (*INSTRUCTOR_PAGES, VALIDATE):
        assert served(f"{url}/{page}?token={token}"), f"an instructor's Lab lacks nbgrader's /{page}"
    assert not INSTRUCTOR_PLUGINS & disabled_plugins(url, token)


@pytest.mark.parametrize("role", ["student", "instructor"])
def test_a_kernel_runs_encrypted_and_a_hidden_test_cell_shows_nothing(role, request):
    url, token, log = request.getfixturevalue(role)
    request_ = urllib.request.Request(f"{url}/api/kernels?token={token}", method="POST", data=b'{"name": "python3"}')
    with urllib.request.urlopen(request_, timeout=60) as response:
        kernel = json.load(response)["id"]
    assert asyncio.run(execute(url, token, kernel, hidden_test_cell())) == []
    shown = asyncio.run(execute(url, token, kernel, "6 * 7"))
    assert [s.get("data", {}).get("text/plain") for s in shown] == ["42"], shown  # the kernel answers through Curve
    said = log.read_text()
    assert not [notice for notice in NOTICES if notice in said], said[-3000:]


@pytest.mark.browser
@pytest.mark.parametrize("role", ["student", "instructor"])
def test_the_lab_page_shows_nbgrader_menus_to_instructors_alone(role, request, tmp_path):
    """In Chromium: a student's menu bar has no Nbgrader menu; an instructor's has formgrader in it."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: `apt-get install chromium`")
    from playwright.sync_api import sync_playwright
    url, token, _ = request.getfixturevalue(role)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{url}/lab?token={token}")
            page.wait_for_selector(".lm-MenuBar-itemLabel >> text=Help", timeout=180_000)
            page.wait_for_timeout(2000)  # every plugin's menu added
            menus = page.locator(".lm-MenuBar-itemLabel").all_text_contents()
            page.screenshot(path=tmp_path / f"{role}.png")
            if role == "student":
                assert "Nbgrader" not in menus, f"a student's Lab shows nbgrader's menu (see {tmp_path})"
            else:
                page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
                items = page.locator(".lm-Menu-itemLabel").all_text_contents()
                assert "Formgrader" in items and "Create assignment" in items, items
            assert "Error fetching" not in page.content()
        finally:
            browser.close()
