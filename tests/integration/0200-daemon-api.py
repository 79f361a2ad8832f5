"""stagehandd API: bad input, limits, identity and ownership, /metrics.

Against a real daemon on a private socket (see conftest.py). Run as root.
"""
import concurrent.futures
import json
import math
import os
import re
import socket

import pytest

from conftest import as_identity, owned_dir, sha256_file

STATES = ("queued", "running", "verifying", "done", "failed_retryable", "failed_final", "cancelled")


@pytest.fixture(scope="module")
def daemon(make_daemon, base_dir):
    return make_daemon("api", ScratchRoots=os.path.join(base_dir, "scratch"))


@pytest.fixture(scope="module")
def small_src(base_dir, test_users):
    """One small tree per test user, readable only by its owner."""
    out = {}
    for u in ("shtest", "shtest2"):
        d = owned_dir(os.path.join(base_dir, "src", u), u, 0o700)
        for i in range(5):
            p = os.path.join(d, f"f{i}.dat")
            with open(p, "wb") as f:
                f.write(os.urandom(1000 + i))
            os.chown(p, test_users[u].pw_uid, test_users[u].pw_gid)
        out[u] = d
    owned_dir(os.path.join(base_dir, "scratch", "shtest"), "shtest")
    owned_dir(os.path.join(base_dir, "scratch", "shtest2"), "shtest2")
    return out


def _error_of(doc, text):
    assert isinstance(doc, dict) and isinstance(doc.get("error"), str), \
        f"error answer is not {{\"error\": ...}}: {text!r}"
    assert len(doc["error"]) >= 10, f"error message too thin to act on: {doc['error']!r}"
    return doc["error"]


# ---- health -----------------------------------------------------------------

def test_health_reports_version_identity_and_queue(daemon, test_users):
    st, doc, text, ctype = daemon.api.get("/v1/health")
    assert st == 200, text
    assert "application/json" in ctype
    assert doc["status"] == "ok"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", doc["version"])
    assert doc["uid"] == 0 and doc["admin"] is True
    assert set(STATES) <= set(doc["queue"]), doc["queue"]
    st, doc, text, _ = daemon.api.get("/v1/health", as_user="shtest")
    assert st == 200, text
    assert doc["uid"] == test_users["shtest"].pw_uid and doc["admin"] is False


# ---- malformed input --------------------------------------------------------

@pytest.mark.parametrize("raw", [
    b'{"action": "stage_in", "source": "/x",',     # truncated
    b'{"action": stage_in}',                        # not JSON
    b'\xff\xfe\x00garbage',                         # not UTF-8
    b'[1, 2, 3]',                                    # not an object
    b'',                                             # empty
])
def test_malformed_json_is_400_with_message(daemon, raw):
    st, doc, text, _ = daemon.api.call("POST", "/v1/requests", raw=raw, as_user="shtest")
    assert st == 400, f"{raw!r}: HTTP {st}: {text}"
    _error_of(doc, text)


@pytest.mark.parametrize("body,field", [
    ({"source": "/a", "dest": "/b"}, "action"),
    ({"action": "teleport", "source": "/a", "dest": "/b"}, "action"),
    ({"action": "stage_in", "dest": "/b"}, "source"),
    ({"action": "stage_in", "source": "relative/path", "dest": "/b"}, "source"),
    ({"action": "stage_in", "source": "/a/../etc/shadow", "dest": "/b"}, "source"),
    ({"action": "stage_in", "source": "/a", "dest": "/b", "options": {"bogus": 1}}, "bogus"),
])
def test_invalid_fields_are_400_naming_the_field(daemon, base_dir, body, field):
    if body.get("dest") == "/b":  # inside ScratchRoots, so only the field under test is wrong
        body = dict(body, dest=os.path.join(base_dir, "scratch", "shtest", "b"))
    st, doc, text, _ = daemon.api.post("/v1/requests", body, as_user="shtest")
    assert st == 400, f"{body}: HTTP {st}: {text}"
    assert field in _error_of(doc, text), f"message does not name '{field}': {doc['error']}"


