"""S3 multipart upload (stage_out/archive of a file larger than S3PartSize)
against moto_server, through a small proxy started here.

The proxy sits between the daemon and moto: it forwards every request as it
came (the SigV4 signature names the proxy's host and port, which moto checks
as sent), logs what it forwarded, and on demand holds one part's upload
(the daemon waits for an answer that never comes: a transfer held mid-file
on purpose, never by size or speed) or changes one byte of a part on its
way to moto (a part corrupted in transit: its ETag is then not the md5 of
what the daemon sent).

Checks: a file in N parts verified by the object's ETag ("-N"); a daemon
killed mid-upload sends only the missing parts after its restart; an upload
the server no longer has, or of a source that changed, starts over; a
corrupted part is sent again, and one corrupted every time fails the request
in clear words; a cancelled request leaves no multipart upload open.

Run: sudo python3 -m pytest -v tests/integration/0231-daemon-s3-multipart.py
"""
import hashlib
import http.client
import http.server
import os
import pwd
import random
import re
import threading
import time
import urllib.parse

import pytest

from conftest import free_port, sha256_file, start_moto, user_dir

USER = "shtest"
MiB = 1 << 20
PART = 5 * MiB          # S3PartSize of these daemons: S3's minimum
BUCKET = "multipart"


def until(cond, what, timeout=30, d=None):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"{what} within {timeout}s" + (
            f"\n{d.log_tail()}" if d else "")
        time.sleep(0.05)


# ---- the proxy ----------------------------------------------------------------------

HOP = {"connection", "keep-alive", "expect", "proxy-connection", "te", "upgrade",
       "transfer-encoding"}


class Proxy(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream
        self.lock = threading.Lock()
        self.log = []            # (method, part number or None, query) forwarded
        self.held_log = []       # part numbers held (never forwarded)
        self.hold_part = None
        self.held = threading.Event()
        self.release = threading.Event()
        self.corrupt = {}        # part number: sends still to corrupt
        self.lie_complete = False  # CompleteMultipartUpload answers another ETag

    def reset(self):
        with self.lock:
            self.log.clear()
            self.held_log.clear()
            self.hold_part = None
            self.corrupt = {}
            self.lie_complete = False
        self.held.clear()
        self.release.clear()

    def parts_sent(self, n):
        with self.lock:
            return sum(1 for m, p, _ in self.log if m == "PUT" and p == n)

    def calls(self, method, word):
        with self.lock:
            return sum(1 for m, _, q in self.log if m == method and word in q)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive, and "100 Continue" for curl's uploads

    def log_message(self, *a):
        pass

    def _relay(self):
        px = self.server
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query,
                                  keep_blank_values=True)
        part = int(q["partNumber"][0]) if "partNumber" in q else None
        hold = corrupt = False
        with px.lock:
            if self.command == "PUT" and part is not None and part == px.hold_part:
                px.held_log.append(part)
                hold = True
            elif self.command == "PUT" and px.corrupt.get(part, 0) > 0:
                px.corrupt[part] -= 1
                corrupt = True
        if hold:
            px.held.set()
            px.release.wait(300)
            self.close_connection = True
            return
        if corrupt:
            b = bytearray(body)
            b[len(b) // 2] ^= 0xFF
            body = bytes(b)
        up = http.client.HTTPConnection("127.0.0.1", px.upstream, timeout=120)
        up.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for k, v in self.headers.items():
            if k.lower() not in HOP:
                up.putheader(k, v)
        up.endheaders(body if body else None)
        resp = up.getresponse()
        data = resp.read()
        if px.lie_complete and self.command == "POST" and "uploadId=" in self.path:
            # The object's ETag as a server that assembled other bytes would say it.
            data = re.sub(rb'<ETag>"([0-9a-f])', lambda m: b'<ETag>"' + (
                b"0" if m.group(1) != b"0" else b"1"), data)
        with px.lock:
            px.log.append((self.command, part, urllib.parse.urlsplit(self.path).query))
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP and k.lower() != "content-length":
                self.send_header(k, v)
        if self.command == "HEAD":
            self.send_header("Content-Length", resp.getheader("Content-Length", "0"))
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        up.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay


# ---- fixtures -------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3(base_dir, home):
    s = start_moto(base_dir, free_port())
    s.client.create_bucket(Bucket=BUCKET)
    cf = os.path.join(home, ".config", "stagehand", "s3.conf")
    pw = pwd.getpwnam(USER)
    os.makedirs(os.path.dirname(cf))
    for d in (os.path.join(home, ".config"), os.path.dirname(cf)):
        os.chown(d, pw.pw_uid, pw.pw_gid)
    with open(cf, "w") as f:
        f.write(f"access_key_id = {s.access}\n"
                f"secret_access_key = {s.secret}\n")
    os.chown(cf, pw.pw_uid, pw.pw_gid)
    os.chmod(cf, 0o600)
    s.proxy = Proxy(s.port)
    threading.Thread(target=s.proxy.serve_forever, daemon=True).start()
    s.proxy_url = f"http://127.0.0.1:{s.proxy.server_address[1]}"
    yield s
    s.proxy.release.set()
    s.proxy.shutdown()
    s.proc.terminate()
    s.proc.wait(10)


@pytest.fixture(scope="module")
def daemon(make_daemon, s3, home):
    return make_daemon("mpu", homes={pwd.getpwnam(USER).pw_dir: home}, AllowedSchemes="s3",
                       S3Endpoint=s3.proxy_url, S3Region="us-east-1", S3PartSize="5M",
                       MaxRetries=0, Workers=1, OutboundAllow="127.0.0.1/32")


@pytest.fixture
def proxy(s3):
    s3.proxy.reset()
    yield s3.proxy
    s3.proxy.release.set()


# ---- helpers --------------------------------------------------------------------

def source(base_dir, name, size, seed):
    """A file of the test user's of size bytes (random, reproducible); its path and sha256."""
    d = user_dir(base_dir, USER, "out", name)
    path = os.path.join(d, "big.bin")
    rnd = random.Random(seed)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, MiB)
            f.write(rnd.randbytes(n))
            left -= n
    pw = pwd.getpwnam(USER)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    return path, sha256_file(path)


