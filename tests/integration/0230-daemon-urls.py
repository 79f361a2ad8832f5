"""stagehandd's url backend against real servers started here on 127.0.0.1.

Servers (each skipped, with the reason, only when its program is missing):
  * nginx with the WebDAV modules (dav_methods PUT MKCOL, dav_ext PROPFIND):
    http GET/PUT, trees by PROPFIND, checksum headers, Range resume;
  * pyftpdlib (Debian python3-pyftpdlib, run by /usr/bin/python3): ftp with
    ~/.netrc, REST resume;
  * OpenSSH's sshd, run as the test user on a high port with a generated
    host key: sftp with the user's key and known_hosts;
  * moto_server (PyPI moto[server]): s3 with SigV4 and per-user keys.

For each protocol: stage_in of a file and of a tree, stage_out/archive of a
tree, a resumed download (the daemon is killed mid-file, restarted, and the
rest is fetched from where it stopped), refusals (a credentials file readable
by others, a scheme the site does not allow), a wrong checksum detected.

Run: sudo python3 -m pytest -v tests/integration/0230-daemon-urls.py
"""
import hashlib
import os
import pwd
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import (chown_tree, free_port, proc_fields, run_cli, sha256_file, start_moto,
                      tree_digest, user_dir, wait_port)

USER = "shtest"
BIG = 12 << 20          # resumed file; the daemon moves 4 MiB/s in the resume tests
CAP = "4M"
SYS_PY = "/usr/bin/python3"


def stop(proc):
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def make_tree(root, seed, n=6):
    rnd = random.Random(seed)
    os.makedirs(os.path.join(root, "sub", "deeper"), exist_ok=True)
    names = ["a.txt", "b.bin", "with space.dat", "sub/c.txt", "sub/deeper/d.bin", "sub/e.txt"]
    for name in names[:n]:
        with open(os.path.join(root, name), "wb") as f:
            f.write(rnd.randbytes(rnd.randrange(1, 200000)))
    return tree_digest(root)


def write_big(path, seed):
    rnd = random.Random(seed)
    with open(path, "wb") as f:
        for _ in range(BIG >> 20):
            f.write(rnd.randbytes(1 << 20))
    return sha256_file(path)


def put_user_file(home, path, data, mode=0o600):
    """path (below home) with data, owned by USER, as are the folders made for it."""
    pw = pwd.getpwnam(USER)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    d = os.path.dirname(path)
    while d.startswith(home + "/"):
        os.chown(d, pw.pw_uid, pw.pw_gid)
        d = os.path.dirname(d)
    with open(path, "w") as f:
        f.write(data)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    os.chmod(path, mode)


# ---- the test user's credential files: in a home of the test's own -------------

def homes(home):
    """make_daemon's homes= for this module: the stand-in over USER's home."""
    return {pwd.getpwnam(USER).pw_dir: home}


# ---- servers --------------------------------------------------------------------

