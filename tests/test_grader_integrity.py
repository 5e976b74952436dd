"""Hostile hand-ins against the grader: each family of attack tried (tests/hostile.py), each row checked.

One class holds, per family, a hand-in that tries it, and unedited and right "victims" graded after the ones that
try to leave something behind. Tamperers must score 0 with status `tampered`, readers 0 because what they wanted was
not there, victims what their answers deserve; no hidden line may reach any feedback, and nothing outside the
batch may change. A control run with stock nbgrader shows that the attacks that could win points really do.
"""

import fcntl
import hashlib
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

import hostile
from course import ROOT, nbgrader
from handins import (ASSIGNMENT, FIRST, NOTEBOOK, SECOND, exercise_points, grade, handin, hidden_lines, html_text,
                     leaked, private_env, release, right, right_answers, rows_of, scratch_course, write, write_folder)

pytestmark = [pytest.mark.xdist_group("grader-integrity"), pytest.mark.sandbox, pytest.mark.slow]
SECRET = "an-instructors-token-7f3a9c"  # in the grader's environment: no kernel may see it
BOTH = {FIRST, SECOND}


def stub(answer: str) -> str:
    return next(c.source for c in release().cells if c.id == answer)


def unedited_with(code: str):
    """The unedited notebook, `code` run in its first answer cell: full marks if the attack worked."""
    return handin({FIRST: f"{code}\n\n{stub(FIRST)}"})


def right_with(code: str, where: str = FIRST, **changed):
    answers = {**right_answers(), **changed}
    answers[where] = f"{code}\n\n{answers[where]}"
    return handin(answers)


# student -> (notebook, expected status, exercises scoring 0 (the others full marks), words the message must hold)
def hostile_class(port: int) -> dict[str, tuple]:
    return {
        "input_transformer": (unedited_with(hostile.INPUT_TRANSFORMER), "tampered", BOTH, "must fail"),
        "ast_transformer": (unedited_with(hostile.AST_TRANSFORMER), "tampered", BOTH, "must fail"),
        "run_cell_replaced": (unedited_with(hostile.RUN_CELL_REPLACED), "tampered", BOTH, ""),
        "run_cell_class_patched": (unedited_with(hostile.RUN_CELL_CLASS_PATCHED), "tampered", BOTH, ""),
        "execute_handler": (unedited_with(hostile.EXECUTE_HANDLER), "tampered", BOTH, ""),
        "custom_exception": (unedited_with(hostile.CUSTOM_EXCEPTION), "tampered", BOTH, "errors"),
        "showtraceback": (unedited_with(hostile.SHOWTRACEBACK), "tampered", BOTH, "errors"),
        "code_swap": (unedited_with(hostile.CODE_SWAP), "tampered", BOTH, ""),
        "trace_skips_asserts": (unedited_with(hostile.TRACE_SKIPS_ASSERTS), "tampered", BOTH, ""),
        "profile_hook": (unedited_with(hostile.PROFILE_HOOK), "tampered", BOTH, "getprofile"),
        "transient_trace": (handin({**right_answers(), FIRST: hostile.TRANSIENT_TRACE}), "tampered", BOTH,
                            "a trace function"),
        "faked_math": (handin({FIRST: hostile.FAKED_MATH}), "tampered", BOTH, "math.isclose"),
        "event_loop_once_fakes_math": (handin({FIRST: hostile.EVENT_LOOP_ONCE_FAKES_MATH}), "tampered", BOTH,
                                       "left code to run later"),
        "faked_reference": (handin({FIRST: hostile.FAKED_REFERENCE}), "tampered", BOTH, "this hidden test uses"),
        "reference_by_a_builtin": (handin({FIRST: hostile.REFERENCE_BY_A_BUILTIN}), "tampered", BOTH,
                                   "this hidden test uses"),
        "shadowed_builtin": (right(**{SECOND: hostile.SHADOWED_BUILTIN}), "tampered", {SECOND}, "this hidden test uses"),
        # getting hidden tests out
        "recorder_prints": (handin(right_answers(), added=[hostile.PRINT_RECORDED], lesson=hostile.RECORDER),
                            "graded", set(), ""),
        "recorder_raises": (handin({**right_answers(), SECOND: hostile.RAISE_RECORDED}, lesson=hostile.RECORDER),
                            "graded", {SECOND}, ""),
        "recorder_display": (handin(right_answers(), added=[hostile.UPDATE_SLOT],
                                    lesson=hostile.RECORDER + hostile.DISPLAY_SLOT), "graded", set(), ""),
        "recorder_widget": (handin(right_answers(), added=[hostile.FILL_WIDGET],
                                   lesson=hostile.RECORDER + hostile.WIDGET_SLOT), "graded", set(), ""),
        "recorder_names_error": (handin({**right_answers(), SECOND: hostile.ERROR_NAMED_BY_RECORDING},
                                        lesson=hostile.RECORDER), "graded", {SECOND}, ""),
        # reaching beyond its own grading
        "answer_reader": (unedited_with(hostile.ANSWER_READER), "graded", BOTH, ""),
        "home_polluter": (unedited_with(hostile.HOME_POLLUTER), "graded", BOTH, ""),
        "vandal": (right_with(hostile.VANDAL), "graded", set(), ""),
        "fork_bomb": (right_with(hostile.FORK_BOMB), "graded", set(), "running after grading"),
        "warm_parent_prober": (right_with(hostile.WARM_PARENT_PROBE), "graded", set(), ""),
        "disk_filler": (right_with(hostile.DISK_FILLER), "graded", set(), ""),
        "network": (right_with(hostile.network_probe(port)), "graded", set(), ""),
        "env_reader": (right_with(hostile.ENV_READER), "graded", set(), ""),
        # victims, graded after the others (sorted by name, two at a time)
        "zz_unedited": (handin(), "graded", BOTH, ""),
        "zz_right": (right(), "graded", set(), ""),
    }