def multipart_etag(path):
    """The ETag S3 gives path uploaded in parts of PART bytes."""
    md5s = b""
    n = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(PART)
            if not b:
                break
            md5s += hashlib.md5(b).digest()
            n += 1
    return f"{hashlib.md5(md5s).hexdigest()}-{n}"


def object_sha(s3, key):
    return hashlib.sha256(s3.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()).hexdigest()


def open_uploads(s3):
    return s3.client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])


def recorded(d, table, rid=None):
    """Rows of the daemon's upload records (of request rid, or all)."""
    if rid is None:
        return d.db_rows(f"SELECT count(*) FROM {table}")[0][0]
    return d.db_rows(f"SELECT count(*) FROM {table} WHERE request_id=?", (rid,))[0][0]


def items(d, rid):
    st, doc, text, _ = d.api.get(f"/v1/requests/{rid}?items=1")
    assert st == 200, text
    return {i["relpath"]: i for i in doc["items"]}


def held_mid_upload(d, proxy, rid, part, parts_recorded):
    """Wait until the proxy holds part `part` and the daemon recorded the parts before it."""
    until(proxy.held.is_set, f"request {rid}: part {part} held by the proxy", d=d)
    until(lambda: recorded(d, "s3_upload_parts", rid) >= parts_recorded,
          f"{parts_recorded} parts recorded in the daemon's database", d=d)
    assert recorded(d, "s3_uploads", rid) == 1


# ---- tests ----------------------------------------------------------------------

def test_file_over_part_size_goes_in_parts_verified_by_etag(daemon, s3, proxy, base_dir):
    path, sha = source(base_dir, "whole", 2 * PART + 1234, 1)
    small = os.path.join(os.path.dirname(path), "small.txt")
    with open(small, "wb") as f:
        f.write(b"one PUT\n" * 100)
    os.chown(small, pwd.getpwnam(USER).pw_uid, -1)
    r = daemon.api.submit("archive", os.path.dirname(path), f"s3://{BUCKET}/whole/", as_user=USER)
    done = daemon.api.wait(r["id"], timeout=120)
    assert done["state"] == "done", f"{done}\n{daemon.log_tail()}"
    want = multipart_etag(path)
    its = items(daemon, r["id"])
    assert its["big.bin"]["checksum"] == f"s3etag:{want}", its
    assert its["small.txt"]["checksum"] == "md5:" + hashlib.md5(b"one PUT\n" * 100).hexdigest()
    head = s3.client.head_object(Bucket=BUCKET, Key="whole/big.bin")
    assert head["ETag"] == f'"{want}"' and head["ETag"].endswith('-3"'), head["ETag"]
    assert object_sha(s3, "whole/big.bin") == sha
    assert [proxy.parts_sent(n) for n in (1, 2, 3, 4)] == [1, 1, 1, 0]
    assert proxy.calls("POST", "uploads=") == 1 and proxy.calls("POST", "uploadId=") == 1
    assert not open_uploads(s3)
    assert recorded(daemon, "s3_uploads", r["id"]) == 0
    assert recorded(daemon, "s3_upload_parts", r["id"]) == 0
    assert "'big.bin' uploaded in 3 parts of 5242880 bytes (3 sent by this attempt)" in \
        daemon.log_tail(400)


