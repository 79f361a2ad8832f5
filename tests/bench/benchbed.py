"""benchbed - what the benchmarks that run real Slurm jobs share.

tests/bench/busy/run and tests/bench/interference/run submit jobs with
sbatch as the ordinary user shtest to the test bed of scripts/testbed, give
them a throttled scratch disk and sample its counters. This module owns:

  TestBed        the bed as 'scripts/testbed env' describes it: Slurm
                 commands run where slurmctld answers ('scripts/testbed exec
                 svc', the service namespace of a multi-node bed), sbatch as
                 shtest, job states, the daemon's API over its UNIX socket,
                 the daemon's configuration file and its restart
  ThrottledDisk  ext4 on a loop device (direct I/O to its backing file) with
                 a cgroup v1 blkio throttle in the root group, its scratch
                 and archive directories bind-mounted under the bed's scratch
                 and archive roots (the bed's state directory is a shared
                 mount: the compute nodes' mount namespaces see them)
  Sampler        a thread calling a function every period seconds

It never starts or stops the bed (the user does, with scripts/testbed up and
down) and leaves it as it found it: teardown() of each class undoes what it
did, also after a failure half-way.
"""
import http.client
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time

SRC = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TESTBED = os.path.join(SRC, "scripts", "testbed")
USER = "shtest"
MIB = 1 << 20
BLKIO = "/sys/fs/cgroup/blkio"
# Job states after which a job never runs again.
FAILED_STATES = ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
                 "DEADLINE", "PREEMPTED")


class SetupError(Exception):
    pass


