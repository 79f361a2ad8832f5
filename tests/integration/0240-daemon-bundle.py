"""Small-file bundling of archive copies, and 'stagehand restore'.

A real stagehandd (SlurmWatch=no, ArchiveBundle=yes, Checksum=sha256 so the
test can check every checksum with hashlib) archives a job's results/ tree
of 5,000 small files, 3 larger ones, a symlink and a FIFO after a job-end
event with a plan. Then, as the owner: restore one file, restore the whole
tree through the scratch directory's location label, detect a damaged
bundle, refuse hostile indexes and a symlink planted at the destination,
resume an archive at bundle granularity, and archive with keep=no (every
source removed only once bundled). About 25 s.
"""
import hashlib
import json
import os
import random
import shutil
import stat
import subprocess
import time

import pytest

from conftest import chown_tree, owned_dir, run_cli, tree_digest

N_SMALL = 5000
N_LARGE = 3
LARGE = 1 << 20
JOB = 924001
LONG = "l" * 120 + ".dat"           # a name longer than ustar's 100 bytes


@pytest.fixture(scope="module")
def daemon(make_daemon):
    return make_daemon("bundle", ArchiveBundle="yes", BundleMinFiles=1000,
                       BundleFileMax="64K", BundleSize="8M", Checksum="sha256")


@pytest.fixture(scope="module")
def job(daemon, base_dir, test_users, stagehand_bin):
    """A finished job's results/ archived through the job-end path."""
    rnd = random.Random(240)
    work = owned_dir(os.path.join(base_dir, "shtest", "work"), "shtest")
    res = os.path.join(work, "results")
    os.makedirs(res)
    for i in range(N_SMALL):
        sub = os.path.join(res, f"d{i % 50:02d}")
        os.makedirs(sub, exist_ok=True)
        size = rnd.choice((0, 1, 511, 512, 513)) if i < 50 else rnd.randrange(1, 8192)
        with open(os.path.join(sub, f"f{i:05d}.bin"), "wb") as f:
            f.write(rnd.randbytes(size))
    # Special names: spaces, a newline, a long name (pax header).
    with open(os.path.join(res, "d00", "with space.txt"), "wb") as f:
        f.write(b"space\n")
    with open(os.path.join(res, "d01", "new\nline"), "wb") as f:
        f.write(b"newline\n")
    with open(os.path.join(res, "d02", LONG), "wb") as f:
        f.write(b"long\n" * 100)
    os.makedirs(os.path.join(res, "empty-dir"))
    os.chmod(os.path.join(res, "d03"), 0o750)
    os.chmod(os.path.join(res, "d03", "f00003.bin"), 0o600)
    for i in range(N_LARGE):
        with open(os.path.join(res, f"large{i}.dat"), "wb") as f:
            f.write(rnd.randbytes(LARGE + i))
    os.symlink("d00/f00000.bin", os.path.join(res, "link"))
    os.mkfifo(os.path.join(res, "pipe"))
    chown_tree(res, "shtest")
    os.chown(os.path.join(res, "pipe"), test_users["shtest"].pw_uid, test_users["shtest"].pw_gid)
    digest = tree_digest(res)
    dest_root = owned_dir(os.path.join(base_dir, "shtest", "archive"), "shtest")
    dest = os.path.join(dest_root, "results")
    plan = {"version": 1, "actions": [
        {"line": 3, "action": "archive", "path": "results", "to": dest, "when": "always",
         "keep": True}]}
    plan_path = os.path.join(base_dir, "plan-bundle.json")
    with open(plan_path, "w") as f:
        json.dump(plan, f)
    p = run_cli(stagehand_bin, ["--socket", daemon.sock, "job-end", str(JOB), "--state",
                                "COMPLETED", "--exit-code", "0", "--uid",
                                str(test_users["shtest"].pw_uid), "--work-dir", work,
                                "--plan", plan_path])
    assert p.returncode == 0, p.stderr
    end = time.monotonic() + 30
    while True:
        st, doc, text, _ = daemon.api.get(f"/v1/jobs/{JOB}")
        if st == 200 and doc["requests"]:
            break
        assert time.monotonic() < end, f"no archive request for job {JOB}: {st} {text}"
        time.sleep(0.2)
    t0 = time.monotonic()
    r = daemon.api.wait(doc["requests"][0]["id"], timeout=120)
    elapsed = time.monotonic() - t0
    assert r["state"] == "done", f"{r}\n{daemon.log_tail()}"
    return {"work": work, "res": res, "digest": digest, "dest": dest, "req": r,
            "bdir": os.path.join(dest, ".stagehand-bundles"), "elapsed": elapsed}