class Nginx:
    def __init__(self, base):
        self.dir = os.path.join(base, "nginx")
        self.www = os.path.join(self.dir, "www")
        os.makedirs(os.path.join(self.dir, "tmp"), exist_ok=True)
        os.makedirs(os.path.join(self.www, "data"), exist_ok=True)
        os.makedirs(os.path.join(self.www, "bad"), exist_ok=True)
        os.makedirs(os.path.join(self.www, "up"), exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tls_port = free_port()
        self.tls_url = f"https://127.0.0.1:{self.tls_port}"
        self.cert = None
        self.access_log = os.path.join(self.dir, "access.log")
        self.proc = None
        self.headers = {}

    def start(self):
        mod = "/usr/lib/nginx/modules/ngx_http_dav_ext_module.so"
        extra = "".join(
            f"        location = {loc} {{ add_header {k} {v}; }}\n"
            for loc, (k, v) in self.headers.items())
        conf = f"""
load_module {mod};
user root root;
worker_processes 1;
pid {self.dir}/nginx.pid;
error_log {self.dir}/error.log info;
events {{ worker_connections 64; }}
http {{
    log_format xfer '$request_method $uri $status $body_bytes_sent "$http_range"';
    access_log {self.access_log} xfer;
    client_body_temp_path {self.dir}/tmp/body;
    proxy_temp_path {self.dir}/tmp/proxy;
    fastcgi_temp_path {self.dir}/tmp/fastcgi;
    uwsgi_temp_path {self.dir}/tmp/uwsgi;
    scgi_temp_path {self.dir}/tmp/scgi;
    server {{
        listen 127.0.0.1:{self.port};
        root {self.www};
        client_max_body_size 0;
        location / {{
            dav_methods PUT DELETE MKCOL;
            dav_ext_methods PROPFIND OPTIONS;
            create_full_put_path on;
            dav_access user:rw group:r all:r;
        }}
{extra}    }}
}}
"""
        if self.cert:
            conf = conf.replace("        client_max_body_size 0;\n", f"""        client_max_body_size 0;
        listen 127.0.0.1:{self.tls_port} ssl;
        ssl_certificate {self.cert[0]};
        ssl_certificate_key {self.cert[1]};
""", 1)
        path = os.path.join(self.dir, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        self.proc = subprocess.Popen(["nginx", "-c", path, "-g", "daemon off;"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, self.proc, "nginx")

    def log_lines(self):
        with open(self.access_log) as f:
            return f.read().splitlines()


@pytest.fixture(scope="module")
def tls_cert(base_dir):
    """A self-signed certificate for 127.0.0.1: (cert, key), or None without openssl."""
    if not shutil.which("openssl"):
        return None
    d = os.path.join(base_dir, "tls")
    os.makedirs(d, exist_ok=True)
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    os.chmod(cert, 0o644)
    return cert, key


@pytest.fixture(scope="module")
def nginx(base_dir, tls_cert):
    if not shutil.which("nginx"):
        pytest.skip("nginx not installed (Debian: nginx, libnginx-mod-http-dav-ext)")
    if not os.path.exists("/usr/lib/nginx/modules/ngx_http_dav_ext_module.so"):
        pytest.skip("nginx WebDAV PROPFIND module missing (Debian: libnginx-mod-http-dav-ext)")
    n = Nginx(base_dir)
    tree = os.path.join(n.www, "data", "tree")
    n.tree_digest = make_tree(tree, 1)
    with open(os.path.join(n.www, "data", "one.txt"), "wb") as f:
        f.write(b"one file over http\n" * 1000)
    n.big_sha = write_big(os.path.join(n.www, "data", "big.bin"), 2)
    with open(os.path.join(n.www, "bad", "wrong.bin"), "wb") as f:
        f.write(b"these bytes do not match the header\n")
    n.headers["/data/one.txt"] = ("X-Checksum-Sha256",
                                  sha256_file(os.path.join(n.www, "data", "one.txt")))
    n.headers["/bad/wrong.bin"] = ("X-Checksum-Sha256", "0" * 64)
    n.cert = tls_cert
    n.start()
    yield n
    stop(n.proc)


FTP_SERVER = r"""
import logging, sys
from pyftpdlib.authorizers import DummyAuthorizer
from pyftpdlib.handlers import FTPHandler
from pyftpdlib.servers import FTPServer
port, root, pw, log = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
logging.basicConfig(filename=log, level=logging.INFO)
a = DummyAuthorizer()
a.add_user("shtest", pw, root, perm="elradfmwMT")
h = FTPHandler
h.authorizer = a
FTPServer(("127.0.0.1", port), h).serve_forever()
"""


@pytest.fixture(scope="module")
def ftp(base_dir, home):
    if not os.path.exists(SYS_PY) or subprocess.run(
            [SYS_PY, "-c", "import pyftpdlib"], capture_output=True).returncode != 0:
        pytest.skip("pyftpdlib not installed for /usr/bin/python3 (Debian: python3-pyftpdlib)")

    class F:
        pass
    f = F()
    f.dir = os.path.join(base_dir, "ftp")
    f.root = os.path.join(f.dir, "root")
    os.makedirs(os.path.join(f.root, "pub"), exist_ok=True)
    os.makedirs(os.path.join(f.root, "up"), exist_ok=True)
    f.tree_digest = make_tree(os.path.join(f.root, "pub", "tree"), 3)
    f.big_sha = write_big(os.path.join(f.root, "pub", "big.bin"), 4)
    with open(os.path.join(f.root, "pub", "one.txt"), "wb") as fh:
        fh.write(b"one file over ftp\n" * 500)
    f.port = free_port()
    f.log = os.path.join(f.dir, "ftp.log")
    script = os.path.join(f.dir, "server.py")
    with open(script, "w") as fh:
        fh.write(FTP_SERVER)
    pw = "pw%d" % random.randrange(1 << 30)
    f.netrc = f"machine 127.0.0.1 login {USER} password {pw}\n"
    put_user_file(home, os.path.join(home, ".netrc"), f.netrc)
    f.proc = subprocess.Popen([SYS_PY, script, str(f.port), f.root, pw, f.log],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(f.port, f.proc, "pyftpdlib")
    f.url = f"ftp://127.0.0.1:{f.port}"
    yield f
    stop(f.proc)


@pytest.fixture(scope="module")
def sftp(base_dir, home):
    if not os.path.exists("/usr/sbin/sshd") or not shutil.which("ssh-keygen"):
        pytest.skip("OpenSSH server not installed (Debian: openssh-server)")
    pw = pwd.getpwnam(USER)

    class S:
        pass
    s = S()
    s.dir = os.path.join(base_dir, "sshd")
    s.root = os.path.join(s.dir, "files")
    os.makedirs(os.path.join(s.root, "up"), exist_ok=True)
    s.tree_digest = make_tree(os.path.join(s.root, "tree"), 5)
    s.big_sha = write_big(os.path.join(s.root, "big.bin"), 6)
    with open(os.path.join(s.root, "one.txt"), "wb") as fh:
        fh.write(b"one file over sftp\n" * 700)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                    os.path.join(s.dir, "hostkey")], check=True)
    ssh = os.path.join(home, ".ssh")
    os.makedirs(ssh, mode=0o700, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                    os.path.join(ssh, "id_ed25519")], check=True)
    s.port = free_port()
    with open(os.path.join(s.dir, "hostkey.pub")) as fh:
        kt, kb = fh.read().split()[:2]
    with open(os.path.join(ssh, "known_hosts"), "w") as fh:
        fh.write(f"[127.0.0.1]:{s.port} {kt} {kb}\n")
    shutil.copy(os.path.join(ssh, "id_ed25519.pub"), os.path.join(s.dir, "authorized_keys"))
    with open(os.path.join(s.dir, "sshd_config"), "w") as fh:
        fh.write(f"""Port {s.port}
ListenAddress 127.0.0.1
HostKey {s.dir}/hostkey
PidFile {s.dir}/sshd.pid
AuthorizedKeysFile {s.dir}/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
Subsystem sftp internal-sftp
""")
    chown_tree(s.dir, USER)
    chown_tree(ssh, USER)
    s.log = os.path.join(s.dir, "sshd.log")
    # Unprivileged sshd: it serves only the user it runs as, which is all we need.
    s.proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", os.path.join(s.dir, "sshd_config")],
                              user=pw.pw_uid, group=pw.pw_gid, extra_groups=[],
                              stdout=open(s.log, "wb"), stderr=subprocess.STDOUT)
    wait_port(s.port, s.proc, "sshd")
    s.url = f"sftp://127.0.0.1:{s.port}"
    yield s
    stop(s.proc)