def test_daemon_killed_mid_upload_sends_only_missing_parts(daemon, s3, proxy, base_dir):
    path, sha = source(base_dir, "resume", 3 * PART + 777, 2)
    proxy.hold_part = 3
    r = daemon.api.submit("stage_out", path, f"s3://{BUCKET}/resume/big.bin", as_user=USER)
    held_mid_upload(daemon, proxy, r["id"], 3, 2)
    daemon.kill9()
    proxy.hold_part = None
    proxy.release.set()
    daemon.start()
    done = daemon.api.wait(r["id"], timeout=120)
    assert done["state"] == "done", f"{done}\n{daemon.log_tail()}"
    assert object_sha(s3, "resume/big.bin") == sha
    head = s3.client.head_object(Bucket=BUCKET, Key="resume/big.bin")
    assert head["ETag"] == f'"{multipart_etag(path)}"'
    # Parts 1 and 2 went once, before the kill; 3 was held (never reached moto) and
    # went after the restart with 4.
    assert proxy.held_log == [3]
    assert [proxy.parts_sent(n) for n in (1, 2, 3, 4)] == [1, 1, 1, 1]
    assert proxy.calls("POST", "uploads=") == 1, "a second upload was begun"
    log = daemon.log_tail(400)
    assert "resuming S3 multipart upload: 2 of 4 parts on the server, 2 to send" in log, log
    assert "'big.bin' uploaded in 4 parts of 5242880 bytes (2 sent by this attempt)" in log
    assert not open_uploads(s3)
    assert recorded(daemon, "s3_uploads", r["id"]) == 0


def test_upload_gone_from_server_starts_over(daemon, s3, proxy, base_dir):
    path, sha = source(base_dir, "gone", 2 * PART + 5, 3)
    proxy.hold_part = 2
    r = daemon.api.submit("stage_out", path, f"s3://{BUCKET}/gone/big.bin", as_user=USER)
    held_mid_upload(daemon, proxy, r["id"], 2, 1)
    daemon.kill9()
    proxy.hold_part = None
    proxy.release.set()
    (up,) = open_uploads(s3)
    s3.client.abort_multipart_upload(Bucket=BUCKET, Key="gone/big.bin", UploadId=up["UploadId"])
    daemon.start()
    done = daemon.api.wait(r["id"], timeout=120)
    assert done["state"] == "done", f"{done}\n{daemon.log_tail()}"
    assert object_sha(s3, "gone/big.bin") == sha
    assert f"S3 multipart upload {up['UploadId']} is gone (NoSuchUpload): starting over" in \
        daemon.log_tail(400)
    assert proxy.calls("POST", "uploads=") == 2
    assert [proxy.parts_sent(n) for n in (1, 2, 3)] == [2, 1, 1]
    assert not open_uploads(s3)


def test_source_changed_since_upload_began_starts_over(daemon, s3, proxy, base_dir):
    path, _ = source(base_dir, "changed", 2 * PART + 5, 4)
    proxy.hold_part = 2
    r = daemon.api.submit("stage_out", path, f"s3://{BUCKET}/changed/big.bin", as_user=USER)
    held_mid_upload(daemon, proxy, r["id"], 2, 1)
    daemon.kill9()
    proxy.hold_part = None
    proxy.release.set()
    (stale,) = open_uploads(s3)
    with open(path, "r+b") as f:      # same size, other bytes, a later mtime
        f.write(b"changed")
    os.utime(path, (time.time() + 5, time.time() + 5))
    sha = sha256_file(path)
    daemon.start()
    done = daemon.api.wait(r["id"], timeout=120)
    assert done["state"] == "done", f"{done}\n{daemon.log_tail()}"
    assert object_sha(s3, "changed/big.bin") == sha
    assert (f"S3 multipart upload {stale['UploadId']} aborted (the source or S3PartSize "
            "changed since it began)") in daemon.log_tail(400)
    assert not open_uploads(s3), "the stale upload is still open"