def _index(bdir):
    with open(os.path.join(bdir, "index.jsonl"), "rb") as f:
        lines = [json.loads(l) for l in f.read().decode().splitlines()]
    return lines[0], [l for l in lines[1:] if "bundle" in l and "path" not in l], \
        [l for l in lines[1:] if "path" in l]


def restore(stagehand_bin, *args, user="shtest"):
    return run_cli(stagehand_bin, ["restore"] + list(args), user=user)


def _user_tmp(base_dir, name):
    return owned_dir(os.path.join(base_dir, "shtest", name), "shtest")


def test_bundles_and_index(job, daemon, test_users):
    r, bdir = job["req"], job["bdir"]
    assert r["options"]["backend"] == "bundle", r
    # Every regular file counted, checksummed and verified; the FIFO skipped.
    assert r["files_total"] == r["files_done"] == N_SMALL + 3 + N_LARGE, r
    assert r["files_skipped"] == 1, r
    assert r["bytes_done"] == r["bytes_total"] == sum(s for s, _ in job["digest"].values())
    skipped = daemon.db_rows("SELECT relpath, error FROM items WHERE request_id = ? AND "
                             "state = 'skipped'", (r["id"],))
    assert skipped and skipped[0][0] == "pipe" and "FIFO" in skipped[0][1], skipped
    header, bundles, entries = _index(bdir)
    assert header["stagehand_index"] == 1 and header["checksum"] == "sha256", header
    assert header["source"] == job["res"] and header["job"] == JOB
    names = sorted(os.listdir(bdir))
    assert names == sorted([b["bundle"] for b in bundles] + ["index.jsonl"]), names
    assert len(bundles) >= 3, bundles          # about 20 MB of members, 8 MiB bundles
    for b in bundles:
        p = os.path.join(bdir, b["bundle"])
        assert os.path.getsize(p) == b["size"] <= 8 << 20
        with open(p, "rb") as f:
            assert "sha256:" + hashlib.sha256(f.read()).hexdigest() == b["checksum"], b
        st = os.stat(p)
        assert st.st_uid == test_users["shtest"].pw_uid and stat.S_IMODE(st.st_mode) == 0o600
    files = {e["path"]: e for e in entries if e["type"] == "file"}
    assert set(files) == set(job["digest"]), set(files) ^ set(job["digest"])
    # Each member's checksum is right, at its offset; large files are plain copies.
    handles = {b["bundle"]: open(os.path.join(bdir, b["bundle"]), "rb") for b in bundles}
    try:
        for path, e in files.items():
            size, sha = job["digest"][path]
            assert e["size"] == size and e["checksum"] == "sha256:" + sha, e
            if size >= 64 << 10:
                assert "bundle" not in e, e
                assert os.path.getsize(os.path.join(job["dest"], path)) == size
            else:
                f = handles[e["bundle"]]
                f.seek(e["offset"])
                assert hashlib.sha256(f.read(size)).hexdigest() == sha, path
    finally:
        for f in handles.values():
            f.close()
    links = [e for e in entries if e["type"] == "symlink"]
    assert links == [dict(links[0], path="link", target="d00/f00000.bin")], links
    dirs = {e["path"]: e for e in entries if e["type"] == "dir"}
    assert "empty-dir" in dirs and dirs["d03"]["mode"] == 0o750
    # One audit record per member, with its size.
    rows = daemon.db_rows("SELECT count(*), sum(bytes) FROM audit WHERE request_id = ?", (r["id"],))
    assert rows[0] == (len(files), r["bytes_total"]), rows
    # The scratch copy is labelled archived, pointing at the archive.
    assert os.getxattr(job["res"], "user.stagehand.policy") == b"archived"
    assert os.getxattr(job["res"], "user.stagehand.location").decode() == job["dest"]


