"""Where a user's URL may make the daemon go, and what it shows of it
(issue 47, findings 4, 5 and 6b; stagehand.conf(5): S3SitePrefix,
OutboundAllow, AllowedSchemes).

  * The site's S3 keys (S3CredentialsFile) sign only below the owner's own
    prefix (S3SitePrefix=s3://archive/%u/): shtest2, who has no key file,
    cannot read or overwrite shtest's prefix, reach a bucket's ACL or
    policy, or name a key with '?'; each is refused with a reason before
    any request, and moto sees none of them. Without S3SitePrefix the
    site's keys serve nobody, and the message says where to put one's own.
  * The outbound policy, on the address each connection is about to use:
    a redirect to a loopback port that OutboundAllow does not list, the
    metadata address, IPv4-mapped and ::1 forms are refused and their
    server sees nothing; a name that resolves to 127.0.0.1 is refused and
    the same name, resolving to an allowed address, works (an /etc/hosts
    of the daemon's own mount namespace, changed between the two); a
    redirect from https to http is not followed when AllowedSchemes leaves
    http out; the user reads an error class, the log curl's detail.
  * A pre-signed URL's query (X-Amz-Signature=...) reaches the server but
    not the daemon's log, the API's listings or NotifyCommand.

Servers: Python's http.server on 127.0.0.1 (allowed) and 127.0.0.2 (not
allowed, but for the daemon that allows it), moto_server for S3 (PyPI
moto[server]; skipped without it).

Run: sudo python3 -m pytest -v tests/integration/0232-daemon-outbound.py
"""
import http.server
import os
import pwd
import re
import shutil
import ssl
import subprocess
import threading
import time

import pytest

from conftest import free_port, start_moto, user_dir

ALICE, BOB = "shtest", "shtest2"
SECRET = "s3cr3t-Signature-0232"
POLICY = "outbound policy"
CLASS = "the server's address is not allowed by the site's outbound policy"


# ---- servers ------------------------------------------------------------------------

class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        pass

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body):
        srv = self.server
        with srv.lock:
            srv.seen.append(self.path)
        path = self.path.split("?", 1)[0]
        if path in srv.redirects:
            self.send_response(302)
            self.send_header("Location", srv.redirects[path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path.startswith("/ok"):
            data = b"fetched from %s\n" % srv.name.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)
            return
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host, name, tls=None):
        super().__init__((host, 0), _Handler)
        self.name = name
        self.lock = threading.Lock()
        self.seen = []
        self.redirects = {}
        scheme = "http"
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.socket = ctx.wrap_socket(self.socket, server_side=True)
            scheme = "https"
        self.port = self.server_address[1]
        self.url = f"{scheme}://{host}:{self.port}"
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def requests(self):
        with self.lock:
            return list(self.seen)


@pytest.fixture(scope="module")
def tls_cert(base_dir):
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    d = os.path.join(base_dir, "tls")
    os.makedirs(d, exist_ok=True)
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    os.chmod(cert, 0o644)
    return cert, key


@pytest.fixture(scope="module")
def web(tls_cert):
    """allowed: 127.0.0.1 (the daemons' OutboundAllow), inner: 127.0.0.2, tls: https on 127.0.0.1."""
    class W:
        pass
    w = W()
    w.allowed = Server("127.0.0.1", "allowed")
    w.inner = Server("127.0.0.2", "inner")
    w.tls = Server("127.0.0.1", "tls", tls=tls_cert)
    yield w
    for s in (w.allowed, w.inner, w.tls):
        s.shutdown()


# ---- daemons ------------------------------------------------------------------------

def scratch(base_dir, user, name):
    return user_dir(base_dir, user, "scratch", name)


@pytest.fixture(scope="module")
def notify_script(base_dir):
    out = os.path.join(base_dir, "notices")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(base_dir, "record-notice")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n{ printf 'ARG=%s\\n' \"$@\"; env; } > "
                f"{out}/notice-$STAGEHAND_REQUEST_ID\n")
    os.chmod(path, 0o755)
    return out, path


