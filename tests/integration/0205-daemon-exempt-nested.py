"""`#DATA exempt=` directories inside an `archive=` or `stage_out=` directory
are left out of the copy.

Real stagehandd processes (SlurmWatch=no, Checksum=sha256) get job-end
events with plans, as the SPANK plugin sends them. For each after-job
request the daemon lists the exempt directories inside its source in
options.exclude; the worker neither copies nor (keep=no) removes them, says
why in the request's items, and leaves them out of the totals. Checked with
the local backend (archive, archive keep=no, stage_out), the bundle backend
(ArchiveBundle=yes, restored with `stagehand restore`), an exempt outside
the archived directory, and options.exclude submitted through the API.
About 10 s.
"""
import json
import os
import random
import time

import pytest

from conftest import chown_tree, owned_dir, run_cli, tree_digest

REASON = "exempt (#DATA exempt=): not archived"
JOB_ARCHIVE = 925001     # archive=results + exempt=results/scratch/ + results/a/b/ + tmp/
JOB_NOKEEP = 925002      # the same with keep=no
JOB_STAGE_OUT = 925003   # stage_out=logs + exempt=logs/debug/
JOB_OUTSIDE = 925004     # archive=out + exempt=other/ (not inside): everything copied
JOB_BUNDLE = 925005      # ArchiveBundle=yes, as JOB_ARCHIVE


@pytest.fixture(scope="module")
def daemon(make_daemon):
    return make_daemon("exempt", Workers=2, Checksum="sha256")


@pytest.fixture(scope="module")
def bdaemon(make_daemon):
    return make_daemon("exempt-bundle", Workers=1, Checksum="sha256", ArchiveBundle="yes",
                       BundleMinFiles=10, BundleFileMax="64K", BundleSize="1M")


def _tree(root, rnd, n=12):
    """A results-like tree: top files, a/, a/b/ (exempt), a/c/, scratch/ (exempt)."""
    for sub in ("", "a", "a/b", "a/b/deep", "a/c", "scratch", "scratch/s1", "keep-me/scratch"):
        d = os.path.join(root, sub)
        os.makedirs(d, exist_ok=True)
        for i in range(n):
            with open(os.path.join(d, f"f{i:02d}.bin"), "wb") as f:
                f.write(rnd.randbytes(rnd.randrange(0, 3000)))
    with open(os.path.join(root, "big.dat"), "wb") as f:
        f.write(rnd.randbytes(200 << 10))


def _without(digest, *dirs):
    return {p: v for p, v in digest.items()
            if not any(p == d or p.startswith(d + "/") for d in dirs)}


def _end(daemon, job, uid, work, actions):
    st, doc, text, _ = daemon.api.post(f"/v1/jobs/{job}/end", {
        "state": "COMPLETED", "exit_code": 0, "uid": uid, "work_dir": work,
        "plan": {"version": 1, "actions": actions}})
    assert st == 202, text
    end = time.monotonic() + 30
    while True:
        st, doc, text, _ = daemon.api.get(f"/v1/jobs/{job}")
        if st == 200 and doc["requests"]:
            break
        assert time.monotonic() < end, f"no request for job {job}: {st} {text}"
        time.sleep(0.2)
    assert len(doc["requests"]) == 1, doc
    r = daemon.api.wait(doc["requests"][0]["id"], timeout=120)
    assert r["state"] == "done", f"{r}\n{daemon.log_tail()}"
    st, full, text, _ = daemon.api.get(f"/v1/requests/{r['id']}?items=1")
    assert st == 200, text
    return full


def _skipped(r):
    return {i["relpath"]: i["error"] for i in r["items"] if i["state"] == "skipped"}


def _check(r, src_digest, dest, excluded):
    want = _without(src_digest, *excluded)
    got = tree_digest(dest)
    assert got == want, (sorted(set(want) ^ set(got))[:10])
    for d in excluded:
        assert not os.path.lexists(os.path.join(dest, d)), d
    assert r["files_total"] == r["files_done"] == len(want), r
    assert r["bytes_total"] == r["bytes_done"] == sum(s for s, _ in want.values()), r
    assert r["files_skipped"] == len(excluded), r
    assert _skipped(r) == {d: REASON for d in excluded}, _skipped(r)


@pytest.fixture(scope="module")
def work(base_dir, test_users):
    return owned_dir(os.path.join(base_dir, "shtest", "work"), "shtest")


def _make_results(work, name, seed):
    res = os.path.join(work, name)
    _tree(res, random.Random(seed))
    chown_tree(res, "shtest")
    return res, tree_digest(res)


def _actions(name, dest, keep=True):
    return [
        {"line": 2, "action": "exempt", "path": "tmp"},
        {"line": 3, "action": "archive", "path": name, "to": dest, "when": "always",
         "keep": keep},
        {"line": 4, "action": "exempt", "path": f"{name}/scratch"},
        {"line": 5, "action": "exempt", "path": f"{name}/a/b/"},
    ]


def test_archive_leaves_exempt_dirs_out(daemon, work, base_dir, test_users):
    res, digest = _make_results(work, "results", 1)
    dest = os.path.join(owned_dir(os.path.join(base_dir, "shtest", "arch1"), "shtest"), "results")
    r = _end(daemon, JOB_ARCHIVE, test_users["shtest"].pw_uid, work,
             _actions("results", dest))
    # exempt=tmp is outside results/: not in the list; a trailing '/' is dropped.
    assert r["options"]["exclude"] == ["scratch", "a/b"], r["options"]
    _check(r, digest, dest, ["scratch", "a/b"])
    # keep=yes: the source is whole; a directory merely named 'scratch' deeper is copied.
    assert tree_digest(res) == digest
    assert os.path.isfile(os.path.join(dest, "keep-me", "scratch", "f00.bin"))



