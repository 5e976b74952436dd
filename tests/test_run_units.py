"""The run wing one module at a time: collecting hand-ins, the plan, the supervisor's deadline, batch refusals."""

import copy
import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from traitlets.config import Config

from autograder.run import batch, collect
from autograder import layout, results
from autograder import config as course_config
from course import ROOT
from handins import grade, handin, private_env, right, rows_of, scratch_course, write, write_folder


def test_a_configuration_that_would_leak_run_unguarded_or_show_script_is_refused():
    shipped = course_config.load(ROOT, {})
    batch.check_configuration(shipped)
    with pytest.raises(SystemExit, match="GuardedExecute"):
        batch.check_configuration(Config({"Autograde": {"autograde_preprocessors": ["nbgrader.preprocessors.Execute"]},
                                          "GenerateFeedback": {"preprocessors": ["autograder.grading.feedback.HideHiddenTests"]}}))
    unsanitised = copy.deepcopy(shipped)
    unsanitised.HTMLExporter.sanitize_html = False
    with pytest.raises(SystemExit, match="sanitise"):
        batch.check_configuration(unsanitised)


def test_where_the_sandbox_cannot_start_grading_stops_unless_unfenced(tmp_path):
    """A clear message and a non-zero exit; with --unfenced the batch grades, and its summary and logs say so."""
    course = scratch_course(tmp_path / "course")
    with open(course / "nbgrader_config.py", "a") as f:
        f.write('\nc.SandboxedKernelManager.bwrap = "/nonexistent/bwrap"\n')
    submissions = write_folder(tmp_path / "subs", {"right": write(right()), "unedited": write(handin())})
    refused = grade(course, submissions, check=False, env=private_env(tmp_path / "env"))
    assert refused.returncode != 0 and "apt install bubblewrap" in refused.stderr and "--unfenced" in refused.stderr
    graded = grade(course, submissions, "--unfenced", env=private_env(tmp_path / "env"))
    assert "UNFENCED" in graded.stderr
    out = course / "autograder" / "grades" / "01_basics"
    assert {s: r["score"] for s, r in rows_of(out).items()} == {"right": "6", "unedited": "0"}
    assert all("UNFENCED" in (out / "logs" / f"{s}.log").read_text() for s in ("right", "unedited"))


def test_a_link_in_a_folder_of_hand_ins_is_not_followed(tmp_path):
    """A hand-in that is a link (to another student's notebook, to the sources) is not read: that student has none."""
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "01_basics.ipynb").write_text("{}")
    (tmp_path / "mallory").mkdir()
    (tmp_path / "mallory" / "01_basics.ipynb").symlink_to(tmp_path / "alice" / "01_basics.ipynb")
    (tmp_path / "trudy").symlink_to(tmp_path / "alice")  # a student's whole folder a link to another's
    (tmp_path / "oscar.ipynb").symlink_to(tmp_path / "alice" / "01_basics.ipynb")
    (tmp_path / "eve" / "deep").mkdir(parents=True)
    (tmp_path / "eve" / "deep" / "inside").symlink_to(tmp_path / "alice")  # a folder behind a link, inside
    found = {s.student_id: s for s in collect.from_folder(tmp_path, "01_basics.ipynb")}
    assert found["alice"].path == tmp_path / "alice" / "01_basics.ipynb"
    assert found["mallory"].path is None and "no notebook" in found["mallory"].message
    assert found["eve"].path is None and "no notebook" in found["eve"].message
    for name in ("trudy", "oscar"):
        assert found[name].path is None and found[name].status == "invalid" and "is a link" in found[name].message


