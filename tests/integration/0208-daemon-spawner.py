"""The worker spawner: workers are forked by a small process of the daemon's
(stagehand-spawn), not by the daemon's main loop (daemon/core/spawner.h).

With a real daemon and real workers, each worker held on purpose while it is
looked at (in its first open of the source, by stall-open; or stopped while a
bandwidth cap keeps its copy going):
  * a worker is the spawner's child, named stagehandd, running as the
    request's owner; the spawner is the daemon's child, root, and holds no
    descriptor of the daemon's but its socket; the copy is verified;
  * a spawner killed while its worker runs takes the worker with it; the
    attempt fails as a killed worker, the retry goes through a new spawner
    and the copy is whole;
  * after a reload the next worker comes from a new spawner (the old one
    holds the old configuration) and the old one is gone;
  * a resumed request (files done before a crash) is forked by the daemon
    itself: its resume state is in the daemon's memory only;
  * a worker either way holds no socket but its channel and none of the
    daemon's files.
"""
import os
import pwd
import re
import select
import signal
import subprocess
import time

from conftest import chown_tree, proc_children, proc_fields, tree_digest, user_dir

USER = "shtest"
STALL_OPEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stall-open")


class Stall:
    """The first worker of USER to open path is held there until release()."""

    def __init__(self, path):
        self.p = subprocess.Popen([STALL_OPEN, path, "stagehandd", USER], stdout=subprocess.PIPE,
                                  text=True)
        assert self.p.stdout.readline().strip() == "ready", "stall-open did not start"

    def held(self, timeout=60):
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        assert ready, f"no worker opened the source within {timeout}s"
        return int(self.p.stdout.readline())

    def release(self):
        if self.p.poll() is None:
            self.p.terminate()
            self.p.wait(timeout=10)


