"""Fixtures for the stagehandd integration tests (tests/integration/0200-daemon*.py).

Each test module gets real stagehandd processes, started as root on a
private socket, database and config under a temporary directory in
/var/tmp, and torn down afterwards. Nothing here talks to the system daemon
or to /run/stagehand.

Binaries: $STAGEHANDD and $STAGEHAND, else daemon/stagehandd and
cli/stagehand under $STAGEHAND_BUILD_DIR (set by 'make integration') or the
source tree. Test users: shtest and shtest2 (created
by scripts/testbed; created here with useradd -m if missing).

Run: sudo python3 -m pytest -v tests/integration/0200-daemon*.py
"""
import contextlib
import ctypes
import errno
import hashlib
import http.client
import json
import os
import pwd
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEST_USERS = ("shtest", "shtest2")
TERMINAL = ("done", "failed_final", "cancelled")


# ---- collection: our files are named NNNN-*.py, not test_*.py ---------------

def pytest_collect_file(file_path, parent):
    name = file_path.name
    if (name.endswith(".py") and len(name) > 5 and name[:4].isdigit() and name[4] == "-"
            and not parent.session.isinitpath(file_path)):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


# ---- helpers ------------------------------------------------------------------

def _find_binary(env, relpath):
    build = os.environ.get("STAGEHAND_BUILD_DIR") or REPO
    path = os.environ.get(env) or os.path.join(build, relpath)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.skip(f"{relpath} not built (or set ${env}): build with 'make' first")
    return path


def sha256_file(path, bufsize=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(bufsize)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def tree_digest(root):
    """{relpath: (size, sha256)} for every regular file under root."""
    out = {}
    for d, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            if os.path.isfile(p) and not os.path.islink(p):
                out[os.path.relpath(p, root)] = (os.path.getsize(p), sha256_file(p))
    return out


@contextlib.contextmanager
def as_identity(user):
    """Temporarily take user's effective uid/gid (for SO_PEERCRED on connect)."""
    pw = pwd.getpwnam(user)
    os.setegid(pw.pw_gid)
    os.seteuid(pw.pw_uid)
    try:
        yield pw
    finally:
        os.seteuid(0)
        os.setegid(0)


def proc_fields(pid):
    """/proc/PID/stat's fields after the command name (the state first, then
    the parent's pid), or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def proc_children(ppid):
    """The pids of ppid's children now."""
    return [int(e) for e in os.listdir("/proc")
            if e.isdigit() and (f := proc_fields(int(e))) and int(f[1]) == ppid]


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=30):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        # A full listen backlog fails a connect with a timeout set (EAGAIN):
        # tried again until the timeout, as the project's client does (dclient.c).
        end = time.monotonic() + (self.timeout or 30)
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(self.timeout)
            try:
                s.connect(self._path)
                break
            except BlockingIOError:
                s.close()
                if time.monotonic() >= end:
                    raise
                time.sleep(0.01)
        self.sock = s


