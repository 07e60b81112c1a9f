"""Nothing lost: under a steady request stream the dev broker goes down for
30 s and comes back; every request made appears on the topic (counted by
event id after spool replay) and no request waited on Kafka. And SIGTERM with
the broker down: exit 0, the undelivered events are spooled and replayed by
the next start."""
import http.client
import os
import re
import threading
import time

from test_redirect import read_events, start


def stream(port, codes, tag, rate, secs, out, lock, stop=None):
    """One client thread: GET /{code}?r=<tag>-<n> at `rate` req/s over a
    keep-alive connection; appends (n_id, t_start, duration, status)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    t_end = time.time() + secs
    i = 0
    nxt = time.time()
    while time.time() < t_end and not (stop and stop.is_set()):
        rid = f"{tag}-{i}"
        code = codes[i % len(codes)]
        t0 = time.perf_counter()
        started = time.time()
        c.request("GET", f"/{code}?r={rid}")
        r = c.getresponse()
        r.read()
        dt = time.perf_counter() - t0
        with lock:
            out.append((rid, started, dt, r.status))
        i += 1
        nxt += 1.0 / rate
        delay = nxt - time.time()
        if delay > 0:
            time.sleep(delay)
    c.close()


def counters(text):
    m = re.findall(r"events: events=(\d+) produced=(\d+) delivered=(\d+) failed=(\d+) "
                   r"spooled=(\d+) replayed=(\d+) spool_dropped=(\d+)", text)
    keys = ("events", "produced", "delivered", "failed", "spooled", "replayed", "spool_dropped")
    return [dict(zip(keys, map(int, x))) for x in m]


def check_topic(broker, made, timeout):
    """Every request id in `made` is on the topic; returns the events."""
    want = {rid for rid, *_ in made}
    evs = read_events(broker, len(want), timeout=timeout,
                      pred=lambda e: (e["query"] or "").startswith("r="))
    ids_by_rid = {}
    for _, e in evs:
        ids_by_rid.setdefault(e["query"][2:], set()).add(e["id"])
    missing = want - set(ids_by_rid)
    assert not missing, f"{len(missing)} of {len(want)} requests have no event, e.g. {sorted(missing)[:5]}"
    assert set(ids_by_rid) == want
    # exactly one event id per request (replays may repeat a message, never an id)
    assert all(len(v) == 1 for v in ids_by_rid.values())
    distinct = {e["id"] for _, e in evs}
    assert len(distinct) == len(want)
    return evs


def test_broker_outage_loses_nothing(procs, pg, redis, broker, workdir):
    red = start(procs, pg, redis, broker, workdir, {
        "kafka_message_timeout_ms": 5000, "log_level": "info", "http_threads": 2})
    codes = [red.create(url=f"https://example.com/f{i}")["code"] for i in range(8)]
    for c in codes:  # warm the cache
        assert red.get("/" + c).status_code == 302
    out, lock, threads = [], threading.Lock(), []
    t_start = time.time()
    for t in range(4):
        th = threading.Thread(target=stream, args=(red.port, codes, f"t{t}", 50, 45, out, lock))
        th.start()
        threads.append(th)
    time.sleep(7)
    down_at = time.time()
    broker.brokers_down()
    time.sleep(30)
    up_at = time.time()
    broker.brokers_up()
    for th in threads:
        th.join()
    assert all(s == 302 for _, _, _, s in out)
    n = len(out)
    assert n > 6000, n
    during = [dt for _, t, dt, _ in out if down_at <= t <= up_at]
    assert len(during) > 4000
    slow = sorted(during)[-5:]
    print(f"requests {n}, during outage {len(during)}, slowest during outage "
          f"{[round(x * 1000, 1) for x in slow]} ms; whole run max "
          f"{max(dt for _, _, dt, _ in out) * 1000:.1f} ms; took {time.time() - t_start:.0f} s")
    # Not blocked on Kafka (kafka_message_timeout_ms is 5 s): the 99th
    # percentile under 50 ms and no request near a second. (The maximum
    # under 50 ms failed on one scheduling pause of a 2-core machine with
    # four client threads sharing Python's interpreter lock.)
    p99 = sorted(during)[int(len(during) * 0.99)]
    assert p99 < 0.050, f"99th percentile during the outage {p99 * 1000:.1f} ms"
    assert max(during) < 1.0, f"slowest request during the outage took {max(during) * 1000:.1f} ms"
    check_topic(broker, out, timeout=120)
    assert red.proc.stop() == 0
    c, = counters(red.proc.output())
    print("producer counters:", c)
    assert c["spooled"] > 0 and c["replayed"] > 0 and c["spool_dropped"] == 0
    assert c["events"] == n + len(codes)
    assert c["delivered"] >= c["events"]
    assert "replaying" in red.proc.output()


def test_sigterm_spools_and_next_start_replays(procs, pg, redis, broker, workdir):
    settings = {"shutdown_flush_ms": 1500, "kafka_message_timeout_ms": 60000}
    red = start(procs, pg, redis, broker, workdir, settings)
    codes = [red.create(url=f"https://example.com/s{i}")["code"] for i in range(4)]
    out, lock = [], threading.Lock()
    stream(red.port, codes, "up", 100, 2, out, lock)
    broker.brokers_down()
    time.sleep(1)
    stream(red.port, codes, "down", 100, 2, out, lock)
    t0 = time.time()
    rc = red.proc.stop()
    assert rc == 0, red.proc.output()[-3000:]
    assert time.time() - t0 < 15
    c, = counters(red.proc.output())
    print("first run:", c)
    assert c["spooled"] > 0 and c["spool_dropped"] == 0
    spool = os.path.join(workdir, "spool")
    # the spool's files (the directory also holds its lock and the ids' mark)
    def spooled():
        return [os.path.getsize(os.path.join(spool, f)) for f in os.listdir(spool)
                if f == "spool.active" or f.endswith(".spool")]
    assert sum(spooled()) > 0
    broker.brokers_up()
    red2 = start(procs, pg, redis, broker, workdir, settings)  # same spool_dir
    check_topic(broker, out, timeout=60)
    deadline = time.time() + 20
    while time.time() < deadline and any(spooled()):
        time.sleep(0.2)
    assert not any(spooled())
    assert red2.proc.stop() == 0
    c2 = counters(red2.proc.output())[-1]  # both runs log to the same file
    print("second run:", c2)
    assert c2["replayed"] == c["spooled"]


def test_event_kafka_refuses_is_kept_and_the_rest_replayed(procs, pg, redis, broker, workdir):
    """An event Kafka refuses for good (past kafka_message_max_bytes) is kept
    in spool_dir/refused-N.spool (N: its replay file's number), and the
    events spooled after it in the same file are replayed: the replay
    stopped at it, and kept the whole file back for good, retrying every
    30 s."""
    red = start(procs, pg, redis, broker, workdir, {
        "kafka_message_max_bytes": 1000, "kafka_message_timeout_ms": 2000})
    code = red.create(url="https://example.com/big")["code"]
    assert red.get("/" + code).status_code == 302  # cached
    broker.brokers_down()
    time.sleep(0.5)
    c = http.client.HTTPConnection("127.0.0.1", red.port, timeout=10)
    c.request("GET", f"/{code}?r=big", headers={"User-Agent": "B" * 1500})
    r = c.getresponse()
    r.read()
    assert r.status == 302
    out, lock = [], threading.Lock()
    stream(red.port, [code], "after", 20, 1, out, lock)  # ~20 small events
    assert out and all(s == 302 for *_, s in out)
    spool = os.path.join(workdir, "spool")
    time.sleep(3)  # past kafka_message_timeout_ms: the small ones spool too
    broker.brokers_up()
    check_topic(broker, out, timeout=60)

    def refused_files():
        return [f for f in os.listdir(spool) if f.startswith("refused-")]
    deadline = time.time() + 20
    while time.time() < deadline and (
            not refused_files() or
            any(f.startswith("replay-") for f in os.listdir(spool)) or
            os.path.getsize(os.path.join(spool, "spool.active")) > 0):
        time.sleep(0.2)
    left = [f for f in os.listdir(spool) if f.startswith("replay-")]
    assert not left, f"replay files left: {left}"
    names = refused_files()
    assert len(names) == 1 and re.fullmatch(r"refused-\d{16}\.spool", names[0]), names
    with open(os.path.join(spool, names[0]), "rb") as f:
        data = f.read()
    assert data.count(b"r=big") == 1 and b"B" * 1500 in data  # the refused event alone
    assert data.count(b"r=after") == 0
    big = read_events(broker, 1, timeout=3, pred=lambda e: e["query"] == "r=big")
    assert big == []  # never on the topic
    metrics = red.get("/metrics").text
    assert re.search(r"^linkpulse_redirector_events_spool_refused_total 1$", metrics, re.M), \
        metrics
    assert red.proc.stop() == 0
    line = re.findall(r"events: .*spool_dropped=(\d+) spool_bytes=(\d+) spool_refused=(\d+)",
                      red.proc.output())
    assert line == [("0", "0", "1")], line
    assert f"kept in {names[0]}" in red.proc.output()
    # renamed to its replay file's name, it is replayed at the next start
    # (the limit raised): the event reaches the topic
    os.rename(os.path.join(spool, names[0]),
              os.path.join(spool, names[0].replace("refused-", "replay-")))
    red2 = start(procs, pg, redis, broker, workdir, {"kafka_message_timeout_ms": 2000})
    big = read_events(broker, 1, timeout=30, pred=lambda e: e["query"] == "r=big")
    assert len(big) == 1 and big[0][1]["user_agent"] == "B" * 1500
    assert red2.proc.stop() == 0
