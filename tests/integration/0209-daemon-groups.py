"""A worker carries its owner's supplementary groups, as the group database
gives them within the last minute (daemon/core/usercache.c).

A tree readable only through a group is staged for a member of that group,
and refused to a user outside it. Then the member is taken out of the group:
a request made after the daemon's minute is up is refused too, so the kept
groups do expire. The last test waits out that minute (about 65 s).
"""
import os
import subprocess
import time

import pytest

from conftest import user_dir

GROUP = "shtestgrp"


def _sh(*argv):
    subprocess.run(argv, check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def group(test_users):
    subprocess.run(["groupdel", GROUP], capture_output=True)
    _sh("groupadd", GROUP)
    _sh("gpasswd", "-a", "shtest", GROUP)
    yield GROUP
    subprocess.run(["groupdel", GROUP], capture_output=True)


@pytest.fixture(scope="module")
def shared(base_dir, group):
    """base/grp-src: root's, group-readable only (0750 / 0640)."""
    import grp
    gid = grp.getgrnam(group).gr_gid
    src = os.path.join(base_dir, "grp-src")
    os.makedirs(os.path.join(src, "sub"))
    for rel, data in (("a.dat", b"alpha\n" * 1000), ("sub/b.dat", b"beta\n" * 10)):
        p = os.path.join(src, rel)
        with open(p, "wb") as f:
            f.write(data)
        os.chown(p, 0, gid)
        os.chmod(p, 0o640)
    for d in (src, os.path.join(src, "sub")):
        os.chown(d, 0, gid)
        os.chmod(d, 0o750)
    return src


@pytest.fixture(scope="module")
def daemon(make_daemon, group):
    # Started after the membership was added: nothing of it is kept yet.
    return make_daemon("groups", Workers=1, MaxRetries=0)


def _stage(daemon, src, user, name):
    dest = os.path.join(user_dir(os.path.dirname(src), user, "scratch"), name)
    req = daemon.api.submit("stage_in", src, dest, as_user=user)
    return daemon.api.wait(req["id"], timeout=120), dest


def test_member_reads_through_its_group(daemon, shared):
    r, dest = _stage(daemon, shared, "shtest", "member")
    assert r["state"] == "done", f"{r}\n{daemon.log_tail()}"
    with open(os.path.join(dest, "sub", "b.dat"), "rb") as f:
        assert f.read() == b"beta\n" * 10
    assert r["files_done"] == 2


def test_non_member_is_refused(daemon, shared):
    r, dest = _stage(daemon, shared, "shtest2", "outsider")
    assert r["state"] != "done", r
    assert "Permission denied" in (r.get("error") or ""), r
    # Made through the API, it has no job: the message names the request.
    assert f"request {r['id']}: " in r["error"] and "job 0" not in r["error"], r
    assert not os.path.exists(os.path.join(dest, "a.dat"))


def test_removed_member_loses_the_group_within_a_minute(daemon, shared, group):
    # The member's groups were kept at its first request's worker start.
    _sh("gpasswd", "-d", "shtest", group)
    time.sleep(65)          # USERCACHE_TTL (60 s) and a margin
    r, dest = _stage(daemon, shared, "shtest", "removed")
    assert r["state"] != "done", f"{r}: the group was still used after a minute"
    assert "Permission denied" in (r.get("error") or ""), r