class Api:
    """A small HTTP/JSON client for the daemon's UNIX socket.

    as_user: connect with that user's uid/gid, so the daemon's SO_PEERCRED
    sees them (root otherwise).
    """

    def __init__(self, sock_path):
        self.sock_path = sock_path

    def call(self, method, path, body=None, as_user=None, raw=None, headers=None, timeout=30):
        conn = _UnixHTTPConnection(self.sock_path, timeout=timeout)
        if as_user:
            with as_identity(as_user):
                conn.connect()
        else:
            conn.connect()
        try:
            data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
            hdrs = {"Content-Type": "application/json"} if data is not None else {}
            hdrs.update(headers or {})
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            text = resp.read().decode("utf-8", "replace")
            ctype = resp.getheader("Content-Type", "")
        finally:
            conn.close()
        try:
            doc = json.loads(text) if text else None
        except ValueError:
            doc = None
        return resp.status, doc, text, ctype

    def get(self, path, **kw):
        return self.call("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.call("POST", path, body=body, **kw)

    def submit(self, action, source, dest, as_user=None, **extra):
        body = {"action": action, "source": source}
        if dest is not None:
            body["dest"] = dest
        body.update(extra)
        st, doc, text, _ = self.post("/v1/requests", body, as_user=as_user)
        assert st == 201, f"submit {body} as {as_user or 'root'}: HTTP {st}: {text}"
        return doc

    def request(self, rid):
        st, doc, text, _ = self.get(f"/v1/requests/{rid}")
        assert st == 200, f"GET request {rid}: HTTP {st}: {text}"
        return doc

    def wait(self, rid, timeout=600, states=TERMINAL):
        """Poll until the request reaches one of states; return it."""
        end = time.monotonic() + timeout
        while True:
            r = self.request(rid)
            if r["state"] in states:
                return r
            if time.monotonic() > end:
                raise AssertionError(f"request {rid} still {r['state']} after {timeout}s: {r}")
            time.sleep(0.2)


def _die_with_parent():
    """In the child before exec: SIGTERM when pytest dies. A run killed
    (a CI timeout, ^C twice) left its private daemons running, each holding
    its socket, database and workers, since teardown never ran."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class Daemon:
    """One stagehandd process with its own config, socket, db and log."""

    def __init__(self, binary, base, name="d", homes=None, **conf):
        self.binary = binary
        # {a user's home directory: a directory of the test's own to stand in
        # for it}: see argv().
        self.homes = dict(homes or {})
        self.dir = os.path.join(base, name)
        os.makedirs(self.dir, mode=0o755, exist_ok=True)
        os.chmod(self.dir, 0o755)
        self.sock = os.path.join(self.dir, "stagehandd.sock")
        self.db = os.path.join(self.dir, "stagehand.db")
        self.pidfile = os.path.join(self.dir, "stagehandd.pid")
        self.conf_path = os.path.join(self.dir, "stagehand.conf")
        self.log_path = os.path.join(self.dir, "stagehandd.log")
        self.conf = {
            "SocketPath": self.sock,
            "StateDB": self.db,
            "PidFile": self.pidfile,
            "LogLevel": "debug",
            "Workers": "2",
            "RetryBackoff": "1",
            "MaxRetries": "2",
            "DrainTimeout": "5",
            # These daemons must never hold, stage or release the test bed's
            # real jobs (the test bed runs its own daemon).
            "SlurmWatch": "no",
        }
        self.conf.update({k: str(v) for k, v in conf.items()})
        with open(self.conf_path, "w") as f:
            for k, v in self.conf.items():
                f.write(f"{k}={v}\n")
        self.env = dict(os.environ)
        self.proc = None
        self.api = Api(self.sock)
        self.starts = 0

    def argv(self):
        argv = [self.binary, "-F", "-c", self.conf_path]
        if not self.homes:
            return argv
        # A private mount namespace in which each home directory named is the
        # test's stand-in, bound over it: the files the daemon reads from a
        # user's ~ are the test's own, and no test writes into a real home.
        binds = " && ".join(f"mount --bind {shlex.quote(src)} {shlex.quote(dst)}"
                            for dst, src in self.homes.items())
        return (["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                 binds + ' && exec "$@"', "stagehandd"] + argv)

    def start(self, timeout=20):
        assert self.proc is None or self.proc.poll() is not None, "daemon already running"
        log = open(self.log_path, "ab")
        log.write(f"---- start {self.starts} ----\n".encode())
        log.flush()
        # Own session: the daemon and its workers form one process group,
        # which teardown (and a crash test, as systemd would) kills as a whole.
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     env=self.env, preexec_fn=_die_with_parent)
        log.close()
        self.starts += 1
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"stagehandd exited with {self.proc.returncode} at start:\n"
                                     + self.log_tail())
            try:
                st, doc, _, _ = self.api.get("/v1/health", timeout=2)
                if st == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"stagehandd did not answer /v1/health within {timeout}s:\n"
                             + self.log_tail())

    def worker_pids(self):
        """The daemon's workers now: its children, and those of its worker
        spawner (named stagehand-spawn), which is not one."""
        pids = []
        for pid in proc_children(self.proc.pid):
            try:
                with open(f"/proc/{pid}/comm") as f:
                    spawner = f.read().strip() == "stagehand-spawn"
            except OSError:
                continue
            pids += proc_children(pid) if spawner else [pid]
        return pids

    def kill9(self, group=True):
        """SIGKILL the daemon (and, like systemd's cleanup, its workers)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            if group:
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                os.kill(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        if group:
            self._reap_group()

    def _reap_group(self):
        # Wait until no process of the group is left (workers die with it).
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return
            except PermissionError:
                return
            time.sleep(0.05)

    def stop(self, timeout=30):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.returncode

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n=60):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError as e:
            return f"(no log: {e})"

    def db_rows(self, sql, args=()):
        """Read the daemon's SQLite database directly (read-only)."""
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()


# ---- fixtures ---------------------------------------------------------------

@pytest.fixture(scope="session")
def root_only():
    if os.geteuid() != 0:
        pytest.skip("stagehandd integration tests run as root")


@pytest.fixture(scope="session")
def test_users(root_only):
    for u in TEST_USERS:
        try:
            pwd.getpwnam(u)
        except KeyError:
            subprocess.run(["useradd", "-m", "-s", "/bin/bash", u], check=True)
    return {u: pwd.getpwnam(u) for u in TEST_USERS}


@pytest.fixture(scope="session")
def stagehandd_bin(root_only):
    return _find_binary("STAGEHANDD", "daemon/stagehandd")


@pytest.fixture(scope="session")
def stagehand_bin():
    return _find_binary("STAGEHAND", "cli/stagehand")


@pytest.fixture(scope="module")
def base_dir(root_only):
    """A world-searchable temp dir on /var/tmp (large files need real disk)."""
    d = tempfile.mkdtemp(prefix="sh-it-", dir="/var/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def make_daemon(stagehandd_bin, base_dir, test_users):
    """make_daemon(name, homes=None, **conf) -> a started Daemon; all stopped at teardown.

    homes: {a user's home directory: a stand-in the test made}, bound over it
    for this daemon only (Daemon.argv)."""
    daemons = []

    def _make(name="d", start=True, homes=None, **conf):
        d = Daemon(stagehandd_bin, base_dir, name, homes=homes, **conf)
        daemons.append(d)
        if start:
            d.start()
        return d

    yield _make
    for d in daemons:
        d.stop()
        if d.proc is not None and d.proc.returncode not in (0, None, -signal.SIGKILL):
            print(f"stagehandd {d.dir} exited {d.proc.returncode}; log tail:\n{d.log_tail()}")


@pytest.fixture(scope="module")
def home(test_users, base_dir):
    """shtest's home as this module's daemons see it: a directory below
    base_dir, bound over the real one in the daemons' own mount namespace
    (Daemon.argv, make_daemon's homes=). The credential files go there, never
    into the user's real home, which other test runs on the host may share."""
    pw = pwd.getpwnam(TEST_USERS[0])
    h = os.path.join(base_dir, "home", TEST_USERS[0])
    os.makedirs(h)
    os.chown(h, pw.pw_uid, pw.pw_gid)
    os.chmod(h, 0o755)
    return h


def user_dir(base, user, *parts):
    """base/user/parts..., created and owned by user (mode 0755)."""
    pw = pwd.getpwnam(user)
    path = os.path.join(base, user, *parts)
    cur = base
    for p in (user,) + parts:
        cur = os.path.join(cur, p)
        try:
            os.mkdir(cur, 0o755)
        except FileExistsError:
            pass
        os.chown(cur, pw.pw_uid, pw.pw_gid)
    return path


def owned_dir(path, user, mode=0o755):
    """Create path (missing parents as root, mode 0755); the leaf owned by user."""
    pw = pwd.getpwnam(user)
    os.makedirs(path, mode=0o755, exist_ok=True)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    os.chmod(path, mode)
    return path


def chown_tree(root, user):
    pw = pwd.getpwnam(user)
    for d, dirs, files in os.walk(root):
        os.chown(d, pw.pw_uid, pw.pw_gid)
        for f in files:
            os.chown(os.path.join(d, f), pw.pw_uid, pw.pw_gid, follow_symlinks=False)


# ---- bound MUNGE credentials (common/credbind.h, docs/security.md) -------------

CREDBIND_TAG = "stagehand-req-v1"


def bound_payload(method, target, body=b"", when=None, nonce=None):
    """The MUNGE payload that binds a credential to one TCP request: a second
    writing of common/credbind.h's canonical form, held to the same vectors
    (tests/vectors/credbind/) as the C code before any test uses it."""
    if isinstance(body, str):
        body = body.encode()
    when = int(time.time()) if when is None else when
    nonce = os.urandom(16).hex() if nonce is None else nonce
    canon = b"\n".join([CREDBIND_TAG.encode(), method.encode(), target.encode(),
                        str(when).encode(), nonce.encode(), str(len(body)).encode()])
    canon += b"\n" + body
    return f"{CREDBIND_TAG} {when} {nonce} {hashlib.sha256(canon).hexdigest()}"


def _check_bound_payload_vectors():
    vdir = os.path.join(REPO, "tests", "vectors", "credbind")
    names = sorted(n for n in os.listdir(vdir) if n.endswith(".json"))
    assert names, f"no vectors in {vdir}"
    for n in names:
        with open(os.path.join(vdir, n), encoding="utf-8") as f:
            v = json.load(f)
        got = bound_payload(v["method"], v["target"], v["body"], v["time"], v["nonce"])
        assert got == v["payload"], (n, got, v["payload"])


def munge_cred(user=None, payload=None):
    """A MUNGE credential of user (None: root) carrying payload (None: empty,
    as clients older than bound credentials send)."""
    kw = {}
    if user:
        pw = pwd.getpwnam(user)
        kw = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    argv = ["munge", "-n"] if payload is None else ["munge", "-s", payload]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=10, **kw)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def bound_cred(method, target, body=b"", user=None, when=None):
    """A credential of user bound to METHOD TARGET BODY, as dclient makes it."""
    if not getattr(bound_cred, "checked", False):
        _check_bound_payload_vectors()
        bound_cred.checked = True
    return munge_cred(user, bound_payload(method, target, body, when))


def run_cli(binary, args, user=None, env=None, timeout=120):
    """Run the stagehand CLI (as user); returns CompletedProcess with text."""
    e = {"PATH": "/usr/bin:/bin", "LANG": "C"}
    # The path resolver's way, when a run forces it (README.md), reaches the CLI too.
    if os.environ.get("STAGEHAND_RESOLVE"):
        e["STAGEHAND_RESOLVE"] = os.environ["STAGEHAND_RESOLVE"]
    e.update(env or {})
    kw = {}
    if user:
        pw = pwd.getpwnam(user)
        kw = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "cwd": "/"}
    return subprocess.run([binary] + list(args), capture_output=True, text=True, env=e,
                          timeout=timeout, **kw)


# ---- ports and helper servers -------------------------------------------------

def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=15):
    """Wait until proc (a server started for a test, called what) listens on
    127.0.0.1:port; fails if it exits first or is not listening by timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode} at start")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not listen on port {port} within {timeout}s")


def munge_ok():
    """munged answers here (the MUNGE tests are skipped when not)."""
    try:
        return subprocess.run(["munge", "-n"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def start_moto(base_dir, port):
    """moto_server on 127.0.0.1:port (log in base_dir/moto), with an IAM user
    whose keys it checks every S3 request's SigV4 signature against. Skips
    the module when moto or boto3 is missing. Returns an object with port,
    endpoint, dir, proc (the caller stops it), access, secret and client (an
    S3 client with those keys, path-style)."""
    server = shutil.which("moto_server")
    if not server:
        pytest.skip("moto_server not installed (pip install 'moto[server]')")
    try:
        import boto3
        import botocore.config
    except ImportError:
        pytest.skip("boto3 missing (installed with moto)")

    class S:
        pass
    s = S()
    s.port = port
    s.endpoint = f"http://127.0.0.1:{s.port}"
    s.dir = os.path.join(base_dir, "moto")
    os.makedirs(s.dir, exist_ok=True)
    # After the first 3 requests (the IAM user, its policy, its key) moto checks
    # every request's SigV4 signature against the keys it issued.
    s.proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(s.port)],
                              env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="3"),
                              stdout=open(os.path.join(s.dir, "moto.log"), "wb"),
                              stderr=subprocess.STDOUT)
    wait_port(s.port, s.proc, "moto_server", timeout=30)
    iam = boto3.client("iam", endpoint_url=s.endpoint, region_name="us-east-1",
                       aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
    iam.create_user(UserName="stager")
    iam.put_user_policy(UserName="stager", PolicyName="all", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName="stager")["AccessKey"]
    s.access, s.secret = key["AccessKeyId"], key["SecretAccessKey"]
    s.client = boto3.client("s3", endpoint_url=s.endpoint, region_name="us-east-1",
                            config=botocore.config.Config(s3={"addressing_style": "path"}),
                            aws_access_key_id=s.access, aws_secret_access_key=s.secret)
    return s