@pytest.fixture(scope="module")
def daemon(make_daemon, tls_cert, notify_script):
    """OutboundAllow=127.0.0.1/32: the servers on 127.0.0.1, not 127.0.0.2."""
    return make_daemon("outbound", AllowedSchemes="https,http", OutboundAllow="127.0.0.1/32",
                       URLCAFile=tls_cert[0], MaxRetries=0,
                       NotifyCommand=notify_script[1], NotifyTimeout="10s")


@pytest.fixture(scope="module")
def https_only(make_daemon, tls_cert):
    return make_daemon("outbound-https", AllowedSchemes="https", OutboundAllow="127.0.0.1/32",
                       URLCAFile=tls_cert[0], MaxRetries=0)


@pytest.fixture(scope="module")
def hosts(base_dir):
    """An /etc/hosts for the rebinding daemon's mount namespace (bound over the real one)."""
    path = os.path.join(base_dir, "hosts")
    set_hosts(path, "127.0.0.1")
    return path


def set_hosts(path, addr):
    # Rewritten in place: the bind mount holds this inode.
    with open(path, "r+" if os.path.exists(path) else "w") as f:
        f.truncate(0)
        f.write(f"127.0.0.1 localhost\n{addr} rebind.stagehand.test\n")
    os.chmod(path, 0o644)


@pytest.fixture(scope="module")
def rebind(make_daemon, hosts):
    """OutboundAllow=127.0.0.2/32 only: 127.0.0.1 is loopback, refused."""
    return make_daemon("outbound-rebind", homes={"/etc/hosts": hosts}, AllowedSchemes="http",
                       OutboundAllow="127.0.0.2/32", MaxRetries=0)


def run(d, action, source, dest, user=ALICE, timeout=60):
    """Submit as user and wait: the request, or {"state": "refused", "error": ...}
    when the API refuses it outright."""
    body = {"action": action, "source": source, "dest": dest}
    st, doc, text, _ = d.api.post("/v1/requests", body, as_user=user)
    if st == 400:
        return {"state": "refused", "error": doc["error"]}
    assert st == 201, text
    return d.api.wait(doc["id"], timeout=timeout)


def log_of(d):
    with open(d.log_path, errors="replace") as f:
        return f.read()


# ---- the outbound policy ------------------------------------------------------------

def test_allowed_host_works_and_redirect_to_it_too(daemon, web, base_dir):
    d = scratch(base_dir, ALICE, "ob-ok")
    r = run(daemon, "stage_in", f"{web.allowed.url}/ok/a.txt", d + "/a.txt")
    assert r["state"] == "done", f"{r}\n{daemon.log_tail()}"
    assert open(d + "/a.txt").read() == "fetched from allowed\n"
    web.allowed.redirects["/hop"] = f"{web.allowed.url}/ok/b.txt"
    r = run(daemon, "stage_in", f"{web.allowed.url}/hop", d + "/b.txt")
    assert r["state"] == "done", f"{r}\n{daemon.log_tail()}"


def test_redirect_to_loopback_port_not_allowed(daemon, web, base_dir):
    d = scratch(base_dir, ALICE, "ob-redir")
    web.allowed.redirects["/to-inner"] = f"{web.inner.url}/ok/secret-service"
    before = len(web.inner.requests())
    r = run(daemon, "stage_in", f"{web.allowed.url}/to-inner", d + "/x")
    assert r["state"] == "failed_final", r
    assert CLASS in r["error"], r
    assert web.inner.requests()[before:] == [], "the refused server was reached"
    assert not os.path.exists(d + "/x")
    log = log_of(daemon)
    assert f"{POLICY}: connection to 127.0.0.2 refused (loopback (127.0.0.0/8))" in log, \
        daemon.log_tail()


