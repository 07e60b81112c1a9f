"""make bench: ingest events/s from the topic into PostgreSQL (validation,
enrichment, probe for stored ids, COPY into visit_record, rollups, offsets) next
to a raw COPY of the same final visit_record rows into an empty visit_record, in
the same run. The link_day_dim compaction ingest runs every 60 s in the
background is timed separately over the run's batch rows and also reported as
if it had been paid inside the run.

Events are keyed by code, as the redirector keys them, so each link's events
are in one partition and so in one of ingest's two loading lanes (until the
ninth session they were keyed by event id, which put every hot link's
rollup rows in both lanes, where the second lane waited for the first's
row locks; one run each, 2026-11-24: keyed by event id 22.5k events/s with
HEAD 3 and 24.7k with HEAD 2, keyed by code with HEAD 2 27.0k and 27.2k). Link
popularity falls off as u^HEAD (u uniform): HEAD 2 puts 2.2% of the events on
the hottest link, which keeps its partition under the dev broker's 5 MiB
(HEAD 3 put 7.9% there and had to be keyed by event id).

Knobs (environment): LP_BENCH_INGEST_KEY (code; id as before),
LP_BENCH_INGEST_HEAD (2), LP_BENCH_INGEST_EVENTS (200000), LP_BENCH_INGEST_BATCH and
LP_BENCH_INGEST_BATCH_MS (ingest's batch_max_events and batch_max_ms: 40000 and 500, its
defaults; 50000 and 1000 until the tenth session, 20000 and 500 until the fourteenth), LP_BENCH_INGEST_LOG (ingest
log level; debug prints per-batch COPY / insert+rollup times),
LP_BENCH_INGEST_PGOPTIONS (PGOPTIONS for ingest's sessions, e.g. auto_explain),
LP_BENCH_INGEST_DEBUG=1 (print ingest's and PostgreSQL's logs at the end)."""
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import lpstack  # noqa: E402
from test_ingest import EventGen, produce, producer, uap_user_agents  # noqa: E402

N_EVENTS = int(os.environ.get("LP_BENCH_INGEST_EVENTS", "200000"))
HEAD = float(os.environ.get("LP_BENCH_INGEST_HEAD", "2"))
KEY = os.environ.get("LP_BENCH_INGEST_KEY", "code")
COLS = ("id, url_link_id, unique_code, client_id, client_ip, visit_time, http_status, "
        "user_agent, referer, referer_host, accept_language, language, host, query_string, "
        "country_code, country, province, city, isp, asn, browser_type, browser_version, "
        "os_type, os_version, device_type, device_family, device_brand, device_model, is_bot")