def _comm(pid):
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def _ruid(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise AssertionError(f"no Uid: line for {pid}")


def _spawners(d):
    return [p for p in proc_children(d.proc.pid) if _comm(p) == "stagehand-spawn"]


def _gone(pid):
    f = proc_fields(pid)
    return f is None or f[0] in "ZX"


def _held_worker(d, timeout=30):
    """The first worker of d, stopped (SIGSTOP) as soon as it is seen."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pids = d.worker_pids()
        if pids:
            os.kill(pids[0], signal.SIGSTOP)
            while (f := proc_fields(pids[0])) and f[0] not in "TtZX":
                assert time.monotonic() < end, "worker never stopped"
                time.sleep(0.005)
            return pids[0]
        time.sleep(0.01)
    raise AssertionError("no worker appeared:\n" + d.log_tail(30))


def _tree(base_dir, name, files=4, size=1 << 20):
    src = user_dir(base_dir, USER, "spawn-src", name)
    for i in range(files):
        with open(os.path.join(src, f"f{i}"), "wb") as f:
            f.write(os.urandom(size))
    chown_tree(src, USER)
    return src


def _fd_links(pid):
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            pass    # closed while listed
    return out


def _holds_nothing_of_the_daemons(w, d):
    """w's only socket is its channel (3), and past its standard streams (the
    daemon's log) it holds none of the daemon's files, the state database
    among them: close_range or the /proc/self/fd listing closed them."""
    mine, theirs = _fd_links(w), _fd_links(d.proc.pid)
    socks = sorted(fd for fd, link in mine.items() if link.startswith("socket:"))
    assert socks == [3], f"worker {w} sockets at {socks}: {mine}"
    files = {link for link in theirs.values() if link.startswith("/") and
             not link.startswith("/dev/")}
    shared = files & {link for fd, link in mine.items() if fd > 2}   # 0-2: the log, shared
    assert not shared, f"worker {w} holds the daemon's {sorted(shared)}"


def _started(d):
    return [int(p) for p in re.findall(r"worker spawner started \(pid (\d+)", d.log_tail(2000))]


def test_workers_come_from_the_spawner(make_daemon, base_dir):
    d = make_daemon("spawn-basic")
    src = _tree(base_dir, "basic")
    dest = os.path.join(user_dir(base_dir, USER, "spawn-dst"), "basic")
    stall = Stall(src)
    req = d.api.submit("archive", src, dest, as_user=USER)
    w = stall.held()
    try:
        sp = _spawners(d)
        assert len(sp) == 1, f"spawners of daemon {d.proc.pid}: {sp}"
        sp = sp[0]
        assert proc_fields(w)[1] == str(sp), "the worker is not the spawner's child"
        assert _comm(w) == "stagehandd"
        assert _ruid(w) == pwd.getpwnam(USER).pw_uid
        assert _ruid(sp) == 0
        assert sorted(os.listdir(f"/proc/{sp}/fd")) == ["0", "1", "2", "3"], \
            os.listdir(f"/proc/{sp}/fd")
        _holds_nothing_of_the_daemons(w, d)
        assert _started(d) == [sp]
    finally:
        stall.release()
    r = d.api.wait(req["id"], timeout=60)
    assert r["state"] == "done", r
    assert tree_digest(dest) == tree_digest(src)


def test_a_lost_spawner_takes_its_worker_and_a_new_one_is_made(make_daemon, base_dir):
    d = make_daemon("spawn-lost", MaxRetries=2, RetryBackoff=1)
    src = _tree(base_dir, "lost")
    dest = os.path.join(user_dir(base_dir, USER, "spawn-dst"), "lost")
    stall = Stall(src)
    req = d.api.submit("archive", src, dest, as_user=USER)
    try:
        w = stall.held()
        (sp,) = _spawners(d)
        os.kill(sp, signal.SIGKILL)
        # The worker's parent-death signal ends it in its held open.
        end = time.monotonic() + 10
        while not _gone(w):
            assert time.monotonic() < end, f"worker {w} outlived its spawner"
            time.sleep(0.01)
    finally:
        stall.release()
    r = d.api.wait(req["id"], timeout=60)
    assert r["state"] == "done", r
    assert r["attempts"] == 2, r
    assert tree_digest(dest) == tree_digest(src)
    log = d.log_tail(400)
    assert f"no exit status for worker {w} from the worker spawner" in log, log
    assert "worker killed by signal 9" in log, log
    started = _started(d)
    assert len(started) == 2 and started[0] == sp and started[1] != sp, started


def test_a_reload_makes_a_new_spawner(make_daemon, base_dir):
    d = make_daemon("spawn-reload")
    dst = user_dir(base_dir, USER, "spawn-dst")
    src = _tree(base_dir, "reload", files=1, size=4096)
    r = d.api.wait(d.api.submit("archive", src, os.path.join(dst, "r1"), as_user=USER)["id"],
                   timeout=60)
    assert r["state"] == "done", r
    (old,) = _spawners(d)
    with open(d.conf_path, "a") as f:
        f.write("BandwidthCap=0\n")
    d.proc.send_signal(signal.SIGHUP)
    end = time.monotonic() + 10
    while "configuration reloaded" not in d.log_tail(50):
        assert time.monotonic() < end, d.log_tail(50)
        time.sleep(0.05)
    stall = Stall(src)
    req = d.api.submit("archive", src, os.path.join(dst, "r2"), as_user=USER)
    try:
        w = stall.held()
        (new,) = _spawners(d)
        assert new != old and _gone(old), (old, new)
        assert proc_fields(w)[1] == str(new)
    finally:
        stall.release()
    assert d.api.wait(req["id"], timeout=60)["state"] == "done"
    assert _started(d) == [old, new]


def test_a_resumed_request_is_forked_by_the_daemon(make_daemon, base_dir):
    # 1 MiB/s for 8 MiB: when 2 files are done, the cap (a bound from above)
    # keeps the copy going for 7 s more on any machine, and as long again
    # after the restart; the worker is stopped in that time to be looked at.
    d = make_daemon("spawn-resume", BandwidthCap="1M")
    src = _tree(base_dir, "resume", files=32, size=256 << 10)
    dest = os.path.join(user_dir(base_dir, USER, "spawn-dst"), "resume")
    req = d.api.submit("archive", src, dest, as_user=USER)
    end = time.monotonic() + 60
    while d.api.request(req["id"])["files_done"] < 2:
        assert time.monotonic() < end, d.api.request(req["id"])
        time.sleep(0.05)
    d.kill9()
    d.start()
    w = _held_worker(d)
    try:
        assert proc_fields(w)[1] == str(d.proc.pid), "a resume went through the spawner"
        _holds_nothing_of_the_daemons(w, d)
    finally:
        os.kill(w, signal.SIGCONT)
    r = d.api.wait(req["id"], timeout=120)
    assert r["state"] == "done", r
    assert tree_digest(dest) == tree_digest(src)