@pytest.fixture(scope="module")
def s3(base_dir, home):
    s = start_moto(base_dir, S3_PORT)    # where the daemons' S3Endpoint points
    import boto3.s3.transfer
    s.client.create_bucket(Bucket="inputs")
    s.client.create_bucket(Bucket="outputs")
    src = os.path.join(s.dir, "src")
    s.tree_digest = make_tree(os.path.join(src, "tree"), 7)
    for rel in s.tree_digest:
        s.client.upload_file(os.path.join(src, "tree", rel), "inputs", "tree/" + rel)
    s.big_sha = write_big(os.path.join(src, "big.bin"), 8)
    s.client.upload_file(os.path.join(src, "big.bin"), "inputs", "big.bin",
                         ExtraArgs=None, Config=boto3.s3.transfer.TransferConfig(
                             multipart_threshold=1 << 30))
    s.client.put_object(Bucket="inputs", Key="one.txt", Body=b"one object over s3\n" * 300)
    put_user_file(home, os.path.join(home, ".config", "stagehand", "s3.conf"),
                  f"[default]\naccess_key_id = {s.access}\nsecret_access_key = {s.secret}\n")
    yield s
    stop(s.proc)


# ---- daemons --------------------------------------------------------------------

S3_PORT = free_port()
# Every server here is on 127.0.0.1, which the outbound deny list refuses
# unless the site allows it (stagehand.conf(5), OutboundAllow).
LOCAL = "127.0.0.1/32"


