"""stagehandd API: one user's hostile batches cannot freeze another user's writes.

docs/api.md, "Reads and writes" and "Per-user limits"; issue "The hostile
user", finding 3. POST /v1/requests takes up to 10,000 requests, and a
request on a job is checked against slurmctld's record of the job's owner.
Those look-ups are made before the API's writer thread takes the batch (the
prep stage, daemon/api/api_prep.h), once per job per batch through a cache,
and never while the writer holds the state database's lock: every worker's
progress, job start and job end waits for that lock.

The latency test runs 16 processes of one user (shtest), each on its own
connection, posting batches of 10,000 requests that are refused at their last
entry (9,999 on shtest's own held jobs or its held array's tasks, the last
on shtest2's job, or a bad action), while root sends job-end events for
shtest2's jobs and a stage-in of shtest2's runs under a bandwidth cap. It
asserts the job-end answers and the transfer's progress stay within bounds
measured on this machine (see BOUND_*). With the look-ups back on the writer
(tests/faults/mutations/MW1-owner-lookup-under-lock.patch), each batch made
10,000 calls to slurmctld holding the lock and the test goes red.

The limits tests: MaxUserRequests, MaxUserItems and MaxUserQueuedBytes each
answer 429 naming the limit, the user's count and what to do; admins are
exempt.

The daemons here use the test bed's slurmctld (SlurmWatch=yes) for the owner
look-ups; the jobs they see are this file's own, submitted held and without
'#DATA' lines, so nothing of another test is staged or released by them.
Run as root on the test bed (scripts/testbed up).
"""
import json
import os
import pwd
import re
import subprocess
import sqlite3
import threading
import time

import pytest

from conftest import chown_tree, user_dir

# Measured on the 2-core development machine, shared with four other builds,
# one-node bed, six runs: without the attack the slowest job-end answer took
# 2-23 ms and the longest pause in the transfer's progress 0.1-1.1 s (the
# bandwidth cap's bursts); under the attack, with the look-ups before the
# writer, 0.11-0.30 s and 0.25-1.23 s, 240-410 hostile batches refused in
# 10 s. With them back under the writer's lock (MW1) the job-end sent during
# the attack was still unanswered after 9 s and the transfer paused 8.9 s.
# The bounds leave room for a slower, loaded CI machine.
BOUND_JOB_END_S = 3.0
BOUND_PROGRESS_GAP_S = 5.0
ATTACK_S = 10
HOSTILE = 16
BATCH = 10000

BODY = {"action": "archive", "source": "/nonexistent/hostile/src",
        "dest": "/nonexistent/hostile/dst"}

# One hostile connection: posts its batch again and again until the deadline,
# counting the answers by status. Runs as shtest (subprocess user=).
HOSTILE_CLIENT = r"""
import http.client, json, socket, sys, time
sock, path, deadline = sys.argv[1], sys.argv[2], float(sys.argv[3])
body = open(path, "rb").read()
class C(http.client.HTTPConnection):
    def __init__(self):
        super().__init__("localhost", timeout=60)
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(sock)
counts = {}
c = C()     # one connection, kept alive (http.client opens it again if closed)
while time.time() < deadline:
    try:
        c.request("POST", "/v1/requests", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        counts[r.status] = counts.get(r.status, 0) + 1
        if r.status == 201:
            counts["created"] = counts.get("created", 0) + 1
    except (OSError, http.client.HTTPException) as e:
        counts[type(e).__name__] = counts.get(type(e).__name__, 0) + 1
        c.close()
        time.sleep(0.05)
c.close()
print(json.dumps(counts))
"""


def _slurm(*args, user=None, check=True):
    cmd = (["runuser", "-u", user, "--"] if user else []) + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert not check or p.returncode == 0, f"{cmd}: {p.returncode} {p.stdout} {p.stderr}"
    return p.stdout.strip()


def _sbatch_held(user, base_dir, *extra):
    out = _slurm("sbatch", "--parsable", "--hold", "-o", "/dev/null", "-D", base_dir,
                 *extra, "--wrap", "true", user=user)
    return int(out.split(";")[0])


