"""stagehandd API: reads answered while writes wait, shared commits, lists of requests.

The API answers every change (POST, DELETE) on a writer thread of its own
and reads on its listener (docs/api.md, "Reads and writes"). These tests
hold a change in the writer on purpose: the test takes the state database's
write lock itself (BEGIN IMMEDIATE on a connection of its own), so the
writer waits in SQLite's busy handler (up to the daemon's 5 s) until the test
lets go; /metrics says when the writer holds it (stagehand_api_writes_waiting).
Against a real daemon on a private socket (see conftest.py). Run as root.
"""
import concurrent.futures
import json
import re
import signal
import sqlite3
import threading
import time

import pytest

from conftest import _UnixHTTPConnection, as_identity

BODY = {"action": "archive", "source": "/nonexistent/writer/src", "dest": "/nonexistent/writer/dst"}


@pytest.fixture(scope="module")
def daemon(make_daemon):
    # No workers to speak of: the requests made here are never meant to run.
    # MaxRequestBytes: room for a list of more than 10,000 requests (its own limit).
    return make_daemon("writer", Workers="1", MaxRequestBytes="4M")


def _metric(d, name):
    st, _, text, _ = d.api.get("/metrics", timeout=20)
    assert st == 200, text
    m = re.search(rf"^{name} (\d+)$", text, re.M)
    assert m, f"/metrics has no {name}:\n{text[:2000]}"
    return int(m.group(1))


class Hold:
    """The state database's write lock, taken by the test (BEGIN IMMEDIATE)."""

    def __init__(self, d):
        self.con = sqlite3.connect(d.db, timeout=30, isolation_level=None)
        self.con.execute("BEGIN IMMEDIATE")

    def release(self):
        if self.con:
            self.con.execute("ROLLBACK")
            self.con.close()
            self.con = None


def _connected(d, user, n):
    """n connections to the daemon made as user, one after another (the
    effective uid is the process's: threads must not switch it at once)."""
    out = []
    with as_identity(user):
        for _ in range(n):
            c = _UnixHTTPConnection(d.sock, timeout=60)
            c.connect()
            out.append(c)
    return out