def _raw_exchange(sock_path, data, as_user=None):
    """Send raw bytes (ignoring a peer that stops reading), return the reply."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    if as_user:
        with as_identity(as_user):
            s.connect(sock_path)
    else:
        s.connect(sock_path)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon answered early and closed: read what it said
        reply = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            reply += chunk
    finally:
        s.close()
    return reply


def test_oversized_body_is_413(daemon):
    body = b'{"action":"stage_in","source":"/' + b"a" * 200000 + b'","dest":"/b"}'
    req = (b"POST /v1/requests HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
           b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    reply = _raw_exchange(daemon.sock, req, as_user="shtest")
    head, _, payload = reply.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n")[0]
    assert status_line.startswith(b"HTTP/1.1 413"), reply[:300]
    doc = json.loads(payload.decode())
    _error_of(doc, payload)
    assert "MaxRequestBytes" in doc["error"] or "65536" in doc["error"], doc
    # ... and the daemon is still fine.
    assert daemon.api.get("/v1/health")[0] == 200


def test_garbage_on_the_socket_does_not_hurt(daemon):
    for junk in (b"\x00\x01\x02\xff" * 1000, b"GET /v1/health HTTP/9.9\r\n\r\n",
                 b"POST /v1/requests HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(daemon.sock)
        try:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            s.recv(4096)
        except OSError:
            pass
        finally:
            s.close()
    assert daemon.running(), daemon.log_tail()
    assert daemon.api.get("/v1/health")[0] == 200


def test_unknown_path_and_id_are_404(daemon):
    st, doc, text, _ = daemon.api.get("/v1/nonesuch")
    assert st == 404, text
    st, doc, text, _ = daemon.api.get("/v1/requests/999999999")
    assert st == 404, text
    _error_of(doc, text)


@pytest.mark.parametrize("method,path,status,words", [
    # The route table (api_handlers.c): an unknown path is 404, a known one
    # with another method 405 naming the methods it takes, an id that is not
    # one 404 before the method is looked at.
    ("GET", "/v1/requests/1/nonesuch", 404, "no such path"),
    ("GET", "/v2/health", 404, "lives under /v1/"),
    ("DELETE", "/v1/requests", 405, "use POST or GET"),
    ("POST", "/v1/health", 405, "use GET"),
    ("GET", "/v1/jobs/7/start", 405, "use POST or DELETE"),
    ("GET", "/v1/requests/12x", 404, "'12x' is not a request id"),
    ("POST", "/v1/requests/0/cancel", 404, "'0' is not a request id"),
    ("DELETE", "/v1/jobs/abc/end", 404, "'abc' is not a job id"),
    ("GET", "/v1/bb/7/setup", 405, "use POST"),
])
def test_routes_answer_404_and_405_in_words(daemon, method, path, status, words):
    st, doc, text, _ = daemon.api.call(method, path, body={} if method == "POST" else None)
    assert st == status, text
    assert words in _error_of(doc, text), text


# ---- identity and ownership -------------------------------------------------

def test_forged_uid_in_body_is_ignored(daemon, small_src, base_dir, test_users):
    u = test_users["shtest"]
    dest = os.path.join(base_dir, "scratch", "shtest", "forged")
    for forged in (0, test_users["shtest2"].pw_uid):
        req = daemon.api.submit("stage_in", small_src["shtest"], dest + str(forged),
                                as_user="shtest", uid=forged, gid=0, user="root")
        assert req["uid"] == u.pw_uid and req["gid"] == u.pw_gid, req
        assert req["user"] == "shtest", req
        done = daemon.api.wait(req["id"], timeout=120)
        assert done["state"] == "done", done
        # The database agrees, and the copy was written as shtest.
        rows = daemon.db_rows("SELECT uid, gid FROM requests WHERE id = ?", (req["id"],))
        assert rows == [(u.pw_uid, u.pw_gid)]
        for f in os.listdir(dest + str(forged)):
            p = os.path.join(dest + str(forged), f)
            assert os.stat(p).st_uid == u.pw_uid, p
            assert sha256_file(p) == sha256_file(os.path.join(small_src["shtest"], f))


def test_another_users_request_is_403(daemon, small_src, base_dir):
    # shtest2 owns a request that runs to done, and one that we cancel.
    theirs = daemon.api.submit("stage_in", small_src["shtest2"],
                               os.path.join(base_dir, "scratch", "shtest2", "own"), as_user="shtest2")
    rid = theirs["id"]
    daemon.api.wait(rid, timeout=120)
    for method, path in (("GET", f"/v1/requests/{rid}"),
                         ("POST", f"/v1/requests/{rid}/cancel"),
                         ("POST", f"/v1/requests/{rid}/retry")):
        st, doc, text, _ = daemon.api.call(method, path, as_user="shtest")
        assert st == 403, f"{method} {path} as shtest: HTTP {st}: {text}"
        _error_of(doc, text)
    # Nothing changed for the owner.
    st, doc, text, _ = daemon.api.get(f"/v1/requests/{rid}", as_user="shtest2")
    assert st == 200 and doc["state"] == "done", text
    # shtest's list never shows it, with or without all=1.
    for q in ("/v1/requests", "/v1/requests?all=1"):
        st, doc, text, _ = daemon.api.get(q, as_user="shtest")
        if st == 200:
            assert rid not in [r["id"] for r in doc["requests"]], text
            assert all(r["uid"] != theirs["uid"] for r in doc["requests"]), text
        else:
            assert st == 403, f"{q}: HTTP {st}: {text}"
    # An admin (root) sees everyone's.
    st, doc, text, _ = daemon.api.get("/v1/requests?all=1")
    assert st == 200 and rid in [r["id"] for r in doc["requests"]]


def test_job_end_is_root_or_admin_only(daemon):
    st, doc, text, _ = daemon.api.post("/v1/jobs/777001/end", {"state": "COMPLETED", "uid": 0},
                                       as_user="shtest")
    assert st == 403, text
    _error_of(doc, text)


def test_cannot_read_other_users_source(daemon, small_src, base_dir):
    """shtest asks for shtest2's private tree: failed_final, permission, nothing copied."""
    dest = os.path.join(base_dir, "scratch", "shtest", "stolen")
    req = daemon.api.submit("stage_in", small_src["shtest2"], dest, as_user="shtest")
    r = daemon.api.wait(req["id"], timeout=120)
    assert r["state"] == "failed_final", r
    assert "ermission denied" in (r["error"] or ""), r
    assert r["files_done"] == 0 and r["bytes_done"] == 0, r
    leaked = []
    if os.path.exists(dest):
        for d, _dirs, files in os.walk(dest):
            leaked += files
    assert leaked == [], f"files copied despite the permission error: {leaked}"