@pytest.fixture(scope="module")
def jobs(base_dir, test_users):
    """Held jobs of this file's own: shtest's 4 and an array of 200 tasks,
    shtest2's one. Cancelled at the end."""
    if not os.environ.get("SLURM_CONF"):
        pytest.skip("needs the test bed's slurmctld (eval \"$(scripts/testbed env)\")")
    other = _sbatch_held("shtest2", base_dir)
    ids = {"other": other, "mine": [_sbatch_held("shtest", base_dir) for _ in range(4)],
           "array": _sbatch_held("shtest", base_dir, "--array=0-199")}
    yield ids
    _slurm("scancel", *[str(j) for j in ids["mine"] + [ids["array"], ids["other"]]],
           check=False)


@pytest.fixture(scope="module")
def daemon(make_daemon, jobs):
    # SlurmWatch=yes: ownership is slurmctld's word. MaxRequestBytes: room for
    # 10,000 requests. No per-user limit in the way of the attack's batches.
    # SyncMode=file: each file of the victim's transfer is reported done on its
    # own (a batch of small files is reported at its end), and the cap keeps it
    # running for the whole test (400 files of 16 KiB at 256 KiB/s: 25 s).
    return make_daemon("hostile", Workers="2", MaxRequestBytes="4M", SlurmWatch="yes",
                       SlurmWatchInterval="60", BandwidthCap="256K", SyncMode="file", MaxUserRequests="0",
                       MaxConnectionsPerUser="20")


def _batch(kind, jobs, seq):
    reqs = []
    for i in range(BATCH - 1):
        r = dict(BODY, source=f"/nonexistent/hostile/{seq}/{i}")
        if kind == "own":
            r["job_id"] = jobs["mine"][i % len(jobs["mine"])]
        elif kind == "array":
            r["job_id"] = jobs["array"]     # a held array: slurmctld answers with its tasks
        reqs.append(r)
    if kind == "bad":
        reqs.append(dict(BODY, action="teleport"))
    else:
        reqs.append(dict(BODY, job_id=jobs["other"]))
    return {"requests": reqs}


def _job_end(d, job, uid):
    t0 = time.monotonic()
    st, doc, text, _ = d.api.post(f"/v1/jobs/{job}/end",
                                  {"state": "COMPLETED", "exit_code": 0, "uid": uid},
                                  timeout=60)
    dt = time.monotonic() - t0
    assert st == 202, f"job-end {job}: {st} {text}"
    return dt


class Victim:
    """shtest2's side: job-end events every 0.2 s and the progress of a
    running transfer, polled every 0.1 s (reads: answered beside the writer)."""

    def __init__(self, d, rid, uid, first_job):
        self.d, self.rid, self.uid, self.job = d, rid, uid, first_job
        self.ends, self.gaps, self.changes = [], [], 0
        self.inflight = None     # when the job-end under way was sent
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._ends), threading.Thread(target=self._progress)]

    def _ends(self):
        while not self.stop.is_set():
            self.job += 1
            self.inflight = time.monotonic()
            try:
                self.ends.append(_job_end(self.d, self.job, self.uid))
            except (AssertionError, OSError) as e:
                self.ends.append(float("inf"))
                print(f"job-end {self.job}: {e}")
            self.inflight = None
            self.stop.wait(0.2)

    def _progress(self):
        last, since = None, time.monotonic()
        while not self.stop.is_set():
            r = self.d.api.request(self.rid)
            now = time.monotonic()
            if r["state"] != "running":
                break
            if r["files_done"] != last:
                if last is not None:
                    self.gaps.append(now - since)
                    self.changes += 1
                last, since = r["files_done"], now
            self.stop.wait(0.1)
        self.gaps.append(time.monotonic() - since)

    def run(self, seconds, baseline=False):
        """The slowest job-end and the longest pause in progress over the
        next seconds, a job-end still waiting and the pause still going on
        at the end counted as they are then."""
        for t in self.threads:
            t.start()
        time.sleep(seconds)
        self.stop.set()
        now, since = time.monotonic(), self.inflight
        slowest = max(self.ends + ([now - since] if since else []))
        for t in self.threads:
            t.join(180)
        if baseline:
            # The transfer runs, and reports: its pauses are measured, not its end.
            assert self.changes >= 5 and len(self.ends) >= 3, \
                f"without the attack: {self.changes} progress steps, {len(self.ends)} " \
                f"job ends in {seconds} s"
        return slowest, max(self.gaps)


