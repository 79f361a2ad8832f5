"""The stagehand CLI against a real stagehandd: status, cancel, retry,
job-end, health, and the message when the daemon is down."""
import json
import os

import pytest

from conftest import chown_tree, free_port, run_cli, tree_digest, user_dir


@pytest.fixture(scope="module")
def daemon(make_daemon):
    # A low cap keeps a 64 MiB copy running long enough to cancel it.
    return make_daemon("cli", Workers=1, BandwidthCap="8M")


@pytest.fixture(scope="module")
def data(base_dir, test_users):
    src = user_dir(base_dir, "shtest", "cli-src")
    with open(os.path.join(src, "slow.dat"), "wb") as f:
        f.write(os.urandom(64 << 20))
    small = user_dir(base_dir, "shtest", "cli-small")
    for i in range(20):
        with open(os.path.join(small, f"s{i}"), "wb") as f:
            f.write(os.urandom(100 + i))
    chown_tree(src, "shtest")
    chown_tree(small, "shtest")
    return {"src": src, "small": small, "scratch": user_dir(base_dir, "shtest", "cli-scratch")}


def cli(stagehand_bin, daemon, *args, user="shtest"):
    return run_cli(stagehand_bin, ["--socket", daemon.sock] + list(args), user=user)


def test_daemon_down_message(stagehand_bin, base_dir):
    missing = os.path.join(base_dir, "no-such-daemon.sock")
    p = run_cli(stagehand_bin, ["status"], user="shtest", env={"STAGEHAND_SOCKET": missing})
    assert p.returncode == 2, p
    assert p.stderr == (f"stagehand: cannot reach stagehandd at {missing}: No such file or directory "
                        "(is the daemon running? systemctl status stagehandd)\n"), p.stderr
    assert p.stdout == ""


def test_daemon_stopped_socket_left_behind(stagehand_bin, make_daemon):
    """A crashed daemon leaves its socket file: the kernel refuses the connection."""
    d = make_daemon("down")
    d.kill9()
    assert os.path.exists(d.sock)
    p = run_cli(stagehand_bin, ["--socket", d.sock, "health"])
    assert p.returncode == 2
    assert "Connection refused (is the daemon running?" in p.stderr, p.stderr


def test_health(stagehand_bin, daemon):
    p = cli(stagehand_bin, daemon, "health")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("stagehandd ") and ": ok\n" in p.stdout, p.stdout
    p = cli(stagehand_bin, daemon, "health", "--json")
    assert json.loads(p.stdout)["status"] == "ok"


def test_submit_wait_and_status_json(stagehand_bin, daemon, data):
    dest = os.path.join(data["scratch"], "small")
    p = cli(stagehand_bin, daemon, "submit", "--stage-in", data["small"], dest, "--wait")
    assert p.returncode == 0, p.stderr
    first = p.stdout.splitlines()[0]
    # The answer gives the state the request had when it was read back for
    # it: the workers are woken first, so a fast machine may have started it.
    assert first.startswith("submitted request r") and \
        first.endswith(("(queued)", "(running)", "(verifying)", "(done)")), p.stdout
    rid = int(first.split()[2][1:])
    # Not a terminal: --wait printed JSON lines, the last one done.
    last = json.loads(p.stdout.splitlines()[-1])
    assert last["id"] == rid and last["state"] == "done"
    assert tree_digest(dest) == tree_digest(data["small"])

    p = cli(stagehand_bin, daemon, "status", "--all", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    mine = {r["id"]: r for r in doc["requests"]}
    assert mine[rid]["state"] == "done" and mine[rid]["files_done"] == 20
    api = daemon.api.request(rid)
    for k in ("id", "uid", "state", "source", "dest", "files_done", "bytes_done", "bytes_total"):
        assert mine[rid][k] == api[k], k

    p = cli(stagehand_bin, daemon, "status", f"r{rid}")
    assert p.returncode == 0
    assert f"r{rid}" in p.stdout and "done" in p.stdout and "20/20" in p.stdout, p.stdout


def test_status_of_someone_elses_request_fails(stagehand_bin, daemon, data):
    rid = daemon.api.submit("stage_in", data["small"], os.path.join(data["scratch"], "x"),
                            as_user="shtest")["id"]
    daemon.api.wait(rid)
    p = cli(stagehand_bin, daemon, "status", f"r{rid}", user="shtest2")
    assert p.returncode == 1
    assert p.stderr.startswith("stagehand: ") and len(p.stderr) > 20, p.stderr
    p = cli(stagehand_bin, daemon, "cancel", f"r{rid}", user="shtest2")
    assert p.returncode == 1, p


def test_cancel_then_retry(stagehand_bin, daemon, data):
    dest = os.path.join(data["scratch"], "slow")
    p = cli(stagehand_bin, daemon, "submit", "--stage-in", data["src"], dest, "--json")
    assert p.returncode == 0, p.stderr
    rid = json.loads(p.stdout)["id"]
    daemon.api.wait(rid, timeout=30, states=("running", "verifying"))

    p = cli(stagehand_bin, daemon, "cancel", f"r{rid}")
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"cancelled r{rid} (cancelled)\n", p.stdout
    r = daemon.api.wait(rid, timeout=30)
    assert r["state"] == "cancelled"
    # Cancelling again: the daemon refuses (409) and says why.
    p = cli(stagehand_bin, daemon, "cancel", f"r{rid}")
    assert p.returncode == 1 and "stagehand: " in p.stderr, p

    p = cli(stagehand_bin, daemon, "retry", f"r{rid}")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"re-queued r{rid} ("), p.stdout
    r = daemon.api.wait(rid, timeout=120)
    assert r["state"] == "done", r
    assert tree_digest(dest) == tree_digest(data["src"])


