"""HistoryRetention and AuditRetention: the daemon removes, on its own,
finished requests' per-file rows and old audit rows, and keeps what must stay.

Each test runs its own daemon with a retention of 2 s and waits (up to 60 s,
polling) for the rows to go: the daemon looks every 5 s when it had nothing
to remove. Which rows count as finished, old, kept or in budget is checked
row by row in daemon/tests/test_history.c.
"""
import os
import subprocess
import time

import pytest

from conftest import chown_tree, user_dir


def _tree(base, name, n):
    src = user_dir(base, "shtest", name)
    for i in range(n):
        with open(os.path.join(src, f"f{i}.dat"), "wb") as f:
            f.write(os.urandom(1000 + i))
    chown_tree(src, "shtest")
    return src


def _done(daemon, action, src, dest):
    req = daemon.api.submit(action, src, dest, as_user="shtest")
    r = daemon.api.wait(req["id"], timeout=300)
    assert r["state"] == "done", f"{r}\n{daemon.log_tail()}"
    return r


def _count(daemon, sql, rid):
    return daemon.db_rows(sql, (rid,))[0][0]


def _wait_for(what, cond, daemon, timeout=60):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not after {timeout} s\n{daemon.log_tail()}")
        time.sleep(0.5)


def test_history_retention_removes_file_rows_keeps_archives_and_audit(make_daemon, base_dir,
                                                                      test_users):
    d = make_daemon("history", HistoryRetention="2s")
    src = _tree(base_dir, "hist-src", 3)
    scratch = user_dir(base_dir, "shtest", "hist-scratch")
    si = _done(d, "stage_in", src, os.path.join(scratch, "in"))
    ar = _done(d, "archive", src, os.path.join(user_dir(base_dir, "shtest", "hist-arch"), "a"))
    items = "SELECT count(*) FROM items WHERE request_id = ?"
    assert _count(d, items, si["id"]) == 3 and _count(d, items, ar["id"]) == 3

    _wait_for("the stage_in's items removed", lambda: _count(d, items, si["id"]) == 0, d)
    r = d.api.request(si["id"])
    assert r["state"] == "done" and r["files_done"] == 3 and r["bytes_done"] == 3003, r
    st, doc, text, _ = d.api.get(f"/v1/requests/{si['id']}?items=1", as_user="shtest")
    assert st == 200 and doc["items"] == [], text
    # The done archive keeps its items (the checksums a stage-back is checked
    # against); the audit trail is not HistoryRetention's.
    assert _count(d, items, ar["id"]) == 3
    assert _count(d, "SELECT count(*) FROM audit WHERE request_id = ?", si["id"]) == 3
    with open(d.log_path, errors="replace") as f:
        assert "history: removed the file rows of 1 finished request (3 rows)" in f.read()


def test_audit_retention_removes_audit_rows_only(make_daemon, base_dir, test_users):
    d = make_daemon("audit-ret", AuditRetention="2s")
    src = _tree(base_dir, "aud-src", 4)
    si = _done(d, "stage_in", src, os.path.join(user_dir(base_dir, "shtest", "aud-s"), "in"))
    audit = "SELECT count(*) FROM audit WHERE request_id = ?"
    assert _count(d, audit, si["id"]) == 4

    _wait_for("the audit rows removed", lambda: _count(d, audit, si["id"]) == 0, d)
    st, doc, text, _ = d.api.get("/v1/audit?by=file", as_user="shtest")
    assert st == 200, text
    assert not [row for row in doc["rows"] if row.get("src", "").startswith(src)], text
    # The request and its items are not AuditRetention's.
    assert _count(d, "SELECT count(*) FROM items WHERE request_id = ?", si["id"]) == 4
    assert d.api.request(si["id"])["state"] == "done"


@pytest.mark.parametrize("key", ["HistoryRetention", "AuditRetention"])
def test_retention_value_checked(make_daemon, key):
    """0 is refused (it would remove a finished request's rows at once): the
    error names the key, what it must be, and the file and line."""
    d = make_daemon(f"bad-{key}", start=False, **{key: "0"})
    r = subprocess.run([d.binary, "--check-config", "-c", d.conf_path], capture_output=True,
                       text=True)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert f"{key} must be a duration from 1s up to 3650d" in out and d.conf_path in out, out