# Attacks that win points from stock nbgrader (the control run). Of the others, custom exception handlers and a
# silenced showtraceback are undone by nbgrader's own reading of the kernel's replies, and the trace function finds
# no line to jump to in this course's one-line asserts: the grader stops them all the same.
WINS_UNGUARDED = ("input_transformer", "ast_transformer", "run_cell_replaced", "run_cell_class_patched",
                  "event_loop_once_fakes_math",
                  "execute_handler", "faked_math", "faked_reference", "reference_by_a_builtin", "shadowed_builtin")


class Listener:
    """A TCP server on this machine's loopback that records whether anyone connected."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port, self.heard = self.server.getsockname()[1], []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.heard.append(connection.recv(100))
            connection.close()


def fingerprint(folders: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for f in folders for p in sorted(f.rglob("*"))
            if p.is_file() and ".venv" not in p.parts and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def listener():
    return Listener()


@pytest.fixture(scope="module")
def graded(tmp_path_factory, listener):
    """The hostile class graded once, with files outside the batch fingerprinted before and after."""
    base = tmp_path_factory.mktemp("integrity")
    course = scratch_course(base / "course")
    class_ = hostile_class(listener.port)
    submissions = write_folder(base / "submissions", {s: write(v[0]) for s, v in class_.items()})
    env = private_env(base / "env", AUTOGRADER_TEST_SECRET=SECRET)
    outside = [course / "solutions", submissions, ROOT / "torchcourse", ROOT / "data", ROOT / "autograder",
               Path(env["HOME"])]
    before = fingerprint(outside) | {"nbgrader_config.py": hashlib.sha256((course / "nbgrader_config.py").read_bytes()).hexdigest()}
    grade(course, submissions, env=env)
    after = fingerprint(outside) | {"nbgrader_config.py": hashlib.sha256((course / "nbgrader_config.py").read_bytes()).hexdigest()}
    out = course / "autograder" / "grades" / ASSIGNMENT
    return course, out, rows_of(out), class_, before, after, Path(env["TMPDIR"])


@pytest.mark.parametrize("student", list(hostile_class(0)))
def test_each_hand_in_is_graded_as_it_deserves(graded, student):
    _, _, rows, class_, _, _, _ = graded
    _, status, zero, words = class_[student]
    row = rows[student]
    assert row["status"] == status, f"{student}: {row['status']} ({row['message']})"
    assert words in row["message"], f"{student}: '{row['message']}' does not mention '{words}'"
    for exercise in (FIRST, SECOND):
        got, best = exercise_points(row, exercise)
        assert got == (0 if exercise in zero else best), f"{student}: {exercise} scores {got}/{best} ({row['message']})"


def test_no_hidden_line_reaches_any_feedback(graded):
    """By the test's own list of hidden lines, in the text a student reads (tags stripped, entities decoded)."""
    _, out, rows, _, _, _, _ = graded
    secret = hidden_lines()
    assert len(secret) >= 4
    for student in rows:
        text = html_text(out / "feedback" / f"{student}.html")
        assert not leaked(text, secret), f"{student}'s feedback shows hidden lines: {leaked(text, secret)}"
        assert SECRET not in text, f"{student}'s feedback shows the grader's environment"