def run(cmd, check=True, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if check and p.returncode != 0:
        raise SetupError(f"'{' '.join(map(shlex.quote, cmd))}' failed (exit {p.returncode}): "
                         f"{p.stderr.strip() or p.stdout.strip()}")
    return p


class Sampler(threading.Thread):
    """Calls fn() every period seconds and keeps (time, value) pairs; a
    sample that raises is counted in errors, not fatal."""

    def __init__(self, fn, period):
        super().__init__(daemon=True)
        self.fn, self.period = fn, period
        self.samples = []
        self.errors = 0
        self.stop_ev = threading.Event()

    def run(self):
        while not self.stop_ev.is_set():
            t = time.time()
            try:
                self.samples.append((t, self.fn()))
            except Exception:  # a missed sample is not fatal; count it
                self.errors += 1
            self.stop_ev.wait(self.period)

    def stop(self):
        self.stop_ev.set()
        self.join()


def value_at(samples, t, key):
    """Linear interpolation of key(sample) at time t (clamped at the ends)."""
    if not samples:
        return 0.0
    if t <= samples[0][0]:
        return key(samples[0][1])
    for (t0, v0), (t1, v1) in zip(samples, samples[1:]):
        if t0 <= t <= t1:
            a, b = key(v0), key(v1)
            return a if t1 == t0 else a + (b - a) * (t - t0) / (t1 - t0)
    return key(samples[-1][1])


# --- stagehandd's API over its UNIX socket -------------------------------------

class UnixConn(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=30)
        self.sock_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(self.sock_path)
        self.sock = s


def api(sock, path, raw=False):
    """GET path from the daemon at sock, as root; JSON unless raw."""
    c = UnixConn(sock)
    try:
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
    finally:
        c.close()
    if r.status != 200:
        raise SetupError(f"stagehandd GET {path} on {sock}: HTTP {r.status}: {body[:300]!r}")
    return body.decode() if raw else json.loads(body)


# --- the test bed ----------------------------------------------------------------

class TestBed:
    """The bed that is up (scripts/testbed env), its Slurm and its daemon."""

    def __init__(self):
        p = run([TESTBED, "env"], check=False)
        if p.returncode != 0:
            raise SetupError(f"'{TESTBED} env' failed (exit {p.returncode}): "
                             f"{p.stderr.strip()}: is the test bed set up?")
        self.env = {k: (shlex.split(v)[0] if v else "")
                    for k, v in re.findall(r"^export (\w+)=(.*)$", p.stdout, re.M)}
        self.dir = self.env["STAGEHAND_TESTBED_DIR"]
        self.sock = self.env["STAGEHAND_SOCKET"]
        self.conf = self.env["STAGEHAND_TESTBED_CONF"]
        self.slurm_conf = self.env["SLURM_CONF"]
        self.logdir = self.env["STAGEHAND_TESTBED_LOGDIR"]
        self.scratch = self.env["STAGEHAND_TESTBED_SCRATCH"]
        self.archive = self.env["STAGEHAND_TESTBED_ARCHIVE"]
        self.mode = self.env.get("STAGEHAND_TESTBED_MODE", "one")
        self.nodes = self.env.get("STAGEHAND_TESTBED_NODES", "").split()
        self.pw = pwd.getpwnam(USER)
        self.jobs_to_cancel = set()
        self.conf_orig = None

    def slurm(self, cmd, check=True, **kw):
        """A Slurm command where slurmctld answers (the service namespace of
        a multi-node bed, this host for a one-node bed), as root."""
        return run([TESTBED, "exec", "svc"] + cmd, check=check, **kw)

    def check(self, spank=True, lua=False):
        p = self.slurm(["scontrol", "ping"], check=False)
        if "is UP" not in p.stdout:
            raise SetupError(f"the test bed's slurmctld ({self.slurm_conf}) does not answer "
                             f"({p.stdout.strip()} {p.stderr.strip()}): run 'scripts/testbed up'")
        if spank:
            plug = open(os.path.join(self.dir, "etc", "plugstack.conf")).read()
            if not re.search(r"^(optional|required) .*stagehand\.so", plug, re.M):
                raise SetupError("the SPANK plugin is not in the test bed's plugstack.conf: "
                                 "build it (make) and run 'STAGEHAND_TESTBED_SPANK=1 "
                                 "scripts/testbed up'")
        if lua and "JobSubmitPlugins=lua" not in open(self.slurm_conf).read():
            raise SetupError("the test bed has no job_submit.lua: run "
                             "'STAGEHAND_TESTBED_LUA=1 scripts/testbed up'")
        try:
            h = api(self.sock, "/v1/health")
        except OSError as e:
            raise SetupError(f"stagehandd of the test bed does not answer on {self.sock} ({e}): "
                             "run 'STAGEHAND_TESTBED_DAEMON=1 scripts/testbed up'")
        if h.get("status") != "ok":
            raise SetupError(f"stagehandd on {self.sock} reports status {h.get('status')!r}: "
                             f"see {self.logdir}/stagehandd.log")
        busy = self.queue_busy(h)
        if busy:
            raise SetupError(f"stagehandd has {busy} unfinished requests: let them finish "
                             "(or cancel them) before benchmarking")
        p = self.slurm(["squeue", "-h", "-t", "PENDING,RUNNING,COMPLETING", "-o", "%A"])
        if p.stdout.strip():
            raise SetupError(f"the test bed has jobs queued or running "
                             f"({' '.join(p.stdout.split())}): wait for them or cancel them first")
        return h

    @staticmethod
    def queue_busy(h):
        q = h.get("queue", {})
        return sum(q.get(k, 0) for k in ("queued", "running", "verifying", "failed_retryable"))

    # -- jobs --

    def sbatch(self, script, cwd, extra=()):
        """Submit script as shtest from cwd (its PWD, the directory the SPANK
        plugin reports as the job's); returns the job id."""
        env = {"HOME": self.pw.pw_dir, "USER": USER, "LOGNAME": USER,
               "PATH": "/usr/local/bin:/usr/bin:/bin", "SLURM_CONF": self.slurm_conf,
               "LANG": "C.UTF-8", "PWD": cwd}
        cmd = ["runuser", "-u", USER, "--", "env", "-i"] + \
              [f"{k}={v}" for k, v in env.items()] + ["sbatch", "--parsable", *extra, script]
        p = self.slurm(cmd, check=False, cwd=cwd)
        jid = p.stdout.strip().split(";")[0]
        if p.returncode != 0 or not jid.isdigit():
            raise SetupError(f"sbatch {script} as {USER} in {cwd} failed (exit {p.returncode}): "
                             f"{p.stdout.strip()} {p.stderr.strip()}")
        self.jobs_to_cancel.add(int(jid))
        return int(jid)

    def job_info(self, jid):
        p = self.slurm(["scontrol", "-o", "show", "job", str(jid)], check=False)
        return dict(re.findall(r"\b(JobState|NodeList|Reason)=(\S+)", p.stdout))

    def job_state(self, jid):
        return self.job_info(jid).get("JobState")

    def failed(self, jid, st, what):
        return SetupError(f"{what}: job {jid} ended {st}; see its output file and "
                          f"{self.logdir}/slurmd*.log, slurmctld.log")

    def wait_jobs(self, jids, timeout, what):
        end = time.time() + timeout
        pending = set(jids)
        while pending:
            for j in list(pending):
                st = self.job_state(j)
                if st == "COMPLETED":
                    pending.discard(j)
                    self.jobs_to_cancel.discard(j)
                elif st in FAILED_STATES:
                    raise self.failed(j, st, what)
            if pending:
                if time.time() > end:
                    raise SetupError(f"{what}: jobs {sorted(pending)} not COMPLETED within "
                                     f"{timeout}s (states: "
                                     f"{[self.job_state(j) for j in sorted(pending)]})")
                time.sleep(0.2)

    def cancel_all(self):
        for j in list(self.jobs_to_cancel):
            self.slurm(["scancel", str(j)], check=False)
        if self.jobs_to_cancel:
            time.sleep(3)
        self.jobs_to_cancel.clear()

    def user_dir(self, path, mode=0o755):
        os.makedirs(path, exist_ok=True)
        os.chown(path, self.pw.pw_uid, self.pw.pw_gid)
        os.chmod(path, mode)
        return path

    def write_user_file(self, path, text, mode=0o755):
        with open(path, "w") as f:
            f.write(text)
        os.chown(path, self.pw.pw_uid, self.pw.pw_gid)
        os.chmod(path, mode)

    # -- the daemon --

    def daemon_pid(self):
        try:
            pid = int(open(os.path.join(self.dir, "run", "stagehandd.pid")).read())
            comm = open(f"/proc/{pid}/comm").read().strip()
        except (OSError, ValueError):
            return None
        return pid if comm == "stagehandd" else None

    def set_conf(self, text):
        """Replace the bed's stagehand.conf (the first call keeps the original
        for restore_conf)."""
        if self.conf_orig is None:
            self.conf_orig = open(self.conf).read()
        with open(self.conf, "w") as f:
            f.write(text)

    def restart_daemon(self):
        """The bed's stagehandd restarted with its stagehand.conf as it is."""
        p = run([TESTBED, "restart", "stagehandd"], check=False)
        if p.returncode != 0 or not self.daemon_pid():
            raise SetupError(f"'scripts/testbed restart stagehandd' failed (exit {p.returncode}): "
                             f"{p.stderr.strip()[-500:]}; see {self.logdir}/stagehandd.log")
        for _ in range(100):
            try:
                if api(self.sock, "/v1/health").get("status") == "ok":
                    return
            except (OSError, SetupError, http.client.HTTPException):
                pass
            time.sleep(0.1)
        raise SetupError(f"stagehandd restarted but does not answer on {self.sock} within 10 s: "
                         f"see {self.logdir}/stagehandd.log")

    def kill_daemon(self):
        """SIGKILL to the daemon's process group (its workers too): a run is
        over and its transfers must not go on into the next one. The bed's
        start_stagehandd starts it with setsid, so the group is its own."""
        pid = self.daemon_pid()
        if pid and os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
            for _ in range(100):
                if not self.daemon_pid():
                    break
                time.sleep(0.05)

    def restore_conf(self):
        if self.conf_orig is None:
            return
        with open(self.conf, "w") as f:
            f.write(self.conf_orig)
        self.conf_orig = None
        self.restart_daemon()


# --- the disk ----------------------------------------------------------------------

class ThrottledDisk:
    """ext4 on a loop device with a root-group blkio throttle; its scratch/
    and archive/ bind-mounted at the bed's scratch and archive roots + /name."""

    def __init__(self, bed, work, name):
        self.bed, self.work = bed, work
        self.scratch = os.path.join(bed.scratch, name)
        self.archive = os.path.join(bed.archive, name)
        self.loop = None
        self.mounts = []
        self.throttled = None
        self.knobs = ()
        self.img = None
        self.backing = "disk"
        self.mem = None

    def check_free(self):
        if not os.path.isdir(BLKIO):
            raise SetupError(f"no cgroup v1 blkio controller at {BLKIO}: the benchmark needs it "
                             "to give the disk a finite bandwidth")
        for d in (self.scratch, self.archive):
            if os.path.ismount(d):
                raise SetupError(f"{d} is still mounted from an earlier run: umount it (and "
                                 f"{self.work}/disk, losetup -d its loop device)")

    def setup(self, gib, preallocate=True, label="bench-scratch", backing="disk"):
        """backing "disk": the image is a file of the host's file system, so
        every flush of the device (each journal commit, each fsync) is an
        fsync of that file on the host. backing "memory": the image is in a
        tmpfs of its own (its pages are memory; trim() gives back what the
        file system freed), so a flush costs nothing and the throttle alone
        is the device's bandwidth."""
        os.makedirs(self.work, exist_ok=True)
        self.backing = backing
        if backing == "memory":
            self.mem = os.path.join(self.work, "mem")
            os.makedirs(self.mem, exist_ok=True)
            run(["mount", "-t", "tmpfs", "-o", f"size={gib + 1}g,mode=0700", "tmpfs", self.mem])
            self.mounts.append(self.mem)
            self.img = os.path.join(self.mem, "disk.img")
            preallocate = False  # tmpfs pages are allocated as the loop device writes
        else:
            self.img = os.path.join(self.work, "disk.img")
        if os.path.exists(self.img):
            os.unlink(self.img)
        with open(self.img, "wb") as f:
            if preallocate:
                # Allocated now: writes into a sparse image would pay for the
                # host's block allocation, and only the first run would.
                os.posix_fallocate(f.fileno(), 0, gib << 30)
            else:
                f.truncate(gib << 30)
        self.loop = run(["losetup", "-f", "--show", "--direct-io=on", self.img]).stdout.strip()
        run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0",
             "-L", label, self.loop])
        self.disk = os.path.join(self.work, "disk")
        os.makedirs(self.disk, exist_ok=True)
        run(["mount", "-o", "noatime", self.loop, self.disk])
        self.mounts.append(self.disk)
        for sub, target in (("scratch", self.scratch), ("archive", self.archive)):
            p = os.path.join(self.disk, sub)
            os.makedirs(p, exist_ok=True)
            os.chmod(p, 0o1777)
            os.makedirs(target, exist_ok=True)
            run(["mount", "--bind", p, target])
            self.mounts.append(target)
        dev = os.path.basename(self.loop)
        self.majmin = open(f"/sys/block/{dev}/dev").read().strip()
        self.devstat_path = f"/sys/block/{dev}/stat"

    def throttle(self, read_bps, write_bps, iops=None):
        knobs = [("read_bps", read_bps), ("write_bps", write_bps)]
        if iops:
            knobs += [("read_iops", iops), ("write_iops", iops)]
        self.throttled, self.knobs = self.majmin, tuple(k for k, _ in knobs)
        for knob, v in knobs:
            with open(f"{BLKIO}/blkio.throttle.{knob}_device", "w") as f:
                f.write(f"{self.majmin} {v}\n")

    def unthrottle(self):
        for knob in self.knobs:
            try:
                with open(f"{BLKIO}/blkio.throttle.{knob}_device", "w") as f:
                    f.write(f"{self.throttled} 0\n")
            except OSError as e:
                raise SetupError(f"could not remove the {knob} throttle on {self.throttled} "
                                 f"({BLKIO}/blkio.throttle.{knob}_device): {e}")
        self.throttled, self.knobs = None, ()

    def devstat(self):
        f = open(self.devstat_path).read().split()
        return int(f[2]) * 512, int(f[6]) * 512  # bytes read, written

    def blkio_root(self):
        """Bytes the root blkio group's throttle accounted on this device
        (read, written): what the limit saw, whoever did the I/O."""
        r = w = 0
        with open(f"{BLKIO}/blkio.throttle.io_service_bytes") as f:
            for line in f:
                p = line.split()
                if len(p) == 3 and p[0] == self.majmin:
                    if p[1] == "Read":
                        r = int(p[2])
                    elif p[1] == "Write":
                        w = int(p[2])
        return r, w

    def sync(self):
        run(["sync", "-f", self.disk])

    def trim(self):
        """Memory backing: the blocks the file system freed go back to the
        tmpfs (the loop device punches them out of the image), so removed
        copies do not pile up in memory from one run to the next."""
        if self.backing == "memory":
            run(["fstrim", self.disk])

    @staticmethod
    def _umount(m, log):
        p = run(["umount", m], check=False)
        if p.returncode != 0:
            time.sleep(2)
            p = run(["umount", m], check=False)
            if p.returncode != 0:
                log(f"warning: could not unmount {m}: {p.stderr.strip()}: umount it by hand")

    def teardown(self, log):
        if self.throttled:
            try:
                self.unthrottle()
            except SetupError as e:
                log(f"warning: {e}")
        mem = self.mem
        for m in reversed(self.mounts):
            if m != mem:
                self._umount(m, log)
        if self.loop:
            run(["losetup", "-d", self.loop], check=False)
            self.loop = None
        if mem in self.mounts:
            # After the loop device lets go of the image in it.
            if self.img and os.path.exists(self.img):
                os.unlink(self.img)
            self._umount(mem, log)
            try:
                os.rmdir(mem)
            except OSError:
                pass
        self.mounts = []
        for d in (getattr(self, "disk", None), self.scratch, self.archive):
            if d and os.path.isdir(d) and not os.path.ismount(d):
                try:
                    os.rmdir(d)
                except OSError:
                    pass
        if self.img and os.path.exists(self.img):
            os.unlink(self.img)


def which_all(tools):
    for tool in tools:
        if not shutil.which(tool):
            raise SetupError(f"'{tool}' not found: run scripts/install-deps")
