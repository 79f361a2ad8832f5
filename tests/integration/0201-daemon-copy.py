"""stagehandd copies trees as their owner, byte for byte.

2,000 small files and 3 x 200 MiB files, checksums computed by the test
(sha256) on both sides; ownership, modes and the audit trail checked.
Needs about 1.3 GiB free under /var/tmp.
"""
import os
import random
import shutil

import pytest

from conftest import chown_tree, tree_digest, user_dir

N_SMALL = 2000
N_LARGE = 3
LARGE = 200 << 20


@pytest.fixture(scope="module")
def daemon(make_daemon, base_dir):
    return make_daemon("copy", Workers=2)


@pytest.fixture(scope="module")
def dataset(base_dir, test_users):
    need = N_LARGE * LARGE * 2 + (64 << 20)
    if shutil.disk_usage(base_dir).free < need:
        pytest.skip(f"needs {need >> 20} MiB free under {base_dir}")
    rnd = random.Random(200)
    small = user_dir(base_dir, "shtest", "small")
    for i in range(N_SMALL):
        sub = os.path.join(small, f"d{i % 37:02d}", f"e{i % 5}")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"file{i:05d}.bin"), "wb") as f:
            f.write(rnd.randbytes(rnd.randrange(0, 8192)))
    os.symlink("d00/e0/file00000.bin", os.path.join(small, "link-to-first"))
    os.chmod(os.path.join(small, "d01"), 0o750)
    chown_tree(small, "shtest")
    large = user_dir(base_dir, "shtest", "large")
    chunk = os.urandom(1 << 20)
    for i in range(N_LARGE):
        with open(os.path.join(large, f"big{i}.dat"), "wb") as f:
            for k in range(LARGE >> 20):
                # distinct content per MiB so a misplaced block changes the checksum
                f.write(k.to_bytes(8, "little") + bytes([i]) + chunk[9:])
    chown_tree(large, "shtest")
    scratch = user_dir(base_dir, "shtest", "scratch")
    return {"small": small, "large": large, "scratch": scratch,
            "small_digest": tree_digest(small), "large_digest": tree_digest(large)}


def _check_copy(daemon, req, src, dest, digest, user):
    r = daemon.api.wait(req["id"], timeout=900)
    assert r["state"] == "done", f"{r}\n{daemon.log_tail()}"
    got = tree_digest(dest)
    assert set(got) == set(digest), (sorted(set(digest) - set(got))[:5], sorted(set(got) - set(digest))[:5])
    bad = [p for p in digest if got[p] != digest[p]]
    assert not bad, f"{len(bad)} files differ, e.g. {bad[:5]}"
    assert r["files_done"] == r["files_total"] >= len(digest)
    assert r["bytes_done"] == r["bytes_total"] == sum(s for s, _ in digest.values())
    # Written as the owner, no temporary files left behind.
    for d, dirs, files in os.walk(dest):
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            assert st.st_uid == user.pw_uid, f"{p} owned by {st.st_uid}"
            assert ".stagehand-" not in name, f"temporary file left: {p}"
    # Modes are kept.
    for rel in digest:
        assert (os.stat(os.path.join(dest, rel)).st_mode & 0o7777
                == os.stat(os.path.join(src, rel)).st_mode & 0o7777), rel
    # One audit row per destination file, each with the file's real size.
    rows = daemon.db_rows("SELECT path_dst, bytes, count(*) FROM audit WHERE request_id = ? "
                          "GROUP BY path_dst", (req["id"],))
    assert len(rows) == len(digest), (len(rows), len(digest))
    for path_dst, nbytes, n in rows:
        assert n == 1, f"{n} audit rows for {path_dst}"
        assert os.path.getsize(path_dst) == nbytes, path_dst
    return r