@pytest.mark.parametrize("student", ["recorder_prints", "recorder_raises"])
def test_the_recorders_did_capture_hidden_tests(graded, student):
    """The control for the test above: the instructor's copy (not the feedback) holds the hidden lines they sent."""
    course, _, _, _, _, _, _ = graded
    copy = nbformat.read(course / "autograder" / "autograded" / student / ASSIGNMENT / NOTEBOOK, as_version=4)
    said = "\n".join(str(o.get("text", "")) + str(o.get("evalue", "")) for c in copy.cells for o in c.get("outputs", []))
    assert leaked(said, hidden_lines()), f"{student} captured no hidden line"


def test_feedback_keeps_each_hidden_test_name_points_and_own_message(graded):
    _, out, _, _, _, _, _ = graded
    text = html_text(out / "feedback" / "recorder_raises.html")
    assert f"{SECOND}_hidden" in text and "Hidden tests ran here" in text
    assert "(message not shown" in text, "a message the test did not write is not shown"
    tampered = html_text(out / "feedback" / "faked_math.html")
    assert "TestsTampered" in tampered and "math.isclose" in tampered


def test_nothing_outside_the_batch_changed(graded, listener):
    """The course, the hand-ins, the grader's own files and HOME are as they were; no kernel reached the network."""
    _, _, _, _, before, after, tmp = graded
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"changed outside the batch: {changed[:5]}"
    assert not listener.heard, f"a kernel reached this machine over TCP: {listener.heard}"
    left = sorted(p.name for p in tmp.iterdir())
    assert not left, f"the batch left files in its temporary folder: {left}"


def test_the_fork_bomb_hit_the_process_limit(graded):
    course, _, _, _, _, _, _ = graded
    nb = nbformat.read(course / "autograder" / "autograded" / "fork_bomb" / ASSIGNMENT / NOTEBOOK, as_version=4)
    said = [o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if "forked" in o.get("text", "")]
    assert said and int(said[0].split()[1]) < 256, f"the fork bomb was not limited: {said}"


def test_no_socket_outside_its_own_kernel_is_reachable(graded):
    """The warm parent's socket and other hand-ins' kernels are hidden from a forked kernel: it finds its own
    sockets only."""
    course, _, _, _, _, _, _ = graded
    nb = nbformat.read(course / "autograder" / "autograded" / "warm_parent_prober" / ASSIGNMENT / NOTEBOOK, as_version=4)
    said = [o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if "sockets seen" in o.get("text", "")]
    assert said, "the prober did not run"
    seen, reached = said[0].split(";")
    assert int(seen.split(":")[1]) > 0, f"the prober found no socket at all, not even its kernel's: {said[0]}"
    assert reached.split(":")[1].split()[0] == "0", said[0]