def test_student_file_names_are_safe_and_never_shared():
    """Ids as an LMS gives them: each gets a name of its own for files and the gradebook, safe in any path."""
    ids = ["alice", "José", "Josè", "张伟", "王芳", "bob smith", "bob\nsmith", "bob_smith", "bob%20smith", ".", "..",
           ".hidden", "a/../../b", "x" * 250, "x" * 249 + "y", "x" * 120, "a~b", "a%7Eb", "", "+1", "%2B1", "-rf", "=1+1", "@x", "*?[]"]
    names = [collect.file_name_of(i) for i in ids]
    assert len(set(names)) == len(ids), "two students would share one name"
    assert names[0] == "alice" and collect.file_name_of("s.m-t_1@uni.edu") == "s.m-t_1@uni.edu"
    for name in names:
        assert name and len(name) <= collect.MAX_NAME and name not in (".", "..") and not name.startswith(tuple(".+-@="))
        assert re.fullmatch(r"[A-Za-z0-9@+._%~-]+", name), name


def test_the_exchange_layout_brings_timestamp_and_secret_and_skips_other_assignments(tmp_path):
    """nbgrader's submitted/<student>/<assignment>/: the two small files read (at most MAX_NOTE_BYTES), a student
    without this assignment's folder left out."""
    folder = tmp_path / "alice" / "01_basics"
    folder.mkdir(parents=True)
    (folder / "01_basics.ipynb").write_text("{}")
    (folder / layout.TIMESTAMP_FILE).write_text("2026-11-20 10:00:00 UTC\n")
    (folder / layout.SECRET_FILE).write_text("s" * 5000)
    (tmp_path / "bob" / "02_other").mkdir(parents=True)
    (found,) = collect.from_course(tmp_path, "01_basics", "01_basics.ipynb")
    assert (found.student_id, found.timestamp, found.secret) == ("alice", "2026-11-20 10:00:00 UTC",
                                                                "s" * collect.MAX_NOTE_BYTES)


def test_a_damaged_zip_member_costs_its_own_row(tmp_path):
    """A bad CRC, or a member over the size cap, gives that student an invalid row naming why; the others unpack."""
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("ana/01_basics.ipynb", "{}" * 1000)
        z.writestr("ben/01_basics.ipynb", "{}" * 1000)
    data = archive.read_bytes()
    crc = data.rindex(b"PK\x01\x02", 0, data.rindex(b"ben/01")) + 16  # ben's CRC in the central directory
    archive.write_bytes(data[:crc] + bytes(b ^ 0xFF for b in data[crc:crc + 4]) + data[crc + 4:])
    found = {s.student_id: s for s in collect.from_zip(archive, "01_basics.ipynb", None, tmp_path / "scratch")}
    assert found["ana"].path.read_text() == "{}" * 1000
    assert found["ben"].path is None and found["ben"].status == "invalid"
    assert "could not be unpacked" in found["ben"].message and "CRC" in found["ben"].message


def test_a_grading_stopped_at_its_deadline_leaves_the_batchs_own_processes_running(tmp_path, monkeypatch):
    """The pool stops a grading past its deadline, with all it started, and a 'timeout' row says so; the processes it
    is told to spare (the report's, which works beside the gradings) keep running."""
    import multiprocessing
    import time
    from autograder.kernel.manager import processes
    from autograder.run import supervisor
    from autograder.kernel.manager import WarmParents
    from autograder.results import Job
    parents = WarmParents(1, Config({"SandboxedKernelManager": {"fork_warm": False}}))
    bystander = processes.fork(time.sleep, 600)
    try:
        out = tmp_path / "out"
        (out / "results").mkdir(parents=True)
        job = Job(student_id="slow", assignment="a", notebook="a.ipynb", submitted="", template="",
                  scratch=str(tmp_path / "scratch"), out=str(out), config=Config(), points={"t1": 1.0})
        never_ends = supervisor.Slots(parents, lambda job: time.sleep(600), deadline=1, spare={bystander.pid})
        supervisor.run(never_ends, [job], progress=batch.Progress(1))
        row = json.loads((out / "results" / "slow.json").read_text())
        assert row["status"] == "timeout" and "longer than 1 s" in row["message"], row
        assert bystander.pid in processes.descendants(os.getpid()), "a process the pool was told to spare was stopped"
    finally:
        processes.end(bystander)
        parents.close()
    assert not multiprocessing.active_children(), "a process the pool ended is still listed as running"