def test_copy_2000_small_files(daemon, dataset, test_users):
    dest = os.path.join(dataset["scratch"], "small-copy")
    req = daemon.api.submit("stage_in", dataset["small"], dest, as_user="shtest")
    _check_copy(daemon, req, dataset["small"], dest, dataset["small_digest"], test_users["shtest"])
    link = os.path.join(dest, "link-to-first")
    assert os.path.islink(link) and os.readlink(link) == "d00/e0/file00000.bin"
    assert os.stat(os.path.join(dest, "d01")).st_mode & 0o777 == 0o750


def test_copy_small_files_one_fsync_each(make_daemon, dataset, test_users):
    """SyncMode=file: the per-file fsync path copies the same tree byte for byte."""
    d = make_daemon("copy-filesync", Workers=1, SyncMode="file")
    dest = os.path.join(dataset["scratch"], "small-copy-filesync")
    req = d.api.submit("stage_in", dataset["small"], dest, as_user="shtest")
    _check_copy(d, req, dataset["small"], dest, dataset["small_digest"], test_users["shtest"])
    shutil.rmtree(dest)


def test_big_file_buffered_tail(daemon, base_dir, test_users):
    """The big-file path with a size that is not a multiple of the block size."""
    src = user_dir(base_dir, "shtest", "oddbig")
    path = os.path.join(src, "odd.dat")
    with open(path, "wb") as f:
        f.write(os.urandom((40 << 20) + 12345))
    chown_tree(src, "shtest")
    digest = tree_digest(src)
    dest = os.path.join(base_dir, "shtest", "scratch", "oddbig-copy")
    req = daemon.api.submit("stage_in", src, dest, as_user="shtest")
    _check_copy(daemon, req, src, dest, digest, test_users["shtest"])
    shutil.rmtree(dest)


def test_copy_3_large_files(daemon, dataset, test_users):
    dest = os.path.join(dataset["scratch"], "large-copy")
    req = daemon.api.submit("stage_in", dataset["large"], dest, as_user="shtest")
    _check_copy(daemon, req, dataset["large"], dest, dataset["large_digest"], test_users["shtest"])
    shutil.rmtree(dest)


def test_single_file_into_existing_directory(daemon, dataset, base_dir):
    src = os.path.join(dataset["small"], "d03", "e3", "file00003.bin")
    dest = user_dir(base_dir, "shtest", "scratch", "onefile")
    req = daemon.api.submit("stage_in", src, dest, as_user="shtest")
    r = daemon.api.wait(req["id"], timeout=120)
    assert r["state"] == "done", r
    with open(src, "rb") as a, open(os.path.join(dest, "file00003.bin"), "rb") as b:
        assert a.read() == b.read()


def test_unreadable_file_fails_and_copies_nothing(daemon, base_dir, test_users):
    """shtest asks for a file only shtest2 can read: permission error, no copy."""
    secret_dir = user_dir(base_dir, "shtest2", "private")
    secret = os.path.join(secret_dir, "secret.dat")
    with open(secret, "wb") as f:
        f.write(b"shtest2 only\n" * 1000)
    os.chmod(secret, 0o600)
    os.chown(secret, test_users["shtest2"].pw_uid, test_users["shtest2"].pw_gid)
    dest = os.path.join(user_dir(base_dir, "shtest", "scratch"), "secret-copy.dat")
    req = daemon.api.submit("stage_in", secret, dest, as_user="shtest")
    r = daemon.api.wait(req["id"], timeout=120)
    assert r["state"] == "failed_final", r
    assert "ermission denied" in (r["error"] or "") and "secret.dat" in r["error"], r
    assert r["bytes_done"] == 0
    assert not os.path.exists(dest)
    assert not [n for n in os.listdir(os.path.dirname(dest)) if "secret" in n]
    # Retrying does not help and still copies nothing.
    st, doc, text, _ = daemon.api.post(f"/v1/requests/{req['id']}/retry", as_user="shtest")
    assert st == 200, text
    r = daemon.api.wait(req["id"], timeout=120)
    assert r["state"] == "failed_final" and not os.path.exists(dest), r
