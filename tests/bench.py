"""make bench: measures side by side in one run on this machine and prints the
figures (and ratios against baselines where an issue names one). Benchmarks
are not tests: they never fail the build, they report."""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lpstack  # noqa: E402

CREATE_LUA = r"""
local counter = 0
function setup(thread)
   thread:set("tid", tostring(math.random(1, 1000000000)))
end
request = function()
   counter = counter + 1
   return wrk.format("POST", "/api/v1/links",
      {["Authorization"] = "Bearer %KEY%", ["Content-Type"] = "application/json"},
      '{"url":"https://bench.example/' .. tid .. '/' .. counter .. '"}')
end
done = function(summary, latency, requests)
   io.write(string.format("non2xx %d\n", summary.errors.status))
end
"""


def wrk(url, script, threads=2, conns=64, secs=10):
    r = subprocess.run(["wrk", f"-t{threads}", f"-c{conns}", f"-d{secs}s", "--latency", "-s",
                        script, url], capture_output=True, text=True)
    out = r.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    p99_ms = float(p99.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)] if p99 else -1
    non2xx = int(re.search(r"non2xx (\d+)", out).group(1)) if "non2xx" in out else -1
    return rps, p99_ms, non2xx


def bench_api(bin_dir, work):
    pg = lpstack.Postgres(os.path.join(work, "pg")).up()
    redis = lpstack.Redis(os.path.join(work, "redis")).up()
    port = lpstack.free_port()
    red = lpstack.program("redirector", work, {
        "pg_dsn": pg.dsn, "redis_url": redis.url, "listen_port": port,
        "base_url": "http://s.bench", "log_level": "warn", "pg_pool_size": 48,
        "http_threads": 48, "pool_low_water": 100000, "pool_batch": 20000}).start()
    try:
        lpstack.wait_port(port, proc=red.proc, what="redirector")
        key = subprocess.run([os.path.join(bin_dir, "redirector"), "-o", f"pg_dsn={pg.dsn}",
                              "apikey", "create", "bench"], capture_output=True,
                             text=True).stdout.split()[-1]
        base = f"http://127.0.0.1:{port}"
        # let the pool fill before measuring
        deadline = time.time() + 60
        while time.time() < deadline and int(redis.cli("SCARD", "lp:pool:6") or 0) < 100000:
            time.sleep(0.5)
        script = os.path.join(work, "create.lua")
        with open(script, "w") as f:
            f.write(CREATE_LUA.replace("%KEY%", key))
        rps, p99, non2xx = wrk(base, script, secs=10)
        print(f"api_single_creates_per_sec {rps:.0f}  (wrk -t2 -c64 -d10s keep-alive, p99 {p99:.1f} ms, "
              f"non-2xx {non2xx}; target >= 5000)", flush=True)

        import requests

        def bulk_worker(w, secs=10.0):
            s = requests.Session()
            n, i, t_end = 0, 0, time.time() + secs
            while time.time() < t_end:
                body = {"links": [{"url": f"https://bulk.example/{w}/{i}/{j}"} for j in range(1000)]}
                r = s.post(base + "/api/v1/links/bulk", data=json.dumps(body),
                           headers={"Authorization": f"Bearer {key}"}, timeout=300)
                n += sum(1 for x in r.json()["results"] if x["status"] == 201)
                i += 1
            return n
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            total = sum(ex.map(bulk_worker, range(4)))
        dt = time.time() - t0
        print(f"api_bulk_links_per_sec {total / dt:.0f}  (4 clients, batches of 1000; "
              f"target >= 50000)", flush=True)
        print(f"api_bulk_vs_single_ratio {total / dt / rps:.2f}", flush=True)
    finally:
        red.stop()
        redis.stop()
        pg.stop()


def bench_binaries(bin_dir):
    for name in ("bench_ua", "bench_geo"):
        path = os.path.join(bin_dir, name)
        if not os.path.exists(path):
            print(f"{name}: not built", flush=True)
            continue
        env = dict(os.environ, LP_GEOIP_CITY=os.path.join(lpstack.ROOT,
                                                         "var/geoip/GeoLite2-City.mmdb"),
                   LP_UAP_DIR="/usr/share/uap-core")
        r = subprocess.run([path], capture_output=True, text=True, env=env, cwd=lpstack.ROOT)
        print(r.stdout.strip(), flush=True)


def bench_modules():
    """Every tests/bench/bench_*.py with a run(bin_dir, work) function, by name."""
    import importlib.util
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench")
    mods = []
    for name in sorted(os.listdir(d)):
        if name.startswith("bench_") and name.endswith(".py"):
            spec = importlib.util.spec_from_file_location(name[:-3], os.path.join(d, name))
            m = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(m)
            mods.append((name[6:-3], m))
    return mods


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", default=lpstack.BIN)
    ap.add_argument("--only", action="append", default=[],
                    help="run only these benches (binaries, api, or a tests/bench/bench_NAME.py)")
    a = ap.parse_args()
    lpstack.BIN = os.path.abspath(a.bin)
    work = tempfile.mkdtemp(prefix="lp-bench-", dir="/tmp")
    os.chmod(work, 0o755)
    try:
        print(f"== linkpulse bench on {os.cpu_count()} cores", flush=True)
        want = set(a.only)
        if not want or "binaries" in want:
            bench_binaries(lpstack.BIN)
        if not want or "api" in want:
            bench_api(lpstack.BIN, work)
        for name, mod in bench_modules():
            if not want or name in want:
                sub = os.path.join(work, name)
                os.makedirs(sub, exist_ok=True)
                os.chmod(sub, 0o755)
                mod.run(lpstack.BIN, sub)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