def test_a_hand_in_the_grader_cannot_read_costs_its_row_alone(tmp_path, monkeypatch):
    """A file the instructor's account cannot read (an exchange folder's permissions, say) gets an invalid row
    saying so; the others are planned as usual. (As root every file is readable: the refusal is simulated.)"""
    for folder in ("results", "submitted"):
        (tmp_path / "out" / folder).mkdir(parents=True)
    paths = {name: tmp_path / f"{name}.ipynb" for name in ("alice", "bob")}
    for path in paths.values():
        path.write_text(write(right()))
    real = shutil.copyfile

    def copyfile(source, target, **kw):
        if Path(source).name == "bob.ipynb":
            raise PermissionError(13, "Permission denied")
        return real(source, target, **kw)

    monkeypatch.setattr(shutil, "copyfile", copyfile)
    found = [collect.Submission(name, path) for name, path in paths.items()]
    options = batch.Options(assignment="01", submissions=tmp_path, jobs=1, out=None, force=False, pattern=None,
                            course=tmp_path)
    from autograder.results import Job
    make_job = lambda s: Job(student_id=s.student_id, assignment="01_basics", notebook="01_basics.ipynb",
                             submitted=str(s.path), template="", scratch="", out=str(tmp_path / "out"), config=Config())
    rows, todo = batch.plan(found, options, make_job, tmp_path / "out")
    assert [j.student_id for j in todo] == ["alice"]
    assert rows["bob"].status == "invalid" and "could not be read" in rows["bob"].message
    assert results.read_result(tmp_path / "out" / "results" / "bob.json").status == "invalid"


def big_zip(path: Path, members: int, mib: int) -> Path:
    """A zip of `members` notebooks of `mib` MiB each (zeros: a few kB zipped)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for k in range(members):
            with z.open(f"student{k}/01_basics.ipynb", "w", force_zip64=True) as member:
                for _ in range(mib):
                    member.write(bytes(2**20))
    return path


@pytest.mark.slow
def test_a_zip_is_unpacked_member_by_member_whatever_its_total(tmp_path):
    """A class past 1 GiB in all (23 notebooks of 48 MiB: a real class of notebooks with plots is gigabytes) is
    unpacked whole, each member under the per-notebook cap; a member over it costs its own row."""
    archive = big_zip(tmp_path / "class.zip", 23, 48)
    with zipfile.ZipFile(archive, "a", zipfile.ZIP_DEFLATED) as z, z.open("huge/01_basics.ipynb", "w") as member:
        for _ in range((collect.MAX_BYTES >> 20) + 1):
            member.write(bytes(2**20))
    found = {s.student_id: s for s in collect.from_zip(archive, "01_basics.ipynb", None, tmp_path / "scratch")}
    assert sum(s.path.stat().st_size for s in found.values() if s.path) == 23 * 48 * 2**20
    assert found["huge"].path is None and "not unpacked" in found["huge"].message


def test_a_zip_stops_only_when_the_disk_would_fill(tmp_path, monkeypatch):
    """Unpacking stops, naming what the rest needs, when the disk would be left with less than SPARE_BYTES: the
    instructor's disk, not a student's row."""
    archive = big_zip(tmp_path / "class.zip", 3, 2)
    room = collect.SPARE_BYTES + 3 * 2**20  # room for one member and a half, less what is unpacked

    def disk_usage(path):
        free = room - sum(p.stat().st_size for p in (tmp_path / "scratch").rglob("*") if p.is_file())
        return shutil._ntuple_diskusage(10**12, 10**12 - free, free)

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    with pytest.raises(SystemExit, match=r"full.*need 4 MiB"):
        collect.from_zip(archive, "01_basics.ipynb", None, tmp_path / "scratch")