def test_a_hidden_tests_names_reach_the_instructor_only(graded):
    """What a hidden test reads is named in the instructor's log, not in the row's message nor the feedback."""
    course, out, rows, _, _, _, _ = graded
    for student, name in (("shadowed_builtin", "abs (shadowed"), ("faked_reference", "statistics.fmean (replaced")):
        assert name in (out / "logs" / f"{student}.log").read_text(), f"{student}'s log does not name {name}"
        told = rows[student]["message"] + html_text(out / "feedback" / f"{student}.html")
        assert name.split()[0] not in rows[student]["message"] and name not in told, f"{student} is told {name}"
        assert "this hidden test uses" in told


def test_tampered_notebooks_go_to_a_human(graded):
    course, _, rows, _, _, _, _ = graded
    with Gradebook(f"sqlite:///{course}/autograder/gradebook.db") as gb:
        for student, row in rows.items():
            submitted = gb.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, student)
            assert submitted.needs_manual_grade == (row["status"] == "tampered"), student


def test_the_attacks_win_points_from_stock_nbgrader(tmp_path, listener):
    """The control: graded by plain nbgrader (its own Execute, no sandbox, no checks), each of these scores."""
    from benchmark_grading import stock_nbgrader
    course = stock_nbgrader(scratch_course(tmp_path / "course"))
    class_ = hostile_class(listener.port)
    nbgrader("generate_assignment", ASSIGNMENT, "--force", cwd=course)
    for student in WINS_UNGUARDED:
        target = course / "autograder" / "submitted" / student / ASSIGNMENT / NOTEBOOK
        target.parent.mkdir(parents=True)
        target.write_text(write(class_[student][0]))
    env = private_env(tmp_path / "env")
    subprocess.run([sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT, "--create", "--Execute.timeout=60"],
                   cwd=course, env=env, capture_output=True)
    with Gradebook(f"sqlite:///{course}/autograder/gradebook.db") as gb:
        scores = {s: gb.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, s).score for s in WINS_UNGUARDED}
    assert all(score > 0 for score in scores.values()), f"an attack that should win points did not: {scores}"


POLLUTERS = ("home_polluter", "vandal", "disk_filler", "fork_bomb")


def test_no_order_or_parallelism_changes_a_grade(tmp_path, listener):
    """Polluters graded before the victims, or after them, and one or two at a time: the same scores."""
    class_ = hostile_class(listener.port)
    tables = []
    for k, (first, jobs) in enumerate((("a", "2"), ("z", "2"), ("a", "1"))):
        course = scratch_course(tmp_path / f"course{k}")
        names = {**{f"{first}_{p}": write(class_[p][0]) for p in POLLUTERS},
                 "m_unedited": write(handin()), "m_right": write(right())}
        submissions = write_folder(tmp_path / f"submissions{k}", names)
        grade(course, submissions, "--jobs", jobs)
        rows = rows_of(course / "autograder" / "grades" / ASSIGNMENT)
        tables.append({sid.split("_", 1)[1]: (r["status"], r["score"]) for sid, r in rows.items()})
    assert tables[0] == tables[1] == tables[2], tables
    assert tables[0]["unedited"] == ("graded", "0") and tables[0]["right"] == ("graded", "6")