@pytest.mark.parametrize("host", ["127.0.0.2", "[::ffff:127.0.0.2]", "[::1]", "169.254.169.254",
                                  "[fd00:ec2::254]", "0.0.0.0"])
def test_denied_addresses_refused(daemon, web, base_dir, host):
    d = scratch(base_dir, ALICE, "ob-deny")
    before = len(web.inner.requests())
    r = run(daemon, "stage_in", f"http://{host}:{web.inner.port}/ok/x", d + "/x")
    assert r["state"] == "failed_final", r
    assert CLASS in r["error"], r
    assert web.inner.requests()[before:] == []


def test_name_resolving_to_loopback_then_to_allowed_host(rebind, web, hosts, base_dir):
    """The check is on the address curl connects to, resolved for that very
    attempt: the same name is refused while it resolves to 127.0.0.1 and
    served once it resolves to 127.0.0.2 (allowed), and refused again after."""
    d = scratch(base_dir, ALICE, "ob-rebind")
    url = f"http://rebind.stagehand.test:{web.inner.port}/ok/r.txt"
    r = run(rebind, "stage_in", url, d + "/r1")
    assert r["state"] == "failed_final" and CLASS in r["error"], r
    assert "refused (loopback (127.0.0.0/8))" in log_of(rebind)
    set_hosts(hosts, "127.0.0.2")
    r = run(rebind, "stage_in", url, d + "/r2")
    assert r["state"] == "done", f"{r}\n{rebind.log_tail()}"
    assert open(d + "/r2").read() == "fetched from inner\n"
    set_hosts(hosts, "127.0.0.1")
    r = run(rebind, "stage_in", url, d + "/r3")
    assert r["state"] == "failed_final" and CLASS in r["error"], r
    assert not os.path.exists(d + "/r3")


def test_redirect_to_scheme_not_allowed(https_only, web, base_dir):
    """AllowedSchemes=https: a redirect from https to http is not followed."""
    d = scratch(base_dir, ALICE, "ob-scheme")
    r = run(https_only, "stage_in", f"{web.tls.url}/ok/t.txt", d + "/t")
    assert r["state"] == "done", f"{r}\n{https_only.log_tail()}"
    web.tls.redirects["/down"] = f"{web.allowed.url}/ok/plain-target"
    r = run(https_only, "stage_in", f"{web.tls.url}/down", d + "/x")
    assert r["state"] == "failed_final", r
    assert "a scheme the site does not allow" in r["error"], r
    assert not [p for p in web.allowed.requests() if "plain-target" in p]


def test_curl_error_reduced_to_a_class(daemon, base_dir):
    closed = free_port()
    d = scratch(base_dir, ALICE, "ob-class")
    r = run(daemon, "stage_in", f"http://127.0.0.1:{closed}/x", d + "/x")
    assert r["state"] in ("failed", "failed_final"), r
    assert r["error"].endswith(": connection refused or the server unreachable"), r
    for curl_text in ("Failed to connect", "Couldn't connect", "Connection refused", "after"):
        assert curl_text not in r["error"], r
    assert "curl error 7 (Couldn't connect to server)" in log_of(daemon), daemon.log_tail()


# ---- secrets in URLs ----------------------------------------------------------------

def test_presigned_query_redacted(daemon, web, base_dir, notify_script):
    d = scratch(base_dir, ALICE, "ob-redact")
    url = f"{web.allowed.url}/missing/obj?X-Amz-Signature={SECRET}&X-Amz-Credential=AKIA"
    r = run(daemon, "stage_in", url, d + "/obj")
    assert r["state"] == "failed_final", r
    # The transfer used the whole URL...
    assert any(SECRET in p for p in web.allowed.requests())
    # ...nothing shows it.
    assert r["source"].endswith("/missing/obj?<redacted>"), r
    for path in (f"/v1/requests/{r['id']}?items=1", "/v1/requests?all=1"):
        st, _, text, _ = daemon.api.get(path)
        assert st == 200 and SECRET not in text and "?<redacted>" in text, text
    assert SECRET not in log_of(daemon)
    assert "?<redacted>" in log_of(daemon)
    notice = os.path.join(notify_script[0], f"notice-{r['id']}")
    end = time.monotonic() + 30
    while not os.path.exists(notice) and time.monotonic() < end:
        time.sleep(0.2)
    text = open(notice).read()
    assert "STAGEHAND_SOURCE=" in text and "?<redacted>" in text, text
    assert SECRET not in text