@pytest.fixture(scope="module")
def daemon(make_daemon, base_dir, tls_cert, home):
    ca = {"URLCAFile": tls_cert[0]} if tls_cert else {}
    return make_daemon("urls", homes=homes(home), AllowedSchemes="https,http,s3,ftp,ftps,sftp",
                       OutboundAllow=LOCAL,
                       S3Endpoint=f"http://127.0.0.1:{S3_PORT}", S3Region="us-east-1",
                       MaxRetries=0, **ca)


@pytest.fixture(scope="module")
def slow(make_daemon, base_dir, home):
    """A daemon with a bandwidth cap, killed and restarted by the resume tests."""
    return make_daemon("urls-slow", homes=homes(home), AllowedSchemes="https,http,s3,ftp,ftps,sftp",
                       OutboundAllow=LOCAL,
                       S3Endpoint=f"http://127.0.0.1:{S3_PORT}", BandwidthCap=CAP,
                       MaxRetries=0, Workers=1)


@pytest.fixture(scope="module")
def strict(make_daemon, base_dir, home):
    """A site that allows only https and s3, with site-wide S3 keys."""
    return make_daemon("urls-strict", homes=homes(home), AllowedSchemes="https,s3",
                       S3Endpoint=f"http://127.0.0.1:{S3_PORT}", OutboundAllow=LOCAL,
                       S3CredentialsFile=os.path.join(base_dir, "site-s3.conf"),
                       S3SitePrefix="s3://inputs/%u/")


def scratch(base_dir, *parts):
    return user_dir(base_dir, USER, "scratch", *parts)


def items(d, rid):
    st, doc, text, _ = d.api.get(f"/v1/requests/{rid}?items=1")
    assert st == 200, text
    return {i["relpath"]: i for i in doc["items"]}


def run_ok(d, action, source, dest, timeout=60):
    r = d.api.submit(action, source, dest, as_user=USER)
    done = d.api.wait(r["id"], timeout=timeout)
    assert done["state"] == "done", f"{action} {source} -> {dest}: {done}\n{d.log_tail()}"
    return done


def run_fail(d, action, source, dest, timeout=60):
    r = d.api.submit(action, source, dest, as_user=USER)
    return d.api.wait(r["id"], timeout=timeout)


def check_tree(dest, digest):
    got = tree_digest(dest)
    assert got == digest
    assert not [p for p in got if ".stagehand-" in p]
    st = os.stat(dest)
    assert st.st_uid == pwd.getpwnam(USER).pw_uid


def upload_tree(base_dir, name, seed):
    src = user_dir(base_dir, USER, "out", name)
    digest = make_tree(src, seed)
    chown_tree(src, USER)
    return src, digest


def _hold_workers(d):
    """SIGSTOP each worker of d and wait until it is stopped; their pids."""
    pids = d.worker_pids()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    for pid in pids:
        end = time.monotonic() + 10
        while time.monotonic() < end:
            f = proc_fields(pid)
            if f is None or f[0] in "TtZX":   # stopped, or gone
                break
            time.sleep(0.005)
    return pids


def resume(slow, url, dest, want_sha):
    """Start a capped download, kill the daemon mid-file, restart: returns the resume offset."""
    r = slow.api.submit("stage_in", url, dest, as_user=USER)
    tmp = os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.stagehand-{r['id']}")
    # The worker is stopped (SIGSTOP) at each look, so the file cannot grow
    # between the look and the kill however slow this machine is; it moves
    # only while the test sleeps (50 ms at 4 MiB/s: 0.2 MiB a turn).
    end = time.monotonic() + 30
    while True:
        assert time.monotonic() < end, f"no partial file {tmp}:\n{slow.log_tail()}"
        held = _hold_workers(slow)
        if os.path.exists(tmp) and os.path.getsize(tmp) >= (2 << 20):
            break
        for pid in held:
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    partial = os.path.getsize(tmp)
    slow.kill9()    # the held worker dies with it (SIGKILL ends a stopped process)
    assert 0 < partial < BIG, f"the download was not held mid-file: {partial} of {BIG} bytes"
    slow.start()
    done = slow.api.wait(r["id"], timeout=60)
    assert done["state"] == "done", f"{done}\n{slow.log_tail()}"
    assert sha256_file(dest) == want_sha
    assert not os.path.exists(tmp)
    m = re.findall(r"resuming '%s' at byte (\d+) of %d" % (re.escape(os.path.basename(dest)), BIG),
                   slow.log_tail(2000))
    assert m, f"no resume in the log:\n{slow.log_tail()}"
    off = int(m[-1])
    assert partial <= off < BIG
    return off