def test_gnu_tar_reads_bundles(job):
    _, bundles, entries = _index(job["bdir"])
    listed = []
    for b in bundles:
        p = subprocess.run(["tar", "--quoting-style=escape", "-tf",
                            os.path.join(job["bdir"], b["bundle"])],
                           capture_output=True, text=True, check=True)
        assert p.stderr == "", p.stderr
        listed += p.stdout.splitlines()
    in_bundles = [e["path"].replace("\n", "\\n") for e in entries if "bundle" in e]
    assert sorted(listed) == sorted(in_bundles)
    assert f"d02/{LONG}" in listed and "d01/new\\nline" in listed


def test_restore_one_file(job, stagehand_bin, base_dir):
    to = _user_tmp(base_dir, "restore-one")
    p = restore(stagehand_bin, job["dest"], "--to", to, "--file", "d07/f00007.bin")
    assert p.returncode == 0, p.stderr
    got = tree_digest(to)
    assert got == {"d07/f00007.bin": job["digest"]["d07/f00007.bin"]}, got
    p = restore(stagehand_bin, job["dest"], "--to", to, "--file", "d07/f00007.bin")
    assert p.returncode == 1 and "exists; not replaced (use --force" in p.stderr, p
    p = restore(stagehand_bin, job["dest"], "--to", to, "--file", "d07/f00007.bin", "--force")
    assert p.returncode == 0, p.stderr
    p = restore(stagehand_bin, job["dest"], "--to", to, "--file", "d07/nope")
    assert p.returncode == 1 and "d07/nope: not in the archive" in p.stderr, p


def test_restore_whole_tree_through_label(job, stagehand_bin, base_dir):
    to = os.path.join(_user_tmp(base_dir, "restore-all"), "results")
    t0 = time.monotonic()
    p = restore(stagehand_bin, job["res"], "--to", to)
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert f"{N_SMALL + 3 + N_LARGE} files" in p.stdout, p.stdout
    assert tree_digest(to) == job["digest"]
    assert os.readlink(os.path.join(to, "link")) == "d00/f00000.bin"
    assert os.path.isdir(os.path.join(to, "empty-dir"))
    assert not os.path.exists(os.path.join(to, "pipe"))
    for rel in ("d03", "d03/f00003.bin", "d05/f00005.bin", f"d02/{LONG}"):
        a, b = os.lstat(os.path.join(job["res"], rel)), os.lstat(os.path.join(to, rel))
        assert stat.S_IMODE(a.st_mode) == stat.S_IMODE(b.st_mode), rel
        assert a.st_mtime_ns == b.st_mtime_ns, rel
    print(f"archive {job['elapsed']:.1f}s, restore {elapsed:.1f}s")


def test_restore_as_root_refused(job, stagehand_bin, base_dir):
    p = restore(stagehand_bin, job["dest"], "--to", os.path.join(base_dir, "root-restore"),
                user=None)
    assert p.returncode == 2 and "not as root" in p.stderr, p
    assert not os.path.exists(os.path.join(base_dir, "root-restore"))


def _copy_archive(job, base_dir, name):
    dst = os.path.join(base_dir, "shtest", name)
    shutil.copytree(job["dest"], dst, symlinks=True)
    chown_tree(dst, "shtest")
    return dst


