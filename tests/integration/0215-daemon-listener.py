"""stagehandd's TCP listener against hostile peers that send no credential:
10,000 idle connections, slowloris (headers a byte a second), clients that
never read what they asked for, oversized headers and bodies cut off
midway. While each attack is on, a normal client (shtest, with a MUNGE
credential, from 127.0.0.1) must be answered within VICTIM_BOUND seconds,
and the daemon's resident memory must stay within RSS_GROWTH_BOUND of what
it was before the attacks, during them and after.

The hostile connections come from addresses of 127.0.0.0/8 other than
127.0.0.1 (every one of them is this host's loopback), at most PER_ADDR
from each, so the per-address cap (4 x MaxConnectionsPerUser) lets them all
in and the listener's own limits are what is tested. Bounded: at most
IDLE_CONNECTIONS sockets, about a minute in all. Run as root (a daemon of
its own, conftest.py); run with -s to see the figures.
"""
import http.client
import os
import resource
import socket
import time

import pytest

from conftest import bound_cred, free_port, munge_ok, owned_dir

USER = "shtest"
IDLE_CONNECTIONS = 10000
PER_ADDR = 50             # under the per-address cap of 4 x 16
VICTIM_BOUND = 10.0       # seconds the normal client may wait, attack or not: a
                          # client locked out waits for the attack (held while it
                          # asks) or ConnectionTimeout (30 s), a loaded machine
                          # a second or two
RSS_GROWTH_BOUND = 96 << 20   # bytes over the RSS before the attacks
TIMEOUT = 30              # ConnectionTimeout: longer than each attack, so none is cut short


def _rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def _addr(i):
    """The i-th hostile source address: 127.1.0.1, 127.1.0.2, ... (never 127.0.0.1)."""
    return f"127.1.{i // 250}.{i % 250 + 1}"