# ---- S3: the site's keys below the user's own prefix only ---------------------------

@pytest.fixture(scope="module")
def s3(base_dir):
    s = start_moto(base_dir, free_port())
    s.client.create_bucket(Bucket="archive")
    s.client.put_object(Bucket="archive", Key=f"{ALICE}/secret.txt", Body=b"alice's\n")
    s.client.put_object(Bucket="archive", Key=f"{BOB}/mine.txt", Body=b"bob's\n")
    site = os.path.join(base_dir, "site-s3.conf")
    with open(site, "w") as f:
        f.write(f"access_key_id = {s.access}\nsecret_access_key = {s.secret}\n")
    os.chmod(site, 0o600)
    s.site = site
    s.acl = s.client.get_bucket_acl(Bucket="archive")["Grants"]
    yield s
    s.proc.terminate()
    s.proc.wait(10)


def moto_log(s3):
    with open(os.path.join(s3.dir, "moto.log"), errors="replace") as f:
        return f.read()


@pytest.fixture(scope="module")
def bob_home(base_dir):
    """shtest2's home as the daemons see it: empty, so no key file of his own."""
    pw = pwd.getpwnam(BOB)
    h = os.path.join(base_dir, "home", BOB)
    os.makedirs(h, exist_ok=True)
    os.chown(h, pw.pw_uid, pw.pw_gid)
    return {pw.pw_dir: h}


@pytest.fixture(scope="module")
def alice_home(base_dir, s3):
    """shtest's home as the daemons see it: with keys of her own."""
    pw = pwd.getpwnam(ALICE)
    h = os.path.join(base_dir, "home", ALICE)
    cf = os.path.join(h, ".config", "stagehand", "s3.conf")
    os.makedirs(os.path.dirname(cf), exist_ok=True)
    with open(cf, "w") as f:
        f.write(f"access_key_id = {s3.access}\nsecret_access_key = {s3.secret}\n")
    os.chmod(cf, 0o600)
    for p in (h, os.path.dirname(os.path.dirname(cf)), os.path.dirname(cf), cf):
        os.chown(p, pw.pw_uid, pw.pw_gid)
    return {pw.pw_dir: h}


@pytest.fixture(scope="module")
def s3site(make_daemon, s3, bob_home, alice_home):
    return make_daemon("outbound-s3", homes={**bob_home, **alice_home}, AllowedSchemes="s3",
                       S3Endpoint=s3.endpoint, OutboundAllow="127.0.0.1/32", MaxRetries=0,
                       S3CredentialsFile=s3.site, S3SitePrefix="s3://archive/%u/")


def test_s3_site_keys_in_own_prefix(s3site, s3, base_dir):
    d = scratch(base_dir, BOB, "s3-own")
    r = run(s3site, "stage_in", f"s3://archive/{BOB}/mine.txt", d + "/mine.txt", user=BOB)
    assert r["state"] == "done", f"{r}\n{s3site.log_tail()}"
    assert open(d + "/mine.txt").read() == "bob's\n"