def test_corrupt_bundle_detected(job, stagehand_bin, base_dir):
    arch = _copy_archive(job, base_dir, "corrupt")
    _, _, entries = _index(os.path.join(arch, ".stagehand-bundles"))
    victim = next(e for e in entries if e["type"] == "file" and "bundle" in e and e["size"] > 100)
    with open(os.path.join(arch, ".stagehand-bundles", victim["bundle"]), "r+b") as f:
        f.seek(victim["offset"] + 10)
        b = f.read(1)
        f.seek(victim["offset"] + 10)
        f.write(bytes([b[0] ^ 0xFF]))
    to = _user_tmp(base_dir, "restore-corrupt")
    p = restore(stagehand_bin, arch, "--to", to, "--file", victim["path"])
    assert p.returncode == 1, p
    assert f"{victim['path']}: checksum mismatch in {victim['bundle']} at offset " \
           f"{victim['offset']}" in p.stderr and "damaged" in p.stderr, p.stderr
    assert tree_digest(to) == {}
    assert not [n for d, _, fs in os.walk(to) for n in fs], "temporary file left behind"
    # The whole tree: everything else comes back, the damaged member does not.
    p = restore(stagehand_bin, arch, "--to", os.path.join(to, "all"))
    assert p.returncode == 1 and "1 error" in p.stderr, p.stderr
    got = tree_digest(os.path.join(to, "all"))
    assert set(job["digest"]) - set(got) == {victim["path"]}


def _fake_archive(base_dir, name, lines):
    arch = owned_dir(os.path.join(base_dir, "shtest", name), "shtest")
    bdir = owned_dir(os.path.join(arch, ".stagehand-bundles"), "shtest", 0o700)
    with open(os.path.join(bdir, "bundle-000001.tar"), "wb") as f:
        f.write(b"\0" * 4096)
    with open(os.path.join(bdir, "index.jsonl"), "w") as f:
        f.write(json.dumps({"stagehand_index": 1, "checksum": "sha256"}) + "\n")
        f.write(json.dumps({"bundle": "bundle-000001.tar", "size": 4096,
                            "checksum": "sha256:00", "members": 1}) + "\n")
        for l in lines:
            f.write(json.dumps(l) + "\n")
    chown_tree(arch, "shtest")
    return arch


@pytest.mark.parametrize("bad", ["../evil", "/tmp/stagehand-evil", "a/../../evil", "a//b", "."])
def test_hostile_index_refused(bad, stagehand_bin, base_dir):
    ok = {"path": "fine", "type": "file", "bundle": "bundle-000001.tar", "offset": 512,
          "size": 3, "mode": 0o644, "mtime_ns": 0, "checksum": "sha256:" + "0" * 64}
    arch = _fake_archive(base_dir, "hostile", [ok, dict(ok, path=bad)])
    to = _user_tmp(base_dir, "restore-hostile")
    p = restore(stagehand_bin, arch, "--to", to)
    assert p.returncode == 1, p
    assert "the index is damaged or not trustworthy; nothing was restored" in p.stderr, p.stderr
    assert "line 4" in p.stderr and repr(bad)[1:-1] in p.stderr, p.stderr
    assert os.listdir(to) == []
    assert not os.path.exists("/tmp/stagehand-evil")
    assert not os.path.exists(os.path.join(base_dir, "shtest", "evil"))


def test_hostile_offsets_refused(stagehand_bin, base_dir):
    ok = {"path": "x", "type": "file", "bundle": "bundle-000001.tar", "offset": 512,
          "size": 3, "mode": 0o644, "mtime_ns": 0, "checksum": "sha256:" + "0" * 64}
    for bad, why in ((dict(ok, offset=4096), "runs past the end"),
                     (dict(ok, offset=700), "offset is not on a tar block"),
                     (dict(ok, bundle="../../etc/passwd"), "names a bundle the index does not list"),
                     (dict(ok, type="fifo"), "type is not file")):
        arch = _fake_archive(base_dir, "hostile2", [bad])
        p = restore(stagehand_bin, arch, "--to", _user_tmp(base_dir, "restore-hostile2"))
        assert p.returncode == 1 and why in p.stderr, (bad, p.stderr)
        shutil.rmtree(arch)
    # A well-formed index whose offset does not point at a tar header.
    arch = _fake_archive(base_dir, "hostile3", [ok])
    to = _user_tmp(base_dir, "restore-hostile3")
    p = restore(stagehand_bin, arch, "--to", to)
    assert p.returncode == 1 and "no valid tar header" in p.stderr, p.stderr
    assert os.listdir(to) == []


