"""make bench: ingest events/s from the topic into PostgreSQL (validation,
enrichment, COPY into visit_record, rollups, offsets) next to a raw COPY of the
same final visit_record rows into an empty visit_record, in the same run. The
two alternate over LP_BENCH_INGEST_ROUNDS rounds (3; each ingest round starts a
new ingest on the emptied tables, which reads the topic from its start again)
and the headline takes each side's best, as the redirect bench does: this
machine's speed moves by a fifth from minute to minute, and until the
fifteenth session a single ingest run was set against a single raw COPY taken
a minute later. The link_day_dim compaction ingest runs every 60 s in the
background is timed separately over the last round's batch rows and also
reported as if it had been paid inside that round.

Events are written as the redirector writes them: compact JSON (no spaces;
Python's default separators until the fifteenth session) in lz4-compressed
batches (uncompressed until then), keyed by code, so each link's events
are in one partition and so in one of ingest's two loading lanes (until the
ninth session they were keyed by event id, which put every hot link's
rollup rows in both lanes, where the second lane waited for the first's
row locks; one run each, 2026-11-24: keyed by event id 22.5k events/s with
HEAD 3 and 24.7k with HEAD 2, keyed by code with HEAD 2 27.0k and 27.2k). Link
popularity falls off as u^HEAD (u uniform): HEAD 2 puts 2.2% of the events on
the hottest link, which keeps its partition under the dev broker's 5 MiB
(HEAD 3 put 7.9% there and had to be keyed by event id).

Before the rounds, bench_parse times jansson's json_loadb (and ingest's
event_parse) over the same events on one thread; the line after the ratio sets
that against ingest's CPU per event and against the CPU the 2 cores have per
event at the 0.8 target (added in the sixteenth session: the parse alone is
about half of what ingest spends per event).

Knobs (environment): LP_BENCH_INGEST_KEY (code; id as before),
LP_BENCH_INGEST_HEAD (2), LP_BENCH_INGEST_EVENTS (200000), LP_BENCH_INGEST_BATCH and
LP_BENCH_INGEST_BATCH_MS (ingest's batch_max_events and batch_max_ms: 40000 and 500, its
defaults; 50000 and 1000 until the tenth session, 20000 and 500 until the fourteenth), LP_BENCH_INGEST_LOG (ingest
log level; debug prints per-batch COPY / insert+rollup times),
LP_BENCH_INGEST_PGOPTIONS (PGOPTIONS for ingest's sessions, e.g. auto_explain),
LP_BENCH_INGEST_DEBUG=1 (print ingest's and PostgreSQL's logs at the end),
LP_BENCH_INGEST_ROUNDS (3)."""
import os
import random
import re
import statistics
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
TARGET = 0.8  # issue 6: ingest events/s over raw COPY rows/s
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


# What one ingest round loaded, emptied before the next round (and whose
# stored offsets make ingest read the topic from its start again).
RESET = ("TRUNCATE visit_record, link_hour, link_hour_visitor, link_day, link_total, "
         "orphan_day, link_day_dim_batch, link_day_dim_row, link_month_dim, link_week_dim, "
         "ingest_offset, visit_reject, ingest_lost")