def realistic_events(n, seed=42):
    """n events: user agents drawn with a heavy head (a few browsers make most
    traffic) from uap-core's test strings, ~n/10 distinct visitors on public
    IPv4/IPv6 addresses, 2,000 links (a few hot ones get most clicks, as
    in SMS campaigns: link 1 + 2000 u^HEAD), 3% orphans, referers and
    languages."""
    rng = random.Random(seed)
    uas = [u for u, _ in uap_user_agents(limit=3000, seed=seed)]
    gen = EventGen(links=range(1, 2001), seed=seed, uas=uas)
    clients = []
    for _ in range(max(1, n // 10)):
        while True:
            a = rng.randrange(1 << 32)
            first = a >> 24
            if first not in (0, 10, 100, 127, 169, 172, 192, 198, 203) and first < 224:
                break
        ip = ".".join(str((a >> s) & 255) for s in (24, 16, 8, 0))
        if rng.random() < 0.1:
            ip = "2a0%d:%x:%x::%x" % (rng.randrange(10), rng.randrange(65536),
                                       rng.randrange(65536), rng.randrange(65536))
        ua = uas[int(len(uas) * rng.random() ** 4)]
        clients.append((ip, ua))
    out = []
    for _ in range(n):
        ip, ua = clients[int(len(clients) * rng.random() ** 2)]
        e = gen.event(ip=ip, user_agent=ua)
        if rng.random() < 0.03:
            e.update(link_id=None, code="gone%d" % rng.randrange(50), status=404)
        else:
            # campaign traffic is concentrated: a Zipf-like head of hot links
            e.update(link_id=1 + int(2000 * rng.random() ** HEAD), status=302)
            e["code"] = "c%d" % e["link_id"]
        out.append(e)
    return out


def stored_next(cur):
    """Sum of the stored offsets, over one open connection: a psql process per
    poll (every 50 ms) took a sixth of the machine's CPU away from the run it
    was timing (perf, 2026-11-24)."""
    cur.execute("SELECT coalesce(sum(next_offset), 0) FROM ingest_offset")
    return int(cur.fetchone()[0])


def run(bin_dir, work):
    lpstack.BIN = bin_dir
    pg = lpstack.Postgres(os.path.join(work, "pg")).up()
    broker = lpstack.Broker(os.path.join(work, "kafka"), partitions=64).up()
    ing = None
    try:
        # Both timed phases (ingest, then the raw COPY) run on a cluster in
        # the state of a running server: WAL segments recycled, shared
        # buffers mapped. Until the fifteenth session only the raw COPY did
        # (it ran after ingest had warmed the cluster).
        warm = pg.warm_up()
        print(f"ingest_bench_warm_up {warm:.1f} s  (WAL segments and shared_buffers "
              f"warmed before either timed phase)", flush=True)
        t0 = time.time()
        events = realistic_events(N_EVENTS)
        # keyed by code, as the redirector does (see the docstring)
        produce(broker.bootstrap, broker.topic, events, prod=producer(broker.bootstrap),
                key_field=KEY)
        print(f"ingest_bench_events {len(events)} produced to 64 partitions in "
              f"{time.time() - t0:.1f} s", flush=True)
        geo = os.path.join(lpstack.ROOT, "var/geoip/GeoLite2-City.mmdb")
        ing = lpstack.program("ingest", work, {
            "pg_dsn": pg.dsn, "kafka_bootstrap": broker.bootstrap, "geoip_city_db": geo,
            "metrics_port": lpstack.free_port(),
            # ingest's own defaults unless asked: 20,000 events or 500 ms
            "batch_max_events": int(os.environ.get("LP_BENCH_INGEST_BATCH", "40000")),
            "batch_max_ms": int(os.environ.get("LP_BENCH_INGEST_BATCH_MS", "500")),
            "log_level": os.environ.get("LP_BENCH_INGEST_LOG", "info")},
            env={"PGOPTIONS": os.environ.get("LP_BENCH_INGEST_PGOPTIONS", "")})
        import psycopg2
        poll = psycopg2.connect(pg.dsn)
        poll.autocommit = True
        cur = poll.cursor()
        t_start = time.time()
        ing.start()
        t_assigned = None
        cpu0 = None
        deadline = t_start + 900
        while time.time() < deadline:
            if t_assigned is None and "assigned 64 partitions" in ing.output():
                t_assigned = time.time()
                cpu0 = (lpstack.cpu_secs([ing.proc.pid]), pg.cpu_secs())
            if stored_next(cur) >= len(events):
                break
            if not ing.alive():
                raise RuntimeError("ingest exited:\n" + ing.output()[-3000:])
            time.sleep(0.05)
        t_done = time.time()
        cpu1 = (lpstack.cpu_secs([ing.proc.pid]), pg.cpu_secs())
        poll.close()
        rows = int(pg.psql("SELECT count(*) FROM visit_record"))
        rejects = pg.psql("SELECT count(*), string_agg(DISTINCT left(reason, 60), '; ') "
                          "FROM visit_reject")
        nrej = int(rejects.split("|")[0])
        dups = len(events) - len(set(e["id"] for e in events))
        assert rows + nrej + dups == len(events), (rows, rejects, dups, len(events))
        if nrej or dups:
            print(f"ingest_bench_note {nrej} generated events rejected ({rejects.split('|')[1]}), "
                  f"{dups} duplicate ids", flush=True)
        ing.stop()
        t_assigned = t_assigned or t_start
        batch_rows = int(pg.psql("SELECT count(*) FROM link_day_dim_batch"))
        t1 = time.time()
        pg.psql("SELECT link_day_dim_compact()")
        t_compact = time.time() - t1
        rate_total = rows / (t_done - t_start)
        rate = rows / (t_done - t_assigned)

        # raw COPY of the very same rows into an empty visit_record
        dump = os.path.join(work, "visit_record.copy")
        os.chmod(work, 0o755)
        pg.psql(f"\\copy (SELECT {COLS} FROM visit_record) TO '{dump}'")
        raw = lpstack.Postgres(pg.datadir, port=pg.port)
        raw.dbname = "rawcopy"
        raw.create_db()
        raw.migrate()
        raw.psql("SELECT visit_record_ensure_partition(now() - interval '1 day'), "
                 "visit_record_ensure_partition(now())")
        t1 = time.time()
        raw.psql(f"\\copy visit_record ({COLS}) FROM '{dump}'")
        t_copy = time.time() - t1
        assert raw.psql("SELECT count(*) FROM visit_record") == str(rows)
        rate_text = rows / t_copy
        # the same rows in COPY's binary format, into an emptied visit_record:
        # the baseline is the faster of the two formats
        dump_bin = dump + ".bin"
        pg.psql(f"\\copy (SELECT {COLS} FROM visit_record) TO '{dump_bin}' WITH (FORMAT binary)")
        raw.psql("TRUNCATE visit_record")
        t1 = time.time()
        raw.psql(f"\\copy visit_record ({COLS}) FROM '{dump_bin}' WITH (FORMAT binary)")
        t_copy_bin = time.time() - t1
        assert raw.psql("SELECT count(*) FROM visit_record") == str(rows)
        rate_bin = rows / t_copy_bin
        rate_copy = max(rate_text, rate_bin)
        print(f"ingest_events_per_sec {rate:.0f}  (topic -> visit_record + rollups + offsets, "
              f"from partition assignment to the last commit; {rate_total:.0f}/s counting "
              f"process start, regex compilation and group join)", flush=True)
        print(f"raw_copy_rows_per_sec {rate_copy:.0f}  (psql \\copy of the same {rows} rows "
              f"into an empty visit_record, the faster format: text {rate_text:.0f}/s, "
              f"binary {rate_bin:.0f}/s)", flush=True)
        print(f"ingest_vs_raw_copy_ratio {rate / rate_copy:.2f}  (target >= 0.8)", flush=True)
        if cpu0:
            print(f"ingest_cpu_us_per_event {(cpu1[0] - cpu0[0]) * 1e6 / rows:.1f} ingest, "
                  f"{(cpu1[1] - cpu0[1]) * 1e6 / rows:.1f} PostgreSQL  (utime + stime "
                  f"from partition assignment to the last commit, per row; "
                  f"{(t_done - t_assigned) * 2e6 / rows:.1f} us of the 2 cores' time)",
                  flush=True)
        rate_c = rows / (t_done - t_assigned + t_compact)
        print(f"ingest_link_day_dim_compaction_s {t_compact:.2f}  ({batch_rows} batch rows "
              f"left at the end; with it paid in the run: {rate_c:.0f}/s, ratio "
              f"{rate_c / rate_copy:.2f})", flush=True)
    finally:
        if ing is not None and ing.alive():
            ing.stop()
        broker.stop()
        if os.environ.get("LP_BENCH_INGEST_DEBUG"):
            print(ing.output()[-20000:])
            with open(pg.logfile) as f:
                print(f.read()[-30000:])
        pg.stop()