def test_job_commands(stagehand_bin, daemon, data, test_users):
    job = 880001
    rid = daemon.api.submit("stage_in", data["small"], os.path.join(data["scratch"], "j"),
                            as_user="shtest", job_id=job)["id"]
    daemon.api.wait(rid)
    p = cli(stagehand_bin, daemon, "status", str(job))
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"job {job}: stage-in ready"), p.stdout
    p = cli(stagehand_bin, daemon, "retry", str(job))
    assert p.returncode == 0, p.stderr
    assert "no failed requests" in p.stdout, p.stdout
    # job-end: refused for a user, accepted (once) for root.
    p = cli(stagehand_bin, daemon, "job-end", str(job), "--state", "COMPLETED")
    assert p.returncode == 1, p
    uid = str(test_users["shtest"].pw_uid)
    p = cli(stagehand_bin, daemon, "job-end", str(job), "--state", "COMPLETED", "--uid", uid, user=None)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"job {job}: end recorded"), p.stdout
    p = cli(stagehand_bin, daemon, "job-end", str(job), "--state", "COMPLETED", "--uid", uid, user=None)
    assert p.returncode == 0 and "already recorded" in p.stdout, p


def test_queue_is_admin_view(stagehand_bin, daemon):
    p = cli(stagehand_bin, daemon, "queue", "--json", user=None)
    assert p.returncode == 0, p.stderr
    uids = {r["uid"] for r in json.loads(p.stdout)["requests"]}
    assert uids, "root sees the requests of every user"
    p = cli(stagehand_bin, daemon, "queue", "--state", "done", user=None)
    assert p.returncode == 0 and p.stdout.startswith("REQUEST"), p.stdout
    assert all(" done " in line for line in p.stdout.splitlines()[1:] if line.startswith("r"))


def test_bad_ids_are_usage_errors(stagehand_bin, daemon):
    for args in (["status", "x1"], ["cancel", "r"], ["retry", "-3"], ["cancel", "r0"]):
        p = cli(stagehand_bin, daemon, *args)
        assert p.returncode == 2, (args, p)
        assert p.stderr.startswith("stagehand: "), p.stderr


# ---- TCP with MUNGE -----------------------------------------------------------

@pytest.fixture(scope="module")
def tcp_daemon(make_daemon):
    import shutil
    import subprocess
    if not shutil.which("munge") or subprocess.run(["munge", "-n"], capture_output=True).returncode:
        pytest.skip("munged is not running on this host (scripts/testbed up starts it)")
    port = free_port()
    d = make_daemon("tcp", ListenAddress=f"127.0.0.1:{port}")
    d.port = port
    return d