def test_hostile_batches_do_not_stall_another_users_writes(daemon, jobs, base_dir, test_users):
    uid2 = test_users["shtest2"].pw_uid
    src = user_dir(base_dir, "shtest2", "hostile-src")
    for i in range(400):
        with open(os.path.join(src, f"f{i:04d}"), "wb") as f:
            f.write(os.urandom(16384))
    chown_tree(src, "shtest2")
    dst = user_dir(base_dir, "shtest2", "hostile-dst")
    req = daemon.api.submit("stage_in", src, os.path.join(dst, "in"), as_user="shtest2")
    end = time.monotonic() + 30
    while daemon.api.request(req["id"])["files_done"] < 2:
        assert time.monotonic() < end, daemon.log_tail()
        time.sleep(0.1)

    base_end, base_gap = Victim(daemon, req["id"], uid2, 950000000).run(2, baseline=True)

    kinds = ["own", "array", "bad", "own"]
    paths = []
    for k in range(HOSTILE):
        p = os.path.join(daemon.dir, f"hostile{k}.json")
        with open(p, "w") as f:
            json.dump(_batch(kinds[k % len(kinds)], jobs, k), f)
        paths.append(p)
    deadline = time.time() + ATTACK_S
    procs = [subprocess.Popen(["python3", "-c", HOSTILE_CLIENT, daemon.sock, p, str(deadline)],
                              stdout=subprocess.PIPE, text=True, user=test_users["shtest"].pw_uid,
                              group=test_users["shtest"].pw_gid, extra_groups=[])
             for p in paths]
    time.sleep(0.5)     # the batches arrive
    att_end, att_gap = Victim(daemon, req["id"], uid2, 960000000).run(ATTACK_S - 1)
    answers = {}
    for p in procs:
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()    # its batch still waits in the daemon: counted, not waited for
            out, _ = p.communicate()
            answers["unanswered"] = answers.get("unanswered", 0) + 1
        for k, v in json.loads(out or "{}").items():
            answers[k] = answers.get(k, 0) + v
    print(f"baseline: slowest job-end {base_end:.3f} s, longest progress gap {base_gap:.3f} s; "
          f"attack: {att_end:.3f} s, {att_gap:.3f} s; hostile answers {answers}")
    assert att_end <= BOUND_JOB_END_S, \
        f"another user's job-end waited {att_end:.2f} s under the attack (bound " \
        f"{BOUND_JOB_END_S} s; {base_end:.3f} s without it); hostile answers {answers}"
    assert att_gap <= BOUND_PROGRESS_GAP_S, \
        f"a running transfer made no progress for {att_gap:.2f} s under the attack (bound " \
        f"{BOUND_PROGRESS_GAP_S} s; {base_gap:.3f} s without it)"
    # Every hostile batch was refused whole, and many were answered.
    assert "created" not in answers and sum(answers.get(s, 0) for s in ("400", "403")) >= HOSTILE, \
        answers
    # The owners were asked once per job, not once per entry.
    st, _, text, _ = daemon.api.get("/metrics")
    calls = int(re.search(r"^stagehand_api_owner_lookups_total (\d+)$", text, re.M).group(1))
    assert calls < 50, f"{calls} calls to slurmctld for the owners of 6 jobs and an array"


# ---- per-user limits (429) --------------------------------------------------------

@pytest.fixture(scope="module")
def limited(make_daemon):
    # Drained (below): nothing runs, so what is queued stays live.
    d = make_daemon("limits", Workers="1", MaxUserRequests="5", MaxUserItems="100",
                    MaxUserQueuedBytes="1M", AdminUsers="shtest2")
    st, _, text, _ = d.api.post("/v1/drain", {"reason": "per-user limits test"})
    assert st == 200, text
    return d


def _post(d, body, user):
    st, doc, text, _ = d.api.post("/v1/requests", body, as_user=user)
    return st, (doc or {}).get("error", ""), text


def _live(d, uid):
    return d.db_rows("SELECT count(*) FROM requests WHERE uid=? AND state IN "
                     "('queued','running','verifying','failed_retryable')", (uid,))[0][0]