# ---- refusals (no server needed) ---------------------------------------------------

def test_scheme_not_allowed_refused(strict, base_dir):
    dest = scratch(base_dir, "strict")
    st, doc, text, _ = strict.api.post("/v1/requests", {
        "action": "stage_in", "source": "http://127.0.0.1:1/x", "dest": dest + "/x"}, as_user=USER)
    assert st == 400, text
    assert "scheme 'http' is not allowed" in doc["error"] and "https, s3" in doc["error"], text
    st, doc, text, _ = strict.api.post("/v1/requests", {
        "action": "stage_in", "source": "gopher://h/x", "dest": dest + "/x"}, as_user=USER)
    assert st == 400 and "not allowed" in doc["error"], text


def test_url_misuse_refused(daemon, base_dir):
    dest = scratch(base_dir, "misuse")
    cases = [
        ({"action": "stage_in", "source": "https://u:secret@h/x", "dest": dest + "/x"},
         "password in the URL is refused"),
        ({"action": "stage_in", "source": "file:///etc/hosts", "dest": dest + "/x"},
         "not allowed"),
        ({"action": "archive", "source": "https://h/x", "dest": dest + "/x"},
         "only stage_in reads from a URL"),
        ({"action": "stage_in", "source": "https://h/x", "dest": "https://h/y"},
         "only stage_out and archive write to a URL"),
        ({"action": "stage_in", "source": "s3:///key", "dest": dest + "/x"}, "names no host"),
        ({"action": "archive", "source": dest, "dest": "s3://b/k/", "options": {"backend": "bundle"}},
         "not to a URL"),
    ]
    for body, want in cases:
        st, doc, text, _ = daemon.api.post("/v1/requests", body, as_user=USER)
        assert st == 400 and want in doc["error"], (body, text)
        assert "secret" not in text or "password" in doc["error"]


# ---- http / WebDAV (nginx) -------------------------------------------------------------

def test_http_stage_in_file_checksum_header(daemon, nginx, base_dir):
    dest = os.path.join(scratch(base_dir, "http1"), "one.txt")
    done = run_ok(daemon, "stage_in", f"{nginx.url}/data/one.txt", dest)
    assert sha256_file(dest) == sha256_file(os.path.join(nginx.www, "data", "one.txt"))
    it = items(daemon, done["id"])["one.txt"]
    assert it["checksum"] == "sha256:" + sha256_file(dest), it
    assert os.stat(dest).st_uid == pwd.getpwnam(USER).pw_uid


def test_http_stage_in_tree_by_propfind(daemon, nginx, base_dir):
    dest = os.path.join(scratch(base_dir, "http2"), "tree")
    done = run_ok(daemon, "stage_in", f"{nginx.url}/data/tree/", dest)
    check_tree(dest, nginx.tree_digest)
    its = items(daemon, done["id"])
    assert set(its) == set(nginx.tree_digest)
    for rel, it in its.items():
        assert it["checksum"] == f"size:{nginx.tree_digest[rel][0]}", it


def test_http_archive_tree_by_put_and_mkcol(daemon, nginx, base_dir):
    src, digest = upload_tree(base_dir, "http-arch", 11)
    done = run_ok(daemon, "archive", src, f"{nginx.url}/up/arch/run1/")
    assert tree_digest(os.path.join(nginx.www, "up", "arch", "run1")) == digest
    assert os.getxattr(src, "user.stagehand.policy") == b"archived"
    assert os.getxattr(src, "user.stagehand.location").decode().endswith("/up/arch/run1/")
    methods = " ".join(nginx.log_lines())
    assert "MKCOL /up/arch/run1/sub/ 201" in methods
    assert all(i["checksum"].startswith("size:") for i in items(daemon, done["id"]).values())


def test_http_stage_out_file(daemon, nginx, base_dir):
    src, digest = upload_tree(base_dir, "http-out", 12)
    run_ok(daemon, "stage_out", os.path.join(src, "b.bin"), f"{nginx.url}/up/single/b.bin")
    assert sha256_file(os.path.join(nginx.www, "up", "single", "b.bin")) == digest["b.bin"][1]