def ingest_round(pg, broker, work, n_events, rnd):
    """One ingest process over the whole topic, from partition assignment to
    the last commit. Returns (rate, rate counting start, ingest and cluster
    CPU seconds per event, the process)."""
    geo = os.path.join(lpstack.ROOT, "var/geoip/GeoLite2-City.mmdb")
    rdir = os.path.join(work, f"round{rnd}")
    os.makedirs(rdir, exist_ok=True)
    ing = lpstack.program("ingest", rdir, {
        "pg_dsn": pg.dsn, "kafka_bootstrap": broker.bootstrap, "geoip_city_db": geo,
        "metrics_port": lpstack.free_port(),
        # ingest's own defaults unless asked: 40,000 events or 500 ms
        "batch_max_events": int(os.environ.get("LP_BENCH_INGEST_BATCH", "40000")),
        "batch_max_ms": int(os.environ.get("LP_BENCH_INGEST_BATCH_MS", "500")),
        # timed apart (ingest_link_day_dim_compaction_s), not inside a round
        "compact_interval_s": 0,
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
        if stored_next(cur) >= n_events:
            break
        if not ing.alive():
            raise RuntimeError("ingest exited:\n" + ing.output()[-3000:])
        time.sleep(0.05)
    else:
        raise RuntimeError(f"ingest round timed out: {stored_next(cur)} of {n_events} offsets "
                           "stored after 900 s")
    if t_assigned is None:
        # the headline would silently count process start, and the CPU figures divide by 0
        raise RuntimeError("ingest never logged \"assigned 64 partitions\" (an info line: "
                           "LP_BENCH_INGEST_LOG must be info or debug)")
    t_done = time.time()
    cpu1 = (lpstack.cpu_secs([ing.proc.pid]), pg.cpu_secs())
    poll.close()
    rows = int(pg.psql("SELECT count(*) FROM visit_record"))
    cpu = ((cpu1[0] - cpu0[0]) / rows, (cpu1[1] - cpu0[1]) / rows)
    return rows / (t_done - t_assigned), rows / (t_done - t_start), cpu, rows, \
        t_done - t_assigned, ing


def raw_round(raw, dump, dump_bin, rows):
    """The same rows COPYed into an emptied visit_record of the rawcopy
    database, in text and in binary format: ((text rows/s, binary rows/s),
    the cluster's CPU seconds per row of the faster one, psql's floor in
    seconds). psql is not the postmaster's child, so its own CPU is not
    counted; its start and connection (the floor: the median of three psql -c
    'SELECT 1') are taken off the COPY's time, as ingest's clock starts after
    its own start. Each COPY starts after a CHECKPOINT, as each ingest round
    does, not amid the previous round's dirty buffers."""
    rates, cpus, floors = [], [], []
    for _ in range(3):
        t1 = time.time()
        raw.psql("SELECT 1")
        floors.append(time.time() - t1)
    floor = statistics.median(floors)
    for path, fmt in ((dump, ""), (dump_bin, " WITH (FORMAT binary)")):
        raw.psql("TRUNCATE visit_record")
        raw.psql("CHECKPOINT")
        c1 = raw.cpu_secs()
        t1 = time.time()
        raw.psql(f"\\copy visit_record ({COLS}) FROM '{path}'{fmt}")
        rates.append(rows / (time.time() - t1 - floor))
        cpus.append((raw.cpu_secs() - c1) / rows)
        assert raw.psql("SELECT count(*) FROM visit_record") == str(rows)
    return tuple(rates), cpus[rates.index(max(rates))], floor


def parse_cost(bin_dir, work, events):
    """bench_parse over the events as the redirector writes them (compact
    JSON): (json_loadb us, event_parse us) per event, or None."""
    path = os.path.join(work, "events.jsonl")
    with open(path, "w") as f:
        for e in events:
            f.write(lpstack.encode_event(e).decode() + "\n")
    r = subprocess.run([os.path.join(bin_dir, "bench_parse"), path, "3"],
                       capture_output=True, text=True)
    os.unlink(path)
    m = re.match(r"bench_parse_us_per_event ([\d.]+) json_loadb ([\d.]+) event_parse", r.stdout)
    if r.returncode != 0 or m is None:
        print(f"bench_parse failed: {r.stdout.strip()} {r.stderr.strip()}", flush=True)
        return None
    print(r.stdout.strip(), flush=True)
    return float(m.group(1)), float(m.group(2))


def run(bin_dir, work):
    lpstack.BIN = bin_dir
    pg = lpstack.Postgres(os.path.join(work, "pg")).up()
    broker = lpstack.Broker(os.path.join(work, "kafka"), partitions=64).up()
    ing = None
    rounds = int(os.environ.get("LP_BENCH_INGEST_ROUNDS", "3"))
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
        # as the redirector writes them (see the docstring)
        produce(broker.bootstrap, broker.topic, events,
                prod=producer(broker.bootstrap, **{"compression.codec": "lz4"}),
                key_field=KEY, compact=True)
        print(f"ingest_bench_events {len(events)} produced to 64 partitions in "
              f"{time.time() - t0:.1f} s", flush=True)
        parse = parse_cost(bin_dir, work, events)
        raw = lpstack.Postgres(pg.datadir, port=pg.port)
        raw.dbname = "rawcopy"
        raw.create_db()
        raw.migrate()
        raw.psql("SELECT visit_record_ensure_partition(now() - interval '1 day'), "
                 "visit_record_ensure_partition(now())")
        dump = os.path.join(work, "visit_record.copy")
        dump_bin = dump + ".bin"
        os.chmod(work, 0o755)
        ings, raws, per_round, cpu_ratios = [], [], [], []
        for rnd in range(rounds):
            if rnd > 0:
                pg.psql(RESET)
                pg.psql("CHECKPOINT")
            rate, rate_total, cpu, rows, secs, ing = ingest_round(pg, broker, work,
                                                                   len(events), rnd)
            if rnd == 0:
                rejects = pg.psql("SELECT count(*), string_agg(DISTINCT left(reason, 60), '; ') "
                                  "FROM visit_reject")
                nrej = int(rejects.split("|")[0])
                dups = len(events) - len(set(e["id"] for e in events))
                assert rows + nrej + dups == len(events), (rows, rejects, dups, len(events))
                if nrej or dups:
                    print(f"ingest_bench_note {nrej} generated events rejected "
                          f"({rejects.split('|')[1]}), {dups} duplicate ids", flush=True)
                # the very rows ingest stored, for the raw COPY
                pg.psql(f"\\copy (SELECT {COLS} FROM visit_record) TO '{dump}'")
                pg.psql(f"\\copy (SELECT {COLS} FROM visit_record) TO '{dump_bin}' "
                        f"WITH (FORMAT binary)")
            ing.stop()
            ings.append((rate, rate_total, cpu, secs))
            rates_raw, cpu_raw, floor = raw_round(raw, dump, dump_bin, rows)
            raws.append(rates_raw)
            raw_best = max(rates_raw)
            per_round.append(rate / raw_best)
            # (CPU ratio, the share of the two cores ingest and PostgreSQL kept
            # busy, the raw COPY's wall time per CPU time)
            cpu_ratios.append(((cpu[0] + cpu[1]) / cpu_raw, (cpu[0] + cpu[1]) * rate / 2,
                               1 / (raw_best * cpu_raw)))
            print(f"ingest_bench_round {rnd + 1}: ingest {rate:.0f} events/s (ingest "
                  f"{cpu[0] * 1e6:.1f} us, PostgreSQL {cpu[1] * 1e6:.1f} us of CPU per event), "
                  f"raw COPY text {raws[-1][0]:.0f} binary {raws[-1][1]:.0f} rows/s "
                  f"(PostgreSQL {cpu_raw * 1e6:.1f} us of CPU per row; psql's start and "
                  f"connection, {floor * 1e3:.0f} ms, not counted): "
                  f"{per_round[-1]:.2f}", flush=True)
        batch_rows = int(pg.psql("SELECT count(*) FROM link_day_dim_batch"))
        t1 = time.time()
        pg.psql("SELECT link_day_dim_compact()")
        t_compact = time.time() - t1
        best = max(ings, key=lambda x: x[0])
        rate, rate_total, cpu, secs = best
        rate_copy = max(max(r) for r in raws)
        text_best = max(r[0] for r in raws)
        bin_best = max(r[1] for r in raws)
        print(f"ingest_events_per_sec {rate:.0f}  (topic -> visit_record + rollups + offsets, "
              f"from partition assignment to the last commit; best of "
              f"{' '.join(f'{i[0]:.0f}' for i in ings)}; {rate_total:.0f}/s counting process "
              f"start, regex compilation and group join)", flush=True)
        print(f"raw_copy_rows_per_sec {rate_copy:.0f}  (psql \\copy of the same {rows} rows "
              f"into an emptied visit_record, the faster format: best text {text_best:.0f}/s, "
              f"best binary {bin_best:.0f}/s over {rounds} rounds)", flush=True)
        print(f"ingest_vs_raw_copy_ratio {rate / rate_copy:.2f}  (target >= {TARGET}; best against "
              f"best; per round {' '.join(f'{x:.2f}' for x in per_round)}, median "
              f"{statistics.median(per_round):.2f})", flush=True)
        print(f"ingest_cpu_us_per_event {cpu[0] * 1e6:.1f} ingest, {cpu[1] * 1e6:.1f} PostgreSQL  "
              f"(the best round's utime + stime from partition assignment to the last commit, "
              f"per row; {secs * 2e6 / rows:.1f} us of the 2 cores' time)", flush=True)
        if parse is not None:
            # At the target the two cores have 2 / (TARGET * raw rate) seconds of CPU
            # per event for everything: ingest, PostgreSQL, the dev broker.
            budget = 2e6 / (TARGET * rate_copy)
            print(f"ingest_json_parse_us_per_event {parse[0]:.2f}  (jansson's json_loadb of "
                  f"these events on one thread, {parse[1]:.2f} with ingest's validation: "
                  f"{100 * parse[1] / (cpu[0] * 1e6):.0f}% of ingest's CPU per event in the "
                  f"best round; at the {TARGET} target the 2 cores have {budget:.1f} us per event "
                  f"for ingest and PostgreSQL together, which used "
                  f"{(cpu[0] + cpu[1]) * 1e6:.1f})", flush=True)
        # What the ratio can reach whatever the machine's speed: ingest's
        # events/s is 2 cores x busy share / its CPU per event, the raw COPY's
        # rows/s 1 / (its CPU per row x wall/CPU), so the ratio is
        # 2 x busy x wall/CPU / the CPU ratio; the CPU ratio the target needs:
        def needed(busy, wait):
            return 2 * busy * wait / TARGET
        med = statistics.median
        print(f"ingest_cpu_vs_raw_copy {med(c for c, _, _ in cpu_ratios):.2f}  (ingest's and "
              f"PostgreSQL's CPU per event over PostgreSQL's CPU per row of the raw COPY, "
              f"median of the rounds {' '.join(f'{c:.2f}' for c, _, _ in cpu_ratios)}; for "
              f"{TARGET} it would need to be {med(needed(b, w) for _, b, w in cpu_ratios):.2f} "
              f"or less with the rounds' {100 * med(b for _, b, _ in cpu_ratios):.0f}% of the "
              f"two cores busy with ingest and PostgreSQL, "
              f"{med(needed(1, w) for _, _, w in cpu_ratios):.2f} with all of them)", flush=True)
        rate_c = rows / (secs + t_compact)
        print(f"ingest_link_day_dim_compaction_s {t_compact:.2f}  ({batch_rows} batch rows "
              f"left by the last round; with it paid in that round: {rate_c:.0f}/s, ratio "
              f"{rate_c / rate_copy:.2f})", flush=True)
    finally:
        if ing is not None and ing.alive():
            ing.stop()
        broker.stop()
        if os.environ.get("LP_BENCH_INGEST_DEBUG") and ing is not None:
            print(ing.output()[-20000:])
            with open(pg.logfile) as f:
                print(f.read()[-30000:])
        pg.stop()
