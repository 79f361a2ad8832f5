"""`stagehand tags --verify` against a real stagehandd (SlurmWatch=no): labels
the system wrote pass, forged and stale ones are reported with the right
code, and a user learns nothing about another user's jobs.

Jobs become known to the daemon the way they do in production: a root-sent
job-end event with the job's plan, and the after-job archive that the
daemon's worker carries out (it writes the `archived` label itself).
"""
import json
import os
import time

import pytest

from conftest import chown_tree, owned_dir, run_cli

JOB_OK = 922001        # COMPLETED: exempt=tmp, exempt=scr2, archive=results
JOB_FAILED = 922002    # FAILED: archive=out when=success -> never archived
JOB_SKIPPED = 922003   # COMPLETED: archive=late with an impossible to= -> no request
JOB_NOPLAN = 922004    # known only through a request: no plan
JOB_UNKNOWN = 922999   # never seen


@pytest.fixture(scope="module")
def daemon(make_daemon):
    return make_daemon("labels", Workers=1)


def _label(path, policy, job=None, owner=None, location=None):
    for name, val in (("policy", policy), ("job", job), ("owner", owner),
                      ("location", location)):
        key = f"user.stagehand.{name}"
        if val is None:
            try:
                os.removexattr(path, key)
            except OSError:
                pass
        else:
            os.setxattr(path, key, str(val).encode())


def _end(daemon, job, uid, work, state, exit_code, actions):
    st, doc, text, _ = daemon.api.post(f"/v1/jobs/{job}/end", {
        "state": state, "exit_code": exit_code, "uid": uid, "work_dir": work,
        "plan": {"version": 1, "actions": actions}})
    assert st == 202, text
    return doc


def _wait_requests(daemon, job, n):
    end = time.monotonic() + 60
    while True:
        st, doc, text, _ = daemon.api.get(f"/v1/jobs/{job}")
        if st == 200 and len(doc["requests"]) >= n:
            return doc["requests"]
        assert time.monotonic() < end, f"job {job}: {st} {text}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def tree(daemon, base_dir, test_users):
    a = test_users["shtest"].pw_uid
    b = test_users["shtest2"].pw_uid
    work = owned_dir(os.path.join(base_dir, "shtest", "run"), "shtest")
    dirs = {}
    for name in ("tmp", "scr2", "results", "forged", "ghost", "out", "late", "noplan",
                 "byhand", "badval", "nojob", "fakecopy"):
        dirs[name] = owned_dir(os.path.join(work, name), "shtest")
        with open(os.path.join(dirs[name], "f"), "wb") as f:
            f.write(os.urandom(1000))
    chown_tree(work, "shtest")
    dest = owned_dir(os.path.join(base_dir, "shtest", "arch"), "shtest")

    # Labels as the SPANK plugin writes them at job start.
    _label(dirs["tmp"], "exempt", JOB_OK, a)
    _label(dirs["scr2"], "exempt", JOB_OK, b)            # owner label of another uid
    _label(dirs["results"], "pending", JOB_OK, a)
    _label(dirs["out"], "pending", JOB_FAILED, a)
    _label(dirs["late"], "pending", JOB_SKIPPED, a)
    # Labels set by hand.
    _label(dirs["forged"], "exempt", JOB_OK, a)          # not in the plan
    _label(dirs["ghost"], "exempt", JOB_UNKNOWN, a)      # job never seen
    _label(dirs["noplan"], "pending", JOB_NOPLAN, a)
    _label(dirs["byhand"], "archive", JOB_OK, a)         # no label request
    _label(dirs["badval"], "keep-forever", JOB_OK, a)
    _label(dirs["nojob"], "exempt", None, a)
    _label(dirs["fakecopy"], "archived", JOB_OK, a, location="/nowhere/copy")

    _end(daemon, JOB_OK, a, work, "COMPLETED", 0, [
        {"line": 2, "action": "exempt", "path": "tmp"},
        {"line": 3, "action": "exempt", "path": "scr2"},
        {"line": 4, "action": "archive", "path": "results",
         "to": os.path.join(dest, "results"), "when": "always", "keep": True}])
    _end(daemon, JOB_FAILED, a, work, "FAILED", 1, [
        {"line": 2, "action": "archive", "path": "out", "to": os.path.join(dest, "out"),
         "when": "success", "keep": True}])
    _end(daemon, JOB_SKIPPED, a, work, "COMPLETED", 0, [
        {"line": 2, "action": "archive", "path": "late", "to": "relative/../nope",
         "when": "always", "keep": True}])
    # A job the daemon knows only through a request of its owner (no plan).
    src = owned_dir(os.path.join(base_dir, "shtest", "in"), "shtest")
    with open(os.path.join(src, "x"), "w") as f:
        f.write("x")
    chown_tree(src, "shtest")
    daemon.api.submit("stage_in", src, os.path.join(base_dir, "shtest", "in-copy"),
                      as_user="shtest", job_id=JOB_NOPLAN)

    reqs = _wait_requests(daemon, JOB_OK, 1)
    # JOB_FAILED's archive is skipped: a label request moves 'out' to 'skipped'.
    reqs += _wait_requests(daemon, JOB_FAILED, 1)
    for r in reqs:
        assert daemon.api.wait(r["id"], timeout=120)["state"] == "done", r
    return {"work": work, "dirs": dirs, "dest": dest, "a": a, "b": b}