def test_cli_submit_url_wait(stagehand_bin, daemon, nginx, base_dir):
    dest = os.path.join(scratch(base_dir, "http-cli"), "tree")
    p = run_cli(stagehand_bin, ["--socket", daemon.sock, "submit", "--stage-in",
                                f"{nginx.url}/data/tree/", dest, "--wait", "--interval", "0.2"],
                user=USER)
    assert p.returncode == 0, p.stdout + p.stderr
    check_tree(dest, nginx.tree_digest)


def test_https_with_site_ca(daemon, nginx, base_dir):
    if not nginx.cert:
        pytest.skip("openssl missing: no certificate for the https server")
    d = scratch(base_dir, "https")
    done = run_ok(daemon, "stage_in", f"{nginx.tls_url}/data/one.txt", os.path.join(d, "one.txt"))
    assert items(daemon, done["id"])["one.txt"]["checksum"].startswith("sha256:")
    src, digest = upload_tree(base_dir, "https-out", 16)
    run_ok(daemon, "stage_out", src, f"{nginx.tls_url}/up/tls/")
    assert tree_digest(os.path.join(nginx.www, "up", "tls")) == digest


def test_https_untrusted_certificate_refused(slow, nginx, base_dir):
    if not nginx.cert:
        pytest.skip("openssl missing: no certificate for the https server")
    # This daemon has no URLCAFile: the self-signed certificate is not trusted.
    r = run_fail(slow, "stage_in", f"{nginx.tls_url}/data/one.txt",
                 os.path.join(scratch(base_dir, "https-bad"), "one.txt"))
    assert r["state"] == "failed_final" and "certificate is not trusted" in r["error"], r


def test_http_wrong_checksum_detected(daemon, nginx, base_dir):
    d = scratch(base_dir, "http-bad")
    r = run_fail(daemon, "stage_in", f"{nginx.url}/bad/wrong.bin", os.path.join(d, "wrong.bin"))
    assert r["state"] == "failed_final", r
    assert "checksum mismatch" in r["error"] and "X-Checksum-Sha256" in r["error"], r
    assert os.listdir(d) == []


def test_http_missing_file_is_final(daemon, nginx, base_dir):
    d = scratch(base_dir, "http-404")
    r = run_fail(daemon, "stage_in", f"{nginx.url}/data/nope.bin", os.path.join(d, "x"))
    assert r["state"] == "failed_final" and "HTTP 404" in r["error"], r


def test_http_resume_with_range(slow, nginx, base_dir):
    dest = os.path.join(scratch(base_dir, "http-resume"), "big.bin")
    off = resume(slow, f"{nginx.url}/data/big.bin", dest, nginx.big_sha)
    gets = [l for l in nginx.log_lines() if l.startswith("GET /data/big.bin ")]
    last = gets[-1].split()
    assert last[2] == "206" and f'"bytes={off}-"' == last[4], gets
    assert int(last[3]) == BIG - off < BIG


# ---- ftp (pyftpdlib) ---------------------------------------------------------------------

def ftp_retr_bytes(ftp, path):
    with open(ftp.log) as f:
        # pyftpdlib logs the file system path of the file sent.
        return [int(m) for m in re.findall(r"RETR \S*%s completed=1 bytes=(\d+)" % re.escape(path),
                                           f.read())]


def test_ftp_stage_in_file_and_tree(daemon, ftp, base_dir):
    d = scratch(base_dir, "ftp1")
    done = run_ok(daemon, "stage_in", f"{ftp.url}/pub/one.txt", os.path.join(d, "one.txt"))
    assert sha256_file(os.path.join(d, "one.txt")) == sha256_file(
        os.path.join(ftp.root, "pub", "one.txt"))
    assert items(daemon, done["id"])["one.txt"]["checksum"].startswith("size:")
    run_ok(daemon, "stage_in", f"{ftp.url}/pub/tree/", os.path.join(d, "tree"))
    check_tree(os.path.join(d, "tree"), ftp.tree_digest)


def test_ftp_stage_out_tree(daemon, ftp, base_dir):
    src, digest = upload_tree(base_dir, "ftp-out", 13)
    run_ok(daemon, "stage_out", src, f"{ftp.url}/up/run1/")
    assert tree_digest(os.path.join(ftp.root, "up", "run1")) == digest