@pytest.mark.parametrize("action,url,why", [
    ("stage_in", f"s3://archive/{ALICE}/secret.txt", f"outside s3://archive/{BOB}/"),
    ("stage_out", f"s3://archive/{ALICE}/", f"outside s3://archive/{BOB}/"),
    ("stage_in", f"s3://archive/{BOB}/../{ALICE}/secret.txt", f"outside s3://archive/{BOB}/"),
    ("stage_in", f"s3://archive/{BOB}/%2e%2e/{ALICE}/secret.txt", f"outside s3://archive/{BOB}/"),
    ("stage_in", f"s3://archive/{BOB}x/secret.txt", f"outside s3://archive/{BOB}/"),
    ("stage_in", "s3://archive/?acl", "'?' in an S3 key is refused"),
    ("stage_out", "s3://archive/?policy", "'?' in an S3 key is refused"),
    ("stage_in", f"s3://archive/{BOB}/?acl", "'?' in an S3 key is refused"),
    ("stage_out", f"s3://archive/{BOB}/x?uploads", "'?' in an S3 key is refused"),
    ("stage_in", f"s3://archive/{BOB}/x%3Facl", "'?' (percent-encoded) in an S3 key"),
])
def test_s3_refused_for_bob(s3site, s3, base_dir, action, url, why):
    d = scratch(base_dir, BOB, "s3-refused-" + re.sub(r"[^a-z0-9]+", "_", action + url))
    src = os.path.join(d, "payload")
    with open(src, "w") as f:
        f.write("bob's bytes\n")
    os.chown(src, pwd.getpwnam(BOB).pw_uid, pwd.getpwnam(BOB).pw_gid)
    before = moto_log(s3)
    dest = os.path.join(d, "got") if action == "stage_in" else url
    r = run(s3site, action, url if action == "stage_in" else src, dest, user=BOB)
    assert r["state"] in ("refused", "failed_final"), r
    assert why in r["error"], r
    if r["state"] == "failed_final":
        assert ".config/stagehand/s3.conf" in r["error"] or "'?'" in r["error"], r
    # Nothing read, nothing written: moto saw no request at all.
    assert moto_log(s3)[len(before):] == "", moto_log(s3)[len(before):]
    assert not os.path.exists(os.path.join(d, "got"))
    assert s3.client.get_object(Bucket="archive", Key=f"{ALICE}/secret.txt")["Body"].read() == \
        b"alice's\n"
    keys = {o["Key"] for o in s3.client.list_objects_v2(Bucket="archive")["Contents"]}
    assert keys <= {f"{ALICE}/secret.txt", f"{BOB}/mine.txt"}, keys
    assert s3.client.get_bucket_acl(Bucket="archive")["Grants"] == s3.acl


@pytest.mark.parametrize("url", ["s3://archive/?acl", f"s3://archive/{ALICE}/?policy",
                                 f"s3://archive/{ALICE}/secret.txt?acl"])
def test_s3_query_refused_with_own_keys(s3site, s3, base_dir, url):
    """shtest has keys of her own (which may do anything on the bucket): a
    query is refused all the same, before any request."""
    d = scratch(base_dir, ALICE, "s3-own-query")
    before = moto_log(s3)
    r = run(s3site, "stage_in", url, os.path.join(d, "got"))
    assert r["state"] in ("refused", "failed_final"), r
    assert "'?' in an S3 key is refused" in r["error"], r
    assert moto_log(s3)[len(before):] == ""
    assert not os.path.exists(os.path.join(d, "got"))


def test_s3_site_keys_unused_without_prefix(make_daemon, s3, bob_home, base_dir):
    d = make_daemon("outbound-s3-noprefix", homes=bob_home, AllowedSchemes="s3",
                    S3Endpoint=s3.endpoint, OutboundAllow="127.0.0.1/32", MaxRetries=0,
                    S3CredentialsFile=s3.site)
    before = moto_log(s3)
    r = run(d, "stage_in", f"s3://archive/{BOB}/mine.txt",
            os.path.join(scratch(base_dir, BOB, "s3-noprefix"), "m"), user=BOB)
    assert r["state"] == "failed_final", r
    assert "S3SitePrefix is not set" in r["error"], r
    assert f"{pwd.getpwnam(BOB).pw_dir}/.config/stagehand/s3.conf (mode 0600)" in r["error"], r
    assert moto_log(s3)[len(before):] == ""