def tags(stagehand_bin, daemon, *args, user="shtest"):
    return run_cli(stagehand_bin, ["--socket", daemon.sock, "tags"] + list(args), user=user)


def verdicts(p):
    doc = json.loads(p.stdout)
    return {os.path.basename(l["path"]): l["verify"] for l in doc["labels"]}, doc


def test_daemon_wrote_archived(tree):
    res = tree["dirs"]["results"]
    assert os.getxattr(res, "user.stagehand.policy") == b"archived"
    assert os.getxattr(res, "user.stagehand.location").decode() == os.path.join(tree["dest"],
                                                                                "results")


def test_verify_codes(stagehand_bin, daemon, tree):
    p = tags(stagehand_bin, daemon, "--verify", "--json", tree["work"])
    assert p.returncode == 1, (p.returncode, p.stderr)
    v, doc = verdicts(p)
    expect = {
        "tmp": (True, "valid"),
        "results": (True, "valid"),
        "scr2": (False, "owner_mismatch"),
        "out": (True, "valid"),             # skipped by when=success, relabelled
        "late": (True, "in_progress"),     # ended seconds ago: not stale yet
        "forged": (False, "not_in_plan"),
        "ghost": (False, "unknown_job"),
        "noplan": (False, "no_plan"),
        "byhand": (False, "no_record"),
        "badval": (False, "bad_value"),
        "nojob": (False, "no_job"),
        "fakecopy": (False, "no_verified_copy"),
    }
    got = {k: (v[k]["ok"], v[k]["code"]) for k in expect}
    assert got == expect, json.dumps(v, indent=1)
    assert doc["problems"] == sum(1 for ok, _ in expect.values() if not ok)
    assert "when=success" in v["out"]["reason"], v["out"]
    assert os.getxattr(tree["dirs"]["out"], "user.stagehand.policy") == b"skipped"
    assert v["results"]["request"] is not None


def test_stale_after(stagehand_bin, daemon, tree):
    p = tags(stagehand_bin, daemon, "--verify", "--json", "--stale-after", "0",
             tree["dirs"]["late"])
    assert p.returncode == 1, p.stderr
    v, _ = verdicts(p)
    assert v["late"]["code"] == "stale" and "no archive request" in v["late"]["reason"], v


def test_location_changed(stagehand_bin, daemon, tree):
    res = tree["dirs"]["results"]
    real = os.getxattr(res, "user.stagehand.location")
    os.setxattr(res, "user.stagehand.location", b"/somewhere/else")
    try:
        p = tags(stagehand_bin, daemon, "--verify", "--json", res)
        v, _ = verdicts(p)
        assert p.returncode == 1 and v["results"]["code"] == "location_mismatch", v
    finally:
        os.setxattr(res, "user.stagehand.location", real)