# ---- metrics ----------------------------------------------------------------

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"\s*(,|\Z)')
_TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_prometheus(text):
    """Strict parser for the Prometheus text format 0.0.4.

    Returns {family: {"type": t, "help": h, "samples": {(name, labels): value}}}.
    Raises AssertionError on anything a Prometheus server would reject.
    """
    assert text.endswith("\n"), "exposition must end with a newline"
    fams, seen_series = {}, set()
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {n}: {line!r}"
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                assert len(parts) >= 3 and _NAME.match(parts[2]), where
                fam = fams.setdefault(parts[2], {"type": None, "help": None, "samples": {}})
                if parts[1] == "TYPE":
                    assert fam["type"] is None, f"second TYPE for {parts[2]}: {where}"
                    assert not fam["samples"], f"TYPE after samples: {where}"
                    assert len(parts) == 4 and parts[3] in _TYPES, where
                    fam["type"] = parts[3]
                else:
                    assert fam["help"] is None, f"second HELP: {where}"
                    fam["help"] = parts[3] if len(parts) == 4 else ""
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+-?\d+)?\s*\Z", line)
        assert m, f"bad sample: {where}"
        name, labels_s, value_s = m.group(1), m.group(2), m.group(3)
        labels = []
        if labels_s:
            body = labels_s[1:-1]
            pos = 0
            while pos < len(body):
                lm = _LABEL.match(body, pos)
                assert lm, f"bad labels: {where}"
                labels.append((lm.group(1), lm.group(2)))
                pos = lm.end()
            assert len({k for k, _ in labels}) == len(labels), f"repeated label: {where}"
        if value_s in ("+Inf", "-Inf", "NaN"):
            value = float(value_s.replace("Inf", "inf").replace("NaN", "nan"))
        else:
            value = float(value_s)  # ValueError fails the test too
        fam_name = name
        if fam_name not in fams:
            for suf in ("_total", "_sum", "_count", "_bucket", "_created"):
                if name.endswith(suf) and name[:-len(suf)] in fams:
                    fam_name = name[:-len(suf)]
                    break
        fam = fams.setdefault(fam_name, {"type": None, "help": None, "samples": {}})
        key = (name, tuple(sorted(labels)))
        assert key not in seen_series, f"duplicate series: {where}"
        seen_series.add(key)
        fam["samples"][key] = value
    return fams


def test_parser_rejects_bad_exposition():
    for bad in ("x 1", "x{a=\"1\" 1\n", "# TYPE x wrong\nx 1\n", "x 1\n# TYPE x gauge\n",
                "x one\n", "x 1\nx 1\n"):
        with pytest.raises((AssertionError, ValueError)):
            parse_prometheus(bad)
    assert parse_prometheus('# TYPE x counter\nx_total{a="b\\"c"} 3\n')["x"]["samples"]