def _opts(r, work, line):
    """The request's options without the no-follow ones the daemon adds to
    every #DATA request (beneath: the job's work dir here; line: its line)."""
    o = dict(r["options"])
    assert o.pop("beneath", None) == work, r["options"]
    assert o.pop("line", None) == line, r["options"]
    return o

def test_keep_no_leaves_exempt_dirs_in_place(daemon, work, base_dir, test_users):
    res, digest = _make_results(work, "results-nokeep", 2)
    dest = os.path.join(owned_dir(os.path.join(base_dir, "shtest", "arch2"), "shtest"), "r")
    r = _end(daemon, JOB_NOKEEP, test_users["shtest"].pw_uid, work,
             _actions("results-nokeep", dest, keep=False))
    assert _opts(r, work, 3) == {"keep": False, "exclude": ["scratch", "a/b"]}, r["options"]
    _check(r, digest, dest, ["scratch", "a/b"])
    # Archived files are gone from scratch; the exempt directories are untouched.
    assert tree_digest(res) == {p: v for p, v in digest.items()
                                if p.startswith("scratch/") or p.startswith("a/b/")}


def test_stage_out_leaves_exempt_dir_out(daemon, work, base_dir, test_users):
    logs, digest = _make_results(work, "logs", 3)
    dest = os.path.join(owned_dir(os.path.join(base_dir, "shtest", "so"), "shtest"), "logs")
    r = _end(daemon, JOB_STAGE_OUT, test_users["shtest"].pw_uid, work, [
        {"line": 2, "action": "stage_out", "path": "logs", "to": dest},
        {"line": 3, "action": "exempt", "path": "logs/a/c"}])
    assert _opts(r, work, 2) == {"exclude": ["a/c"]}, r["options"]
    _check(r, digest, dest, ["a/c"])
    assert tree_digest(logs) == digest


def test_exempt_outside_changes_nothing(daemon, work, base_dir, test_users):
    out, digest = _make_results(work, "out", 4)
    owned_dir(os.path.join(work, "other"), "shtest")
    dest = os.path.join(owned_dir(os.path.join(base_dir, "shtest", "arch3"), "shtest"), "out")
    r = _end(daemon, JOB_OUTSIDE, test_users["shtest"].pw_uid, work, [
        {"line": 2, "action": "exempt", "path": "other"},
        {"line": 3, "action": "exempt", "path": "outer/scratch"},   # a sibling prefix
        {"line": 4, "action": "archive", "path": "out", "to": dest, "when": "always",
         "keep": True}])
    assert "exclude" not in r["options"], r["options"]
    _check(r, digest, dest, [])


def test_bundle_backend_leaves_exempt_dirs_out(bdaemon, work, base_dir, test_users,
                                               stagehand_bin):
    res, digest = _make_results(work, "results-bundle", 5)
    dest = os.path.join(owned_dir(os.path.join(base_dir, "shtest", "arch4"), "shtest"), "rb")
    r = _end(bdaemon, JOB_BUNDLE, test_users["shtest"].pw_uid, work,
             _actions("results-bundle", dest))
    assert _opts(r, work, 3) == {"backend": "bundle", "exclude": ["scratch", "a/b"]}, r["options"]
    assert r["files_total"] == r["files_done"] == len(_without(digest, "scratch", "a/b")), r
    assert r["files_skipped"] == 2 and _skipped(r) == {"scratch": REASON, "a/b": REASON}, r
    with open(os.path.join(dest, ".stagehand-bundles", "index.jsonl")) as f:
        paths = [json.loads(l).get("path") for l in f.read().splitlines()[1:]]
    paths = [p for p in paths if p]
    assert any(p.startswith("a/c/") for p in paths), paths[:20]
    bad = [p for p in paths if p in ("scratch", "a/b") or p.startswith(("scratch/", "a/b/"))]
    assert not bad, bad
    to = os.path.join(owned_dir(os.path.join(base_dir, "shtest", "restored"), "shtest"), "rb")
    p = run_cli(stagehand_bin, ["restore", dest, "--to", to], user="shtest")
    assert p.returncode == 0, p.stdout + p.stderr
    assert tree_digest(to) == _without(digest, "scratch", "a/b")
    assert not os.path.lexists(os.path.join(to, "scratch"))
    assert not os.path.lexists(os.path.join(to, "a", "b"))


@pytest.mark.parametrize("exclude, why", [
    (["../x"], "'..' component"),
    (["/abs"], "must be relative"),
    (["a/"], "must be relative"),
    ([""], "is empty"),
    ("scratch", "array"),
    ([1], "must be a string"),
    (["x"] * 257, "at most 256"),
])
def test_api_exclude_checked(daemon, work, base_dir, exclude, why):
    st, doc, text, _ = daemon.api.post("/v1/requests", {
        "action": "archive", "source": os.path.join(work, "results"),
        "dest": os.path.join(base_dir, "shtest", "arch-api"),
        "options": {"exclude": exclude}}, as_user="shtest")
    assert st == 400 and why in text, text


def test_api_exclude_stage_in_refused(daemon, work, base_dir):
    st, doc, text, _ = daemon.api.post("/v1/requests", {
        "action": "stage_in", "source": os.path.join(work, "results"),
        "dest": os.path.join(base_dir, "shtest", "in"),
        "options": {"exclude": ["scratch"]}}, as_user="shtest")
    assert st == 400 and "archive and stage_out" in text, text