def test_ftp_resume_with_rest(slow, ftp, base_dir):
    dest = os.path.join(scratch(base_dir, "ftp-resume"), "big.bin")
    off = resume(slow, f"{ftp.url}/pub/big.bin", dest, ftp.big_sha)
    sent = ftp_retr_bytes(ftp, "/pub/big.bin")
    assert sent and sent[-1] == BIG - off, sent


def test_ftp_netrc_readable_by_others_refused(daemon, ftp, home, base_dir):
    netrc = os.path.join(home, ".netrc")
    os.chmod(netrc, 0o644)
    try:
        r = run_fail(daemon, "stage_in", f"{ftp.url}/pub/one.txt",
                     os.path.join(scratch(base_dir, "ftp-mode"), "one.txt"))
    finally:
        os.chmod(netrc, 0o600)
    assert r["state"] == "failed_final", r
    assert ".netrc is refused" in r["error"] and "chmod 600" in r["error"], r
    assert "password" not in r["error"]


# ---- sftp (OpenSSH) ----------------------------------------------------------------------

def test_sftp_stage_in_file_and_tree(daemon, sftp, base_dir):
    d = scratch(base_dir, "sftp1")
    run_ok(daemon, "stage_in", f"{sftp.url}{sftp.root}/one.txt", os.path.join(d, "one.txt"))
    assert sha256_file(os.path.join(d, "one.txt")) == sha256_file(os.path.join(sftp.root, "one.txt"))
    run_ok(daemon, "stage_in", f"{sftp.url}{sftp.root}/tree/", os.path.join(d, "tree"))
    check_tree(os.path.join(d, "tree"), sftp.tree_digest)


def test_sftp_archive_tree(daemon, sftp, base_dir):
    src, digest = upload_tree(base_dir, "sftp-arch", 14)
    run_ok(daemon, "archive", src, f"{sftp.url}{sftp.root}/up/run1/")
    assert tree_digest(os.path.join(sftp.root, "up", "run1")) == digest


def test_sftp_resume(slow, sftp, base_dir):
    dest = os.path.join(scratch(base_dir, "sftp-resume"), "big.bin")
    resume(slow, f"{sftp.url}{sftp.root}/big.bin", dest, sftp.big_sha)


def test_sftp_unknown_host_key_refused(daemon, sftp, home, base_dir):
    kh = os.path.join(home, ".ssh", "known_hosts")
    with open(kh) as f:
        saved = f.read()
    with open(kh, "w") as f:
        f.write("")
    try:
        r = run_fail(daemon, "stage_in", f"{sftp.url}{sftp.root}/one.txt",
                     os.path.join(scratch(base_dir, "sftp-hk"), "one.txt"))
    finally:
        with open(kh, "w") as f:
            f.write(saved)
    assert r["state"] == "failed_final" and "host key" in r["error"], r


# ---- s3 (moto) ---------------------------------------------------------------------------

def test_s3_stage_in_object_and_prefix(daemon, s3, base_dir):
    d = scratch(base_dir, "s3-1")
    done = run_ok(daemon, "stage_in", "s3://inputs/one.txt", os.path.join(d, "one.txt"))
    data = open(os.path.join(d, "one.txt"), "rb").read()
    assert data == b"one object over s3\n" * 300
    assert items(daemon, done["id"])["one.txt"]["checksum"] == \
        "md5:" + hashlib.md5(data).hexdigest()
    run_ok(daemon, "stage_in", "s3://inputs/tree/", os.path.join(d, "tree"))
    check_tree(os.path.join(d, "tree"), s3.tree_digest)


def test_s3_archive_tree_verified_by_etag(daemon, s3, base_dir):
    src, digest = upload_tree(base_dir, "s3-arch", 15)
    done = run_ok(daemon, "archive", src, "s3://outputs/job42/")
    for rel, (size, sha) in digest.items():
        body = s3.client.get_object(Bucket="outputs", Key="job42/" + rel)["Body"].read()
        assert len(body) == size and hashlib.sha256(body).hexdigest() == sha
    for rel, it in items(daemon, done["id"]).items():
        assert it["checksum"].startswith("md5:"), it


def test_s3_resume_with_range(slow, s3, base_dir):
    dest = os.path.join(scratch(base_dir, "s3-resume"), "big.bin")
    resume(slow, "s3://inputs/big.bin", dest, s3.big_sha)