def test_corrupted_part_is_sent_again(daemon, s3, proxy, base_dir):
    path, sha = source(base_dir, "corrupt-once", 2 * PART + 99, 5)
    proxy.corrupt = {2: 1}
    r = daemon.api.submit("stage_out", path, f"s3://{BUCKET}/once/big.bin", as_user=USER)
    done = daemon.api.wait(r["id"], timeout=120)
    assert done["state"] == "done", f"{done}\n{daemon.log_tail()}"
    assert object_sha(s3, "once/big.bin") == sha
    assert [proxy.parts_sent(n) for n in (1, 2, 3)] == [1, 2, 1]
    assert re.search(r"'big.bin': S3 ETag of part 2 is [0-9a-f]{32}, the md5 of the bytes "
                     r"sent [0-9a-f]{32} \(try 1 of 3\)", daemon.log_tail(400))
    assert items(daemon, r["id"])["big.bin"]["checksum"] == f"s3etag:{multipart_etag(path)}"


def test_part_corrupted_every_time_fails_in_clear_words(daemon, s3, proxy, base_dir):
    path, _ = source(base_dir, "corrupt-always", 2 * PART + 99, 6)
    proxy.corrupt = {2: 99}
    r = daemon.api.submit("stage_out", path, f"s3://{BUCKET}/always/big.bin", as_user=USER)
    done = daemon.api.wait(r["id"], timeout=120)
    assert done["state"] != "done", done
    assert re.search(r"multipart upload of 'big.bin' failed: S3 ETag of part 2 is [0-9a-f]{32}, "
                     r"the md5 of the bytes sent [0-9a-f]{32}", done["error"] or ""), done
    assert proxy.parts_sent(2) == 3 and proxy.parts_sent(3) == 0
    assert proxy.calls("POST", "uploadId=") == 0, "an upload with a bad part was completed"
    with pytest.raises(Exception):
        s3.client.head_object(Bucket=BUCKET, Key="always/big.bin")
    # A failed attempt keeps its upload (and part 1) for a retry by hand.
    (up,) = open_uploads(s3)
    assert recorded(daemon, "s3_upload_parts", r["id"]) == 1
    s3.client.abort_multipart_upload(Bucket=BUCKET, Key="always/big.bin", UploadId=up["UploadId"])


def test_object_etag_not_made_of_the_parts_sent_fails(daemon, s3, proxy, base_dir):
    path, _ = source(base_dir, "lie", 2 * PART + 3, 8)
    proxy.lie_complete = True
    r = daemon.api.submit("stage_out", path, f"s3://{BUCKET}/lie/big.bin", as_user=USER)
    done = daemon.api.wait(r["id"], timeout=120)
    assert done["state"] != "done", done
    assert re.search(r"checksum mismatch after upload: S3 ETag \"[0-9a-f]{32}-3\", the md5s of "
                     rf"the parts sent make \"{multipart_etag(path)}\"", done["error"] or ""), done
    # The server completed it: nothing is left to resume or to abort.
    assert recorded(daemon, "s3_uploads", r["id"]) == 0
    assert not open_uploads(s3)


def test_cancelled_request_leaves_no_upload_open(daemon, s3, proxy, base_dir):
    path, _ = source(base_dir, "cancel", 2 * PART + 5, 7)
    proxy.hold_part = 2
    r = daemon.api.submit("stage_out", path, f"s3://{BUCKET}/cancel/big.bin", as_user=USER)
    held_mid_upload(daemon, proxy, r["id"], 2, 1)
    assert len(open_uploads(s3)) == 1
    st, _, text, _ = daemon.api.post(f"/v1/requests/{r['id']}/cancel", as_user=USER)
    assert st == 200, text
    until(lambda: not open_uploads(s3), "the cancelled request's upload aborted", d=daemon)
    proxy.release.set()
    assert daemon.api.wait(r["id"], timeout=30)["state"] == "cancelled"
    assert proxy.calls("DELETE", "uploadId=") == 1
    # The worker logs the abort after its DELETE, through its record stream:
    # the request is already cancelled (the API set that), so wait for the line.
    until(lambda: "aborted (the request was cancelled)" in daemon.log_tail(400),
          "the abort logged", d=daemon)
    until(lambda: recorded(daemon, "s3_uploads", r["id"]) == 0, "the upload forgotten", d=daemon)