def test_server_option_authenticates_with_munge(stagehand_bin, tcp_daemon, test_users):
    p = run_cli(stagehand_bin, ["--server", f"127.0.0.1:{tcp_daemon.port}", "health", "--json"],
                user="shtest")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["uid"] == test_users["shtest"].pw_uid and doc["admin"] is False, doc
    p = run_cli(stagehand_bin, ["health", "--json"], user="shtest2",
                env={"STAGEHAND_SERVER": f"127.0.0.1:{tcp_daemon.port}"})
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["uid"] == test_users["shtest2"].pw_uid


def test_tcp_without_valid_credential_is_refused(tcp_daemon):
    """No credential, garbage, or a replay: 401; a valid credential not bound
    to the request (a client older than bound credentials): 403."""
    import http.client
    import subprocess
    from conftest import bound_cred
    empty = subprocess.run(["munge", "-n"], capture_output=True, text=True, check=True).stdout.strip()
    cred = bound_cred("GET", "/v1/health")
    cases = [({}, "none", 401), ({"X-Stagehand-Munge": "MUNGE:garbage:"}, "garbage", 401),
             ({"X-Stagehand-Munge": empty}, "not bound", 403),
             ({"X-Stagehand-Munge": cred}, "first use", 200),
             ({"X-Stagehand-Munge": cred}, "replay", 401)]
    for headers, what, want in cases:
        c = http.client.HTTPConnection("127.0.0.1", tcp_daemon.port, timeout=10)
        c.request("GET", "/v1/health", headers=headers)
        r = c.getresponse()
        body = r.read()
        c.close()
        assert r.status == want, (what, r.status, body)
        if want != 200:
            assert json.loads(body)["error"], body


def test_job_end_with_plan_creates_owner_requests(stagehand_bin, daemon, base_dir, test_users):
    """An epilog's job-end with the job's plan: after-job transfers run as the owner."""
    from conftest import owned_dir
    job = 880002
    work = owned_dir(os.path.join(base_dir, "shtest", "job-work"), "shtest")
    out = owned_dir(os.path.join(work, "out"), "shtest")
    res = owned_dir(os.path.join(work, "results"), "shtest")
    for d, n in ((out, 3), (res, 4)):
        for i in range(n):
            with open(os.path.join(d, f"r{i}"), "wb") as f:
                f.write(os.urandom(2000 + i))
    chown_tree(work, "shtest")
    dest_root = owned_dir(os.path.join(base_dir, "shtest", "job-dest"), "shtest")
    plan = {"version": 1, "actions": [
        {"line": 3, "action": "archive", "path": "results", "to": os.path.join(dest_root, "arch"),
         "when": "success", "keep": True},
        {"line": 4, "action": "stage_out", "path": "out", "to": os.path.join(dest_root, "so")}]}
    plan_path = os.path.join(base_dir, "plan.json")
    with open(plan_path, "w") as f:
        json.dump(plan, f)
    p = cli(stagehand_bin, daemon, "job-end", str(job), "--state", "COMPLETED", "--exit-code", "0",
            "--uid", str(test_users["shtest"].pw_uid), "--work-dir", work, "--plan", plan_path,
            user=None)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"job {job}: end recorded"), p.stdout
    # The main loop turns the event into requests shortly after.
    import time
    end = time.monotonic() + 30
    while True:
        st, doc, text, _ = daemon.api.get(f"/v1/jobs/{job}")
        if st == 200 and len(doc["requests"]) >= 2:
            break
        assert time.monotonic() < end, f"no requests for job {job}: {st} {text}"
        time.sleep(0.2)
    for r in doc["requests"]:
        assert r["uid"] == test_users["shtest"].pw_uid, r
        done = daemon.api.wait(r["id"], timeout=120)
        assert done["state"] == "done", done
    assert tree_digest(os.path.join(dest_root, "so")) == tree_digest(out)
    assert tree_digest(os.path.join(dest_root, "arch")) == tree_digest(res)
    # The user sees the job through the CLI.
    p = cli(stagehand_bin, daemon, "status", str(job), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["end"]["state"] == "COMPLETED"