def test_symlink_at_destination_not_followed(job, stagehand_bin, base_dir):
    outside = _user_tmp(base_dir, "outside")
    to = _user_tmp(base_dir, "restore-planted")
    os.symlink(outside, os.path.join(to, "d04"))
    p = restore(stagehand_bin, job["dest"], "--to", to, "--file", "d04/f00004.bin")
    assert p.returncode == 1 and "symlink or not a directory: refused" in p.stderr, p.stderr
    assert os.listdir(outside) == []


def test_resume_keeps_verified_bundles(job, daemon, base_dir, stagehand_bin):
    """A second archive of the same tree keeps every bundle; a lost bundle is repacked alone."""
    bdir = job["bdir"]
    _, bundles, _ = _index(bdir)
    before = {b["bundle"]: os.stat(os.path.join(bdir, b["bundle"])).st_ino for b in bundles}
    rid = daemon.api.submit("archive", job["res"], job["dest"], as_user="shtest",
                            options={"backend": "bundle"})["id"]
    r = daemon.api.wait(rid, timeout=120)
    assert r["state"] == "done" and r["files_done"] == r["files_total"], r
    after = {n: os.stat(os.path.join(bdir, n)).st_ino for n in os.listdir(bdir) if n.endswith(".tar")}
    assert after == before, (before, after)
    lost = bundles[1]["bundle"]
    os.unlink(os.path.join(bdir, lost))
    rid = daemon.api.submit("archive", job["res"], job["dest"], as_user="shtest",
                            options={"backend": "bundle"})["id"]
    r = daemon.api.wait(rid, timeout=120)
    assert r["state"] == "done" and r["files_done"] == r["files_total"], r
    _, bundles2, entries = _index(bdir)
    names = {b["bundle"] for b in bundles2}
    assert lost not in names and set(before) - {lost} <= names and len(names) == len(before)
    for n in set(before) - {lost}:
        assert os.stat(os.path.join(bdir, n)).st_ino == before[n], n
    assert {e["path"] for e in entries if e["type"] == "file"} == set(job["digest"])
    to = os.path.join(_user_tmp(base_dir, "restore-resumed"), "r")
    p = restore(stagehand_bin, job["dest"], "--to", to)
    assert p.returncode == 0, p.stderr
    assert tree_digest(to) == job["digest"]


def test_plain_archive_restore(daemon, base_dir, stagehand_bin, test_users):
    """Below BundleMinFiles the archive is a plain copy; restore reads it too."""
    src = owned_dir(os.path.join(base_dir, "shtest", "few"), "shtest")
    for i in range(20):
        with open(os.path.join(src, f"f{i}"), "wb") as f:
            f.write(os.urandom(100 * i))
    os.symlink("f1", os.path.join(src, "l"))
    chown_tree(src, "shtest")
    dest = os.path.join(base_dir, "shtest", "archive", "few")
    r = daemon.api.wait(daemon.api.submit("archive", src, dest, as_user="shtest",
                                          options={"backend": "bundle"})["id"])
    assert r["state"] == "done", r
    assert not os.path.exists(os.path.join(dest, ".stagehand-bundles"))
    to = os.path.join(_user_tmp(base_dir, "restore-few"), "x")
    p = restore(stagehand_bin, src, "--to", to)
    assert p.returncode == 0, p.stderr
    assert tree_digest(to) == tree_digest(src) and os.readlink(os.path.join(to, "l")) == "f1"
    p = restore(stagehand_bin, dest, "--to", os.path.join(to, "one"), "--file", "f3")
    assert p.returncode == 0 and tree_digest(os.path.join(to, "one")) == {
        "f3": tree_digest(src)["f3"]}, p.stderr