def test_max_user_requests(limited, test_users):
    uid = test_users["shtest"].pw_uid
    for i in range(3):
        st, _, text = _post(limited, dict(BODY, source=f"/nonexistent/lim/{i}"), "shtest")
        assert st == 201, text
    st, err, text = _post(limited, {"requests": [BODY] * 3}, "shtest")
    assert st == 429, text
    assert err.startswith("MaxUserRequests: uid %d has 3 live requests and this would add 3, "
                          "over the limit of 5" % uid), text
    assert "cancel" in err and "nothing was created" in err, text
    assert _live(limited, uid) == 3
    st, _, text = _post(limited, {"requests": [BODY] * 2}, "shtest")
    assert st == 201, text
    st, err, text = _post(limited, BODY, "shtest")
    assert st == 429 and "has 5 live requests" in err, text
    assert _live(limited, uid) == 5


def _set_totals(d, uid, files, nbytes):
    con = sqlite3.connect(d.db, timeout=30)
    with con:
        con.execute("UPDATE requests SET files_total=?, bytes_total=? WHERE id=(SELECT max(id) "
                    "FROM requests WHERE uid=?)", (files, nbytes, uid))
    con.close()


@pytest.mark.parametrize("files,nbytes,key,what", [
    (100, 10, "MaxUserItems", "has 100 files not yet copied"),
    (1, 1 << 20, "MaxUserQueuedBytes", "has 1048576 bytes not yet copied"),
])
def test_max_user_items_and_bytes(limited, test_users, files, nbytes, key, what):
    # shtest's one request of this test, as walked: files and bytes not yet copied.
    uid = test_users["shtest"].pw_uid
    con = sqlite3.connect(limited.db, timeout=30)
    with con:
        con.execute("UPDATE requests SET state='cancelled' WHERE uid=?", (uid,))
    con.close()
    st, _, text = _post(limited, BODY, "shtest")
    assert st == 201, text
    _set_totals(limited, uid, files, nbytes)
    st, err, text = _post(limited, dict(BODY, source="/nonexistent/lim/more"), "shtest")
    assert st == 429, text
    assert err.startswith(f"{key}: uid {uid} {what}"), text
    assert "stagehand cancel" in err, text
    _set_totals(limited, uid, files - 1 if files > 1 else 0, nbytes - 1 if nbytes > 10 else 0)
    st, _, text = _post(limited, dict(BODY, source="/nonexistent/lim/fits"), "shtest")
    assert st == 201, f"under the limit again: {text}"


def test_admins_are_exempt(limited, test_users):
    # shtest2 is in AdminUsers: 10 requests at once, twice the limit of 5.
    st, _, text = _post(limited, {"requests": [BODY] * 10}, "shtest2")
    assert st == 201, text
    assert _live(limited, test_users["shtest2"].pw_uid) >= 10


# ---- a burst of job starts ---------------------------------------------------------

# Measured: 24 job-start events at once, the slowest answered in 10-40 ms. With
# each start settled in turn on the writer and the yield hook's 50 ms period
# (MW5, the code before), the slowest waited 4-5 s. The plugin gives a start
# 300 ms; the bound leaves room for a loaded machine.
BOUND_START_BURST_S = 1.5


def test_a_burst_of_job_starts_is_answered_together(make_daemon, test_users):
    d = make_daemon("starts", Workers="1", MaxConnectionsPerUser="32")
    uid = test_users["shtest"].pw_uid
    took = [None] * 24
    go = threading.Barrier(len(took))

    def start(i):
        go.wait()
        t0 = time.monotonic()
        st, doc, text, _ = d.api.post(f"/v1/jobs/{970000000 + i}/start",
                                      {"uid": uid, "work_dir": "/tmp", "node": "n1"}, timeout=60)
        took[i] = (time.monotonic() - t0, st, text)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(len(took))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(t and t[1] == 202 for t in took), [t for t in took if not t or t[1] != 202][:3]
    slowest = max(t[0] for t in took)
    print(f"24 job starts at once: the slowest answered in {slowest:.3f} s")
    assert slowest <= BOUND_START_BURST_S, \
        f"the slowest of 24 job starts sent together took {slowest:.2f} s (bound " \
        f"{BOUND_START_BURST_S} s; the plugin waits 300 ms)"