def test_s3_credentials_readable_by_others_refused(daemon, s3, home, base_dir):
    cf = os.path.join(home, ".config", "stagehand", "s3.conf")
    os.chmod(cf, 0o640)
    try:
        r = run_fail(daemon, "stage_in", "s3://inputs/one.txt",
                     os.path.join(scratch(base_dir, "s3-mode"), "one.txt"))
    finally:
        os.chmod(cf, 0o600)
    assert r["state"] == "failed_final", r
    assert "is refused" in r["error"] and "mode 0600" in r["error"], r
    assert s3.secret not in r["error"]
    assert s3.secret not in open(daemon.log_path).read()
    assert s3.secret.encode() not in open(daemon.db, "rb").read()


def test_s3_wrong_secret_rejected_by_sigv4(daemon, s3, home, base_dir):
    cf = os.path.join(home, ".config", "stagehand", "s3.conf")
    with open(cf) as f:
        saved = f.read()
    put_user_file(home, cf, saved.replace(s3.secret, "not-the-secret"))
    try:
        r = run_fail(daemon, "stage_in", "s3://inputs/one.txt",
                     os.path.join(scratch(base_dir, "s3-wrong"), "one.txt"))
    finally:
        put_user_file(home, cf, saved)
    assert r["state"] == "failed_final" and "HTTP 403" in r["error"], r


# ---- #DATA plans: archive/stage_out to= URLs at job end ------------------------------

def test_job_end_plan_with_url_destinations(daemon, nginx, s3, base_dir):
    work = user_dir(base_dir, USER, "job-work")
    res, logs = os.path.join(work, "results"), os.path.join(work, "logs")
    digest, ldigest = make_tree(res, 17), make_tree(logs, 18)
    chown_tree(work, USER)
    uid = pwd.getpwnam(USER).pw_uid
    plan = {"version": 1, "actions": [
        {"line": 3, "action": "archive", "path": "results", "to": "s3://outputs/job%j/",
         "when": "always", "keep": True},
        {"line": 4, "action": "stage_out", "path": "logs", "to": f"{nginx.url}/up/job-logs/"},
    ]}
    st, doc, text, _ = daemon.api.post("/v1/jobs/923001/end", {
        "state": "COMPLETED", "exit_code": 0, "uid": uid, "work_dir": work, "plan": plan})
    assert st == 202, text
    assert len(doc["requests"]) == 2, doc
    for rid in doc["requests"]:
        r = daemon.api.wait(rid, timeout=60)
        assert r["state"] == "done", f"{r}\n{daemon.log_tail()}"
    # A URL is taken literally: '%j' is not expanded in it.
    keys = {o["Key"] for o in s3.client.list_objects_v2(Bucket="outputs")["Contents"]
            if o["Key"].startswith("job%j/")}
    assert keys == {"job%j/" + rel for rel in digest}
    assert tree_digest(os.path.join(nginx.www, "up", "job-logs")) == ldigest
    assert os.getxattr(res, "user.stagehand.policy") == b"archived"


def test_s3_site_credentials_file(strict, s3, home, base_dir):
    """Users without their own keys use the site's file, read as root before the
    drop, below their own prefix (S3SitePrefix; 0232-daemon-outbound.py has
    the refusals)."""
    s3.client.put_object(Bucket="inputs", Key=f"{USER}/one.txt", Body=b"one object over s3\n" * 300)
    site = os.path.join(base_dir, "site-s3.conf")
    with open(site, "w") as f:
        f.write(f"aws_access_key_id = {s3.access}\naws_secret_access_key = {s3.secret}\n")
    own = os.path.join(home, ".config", "stagehand", "s3.conf")
    os.rename(own, own + ".away")
    try:
        os.chmod(site, 0o600)
        d = scratch(base_dir, "s3-site")
        r = run_ok(strict, "stage_in", f"s3://inputs/{USER}/one.txt", os.path.join(d, "one.txt"))
        assert open(os.path.join(d, "one.txt"), "rb").read() == b"one object over s3\n" * 300
        os.chmod(site, 0o644)
        r = run_fail(strict, "stage_in", f"s3://inputs/{USER}/one.txt", os.path.join(d, "two.txt"))
        assert r["state"] == "failed_final", r
        assert "site file is unusable" in r["error"] and "mode 0600" in r["error"], r
    finally:
        os.rename(own + ".away", own)
        os.unlink(site)
