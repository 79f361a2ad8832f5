"""YieldMode=adaptive: the scavenger paces after-job transfers on the device.

A real stagehandd (SlurmWatch=no, YieldMode=adaptive) archives a tree of
large files (the pipelined path) on the test bed's disk. While it runs, root
writes to the same file system with direct I/O (others' load on the device):
the scavenger must hold the archive (stagehand_pace_held, a backoff counted)
and let it finish once the writer stops. Its state is in /metrics,
/v1/health and `stagehand status`.
"""
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import chown_tree, run_cli, user_dir

MIB = 1 << 20


def _metrics(daemon):
    st, _, text, _ = daemon.api.get("/metrics")
    assert st == 200
    return {k: float(v) for k, v in re.findall(r"^(stagehand_pace_\w+) (\S+)$", text, re.M)}


def _fs_metrics(daemon, path):
    """The stagehand_pace_fs_* samples of the file system holding path."""
    st, _, text, _ = daemon.api.get("/metrics")
    assert st == 200
    d = os.stat(path).st_dev
    dev = "%d:%d" % (os.major(d), os.minor(d))
    out = {}
    for name, labels, v in re.findall(r"^(stagehand_pace_fs_\w+)\{([^}]*)\} (\S+)$", text, re.M):
        if 'device="%s"' % dev in labels:
            out[name] = float(v)
            if name == "stagehand_pace_fs_probe":
                out["probe"] = re.search(r'probe="([^"]*)"', labels).group(1)
    return out


@pytest.fixture(scope="module")
def layout(base_dir, test_users):
    scratch = os.path.join(base_dir, "scratch")
    archive = os.path.join(base_dir, "archive")
    for p in (scratch, archive):
        os.makedirs(p, mode=0o755, exist_ok=True)
        os.chmod(p, 0o1777)
    return {"scratch": scratch, "archive": archive}


@pytest.fixture(scope="module")
def daemon(make_daemon, layout):
    return make_daemon("pace", Workers=2, ArchiveWorkers=1, YieldMode="adaptive",
                       ScratchRoots=layout["scratch"], ArchiveRoot=layout["archive"],
                       BandwidthCap="40M")


def test_adaptive_state_visible(daemon, stagehand_bin):
    st, health, _, _ = daemon.api.get("/v1/health")
    assert st == 200
    y = health["yield"]
    assert y["mode"] == "adaptive", y
    assert set(y["pace"]) == {"filesystems", "held", "rate", "idle_bandwidth", "capacity",
                              "backoffs"}, y
    m = _metrics(daemon)
    assert m["stagehand_pace_mode"] == 2, m
    for k in ("filesystems", "held", "rate_bytes_per_second", "idle_bytes_per_second",
              "capacity_bytes_per_second", "backoffs_total"):
        assert f"stagehand_pace_{k}" in m, m
    p = run_cli(stagehand_bin, ["status"], user="shtest",
                env={"STAGEHAND_SOCKET": daemon.sock})
    assert p.returncode == 0, p.stderr
    assert "YieldMode=adaptive" in p.stdout and "scavenger:" in p.stdout, p.stdout


def test_archive_held_while_others_write_then_finishes(daemon, layout):
    src = user_dir(layout["scratch"], "shtest", "big", "out")
    for i in range(3):
        with open(os.path.join(src, f"part{i}"), "wb") as f:
            for _ in range(48):
                f.write(os.urandom(MIB))
    chown_tree(src, "shtest")
    subprocess.run(["sync", "-f", src], check=True)
    m0 = _metrics(daemon)
    req = daemon.api.submit("archive", src, os.path.join(layout["archive"], "big"),
                            as_user="shtest")
    # Paced from its first byte.
    end = time.monotonic() + 10
    while time.monotonic() < end and _metrics(daemon)["stagehand_pace_filesystems"] < 1:
        time.sleep(0.05)
    assert _metrics(daemon)["stagehand_pace_filesystems"] == 1, daemon.log_tail()
    # The worker is counted as paced a moment before the main loop logs it.
    end = time.monotonic() + 10
    while time.monotonic() < end and "paced by the adaptive scavenger" not in daemon.log_tail(200):
        time.sleep(0.05)
    assert "paced by the adaptive scavenger" in daemon.log_tail(200), daemon.log_tail()
    # Others' load: direct writes on the same file system (256 MiB, over and
    # over into one file) until the archive is seen held. A fixed amount
    # made this a race with the disk's speed: the hold needs the archive's
    # first write (which tells the pace thread its device: until then it is
    # paced without a probe, seen up to 0.19 s after "paced" under load),
    # then a few 10 ms steps and a /metrics sample, and 256 MiB took 0.15 to
    # 0.2 s here; a faster disk finished before the hold could be seen.
    noise = os.path.join(layout["scratch"], "noise")
    w = subprocess.Popen(["sh", "-c", 'while :; do dd if=/dev/zero of="$1" bs=1M count=256 '
                          'oflag=direct conv=notrunc status=none || exit 1; done', "sh", noise],
                         start_new_session=True)
    # Seen held: the gauge at a sample, or the file system's holds counter
    # risen (a counter cannot be missed between two samples, however short
    # the hold was or however soon the archive was done on this machine).
    holds0 = _fs_metrics(daemon, layout["archive"]).get("stagehand_pace_fs_holds_total", 0)
    held = 0
    try:
        end = time.monotonic() + 60
        while not held and time.monotonic() < end:
            assert w.poll() is None, "the writer stopped: %s" % w.returncode
            held = int(_metrics(daemon)["stagehand_pace_held"] == 1 or
                       _fs_metrics(daemon, layout["archive"]).get(
                           "stagehand_pace_fs_holds_total", 0) > holds0)
            time.sleep(0.02)
    finally:
        os.killpg(w.pid, signal.SIGTERM)
        w.wait()
        os.unlink(noise)
    assert held == 1, "the archive was never seen held while others wrote (60 s)"
    m1 = _metrics(daemon)
    assert m1["stagehand_pace_backoffs_total"] > m0["stagehand_pace_backoffs_total"], \
        (m0, m1, daemon.log_tail())
    # The same per file system, labelled by its device and mount point.
    f = _fs_metrics(daemon, layout["archive"])
    assert f.get("stagehand_pace_fs_holds_total", 0) >= 1, (f, daemon.log_tail())
    # Own bytes are counted when a chunk completes: a hold that comes before
    # the first one (others' writes began at once) leaves the count at 0 here,
    # so it is checked once the archive has moved its bytes, below.
    assert f["probe"] != "none", f
    r = daemon.api.wait(req["id"], timeout=180)
    assert r["state"] == "done", r
    assert r["bytes_done"] == 3 * 48 * MIB
    end = time.monotonic() + 5
    while time.monotonic() < end and _metrics(daemon)["stagehand_pace_filesystems"] != 0:
        time.sleep(0.1)
    assert _metrics(daemon)["stagehand_pace_filesystems"] == 0, "still paced after the end"
    f = _fs_metrics(daemon, layout["archive"])
    assert f["stagehand_pace_fs_active"] == 0 and f["stagehand_pace_fs_holds_total"] >= 1, f
    assert f["stagehand_pace_fs_own_bytes_total"] >= 3 * 48 * MIB, f
