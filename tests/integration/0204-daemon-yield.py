"""After-job transfers yield to running jobs on their file system.

A real stagehandd (SlurmWatch=no) is told a job runs through its YieldProbe
file (one directory per line, as slurmctld's WorkDir/StdOut would be). An
archive whose source shares that file system must stop moving bytes while
the probe lists it and resume when it is gone; a stage-in is not held back;
ArchiveWorkers caps concurrent after-job transfers; YieldMaxDelay lets a
starved archive go on at YieldTrickle. Progress is sampled with timestamps
from the request's bytes_done (verified bytes) and the /metrics gauges.
"""
import os
import re
import time

import pytest

from conftest import chown_tree, user_dir

N_FILES = 400
SIZE = 64 << 10           # 25 MiB in all; BandwidthCap 10M -> about 2.5 s unhindered
# Small files are reported in batches of up to 8 MiB (SyncMode=batch): the
# first progress after a resume shows up within about a second at 10 MiB/s.


def _metric(daemon, name):
    st, _, text, _ = daemon.api.get("/metrics")
    assert st == 200
    m = re.search(rf"^{name} ([0-9.]+)$", text, re.M)
    assert m, f"{name} missing from /metrics"
    return float(m.group(1))


def _tree(root, user, n=N_FILES, size=SIZE):
    os.makedirs(root, exist_ok=True)
    for i in range(n):
        with open(os.path.join(root, f"f{i:04d}"), "wb") as f:
            f.write(os.urandom(size))
    chown_tree(root, user)
    return root


def _sample(daemon, rid, seconds, step=0.2):
    """[(t, bytes_done, state)] over seconds."""
    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        r = daemon.api.request(rid)
        out.append((time.monotonic(), r["bytes_done"], r["state"]))
        time.sleep(step)
    return out


@pytest.fixture(scope="module")
def layout(base_dir, test_users):
    scratch = os.path.join(base_dir, "scratch")
    archive = os.path.join(base_dir, "archive")
    for p in (scratch, archive):
        os.makedirs(p, mode=0o755, exist_ok=True)
        os.chmod(p, 0o1777)
    return {"scratch": scratch, "archive": archive, "probe": os.path.join(base_dir, "busy")}


@pytest.fixture(scope="module")
def daemon(make_daemon, layout):
    return make_daemon("yield", Workers=3, ArchiveWorkers=2, BandwidthCap="10M",
                       ScratchRoots=layout["scratch"], ArchiveRoot=layout["archive"],
                       YieldProbe=layout["probe"], YieldToJobs="yes", YieldBandwidth=0,
                       YieldMaxDelay="10m")


def _busy(layout, *dirs):
    with open(layout["probe"] + ".tmp", "w") as f:
        f.write("# running jobs (test)\n" + "".join(d + "\n" for d in dirs))
    os.rename(layout["probe"] + ".tmp", layout["probe"])


def _idle(layout):
    try:
        os.unlink(layout["probe"])
    except FileNotFoundError:
        pass


def test_archive_pauses_while_job_runs_and_resumes(daemon, layout):
    src = _tree(user_dir(layout["scratch"], "shtest", "job1", "results"), "shtest")
    dest = os.path.join(layout["archive"], "shtest-job1")
    # A job runs in another directory of the same scratch file system.
    _busy(layout, os.path.join(layout["scratch"], "shtest2", "job2"))
    time.sleep(1.0)
    assert _metric(daemon, "stagehand_yield_busy_filesystems") >= 1
    req = daemon.api.submit("archive", src, dest, as_user="shtest")
    paused = _sample(daemon, req["id"], 3.0)
    assert all(b == 0 for _, b, _ in paused), f"bytes moved while a job ran: {paused}"
    assert paused[-1][2] == "running", paused[-1]
    assert _metric(daemon, "stagehand_yield_active") == 1
    t_release = time.monotonic()
    _idle(layout)
    moving = _sample(daemon, req["id"], 3.0)
    first = next((t for t, b, _ in moving if b > 0), None)
    assert first is not None, f"no progress after the job ended: {moving}\n{daemon.log_tail()}"
    assert first - t_release < 2.5, f"resumed only {first - t_release:.1f} s after the job ended"
    r = daemon.api.wait(req["id"], timeout=120)
    assert r["state"] == "done", r
    assert r["bytes_done"] == N_FILES * SIZE
    assert _metric(daemon, "stagehand_yield_active") == 0
    assert _metric(daemon, "stagehand_yield_seconds_total") >= 2.0
    assert "resumes" in daemon.log_tail(400)


def test_stage_in_not_held(daemon, layout):
    src = _tree(user_dir(layout["scratch"], "shtest", "job3", "results"), "shtest", n=20)
    # Stage-in feeds a job that waits for it: never held back, whatever runs.
    _busy(layout, os.path.join(layout["scratch"], "shtest2", "job2"))
    try:
        time.sleep(1.0)
        dest = user_dir(layout["scratch"], "shtest", "job3", "input")
        req = daemon.api.submit("stage_in", src, dest, as_user="shtest")
        r = daemon.api.wait(req["id"], timeout=60)
        assert r["state"] == "done", r
        assert r["bytes_done"] == 20 * SIZE
    finally:
        _idle(layout)


def test_archive_workers_cap(daemon, layout):
    _busy(layout, os.path.join(layout["scratch"], "shtest2", "job2"))
    ids = []
    try:
        time.sleep(1.0)
        for k in range(3):
            src = _tree(user_dir(layout["scratch"], "shtest", f"cap{k}", "out"), "shtest", n=4)
            ids.append(daemon.api.submit("archive", src,
                                         os.path.join(layout["archive"], f"cap{k}"),
                                         as_user="shtest")["id"])
        time.sleep(1.5)
        states = [daemon.api.request(i)["state"] for i in ids]
        # Workers=3 but ArchiveWorkers=2: the third waits queued.
        assert states.count("running") == 2 and states.count("queued") == 1, states
    finally:
        _idle(layout)
    for i in ids:
        assert daemon.api.wait(i, timeout=60)["state"] == "done"


def test_max_delay_trickles(make_daemon, layout, base_dir):
    d = make_daemon("yield-max", Workers=2, ArchiveWorkers=1,
                    ScratchRoots=layout["scratch"], ArchiveRoot=layout["archive"],
                    YieldProbe=layout["probe"] + "-max", YieldMaxDelay="2s",
                    YieldTrickle="2M")
    with open(layout["probe"] + "-max", "w") as f:
        f.write(os.path.join(layout["scratch"], "busyjob") + "\n")
    try:
        time.sleep(1.0)     # the yield state is refreshed every 0.5 s
        src = _tree(user_dir(layout["scratch"], "shtest", "max", "out"), "shtest", n=16,
                    size=64 << 10)
        req = d.api.submit("archive", src, os.path.join(layout["archive"], "max"),
                           as_user="shtest")
        early = _sample(d, req["id"], 1.2)
        assert all(b == 0 for _, b, _ in early), early
        # After YieldMaxDelay it goes on at YieldTrickle (2 MiB/s: 1 MiB in about 0.5 s).
        r = d.api.wait(req["id"], timeout=30)
        assert r["state"] == "done", r
        assert "YieldMaxDelay reached" in d.log_tail(400)
    finally:
        os.unlink(layout["probe"] + "-max")