def test_every_feedback_path_hides_hidden_tests(tmp_path):
    """nbgrader autograde and generate_feedback, and formgrader's Generate Feedback (nbgrader's API), use the
    course's configuration: the same sandbox, the same checks, the same feedback as `make grade`."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import PyFileConfigLoader
    course = scratch_course(tmp_path / "course")
    nbgrader("generate_assignment", ASSIGNMENT, "--force", cwd=course)
    students = {"leaks": handin({**right_answers(), SECOND: hostile.RAISE_RECORDED}, added=[hostile.PRINT_RECORDED],
                                lesson=hostile.RECORDER), "tampers": unedited_with(hostile.INPUT_TRANSFORMER)}
    for student, nb in students.items():
        target = course / "autograder" / "submitted" / student / ASSIGNMENT / NOTEBOOK
        target.parent.mkdir(parents=True)
        target.write_text(write(nb))
    env = private_env(tmp_path / "env")
    for command in (["autograde", ASSIGNMENT, "--create"], ["generate_feedback", ASSIGNMENT]):
        result = subprocess.run([sys.executable, "-m", "nbgrader", *command], cwd=course, env=env, capture_output=True,
                                text=True)
        assert result.returncode == 0, result.stderr[-3000:]
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    config.CourseDirectory.root = str(course)
    shutil.rmtree(course / "autograder" / "feedback" / "leaks")
    NbGraderAPI(CourseDirectory(config=config), config=config).generate_feedback(ASSIGNMENT, "leaks")  # formgrader
    secret = hidden_lines()
    for student in students:
        text = html_text(course / "autograder" / "feedback" / student / ASSIGNMENT / "01_basics.html")
        assert not leaked(text, secret), f"{student}: {leaked(text, secret)}"
    with Gradebook(f"sqlite:///{course}/autograder/gradebook.db") as gb:
        tampered = gb.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, "tampers")
        assert tampered.score == 0 and tampered.needs_manual_grade


def test_two_batches_at_once_each_with_a_vandal(tmp_path):
    """Two gradings of one course at the same time (two assignments), each with a vandal: both tables right."""
    course = scratch_course(tmp_path / "course")
    vandal = write(right_with(hostile.VANDAL))
    first = write_folder(tmp_path / "one", {"vandal": vandal, "right": write(right()), "unedited": write(handin())})
    second = write_folder(tmp_path / "two", {"vandal2": vandal, "right2": write(right()), "unedited2": write(handin())})
    runs = [subprocess.Popen([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, str(folder), "--jobs", "1",
                              "--course", str(course), "--out", str(tmp_path / f"out-{folder.name}")],
                             cwd=ROOT, env=private_env(tmp_path / f"env-{folder.name}"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for folder in (first, second)]
    for run in runs:
        _, err = run.communicate(timeout=600)
        assert run.returncode == 0, err[-3000:]
    for folder, suffix in ((first, ""), (second, "2")):
        rows = rows_of(tmp_path / f"out-{folder.name}")
        assert {s: (r["status"], r["score"]) for s, r in rows.items()} == {
            f"vandal{suffix}": ("graded", "6"), f"right{suffix}": ("graded", "6"), f"unedited{suffix}": ("graded", "0")}
    with open(tmp_path / "out-one" / ".lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        blocked = grade(course, first, "--out", str(tmp_path / "out-one"), check=False)
    assert blocked.returncode != 0 and "another grading is writing" in blocked.stderr


def test_a_batch_that_loses_its_template_keeps_its_rows_and_a_rerun_completes_it(tmp_path):
    """The batch's scratch template is deleted mid-batch: rows graded so far are in grades.csv, the command names
    the failed step and exits non-zero, and the same command again grades what is missing."""
    course = scratch_course(tmp_path / "course")
    submissions = write_folder(tmp_path / "subs", {f"s{k}": write(right() if k % 2 else handin()) for k in range(6)})
    env = private_env(tmp_path / "env")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "autograder", "grade", ASSIGNMENT, str(submissions), "--jobs", "1",
               "--course", str(course), "--out", str(out)]
    run = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list((out / "results").glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    for template in Path(env["TMPDIR"]).glob("autograder-batch-*/template"):
        shutil.rmtree(template)
    _, err = run.communicate(timeout=600)
    assert run.returncode != 0 and "grading stopped" in err and "template" in err, err[-2000:]
    kept = rows_of(out)
    assert 1 <= len(kept) < 6 and all(r["status"] == "graded" for r in kept.values()), kept
    again = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"{6 - len(kept)} to grade" in again.stderr
    rows = rows_of(out)
    assert sorted(rows) == [f"s{k}" for k in range(6)]
    assert all(r["score"] == ("6" if int(s[1:]) % 2 else "0") for s, r in rows.items()), rows