def _post_on(c, body):
    c.request("POST", "/v1/requests", body=json.dumps(body).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read().decode()
    c.close()
    return r.status, json.loads(text), text


def _wait_waiting(d, n, what, timeout=60):
    """Until n changes wait in the writer (asked of /metrics, itself a read)."""
    end = time.monotonic() + timeout
    while True:
        w = _metric(d, "stagehand_api_writes_waiting")
        if w == n:
            return
        assert time.monotonic() < end, f"{what}: {w} changes wait in the writer, not {n}"
        time.sleep(0.05)


def test_reads_are_answered_while_a_write_waits(daemon):
    before = _metric(daemon, "stagehand_api_writes_total")
    hold = Hold(daemon)
    result = {}

    def post():
        result["post"] = daemon.api.post("/v1/requests", BODY, as_user="shtest", timeout=60)

    t = threading.Thread(target=post)
    try:
        t.start()
        _wait_waiting(daemon, 1, "the request held by the test")
        # Reads, while the write cannot go on: each is answered at once.
        st, doc, text, _ = daemon.api.get("/v1/health", as_user="shtest", timeout=20)
        assert st == 200 and doc["status"] == "ok", text
        st, doc, text, _ = daemon.api.get("/v1/requests", as_user="shtest", timeout=20)
        assert st == 200 and isinstance(doc["requests"], list), text
        assert t.is_alive() and "post" not in result, \
            f"the write was answered while the test held the database: {result}"
        assert _metric(daemon, "stagehand_api_writes_waiting") == 1, \
            "the write stopped waiting before the reads were done (the daemon's busy " \
            "timeout, 5 s, ran out: far slower than any machine should be)"
    finally:
        hold.release()
        t.join(60)
    st, doc, text, _ = result["post"]
    assert st == 201 and doc["state"] == "queued", f"the held request, once let go: {st} {text}"
    assert _metric(daemon, "stagehand_api_writes_total") == before + 1
    assert _metric(daemon, "stagehand_api_writes_waiting") == 0


def test_requests_waiting_together_share_one_commit(daemon):
    n = 6
    shared = _metric(daemon, "stagehand_api_shared_commits_total")
    conns = _connected(daemon, "shtest", n)
    hold = Hold(daemon)
    pool = concurrent.futures.ThreadPoolExecutor(n)
    try:
        first = pool.submit(_post_on, conns[0], BODY)
        _wait_waiting(daemon, 1, "the first request")
        # The writer is held in the first; the others queue behind it.
        rest = [pool.submit(_post_on, c, BODY) for c in conns[1:]]
        _wait_waiting(daemon, n, "all six requests")
    finally:
        hold.release()
    answers = [f.result(60) for f in [first] + rest]
    assert all(a[0] == 201 for a in answers), [a[:3] for a in answers if a[0] != 201]
    ids = sorted(a[1]["id"] for a in answers)
    assert len(set(ids)) == n
    # The five that waited together were stored by one commit.
    assert _metric(daemon, "stagehand_api_shared_commits_total") == shared + 1
    for i in ids:
        st, doc, text, _ = daemon.api.get(f"/v1/requests/{i}", as_user="shtest")
        assert st == 200 and doc["state"] in ("queued", "running", "failed_retryable",
                                              "failed_final"), text
    pool.shutdown()


def _count(d, user="shtest"):
    st, doc, text, _ = d.api.get("/v1/requests?limit=100000", as_user=user)
    assert st == 200, text
    return len(doc["requests"])


def test_a_list_of_requests_is_created_in_order(daemon, test_users):
    before = _count(daemon)
    bodies = [dict(BODY, source=f"/nonexistent/writer/list{i}") for i in range(3)]
    st, doc, text, _ = daemon.api.post("/v1/requests", {"requests": bodies}, as_user="shtest")
    assert st == 201, text
    got = doc["requests"]
    assert [r["source"] for r in got] == [b["source"] for b in bodies], text
    assert all(r["uid"] == test_users["shtest"].pw_uid and r["user"] == "shtest" and
               r["state"] == "queued" for r in got), text
    assert [r["id"] for r in got] == list(range(got[0]["id"], got[0]["id"] + 3))
    assert _count(daemon) == before + 3


@pytest.mark.parametrize("body,where", [
    ({"requests": [BODY, dict(BODY, action="teleport"), BODY]}, "requests[1]: 'action'"),
    ({"requests": [BODY, 7]}, "requests[1]: a request must be a JSON object"),
    ({"requests": [BODY, dict(BODY, source="relative/path")]}, "requests[1]"),
    ({"requests": []}, "an array of 1 to 10000"),
    ({"requests": BODY}, "an array of 1 to 10000"),
    ({"requests": [BODY], "action": "archive"}, "the body's only key"),
    ({"requests": [BODY] * 10001}, "an array of 1 to 10000"),
])
def test_a_list_is_all_or_nothing(daemon, body, where):
    before = _count(daemon)
    st, doc, text, _ = daemon.api.post("/v1/requests", body, as_user="shtest")
    assert st == 400, text
    assert where in doc["error"], text
    if "requests[" in where:
        assert "none of the requests was created" in doc["error"], text
    assert _count(daemon) == before, "a refused list created requests"


def test_a_list_names_no_other_users_job(daemon, make_daemon):
    # shtest2's request on a job shtest's requests name: refused as a single one is.
    st, doc, text, _ = daemon.api.post("/v1/requests", dict(BODY, job_id=424242),
                                       as_user="shtest")
    assert st == 201, text
    before = _count(daemon, "shtest2")
    st, doc, text, _ = daemon.api.post(
        "/v1/requests", {"requests": [BODY, dict(BODY, job_id=424242)]}, as_user="shtest2")
    assert st == 403 and "requests[1]: job 424242 belongs to another user" in doc["error"], text
    assert _count(daemon, "shtest2") == before


def test_stopping_answers_the_writes_that_wait(make_daemon):
    d = make_daemon("writer-stop", Workers="1")
    hold = Hold(d)
    result = {}

    def post():
        result["post"] = d.api.post("/v1/requests", BODY, as_user="shtest", timeout=60)

    t = threading.Thread(target=post)
    t.start()
    try:
        _wait_waiting(d, 1, "the request held by the test")
        d.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)     # the daemon is stopping while the write still waits
    finally:
        hold.release()
    t.join(60)
    assert not t.is_alive(), "the held request was never answered"
    st, doc, text, _ = result["post"]
    assert st in (201, 503), f"the held request, answered while stopping: {st} {text}"
    assert d.proc.wait(60) == 0, d.log_tail()
    assert "the writer thread answered 1 request(s)" in d.log_tail(), d.log_tail()
    # What it answered 201 is stored.
    if st == 201:
        con = sqlite3.connect(f"file:{d.db}?mode=ro", uri=True)
        assert con.execute("SELECT count(*) FROM requests WHERE id=?", (doc["id"],)).fetchone()[0] == 1
        con.close()