def test_kill9_resumes_at_bundle_granularity(make_daemon, job, base_dir, stagehand_bin):
    """kill -9 of the daemon and its worker mid-archive: verified bundles are kept."""
    d = make_daemon("bundle-crash", BundleMinFiles=1000, BundleFileMax="64K", BundleSize="1M",
                    Checksum="sha256", BandwidthCap="24M")
    dest = os.path.join(base_dir, "shtest", "archive", "crash")
    bdir = os.path.join(dest, ".stagehand-bundles")
    journal = os.path.join(bdir, "index.jsonl.part")
    rid = d.api.submit("archive", job["res"], dest, as_user="shtest",
                       options={"backend": "bundle"})["id"]
    end = time.monotonic() + 60
    seen = []
    while len(seen) < 2:
        assert time.monotonic() < end, d.log_tail()
        if os.path.exists(journal):
            with open(journal) as f:
                seen = [json.loads(l)["bundle"] for l in f if l.startswith('{"bundle"')]
        time.sleep(0.05)
    inodes = {n: os.stat(os.path.join(bdir, n)).st_ino for n in seen}
    d.kill9()
    assert not os.path.exists(os.path.join(bdir, "index.jsonl")), "finished before the kill"
    d.start()
    r = d.api.wait(rid, timeout=120)
    assert r["state"] == "done" and r["files_done"] == r["files_total"], f"{r}\n{d.log_tail()}"
    _, bundles, entries = _index(bdir)
    names = {b["bundle"] for b in bundles}
    for n, ino in inodes.items():
        assert n in names and os.stat(os.path.join(bdir, n)).st_ino == ino, n
    assert not os.path.exists(journal)
    assert not [n for n in os.listdir(bdir) if n.startswith(".")], os.listdir(bdir)
    to = os.path.join(_user_tmp(base_dir, "restore-crash"), "r")
    p = restore(stagehand_bin, dest, "--to", to)
    assert p.returncode == 0, p.stderr
    assert tree_digest(to) == job["digest"]


def test_keep_no_removes_sources_once_bundled(daemon, base_dir, stagehand_bin):
    """keep=no: every archived file leaves scratch, and the archive restores the tree."""
    rnd = random.Random(2402)
    src = owned_dir(os.path.join(base_dir, "shtest", "keepno"), "shtest")
    for i in range(1200):
        sub = os.path.join(src, f"d{i % 12:02d}", "deep" if i % 3 == 0 else "")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"f{i:05d}"), "wb") as f:
            f.write(rnd.randbytes(rnd.randrange(0, 4096)))
    with open(os.path.join(src, "d03", "deep", "large.dat"), "wb") as f:
        f.write(rnd.randbytes(LARGE))
    os.chmod(os.path.join(src, "d03"), 0o750)
    os.symlink("d00/f00000", os.path.join(src, "link"))
    chown_tree(src, "shtest")
    digest = tree_digest(src)
    dest = os.path.join(_user_tmp(base_dir, "archive-keepno"), "keepno")
    r = daemon.api.wait(daemon.api.submit("archive", src, dest, as_user="shtest",
                                          options={"backend": "bundle", "keep": False})["id"],
                        timeout=120)
    # The first attempt: a bundle open while a large file is copied stays intact.
    assert r["state"] == "done" and r["attempts"] == 1, f"{r}\n{daemon.log_tail()}"
    assert r["files_done"] == r["files_total"] == 1201, \
        f"{r}\n{daemon.log_tail()}"
    left = [os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs]
    assert left == [os.path.join(src, "link")], left[:10]
    _, bundles, entries = _index(os.path.join(dest, ".stagehand-bundles"))
    assert bundles and {e["path"] for e in entries if e["type"] == "file"} == set(digest)
    assert os.path.getsize(os.path.join(dest, "d03", "deep", "large.dat")) == LARGE
    # Directories made for a large file get the source's mode and mtime, as listed.
    dirs = {e["path"]: e for e in entries if e["type"] == "dir"}
    for rel in ("d03", "d03/deep"):
        st = os.stat(os.path.join(dest, rel))
        assert (stat.S_IMODE(st.st_mode), st.st_mtime_ns) == \
            (dirs[rel]["mode"], dirs[rel]["mtime_ns"]), rel
    assert dirs["d03"]["mode"] == 0o750 and not os.path.exists(os.path.join(dest, "d04"))
    to = os.path.join(_user_tmp(base_dir, "restore-keepno"), "r")
    p = restore(stagehand_bin, dest, "--to", to)
    assert p.returncode == 0, p.stderr
    assert tree_digest(to) == digest and os.readlink(os.path.join(to, "link")) == "d00/f00000"
