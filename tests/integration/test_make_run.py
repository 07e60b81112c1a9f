"""`make run`'s stack script (tests/lpstack.py run): brings everything up,
writes run.env with a working key, answers, carries a click end to end
(redirect -> Kafka -> ingest -> PostgreSQL -> reports), and stops cleanly on
SIGINT; a second run keeps the data."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import requests

import lpstack


def start(var, port):
    p = subprocess.Popen([sys.executable, os.path.join(lpstack.ROOT, "tests/lpstack.py"), "run",
                          "--bin", lpstack.BIN, "--var", var, "--port", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    env_path = os.path.join(var, "run.env")
    deadline = time.time() + 90
    while time.time() < deadline and p.poll() is None:
        if os.path.exists(env_path):
            env = dict(l.strip().split("=", 1) for l in open(env_path) if "=" in l)
            return p, {k: v.strip("'") for k, v in env.items()}
        time.sleep(0.2)
    # SIGINT, not SIGKILL: the script stops the services it started (each
    # in a session of its own, which a SIGKILL of the script would orphan
    # into the later tests)
    p.send_signal(signal.SIGINT)
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    raise AssertionError(f"run.env not written:\n{out}")


def stop(p):
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    assert "stopped" in out
    return out


def test_make_run_stack(workdir):
    var = os.path.join(workdir, "var")
    os.makedirs(var)
    os.chmod(workdir, 0o755)
    port = lpstack.free_port()
    p, env = start(var, port)
    try:
        assert set(env) == {"BASE_URL", "API_KEY", "PG_DSN", "KAFKA_BOOTSTRAP", "REDIS_URL"}
        assert requests.get(env["BASE_URL"] + "/healthz", timeout=5).status_code == 200
        # a second run on the same var is refused and leaves the first alone
        # (it removed run.env and stopped the first one's PostgreSQL)
        second = subprocess.run([sys.executable, os.path.join(lpstack.ROOT, "tests/lpstack.py"),
                                 "run", "--bin", lpstack.BIN, "--var", var, "--port",
                                 str(lpstack.free_port())], capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 1 and "in use by another" in second.stderr, second
        assert os.path.exists(os.path.join(var, "run.env"))
        assert requests.get(env["BASE_URL"] + "/readyz", timeout=5).status_code == 200
        r = requests.post(env["BASE_URL"] + "/api/v1/links", json={"url": "https://example.com/"},
                          headers={"Authorization": "Bearer " + env["API_KEY"]}, timeout=10)
        assert r.status_code == 201, r.text
        code = r.json()["code"]
        ua = ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 "
              "(KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1")
        rr = requests.get(env["BASE_URL"] + "/" + code, allow_redirects=False, timeout=5,
                          headers={"User-Agent": ua, "Referer": "https://news.example.org/x"})
        assert rr.headers["Location"] == "https://example.com/"
        # the click travels redirector -> Kafka -> ingest -> visit_record
        pg = lpstack.Postgres(os.path.join(var, "pg"))
        pg.dbname = "linkpulse"
        dsn = env["PG_DSN"]
        deadline, row = time.time() + 60, ""
        while time.time() < deadline and not row:
            row = subprocess.run(["psql", "-XAtq", "-d", dsn, "-c",
                                  "SELECT http_status, browser_type, os_type, device_type, "
                                  "referer_host FROM visit_record WHERE unique_code = '%s'" % code],
                                 capture_output=True, text=True).stdout.strip()
            time.sleep(0.5)
        assert row == "302|Mobile Safari|iOS|mobile|news.example.org", row
        rep = subprocess.run([os.path.join(lpstack.BIN, "reports"), "-o", f"pg_dsn={dsn}",
                              "--link", code, "--format", "json", "--out", "-"],
                             capture_output=True, text=True, timeout=60)
        assert rep.returncode == 0, rep.stderr
        totals = json.loads(rep.stdout)["totals"]
        assert (totals["visits"], totals["bot_visits"]) == (1, 0), totals
    finally:
        out = stop(p)
    assert "curl -s -X POST" in out and env["API_KEY"] in out
    # second run: same data, same key
    p, env2 = start(var, port)
    try:
        assert env2["API_KEY"] == env["API_KEY"]
        g = requests.get(env2["BASE_URL"] + "/api/v1/links/" + code,
                         headers={"Authorization": "Bearer " + env2["API_KEY"]}, timeout=10)
        assert g.status_code == 200 and g.json()["long_url"] == "https://example.com/"
        assert g.json()["hits"] == 1
    finally:
        stop(p)


@pytest.mark.skipif(not lpstack.IS_ROOT, reason="only root runs PostgreSQL as another user")
def test_make_run_in_a_private_home(workdir):
    """As root, a clone under /root (mode 0700) is out of the postgres user's
    reach: the cluster goes under lpstack.DEV_PG_ROOT, var/pg links to it, and
    a second run finds the same data."""
    home = os.path.join(workdir, "root")
    var = os.path.join(home, "linkpulse", "var")
    os.makedirs(var)
    os.chmod(workdir, 0o755)
    os.chmod(home, 0o700)
    port = lpstack.free_port()
    p, env = start(var, port)
    alt = os.path.realpath(os.path.join(var, "pg"))
    try:
        assert os.path.islink(os.path.join(var, "pg"))
        assert alt.startswith(lpstack.DEV_PG_ROOT + "/")
        r = requests.post(env["BASE_URL"] + "/api/v1/links", json={"url": "https://example.com/h"},
                          headers={"Authorization": "Bearer " + env["API_KEY"]}, timeout=10)
        assert r.status_code == 201, r.text
        code = r.json()["code"]
        stop(p)
        p, env2 = start(var, port)
        assert env2["API_KEY"] == env["API_KEY"]
        g = requests.get(env2["BASE_URL"] + "/api/v1/links/" + code,
                         headers={"Authorization": "Bearer " + env2["API_KEY"]}, timeout=10)
        assert g.status_code == 200 and g.json()["long_url"] == "https://example.com/h"
    finally:
        if p.poll() is None:
            stop(p)
        shutil.rmtree(os.path.dirname(alt), ignore_errors=True)
