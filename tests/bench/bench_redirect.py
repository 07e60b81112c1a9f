"""Redirect throughput: wrk -t2 -c64 -d10s --latency against GET /{code} on the
redirector (visit events on, to the dev broker) and against nginx serving
`return 302` in the same run; prints req/s, p99 and the ratio (target
redirector/nginx >= 0.9), then the producer counters."""
import json
import os
import re
import subprocess
import time

import requests

import lpstack

ROTATE_LUA = r"""
local codes = {%CODES%}
local i = 0
request = function()
   i = i + 1
   return wrk.format("GET", "/" .. codes[(i %% #codes) + 1])
end
done = function(summary, latency, requests)
   io.write(string.format("non3xx %d\n", summary.errors.status))
end
"""

NGINX_CONF = """
worker_processes 2;
daemon off;
master_process on;
pid %(work)s/nginx.pid;
error_log %(work)s/nginx-error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %(work)s/body;
    proxy_temp_path %(work)s/proxy;
    fastcgi_temp_path %(work)s/fastcgi;
    uwsgi_temp_path %(work)s/uwsgi;
    scgi_temp_path %(work)s/scgi;
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:%(port)d;
        location / { return 302 https://example.com/; }
    }
}
"""


def wrk(url, script, secs=10):
    r = subprocess.run(["wrk", "-t2", "-c64", f"-d{secs}s", "--latency", "-s", script, url],
                       capture_output=True, text=True)
    out = r.stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not m:
        raise RuntimeError(f"wrk failed:\n{out}\n{r.stderr}")
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    p99_ms = float(p99.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)] if p99 else -1
    bad = re.search(r"non3xx (\d+)", out)
    return float(m.group(1)), p99_ms, int(bad.group(1)) if bad else -1


def counters(text):
    m = re.findall(r"events: (events=\d+ produced=\d+ delivered=\d+ failed=\d+ spooled=\d+ "
                   r"replayed=\d+ spool_dropped=\d+ spool_bytes=\d+)", text)
    return m[-1] if m else "(no counters logged)"


def run(bin_dir, work):
    pg = lpstack.Postgres(os.path.join(work, "pg")).up()
    redis = lpstack.Redis(os.path.join(work, "redis")).up()
    broker = lpstack.Broker(os.path.join(work, "kafka"), partitions=64).up()
    port = lpstack.free_port()
    red = lpstack.program("redirector", work, {
        "pg_dsn": pg.dsn, "redis_url": redis.url, "listen_port": port,
        "base_url": "http://s.bench", "log_level": "info", "kafka_bootstrap": broker.bootstrap,
        "kafka_topic": broker.topic, "spool_dir": os.path.join(work, "spool"),
        "pool_low_water": 100, "pool_batch": 200, "kafka_linger_ms": 5,
        "shutdown_flush_ms": 30000}).start()
    nginx = None
    try:
        lpstack.wait_port(port, proc=red.proc, what="redirector")
        key = subprocess.run([os.path.join(bin_dir, "redirector"), "-o", f"pg_dsn={pg.dsn}",
                              "apikey", "create", "bench"], capture_output=True,
                             text=True).stdout.split()[-1]
        base = f"http://127.0.0.1:{port}"
        codes = []
        for i in range(16):
            r = requests.post(base + "/api/v1/links", headers={"Authorization": f"Bearer {key}"},
                              data=json.dumps({"url": f"https://example.com/bench/{i}",
                                               "dedupe": False}), timeout=30)
            codes.append(r.json()["code"])
        for c in codes:  # warm the in-process cache
            requests.get(f"{base}/{c}", allow_redirects=False, timeout=10)
        deadline = time.time() + 10
        while time.time() < deadline and requests.get(base + "/readyz").status_code != 200:
            time.sleep(0.2)
        script = os.path.join(work, "rotate.lua")
        with open(script, "w") as f:
            f.write(ROTATE_LUA.replace("%CODES%", ", ".join(f'"{c}"' for c in codes))
                    .replace("%%", "%"))
        ngx_port = lpstack.free_port()
        conf = os.path.join(work, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF % {"work": work, "port": ngx_port})
        nginx = subprocess.Popen(["nginx", "-p", work, "-c", conf], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        lpstack.wait_port(ngx_port, proc=nginx, what="nginx")
        r_rps, r_p99, r_bad = wrk(base + "/", script)
        n_rps, n_p99, n_bad = wrk(f"http://127.0.0.1:{ngx_port}/", script)
        print(f"redirect_rps {r_rps:.0f}  (redirector GET /{{code}} over 16 codes, events on; "
              f"wrk -t2 -c64 -d10s, p99 {r_p99:.2f} ms, non-3xx {r_bad})", flush=True)
        print(f"nginx_302_rps {n_rps:.0f}  (nginx-light return 302, 2 workers; p99 {n_p99:.2f} ms, "
              f"non-3xx {n_bad})", flush=True)
        print(f"redirect_vs_nginx_ratio {r_rps / n_rps:.2f}  (target >= 0.9)", flush=True)
    finally:
        if nginx is not None:
            nginx.terminate()
            nginx.wait()
        rc = red.stop()
        print(f"redirect_producer_counters {counters(red.output())}  (redirector exit {rc})",
              flush=True)
        broker.stop()
        redis.stop()
        pg.stop()