def _open(port, n, first_addr=0):
    """n connections to port, PER_ADDR per source address; those connect() refused
    outright are left out. Non-blocking, connected once the handshake is done."""
    socks = []
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((_addr(first_addr + i // PER_ADDR), 0))
        s.setblocking(False)
        if s.connect_ex(("127.0.0.1", port)) not in (0, 115):   # 115: EINPROGRESS
            s.close()
            continue
        socks.append(s)
    return socks


def _held(d):
    """TCP connections to the daemon's port that the daemon has accepted (its own
    descriptors, not the kernel's accept queue)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{d.proc.pid}/fd"):
        try:
            link = os.readlink(f"/proc/{d.proc.pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    n = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "01" and int(local.split(":")[1], 16) == d.tcp_port and inode in inodes:
                n += 1
    return n


def _answers(socks):
    """Read what each socket has been sent: {its first status line, else 'closed'
    (end of file or reset) or 'open' (nothing yet): count}."""
    seen = {}
    for s in socks:
        data, end = b"", "open"
        try:
            while True:
                b = s.recv(65536, socket.MSG_DONTWAIT)
                if not b:
                    end = "closed"
                    break
                data += b
        except BlockingIOError:
            pass
        except OSError:
            end = "closed"      # reset: a close with our unread header still queued
        key = data.split(b"\r\n", 1)[0].decode("latin-1") if data else end
        seen[key] = seen.get(key, 0) + 1
    return seen


def _answers_until(socks, enough, timeout):
    """Like _answers, but each socket's first answer is kept across reads, and
    reading goes on until enough(seen) or timeout seconds: how soon a loaded
    machine answers is not what a test asks."""
    first = [None] * len(socks)
    end = time.monotonic() + timeout
    while True:
        for i, s in enumerate(socks):
            if first[i] is not None:
                continue
            data = b""
            try:
                while True:
                    b = s.recv(65536, socket.MSG_DONTWAIT)
                    if not b:
                        first[i] = "closed"
                        break
                    data += b
            except BlockingIOError:
                pass
            except OSError:
                first[i] = "closed"
            if data:
                first[i] = data.split(b"\r\n", 1)[0].decode("latin-1")
        seen = {}
        for f in first:
            seen[f or "open"] = seen.get(f or "open", 0) + 1
        if enough(seen) or time.monotonic() >= end:
            return seen
        time.sleep(0.2)


def _close(socks):
    for s in socks:
        s.close()
    socks.clear()


class Victim:
    """The normal client: GET /v1/requests as USER over TCP, timed."""

    def __init__(self, port):
        self.port = port
        self.times = []

    def cred(self):
        return bound_cred("GET", "/v1/requests", user=USER)

    def ask(self):
        """(HTTP status or the error, seconds); the credential is made before the clock starts."""
        cred = self.cred()
        t0 = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=VICTIM_BOUND + 5)
        try:
            conn.request("GET", "/v1/requests", headers={"X-Stagehand-Munge": cred})
            resp = conn.getresponse()
            resp.read()
            status = resp.status
        except OSError as e:
            status = f"{type(e).__name__}: {e}"
        finally:
            conn.close()
        dt = time.monotonic() - t0
        self.times.append(dt)
        return status, dt

    def check(self, what, tries=3):
        for _ in range(tries):
            status, dt = self.ask()
            assert status == 200 and dt < VICTIM_BOUND, \
                f"during {what}: the normal client got {status} after {dt:.2f}s"
        return max(self.times[-tries:])


@pytest.fixture(scope="module")
def daemon(make_daemon, base_dir, test_users):
    if not munge_ok():
        pytest.skip("munged is not running here: TCP needs MUNGE")
    # Room for every socket here and in the daemon (which inherits the limit).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = IDLE_CONNECTIONS + 2000
    if hard < want:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {want}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    port, mport = free_port(), free_port()
    owned_dir(os.path.join(base_dir, "scratch"), "root")
    d = make_daemon("listener", ScratchRoots=os.path.join(base_dir, "scratch"),
                    ConnectionTimeout=TIMEOUT, ListenAddress=f"127.0.0.1:{port}",
                    MetricsAddress=f"127.0.0.1:{mport}")
    d.tcp_port, d.metrics_port = port, mport
    d.victim = Victim(port)
    d.victim.check("a quiet start")
    d.rss_before = _rss(d.proc.pid)
    d.rss_peak = d.rss_before
    yield d
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _metrics(d):
    """GET /metrics on the metrics listener: (status or the error, seconds)."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", d.metrics_port, timeout=VICTIM_BOUND + 5)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        resp.read()
        status = resp.status
    except OSError as e:
        status = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    return status, time.monotonic() - t0


def _sample(d, what):
    rss = _rss(d.proc.pid)
    d.rss_peak = max(d.rss_peak, rss)
    print(f"  {what}: daemon RSS {rss / 1048576:.1f} MiB (before the attacks "
          f"{d.rss_before / 1048576:.1f} MiB)")
    assert rss - d.rss_before < RSS_GROWTH_BOUND, \
        f"{what}: RSS grew by {(rss - d.rss_before) >> 20} MiB"
    assert d.running(), d.log_tail()


def test_ten_thousand_idle_connections(daemon):
    socks = _open(daemon.tcp_port, IDLE_CONNECTIONS)
    try:
        time.sleep(2)
        held = _held(daemon)
        worst = daemon.victim.check("10,000 idle connections")
        # Connections opened after the victim's still get in: the listener is not stuck.
        late = _open(daemon.tcp_port, 200, first_addr=IDLE_CONNECTIONS // PER_ADDR + 1)
        socks += late
        time.sleep(1)
        worst = max(worst, daemon.victim.check("10,000 idle connections, and more coming"))
        print(f"\n  {len(socks)} connections opened, {held} held by the daemon after the first "
              f"{IDLE_CONNECTIONS}, {_held(daemon)} at the end; normal client answered in "
              f"{worst * 1000:.0f} ms at worst")
        _sample(daemon, "10,000 idle connections")
    finally:
        _close(socks)


def test_metrics_with_many_connections_open(daemon):
    """900 idle API connections (under the point where any is closed) hold
    1,800 descriptors: the metrics listener's next connection gets one above
    1024, which a select()-based server cannot take."""
    socks = _open(daemon.tcp_port, 900)
    try:
        time.sleep(2)
        status, dt = _metrics(daemon)
        print(f"\n  /metrics with {_held(daemon)} API connections open: {status} in "
              f"{dt * 1000:.0f} ms")
        assert status == 200 and dt < VICTIM_BOUND, f"/metrics: {status} after {dt:.2f}s"
    finally:
        _close(socks)


def test_slowloris_headers_a_byte_a_second(daemon):
    n = 1500
    socks = _open(daemon.tcp_port, n)
    head = b"GET /v1/requests HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 64
    try:
        time.sleep(0.5)
        worst = 0.0
        for sec in range(6):
            for s in socks:
                try:
                    s.send(head[sec:sec + 1])
                except OSError:
                    pass
            worst = max(worst, daemon.victim.check("slowloris", tries=1))
            time.sleep(1)
        held = _held(daemon)
        print(f"\n  slowloris: {n} trickling connections, {held} held by the daemon after 6 s; normal "
              f"client answered in {worst * 1000:.0f} ms at worst")
        _sample(daemon, "slowloris")
    finally:
        _close(socks)


def test_clients_that_never_read(daemon):
    """Pipelined requests, no credential, nothing ever read: the daemon's answers
    pile up in the socket until it stops reading from that client."""
    n = 500
    socks = _open(daemon.tcp_port, n)
    req = b"GET /v1/requests?limit=1000 HTTP/1.1\r\nHost: x\r\n\r\n" * 400
    try:
        time.sleep(0.5)
        for s in socks:
            try:
                s.send(req)
            except OSError:
                pass
        time.sleep(1)
        worst = daemon.victim.check("clients that never read")
        print(f"\n  never-reading: {n} connections with {len(req)} bytes of pipelined requests "
              f"each; normal client answered in {worst * 1000:.0f} ms at worst")
        _sample(daemon, "clients that never read")
    finally:
        _close(socks)


def test_oversized_headers(daemon):
    n = 300
    socks = _open(daemon.tcp_port, n)
    big = b"GET /v1/requests HTTP/1.1\r\nHost: x\r\n" + (b"X-Big: " + b"b" * 8000 + b"\r\n") * 128
    sent, pushed = [0] * n, 0
    try:
        time.sleep(0.5)
        # Keep pushing header bytes, as the attacker would, for up to 5 s.
        end = time.monotonic() + 5
        while time.monotonic() < end:
            for i, s in enumerate(socks):
                if sent[i] < len(big):
                    try:
                        k = s.send(big[sent[i]:])
                        sent[i] += k
                        pushed += k
                    except OSError:
                        sent[i] = len(big)      # refused and closed: nothing more to send
            time.sleep(0.2)
        worst = daemon.victim.check("oversized headers")
        too_big = "HTTP/1.1 431 Request Header Fields Too Large"
        seen = _answers_until(socks, lambda v: v.get(too_big, 0) + v.get("closed", 0) >= n // 4,
                              60)
        print(f"\n  oversized headers: {n} connections sending up to {len(big)} bytes of header "
              f"each ({pushed} sent in all), answered {seen}; normal client answered in "
              f"{worst * 1000:.0f} ms at worst")
        # Refused at libmicrohttpd's per-connection pool (CONN_MEMORY in api.c): a 431,
        # or the reset that a close with unread input sends instead. After the other
        # attacks some are left unanswered, holding no more than their pool, until the
        # sweeper closes them at ConnectionTimeout, as it does idle peers.
        assert set(seen) <= {too_big, "closed", "open"}, seen
        assert seen.get(too_big, 0) + seen.get("closed", 0) >= n // 4, seen
        _sample(daemon, "oversized headers")
    finally:
        _close(socks)


def test_bodies_cut_off_midway(daemon):
    n = 500
    socks = _open(daemon.tcp_port, n)
    body = b"{" + b'"a":"' + b"x" * 30000
    head = (b"POST /v1/requests HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 60000\r\n\r\n")
    try:
        time.sleep(0.5)
        for s in socks:
            try:
                s.send(head + body)
            except OSError:
                pass
        time.sleep(1)
        worst = daemon.victim.check("bodies cut off midway")
        print(f"\n  cut-off bodies: {n} connections stalled at 30,000 of 60,000 bytes; normal "
              f"client answered in {worst * 1000:.0f} ms at worst")
        _sample(daemon, "bodies cut off midway")
    finally:
        _close(socks)


def test_few_descriptors(make_daemon, base_dir, daemon):
    """A daemon started with only 1024 descriptors (ulimit -n by hand, a unit
    without LimitNOFILE=) sizes its listeners to them instead of running out
    and no longer accepting."""
    port = free_port()
    d = make_daemon("listener-1024", start=False, ConnectionTimeout=TIMEOUT,
                    ListenAddress=f"127.0.0.1:{port}")
    argv = d.argv
    d.argv = lambda: ["prlimit", "--nofile=1024:1024", "--"] + argv()
    d.start()
    d.tcp_port = port
    victim = Victim(port)
    socks = _open(port, 3000)
    try:
        time.sleep(2)
        held = _held(d)
        worst = victim.check("3,000 idle connections against 1024 descriptors")
        print(f"\n  RLIMIT_NOFILE 1024: 3000 idle connections, {held} held; normal client "
              f"answered in {worst * 1000:.0f} ms at worst")
    finally:
        _close(socks)
        d.stop()


def test_after_the_attacks(daemon):
    time.sleep(2)
    worst = daemon.victim.check("the quiet after")
    rss = _rss(daemon.proc.pid)
    print(f"\n  after: RSS {rss / 1048576:.1f} MiB (before {daemon.rss_before / 1048576:.1f}, "
          f"peak {daemon.rss_peak / 1048576:.1f}); normal client {worst * 1000:.0f} ms; "
          f"worst of all {max(daemon.victim.times) * 1000:.0f} ms over "
          f"{len(daemon.victim.times)} requests")
    _sample(daemon, "after the attacks")