def test_clean_subtree_exits_zero(stagehand_bin, daemon, tree):
    p = tags(stagehand_bin, daemon, "--verify", tree["dirs"]["tmp"], tree["dirs"]["results"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 label(s) checked, 0 problem(s)" in p.stdout, p.stdout


def test_table_shows_reason(stagehand_bin, daemon, tree):
    p = tags(stagehand_bin, daemon, "--verify", tree["dirs"]["forged"])
    assert p.returncode == 1
    assert "not_in_plan" in p.stdout and "set by hand" in p.stdout, p.stdout


def test_privacy_other_user(stagehand_bin, daemon, tree):
    """shtest2 can read shtest's tree, but the daemon tells them nothing of shtest's jobs."""
    p = tags(stagehand_bin, daemon, "--verify", "--json", tree["work"], user="shtest2")
    assert p.returncode == 1, p.stderr
    v, _ = verdicts(p)
    for name in ("tmp", "results", "forged", "scr2", "out", "noplan"):
        assert v[name]["ok"] is False and v[name]["code"] == "unknown_job", (name, v[name])
        assert "not one of your jobs" in v[name]["reason"]
        assert v[name]["request"] is None
    text = " ".join(x["reason"] for x in v.values())
    assert tree["dest"] not in text           # no archive locations
    assert "#DATA" not in text and "exempt=" not in text   # no plan contents
    assert "COMPLETED" not in text and "FAILED" not in text


def test_admin_sees_all(stagehand_bin, daemon, tree):
    p = tags(stagehand_bin, daemon, "--verify", "--json", tree["work"], user=None)
    v, _ = verdicts(p)
    assert v["tmp"]["code"] == "valid" and v["results"]["code"] == "valid", v
    assert v["ghost"]["code"] == "unknown_job" and "no record of job" in v["ghost"]["reason"]


def test_api_rejects_bad_input(daemon, tree):
    st, doc, _, _ = daemon.api.post("/v1/labels/verify", {"labels": "x"}, as_user="shtest")
    assert st == 400 and "labels" in doc["error"]
    st, doc, _, _ = daemon.api.post("/v1/labels/verify",
                                    {"labels": [{"path": "/x", "uid": 0}]}, as_user="shtest")
    assert st == 400 and "unknown field 'uid'" in doc["error"]
    st, doc, _, _ = daemon.api.post("/v1/labels/verify",
                                    {"labels": [{"path": "/x"}] * 1001}, as_user="shtest")
    assert st == 400 and "at most 1000" in doc["error"]
    st, doc, _, _ = daemon.api.get("/v1/labels/verify", as_user="shtest")
    assert st == 405
    st, doc, _, _ = daemon.api.post("/v1/labels/verify", {"labels": [
        {"path": "relative", "policy": "exempt"}]}, as_user="shtest")
    assert st == 200 and doc["results"][0]["code"] == "bad_input"


def test_label_request_policies_of_users(daemon, tree, base_dir):
    """A user's label request may ask for 'archive' or 'skipped' only (docs/api.md,
    "Options"): 'exempt' and 'purge' say what a #DATA line or the daemon's cleanup
    decided, and with XattrNamespace=trusted root would write them for the user."""
    d = owned_dir(os.path.join(base_dir, "shtest", "askpolicy"), "shtest")
    for policy in ("exempt", "purge"):
        st, doc, text, _ = daemon.api.post("/v1/requests", {
            "action": "label", "source": d, "options": {"policy": policy}}, as_user="shtest")
        assert st == 403, f"{policy}: {st} {text}"
        assert f"options.policy '{policy}'" in doc["error"], doc
        assert "'archive' (the default) or 'skipped'" in doc["error"], doc
    # A batch is refused whole when one of its entries asks for one.
    st, doc, text, _ = daemon.api.post("/v1/requests", {"requests": [
        {"action": "label", "source": d, "options": {"policy": "archive"}},
        {"action": "label", "source": d, "options": {"policy": "exempt"}}]}, as_user="shtest")
    assert st == 403, f"batch: {st} {text}"
    with pytest.raises(OSError):
        os.getxattr(d, "user.stagehand.policy")
    for policy in ("archive", "skipped"):
        r = daemon.api.submit("label", d, None, as_user="shtest", options={"policy": policy})
        assert daemon.api.wait(r["id"], timeout=60)["state"] == "done", r
        assert os.getxattr(d, "user.stagehand.policy") == policy.encode()


def test_many_labels_in_batches(stagehand_bin, daemon, tree, base_dir):
    """More labels than one request carries: the CLI batches; every one is judged."""
    root = owned_dir(os.path.join(base_dir, "shtest", "many"), "shtest")
    for i in range(450):
        d = os.path.join(root, f"d{i:03d}")
        os.mkdir(d)
        _label(d, "exempt", JOB_UNKNOWN, tree["a"])
    chown_tree(root, "shtest")
    p = tags(stagehand_bin, daemon, "--verify", "--json", root)
    assert p.returncode == 1
    doc = json.loads(p.stdout)
    assert len(doc["labels"]) == 450 and doc["problems"] == 450


def test_no_daemon(stagehand_bin, tree, base_dir):
    p = run_cli(stagehand_bin, ["--socket", os.path.join(base_dir, "none.sock"), "tags",
                                "--verify", tree["dirs"]["tmp"]], user="shtest")
    assert p.returncode == 2 and "cannot reach stagehandd" in p.stderr, p.stderr


def test_tags_without_verify(stagehand_bin, daemon, tree):
    p = tags(stagehand_bin, daemon, tree["dirs"]["tmp"])
    assert p.returncode == 0
    assert "exempt" in p.stdout and str(JOB_OK) in p.stdout


def test_trusted_namespace_daemon_half(stagehand_bin, make_daemon, base_dir, test_users):
    """XattrNamespace=trusted: the daemon (root, on a descriptor its worker opened as the
    owner) writes trusted.stagehand.*; users cannot forge them, and cannot read them."""
    d = make_daemon("trusted", Workers=1, XattrNamespace="trusted")
    a = test_users["shtest"].pw_uid
    job = 922101
    work = owned_dir(os.path.join(base_dir, "shtest", "trun"), "shtest")
    res = owned_dir(os.path.join(work, "results"), "shtest")
    with open(os.path.join(res, "f"), "wb") as f:
        f.write(os.urandom(5000))
    chown_tree(work, "shtest")
    dest = owned_dir(os.path.join(base_dir, "shtest", "tarch"), "shtest")
    _end(d, job, a, work, "COMPLETED", 0, [
        {"line": 2, "action": "archive", "path": "results", "to": os.path.join(dest, "r"),
         "when": "always", "keep": True}])
    for r in _wait_requests(d, job, 1):
        assert d.api.wait(r["id"], timeout=120)["state"] == "done", r
    assert os.getxattr(res, "trusted.stagehand.policy") == b"archived"
    assert os.getxattr(res, "trusted.stagehand.job") == str(job).encode()
    with pytest.raises(OSError):
        os.getxattr(res, "user.stagehand.policy")
    # Root (an admin) verifies the trusted labels through the daemon.
    p = run_cli(stagehand_bin, ["--socket", d.sock, "tags", "--verify", "--json",
                                "--namespace", "trusted.", work])
    assert p.returncode == 0, p.stdout + p.stderr
    v, _ = verdicts(p)
    assert v["results"]["code"] == "valid", v
    # The owner cannot write a trusted label by hand ...
    p = run_cli("/usr/bin/setfattr", ["-n", "trusted.stagehand.policy", "-v", "exempt", res],
                user="shtest")
    assert p.returncode != 0, p
    assert os.getxattr(res, "trusted.stagehand.policy") == b"archived"
    # ... nor read one: the kernel hides trusted.* from unprivileged users.
    p = run_cli(stagehand_bin, ["tags", "--namespace", "trusted.", work], user="shtest")
    assert p.returncode == 0 and "no trusted.stagehand.* labels found" in p.stdout, p.stdout


def test_scan_purge_as_owner(stagehand_bin, base_dir, test_users):
    """scan --purge --yes, run by the owner, removes only their old exempt trees."""
    a, b = test_users["shtest"].pw_uid, test_users["shtest2"].pw_uid
    root = owned_dir(os.path.join(base_dir, "purge"), "shtest")
    old = time.time() - 40 * 86400
    made = {}
    for name, owner_user, owner_label, policy in (
            ("mine-old", "shtest", a, "exempt"), ("theirs-old", "shtest2", b, "exempt"),
            ("mine-archive", "shtest", a, "archive"), ("mine-forged-owner", "shtest", b, "exempt")):
        d = owned_dir(os.path.join(root, name), owner_user, mode=0o777)
        with open(os.path.join(d, "f"), "w") as f:
            f.write("x")
        _label(d, policy, JOB_UNKNOWN, owner_label)
        chown_tree(d, owner_user)
        for p in (os.path.join(d, "f"), d):
            os.utime(p, (old, old))
        made[name] = d
    p = run_cli(stagehand_bin, ["scan", "--older-than", "30", root], user="shtest")
    assert p.returncode == 0 and "purge_candidate" in p.stdout, p.stdout + p.stderr
    assert os.path.isdir(made["mine-old"])            # a dry run changes nothing
    p = run_cli(stagehand_bin, ["scan", "--purge", "--yes", "--older-than", "30", root],
                user="shtest")
    assert p.returncode == 1, p.stdout + p.stderr     # some candidates were kept
    assert not os.path.exists(made["mine-old"]), p.stdout
    for keep in ("theirs-old", "mine-archive", "mine-forged-owner"):
        assert os.path.isdir(made[keep]), (keep, p.stdout)
    assert "1 tree(s) removed" in p.stdout and "not yours" in p.stdout, p.stdout