def test_metrics_is_valid_prometheus_text(daemon, small_src):
    st, _doc, text, ctype = daemon.api.get("/metrics")
    assert st == 200
    assert ctype.startswith("text/plain"), ctype
    fams = parse_prometheus(text)

    def sample(name, **labels):
        for fam in fams.values():
            v = fam["samples"].get((name, tuple(sorted(labels.items()))))
            if v is not None:
                return v
        raise AssertionError(f"{name}{labels} missing from /metrics:\n{text}")

    expected_types = {
        "stagehand_up": "gauge", "stagehand_requests": "gauge",
        "stagehand_workers_busy": "gauge", "stagehand_workers_max": "gauge",
        "stagehand_bytes_moved_total": "counter", "stagehand_files_moved_total": "counter",
        "stagehand_transfer_failures_total": "counter",
        "stagehand_transfer_retries_total": "counter",
        "stagehand_transfer_rate_bytes_per_second": "gauge",
        "stagehand_job_end_events_total": "counter", "stagehand_draining": "gauge",
    }
    for name, typ in expected_types.items():
        fam = fams.get(name) or fams.get(name[:-len("_total")] if name.endswith("_total") else name)
        assert fam is not None and fam["type"] == typ, f"{name}: {fam and fam['type']}, want {typ}"
    assert sample("stagehand_up") == 1
    assert sample("stagehand_draining") == 0
    assert sample("stagehand_workers_max") == int(daemon.conf["Workers"])
    # Per-state gauges agree with the database.
    counts = dict(daemon.db_rows("SELECT state, count(*) FROM requests GROUP BY state"))
    for s in STATES:
        assert sample("stagehand_requests", state=s) == counts.get(s, 0), s
    for v in (sample("stagehand_bytes_moved_total"), sample("stagehand_files_moved_total")):
        assert v >= 0 and math.isfinite(v)
    # The earlier tests in this module moved files; the counters saw them.
    done_files = daemon.db_rows("SELECT coalesce(sum(files_done),0) FROM requests")[0][0]
    assert sample("stagehand_files_moved_total") >= min(done_files, 1)

    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return
    names = {f.name for f in text_string_to_metric_families(text)}
    assert "stagehand_up" in names


def test_each_job_end_event_makes_one_set_of_requests(daemon, base_dir, test_users):
    """The API thread and the main loop's job-end hook both process stored
    events; one event must never give two archive requests (seen once as
    the same 512 MiB archived twice)."""
    u = test_users["shtest"]
    work = owned_dir(os.path.join(base_dir, "endrace", "run"), "shtest")
    owned_dir(os.path.join(work, "results"), "shtest")
    jobs = range(778100, 779100)

    def post(job):
        st, doc, text, _ = daemon.api.post(f"/v1/jobs/{job}/end", {
            "state": "COMPLETED", "exit_code": 0, "uid": u.pw_uid, "work_dir": work,
            "plan": {"version": 1, "actions": [
                {"line": 3, "action": "archive", "path": "results/",
                 "to": os.path.join(work, "arch", str(job))}]}})
        return job, st, doc, text

    # Eight clients at once keep several events between "stored" and
    # "processed" whenever the hook runs.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for job, st, doc, text in pool.map(post, jobs):
            assert st == 202, text
            assert len(doc["requests"]) == 1, f"job {job}: {text}"
    rows = daemon.db_rows(
        "SELECT job_id, COUNT(*) FROM requests WHERE job_id BETWEEN ? AND ? GROUP BY job_id",
        (jobs[0], jobs[-1]))
    counts = {j: c for j, c in rows}
    assert len(counts) == len(jobs), f"{len(jobs) - len(counts)} jobs got no request"
    twice = {j: c for j, c in counts.items() if c != 1}
    assert not twice, f"jobs with more than one archive request: {twice}"


def test_a_tab_in_a_plan_path_is_archived(make_daemon, base_dir, test_users):
    """#DATA accepts a tab inside a quoted value; the daemon must not then
    skip that action at job end. A daemon of its own: the module's daemon
    may still be working through the 1,000 archives of the test before
    (under the sanitizers that took longer than the 600 s wait)."""
    daemon = make_daemon("tab")
    u = test_users["shtest"]
    work = owned_dir(os.path.join(base_dir, "tabpath", "run"), "shtest")
    src = owned_dir(os.path.join(work, "res\tults"), "shtest")
    with open(os.path.join(src, "f"), "wb") as f:
        f.write(b"x" * 100)
    os.chown(os.path.join(src, "f"), u.pw_uid, u.pw_gid)
    st, doc, text, _ = daemon.api.post("/v1/jobs/779500/end", {
        "state": "COMPLETED", "exit_code": 0, "uid": u.pw_uid, "work_dir": work,
        "plan": {"version": 1, "actions": [
            {"line": 3, "action": "archive", "path": "res\tults/",
             "to": os.path.join(work, "arch\tive")}]}})
    assert st == 202, text
    assert len(doc["requests"]) == 1, text
    r = daemon.api.wait(doc["requests"][0])
    assert r["state"] == "done", r
    found = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(work, "arch\tive"))
             for f in fs]
    assert len(found) == 1 and open(found[0], "rb").read() == b"x" * 100, (found, r)
