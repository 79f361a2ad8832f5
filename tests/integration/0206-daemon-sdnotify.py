"""stagehandd speaks systemd's notify protocol (Type=notify).

A datagram socket stands in for systemd: the daemon gets NOTIFY_SOCKET and
WATCHDOG_USEC in its environment, as systemd would give them, and the test
reads what it sends: READY=1 only once the API answers, a STATUS line with
the queue's counts, WATCHDOG=1 at half the interval, RELOADING=1 then
READY=1 around SIGHUP, STOPPING=1 on SIGTERM.
"""
import os
import signal
import socket
import time

import pytest

# systemd kills a service whose pings are further apart than WATCHDOG_USEC.
# 4 s: the daemon pings every 2 s, so only a daemon that stops pinging (or
# pings at some slower period) misses it, not a loaded machine's 200 ms stall.
WATCHDOG_USEC = 4000000


class NotifyListener:
    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.msgs = []  # (monotonic time, message)

    def collect(self, seconds):
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                return
            self.msgs.append((time.monotonic(), data.decode()))

    def wait_for(self, field, timeout):
        """Collect until a message holding the line `field` arrives; return it."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for t, m in self.msgs:
                if field in m.split("\n"):
                    return t, m
            self.collect(0.1)
        raise AssertionError(f"no {field!r} within {timeout}s; got {self.msgs}")

    def close(self):
        self.sock.close()


@pytest.fixture
def notified(make_daemon, base_dir):
    d = make_daemon("sdnotify", start=False)
    path = os.path.join(d.dir, "notify.sock")
    if os.path.exists(path):
        os.unlink(path)
    lis = NotifyListener(path)
    d.env["NOTIFY_SOCKET"] = path
    d.env["WATCHDOG_USEC"] = str(WATCHDOG_USEC)
    yield d, lis
    lis.close()


def test_ready_status_watchdog_reload_stop(notified):
    d, lis = notified
    t_start = time.monotonic()
    d.start()
    t_ready, ready = lis.wait_for("READY=1", 10)
    # The API answers by the time READY is sent: d.start() returned after a
    # 200 from /v1/health, and READY must not come before the daemon serves.
    st, _, _, _ = d.api.get("/v1/health")
    assert st == 200
    assert any(line.startswith("STATUS=") and "queued" in line for line in ready.split("\n")), ready
    assert t_ready >= t_start

    # Watchdog: every WATCHDOG_USEC / 2 while the loop turns (the daemon says
    # the period it took), never a gap systemd would kill it for.
    assert "systemd watchdog: pinging every 2000 ms" in d.log_tail(), d.log_tail()
    lis.msgs.clear()
    lis.collect(9.0)
    pings = [t for t, m in lis.msgs if "WATCHDOG=1" in m.split("\n")]
    assert len(pings) >= 3, f"{len(pings)} watchdog pings in 9 s (want >= 3): {lis.msgs}"
    gaps = [b - a for a, b in zip(pings, pings[1:])]
    assert max(gaps) < WATCHDOG_USEC / 1e6, f"a watchdog gap of {max(gaps):.3f} s"

    # Reload: RELOADING=1, then READY=1 again.
    lis.msgs.clear()
    d.proc.send_signal(signal.SIGHUP)
    t_rel, _ = lis.wait_for("RELOADING=1", 5)
    t_again, _ = lis.wait_for("READY=1", 5)
    assert t_again >= t_rel

    # Stop: STOPPING=1 before the process exits.
    lis.msgs.clear()
    d.proc.send_signal(signal.SIGTERM)
    _, stop = lis.wait_for("STOPPING=1", 5)
    assert "draining" in stop, stop
    d.proc.wait(timeout=30)
    assert d.proc.returncode == 0


def test_no_notify_socket_no_harm(make_daemon):
    """Without NOTIFY_SOCKET (not under systemd) the daemon runs as before."""
    d = make_daemon("sdnotify-none", start=False)
    d.env.pop("NOTIFY_SOCKET", None)
    d.env.pop("WATCHDOG_USEC", None)
    d.start()
    st, _, _, _ = d.api.get("/v1/health")
    assert st == 200
    assert "sd_notify failed" not in d.log_tail(200)
