"""ingest against a real dev broker and PostgreSQL: N events in -> exactly N
enriched visit_record rows, rollups equal to the same aggregates computed by SQL
from visit_record, malformed events in visit_reject, replays stored once.

The helpers here (event generation, producing, waiting, rollup checks) are also
used by test_ingest_faults.py and tests/bench/bench_ingest.py."""
import hashlib
import json
import os
import random
import re
import subprocess
import time

import yaml

import lpstack

GEOIP = os.path.join(lpstack.ROOT, "var/geoip/GeoLite2-City.mmdb")
UAP_TESTS = "/usr/share/uap-core/tests"
EPOCH_2024_MS = 1704067200000

# Realistic public addresses (country known to be stable in GeoLite2) and a few
# special ones that must give no location.
IPS = ["8.8.8.8", "81.2.69.160", "2.125.160.216", "89.160.20.112", "202.96.134.133",
       "115.236.1.1", "175.16.199.0", "2001:218:1::5", "2400:3200::1", "1.1.1.1",
       "10.8.4.7", "192.168.1.20"]

# (user agent, browser family, browser version, os family, device type, is_bot)
KNOWN_UAS = [
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/120.0.0.0 Safari/537.36", "Chrome", "120.0.0", "Windows", "desktop", False),
    ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, "
     "like Gecko) Version/17.1 Mobile/15E148 Safari/604.1", "Mobile Safari", "17.1", "iOS",
     "mobile", False),
    ("Mozilla/5.0 (iPad; CPU OS 16_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
     "Version/16.6 Mobile/15E148 Safari/604.1", "Mobile Safari", "16.6", "iOS", "tablet", False),
    ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "Googlebot",
     "2.1", "Other", "bot", True),
    ("curl/8.4.0", "curl", "8.4.0", "Other", "bot", True),
]

REFERERS = [None, "https://www.Google.com/search?q=x", "http://t.co/abc", "android-app://x.y/",
            "https://m.facebook.com:443/story.php", "not a url"]
LANGS = [None, "en-US,en;q=0.9", "zh-CN,zh;q=0.9,en;q=0.8", "de;q=0.5, fr", "*"]


def uap_user_agents(limit=None, seed=1):
    """User-agent strings of uap-core's own test suites (with their expected
    browser family for those from test_ua.yaml)."""
    out = []
    for name in ("test_ua.yaml", "test_os.yaml", "test_device.yaml"):
        with open(os.path.join(UAP_TESTS, name)) as f:
            doc = yaml.safe_load(f)
        for case in doc["test_cases"]:
            ua = case.get("user_agent_string")
            if isinstance(ua, str) and ua:
                out.append((ua, case.get("family") if name == "test_ua.yaml" else None))
    if limit:
        random.Random(seed).shuffle(out)
        out = out[:limit]
    return out


class EventGen:
    """Visit events per schemas/visit_event.schema.json (v1)."""

    def __init__(self, links=(101, 102, 103), worker=7, seed=3, uas=None):
        self.rng = random.Random(seed)
        self.links = list(links)
        self.worker = worker
        self.seq = 0
        self.uas = uas or [u[0] for u in KNOWN_UAS]
        self.base_ms = int(time.time() * 1000) - 3 * 3600 * 1000

    def event(self, **over):
        self.seq += 1
        ms = self.base_ms + self.seq
        link = self.rng.choice(self.links + [None])
        ev = {
            "v": 2,
            "id": ((ms - EPOCH_2024_MS) << 22) | (self.worker << 12) | (self.seq & 0xFFF),
            "ts": ms * 1000 + self.rng.randrange(1000),
            "code": f"c{link}" if link else self.rng.choice(["nope1", "nope2"]),
            "link_id": link,
            "status": 302 if link else 404,
            "ip": self.rng.choice(IPS),
            "user_agent": self.rng.choice(self.uas),
            "referer": self.rng.choice(REFERERS),
            "accept_language": self.rng.choice(LANGS),
            "host": "s.test",
            "query": self.rng.choice([None, "utm_source=sms&x=\t1\\2"]),
        }
        ev.update(over)
        return ev


def producer(bootstrap, **conf):
    from confluent_kafka import Producer
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                     "queue.buffering.max.messages": 1000000, "enable.idempotence": True,
                     **conf})


def produce(bootstrap, topic, values, partition=None, prod=None, key_field="code",
            compact=False):
    """Produces values (dicts become JSON as lpstack.encode_event makes it: a
    version 2 array unless "v" is 1 or the keys are not the schema's; bytes as
    is) keyed by key_field (the redirector keys by code); waits for delivery
    and returns [(partition, offset)]. compact: JSON without spaces, as the
    redirector writes it."""
    p = prod or producer(bootstrap)
    done, errors = [], []

    def cb(err, msg):
        if err:
            errors.append(err)
        else:
            done.append((msg.partition(), msg.offset()))
    for v in values:
        raw = v if isinstance(v, (bytes, bytearray)) else lpstack.encode_event(v, compact)
        key = (str(v.get(key_field)) if isinstance(v, dict) else "raw").encode()
        kw = {} if partition is None else {"partition": partition}
        while True:
            try:
                p.produce(topic, raw, key=key, on_delivery=cb, **kw)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    p.flush(120)
    assert not errors, errors[:3]
    assert len(done) == len(values), (len(done), len(values))
    return done


def start_ingest(procs, pg, broker, logdir=None, **extra):
    """An ingest process; logdir gives it a log of its own (for a second
    ingest running beside the first)."""
    settings = {"pg_dsn": pg.dsn, "kafka_bootstrap": broker.bootstrap,
                "kafka_topic": broker.topic, "geoip_city_db": GEOIP,
                "metrics_port": lpstack.free_port(), "batch_max_ms": 200,
                "kafka_session_timeout_ms": 6000, "log_level": "info"}
    settings.update({k: v for k, v in extra.items()})
    if logdir is None:
        return procs.start("ingest", settings)
    p = lpstack.program("ingest", logdir, settings).start()
    procs.procs.append(p)  # stopped and checked with the others
    return p


def counts(pg):
    r = pg.psql("SELECT (SELECT count(*) FROM visit_record), (SELECT count(*) FROM visit_reject)")
    a, b = r.split("|")
    return int(a), int(b)


def wait_counts(pg, rows, rejects=0, timeout=90, proc=None):
    deadline = time.time() + timeout
    got = None
    while time.time() < deadline:
        got = counts(pg)
        if got == (rows, rejects):
            return got
        if proc is not None and not proc.alive():
            raise AssertionError(f"ingest exited:\n{proc.output()[-3000:]}")
        time.sleep(0.3)
    raise AssertionError(f"expected {rows} rows and {rejects} rejects, have {got}:\n"
                         + (proc.output()[-3000:] if proc else ""))


# The definitions of 0004_rollups.sql's comments, written independently of ingest.
EXPECTED_DIMS = """
SELECT url_link_id, (visit_time AT TIME ZONE 'UTC')::date AS day, dim, val, is_bot, count(*)
FROM visit_record v CROSS JOIN LATERAL (VALUES
  ('country', coalesce(country_code, '')),
  ('province', CASE WHEN province IS NULL THEN '' ELSE coalesce(country_code, '') || '/' || province END),
  ('city', CASE WHEN city IS NULL THEN '' ELSE coalesce(country_code, '') || '/' || coalesce(province, '') || '/' || city END),
  ('isp', coalesce(isp, '')),
  ('browser', coalesce(browser_type, '')),
  ('browser_version', coalesce(browser_type || ' ' || split_part(browser_version, '.', 1), browser_type, '')),
  ('os', coalesce(os_type, '')),
  ('device_type', coalesce(device_type, '')),
  ('referer_host', coalesce(referer_host, '')),
  ('language', coalesce(language, ''))) AS d(dim, val)
WHERE url_link_id IS NOT NULL GROUP BY 1, 2, 3, 4, 5"""


def assert_rollups(pg):
    """Every rollup equals the aggregate SQL computes from visit_record."""
    def diff(a, b):
        return pg.psql(f"SELECT count(*) FROM (({a}) EXCEPT ALL ({b})) x")

    def same(a, b):  # the same rows, duplicates counted, both ways
        return diff(a, b) == "0" and diff(b, a) == "0"

    # append-only (0007): several rows per key until compacted; readers sum
    have_dims = ("SELECT url_link_id, day, dimension, value, is_bot, sum(visits) FROM link_day_dim "
                 "GROUP BY 1, 2, 3, 4, 5 HAVING sum(visits) > 0")
    assert same(EXPECTED_DIMS, have_dims)
    # 0008: link_month_dim is the compacted day rows summed per month, always
    exp_month = ("SELECT url_link_id, date_trunc('month', day)::date, dimension, value, is_bot, "
                 "sum(visits) FROM link_day_dim_row GROUP BY 1, 2, 3, 4, 5")
    have_month = "SELECT url_link_id, month, dimension, value, is_bot, visits FROM link_month_dim"
    assert same(exp_month, have_month)
    # 0008: link_week_dim likewise per ISO week
    exp_week = ("SELECT url_link_id, date_trunc('week', day)::date, dimension, value, is_bot, "
                "sum(visits) FROM link_day_dim_row GROUP BY 1, 2, 3, 4, 5")
    have_week = "SELECT url_link_id, week, dimension, value, is_bot, visits FROM link_week_dim"
    assert same(exp_week, have_week)
    exp_hour = ("SELECT url_link_id, date_trunc('hour', visit_time AT TIME ZONE 'UTC'), "
                "count(*) FILTER (WHERE NOT is_bot), count(*) FILTER (WHERE is_bot), "
                "min(visit_time), max(visit_time) FROM visit_record WHERE url_link_id IS NOT NULL "
                "GROUP BY 1, 2")
    have_hour = ("SELECT url_link_id, hour AT TIME ZONE 'UTC', visits, bot_visits, first_visit, "
                 "last_visit FROM link_hour")
    assert same(exp_hour, have_hour)
    # 0009: link_day per UTC day likewise
    exp_day = ("SELECT url_link_id, (visit_time AT TIME ZONE 'UTC')::date, "
               "count(*) FILTER (WHERE NOT is_bot), count(*) FILTER (WHERE is_bot), "
               "min(visit_time), max(visit_time) FROM visit_record WHERE url_link_id IS NOT NULL "
               "GROUP BY 1, 2")
    have_day = "SELECT url_link_id, day, visits, bot_visits, first_visit, last_visit FROM link_day"
    assert same(exp_day, have_day)
    exp_total = ("SELECT url_link_id, count(*), count(*) FILTER (WHERE is_bot), min(visit_time), "
                 "max(visit_time) FROM visit_record WHERE url_link_id IS NOT NULL GROUP BY 1")
    have_total = "SELECT url_link_id, visits, bot_visits, first_visit, last_visit FROM link_total"
    assert same(exp_total, have_total)
    exp_orph = ("SELECT unique_code, (visit_time AT TIME ZONE 'UTC')::date, "
                "count(*) FILTER (WHERE NOT is_bot), count(*) FILTER (WHERE is_bot) "
                "FROM visit_record WHERE url_link_id IS NULL GROUP BY 1, 2")
    have_orph = "SELECT unique_code, day, visits, bot_visits FROM orphan_day"
    assert same(exp_orph, have_orph)
    # unique human visitors per link-hour: hll (exact in explicit mode for small
    # sets) or the exact fallback table
    hll = pg.psql("SELECT count(*) FROM pg_attribute WHERE attrelid = 'link_hour'::regclass "
                  "AND attname = 'visitors'") == "1"
    exp_uniq = ("SELECT url_link_id, date_trunc('hour', visit_time AT TIME ZONE 'UTC'), "
                "count(DISTINCT client_id) FROM visit_record WHERE url_link_id IS NOT NULL "
                "AND NOT is_bot GROUP BY 1, 2")
    if hll:
        have_uniq = ("SELECT url_link_id, hour AT TIME ZONE 'UTC', "
                     "hll_cardinality(visitors)::bigint FROM link_hour WHERE visits > 0")
        # and across hours: the union equals the distinct count per link
        exp_link = ("SELECT url_link_id, count(DISTINCT client_id) FROM visit_record "
                    "WHERE url_link_id IS NOT NULL AND NOT is_bot GROUP BY 1")
        have_link = ("SELECT url_link_id, hll_cardinality(hll_union_agg(visitors))::bigint "
                     "FROM link_hour GROUP BY 1 HAVING sum(visits) > 0")
        assert same(exp_link, have_link)
        # link_day's sketches: per day, and their union per link
        exp_dayu = ("SELECT url_link_id, (visit_time AT TIME ZONE 'UTC')::date, "
                    "count(DISTINCT client_id) FROM visit_record WHERE url_link_id IS NOT NULL "
                    "AND NOT is_bot GROUP BY 1, 2")
        have_dayu = ("SELECT url_link_id, day, hll_cardinality(visitors)::bigint FROM link_day "
                     "WHERE visits > 0")
        assert same(exp_dayu, have_dayu)
        have_link = ("SELECT url_link_id, hll_cardinality(hll_union_agg(visitors))::bigint "
                     "FROM link_day GROUP BY 1 HAVING sum(visits) > 0")
        assert same(exp_link, have_link)
        # the sketches are the ones the column comments promise (hll_hash_text of
        # client_id), so an analyst's own sketches over visit_record union with them
        for table, key in (("link_hour", "date_trunc('hour', v.visit_time AT TIME ZONE 'UTC')"
                            " = t.hour AT TIME ZONE 'UTC'"),
                           ("link_day", "(v.visit_time AT TIME ZONE 'UTC')::date = t.day")):
            differ = pg.psql(f"SELECT count(*) FROM {table} t WHERE visits > 0 AND visitors <> "
                             "(SELECT hll_add_agg(hll_hash_text(v.client_id)) FROM visit_record v "
                             f"WHERE v.url_link_id = t.url_link_id AND {key} AND NOT v.is_bot)")
            assert differ == "0", f"{table}: {differ} sketches differ from SQL over visit_record"
    else:
        have_uniq = ("SELECT url_link_id, hour AT TIME ZONE 'UTC', count(*) "
                     "FROM link_hour_visitor GROUP BY 1, 2")
    assert same(exp_uniq, have_uniq)


def mmdb(ip, *path):
    """A value of the GeoLite2 record of ip via mmdblookup (independent of ingest)."""
    r = subprocess.run(["mmdblookup", "--file", GEOIP, "--ip", ip] + list(path),
                       capture_output=True, text=True)
    for line in r.stdout.splitlines():
        line = line.strip()
        if line.startswith('"'):
            return line.split('"')[1]
    return None


def row(pg, event_id, cols):
    return pg.psql(f"SELECT {cols} FROM visit_record WHERE id = {event_id}").split("|")


# ------------------------------------------------------------------ tests

def test_events_become_enriched_rows_and_rollups(procs, pg, broker):
    gen = EventGen()
    events = [gen.event() for _ in range(600)]
    # every known UA from every kind of address at least once
    for ua in KNOWN_UAS:
        for ip in ("8.8.8.8", "81.2.69.160", "10.8.4.7"):
            events.append(gen.event(user_agent=ua[0], ip=ip, link_id=101, code="c101",
                                    status=302))
    events.append(gen.event(user_agent=None, referer=None, accept_language=None, host=None,
                            query=None))
    events.append(gen.event(user_agent="Mozilla/5.0 (Linux; Android 14; Pixel 8) \u00e9\u4e2d\t\\x",
                            referer="https://b\u00fccher.example/\u00e4?q=\u2603\nx",
                            accept_language="zh-CN,zh;q=0.9", query="a=\u00e9&b=\\N"))
    uap = uap_user_agents(limit=150)
    for ua, _ in uap:
        events.append(gen.event(user_agent=ua))
    produce(broker.bootstrap, broker.topic, events)
    ing = start_ingest(procs, pg, broker)
    wait_counts(pg, len(events), 0, proc=ing)
    # exactly N rows, each event once
    assert pg.psql("SELECT count(DISTINCT id) FROM visit_record") == str(len(events))

    by_id = {e["id"]: e for e in events}
    # every field as sent (the COPY rows are in binary format: each type's
    # encoding, NULLs, tabs, backslashes and non-ASCII text)
    stored = json.loads(pg.psql(
        "SELECT json_agg(json_build_object('id', id, 'link_id', url_link_id, 'code', unique_code,"
        " 'ts', (extract(epoch FROM visit_time) * 1000000)::bigint, 'status', http_status,"
        " 'user_agent', user_agent, 'referer', referer, 'accept_language', accept_language,"
        " 'host', host, 'query', query_string)) FROM visit_record"))
    assert len(stored) == len(events)
    for r in stored:
        e = by_id[r["id"]]
        for k in ("link_id", "code", "ts", "status", "user_agent", "referer", "accept_language",
                  "host", "query"):
            assert r[k] == e[k], (k, r[k], e[k])
    # client_id = sha1(ip & ua) for every row
    for line in pg.psql("SELECT id, client_id, coalesce(host(client_ip), '-') FROM visit_record"
                        ).splitlines():
        i, cid, ip = line.split("|")
        e = by_id[int(i)]
        want = hashlib.sha1((e["ip"] + "&" + (e["user_agent"] or "")).encode()).hexdigest()
        assert cid == want
        assert ip == e["ip"].lower(), (ip, e["ip"])
    # and the SQL the column's comment (0017) gives for it
    pg.psql("CREATE EXTENSION IF NOT EXISTS pgcrypto")
    assert pg.psql("SELECT count(*) FROM visit_record WHERE client_ip IS NOT NULL AND client_id "
                   "<> encode(digest(host(client_ip) || '&' || coalesce(user_agent, ''), 'sha1'), "
                   "'hex')") == "0"

    # geo: country/province/city as GeoLite2 says (mmdblookup), NULL for private
    for ip in ("8.8.8.8", "81.2.69.160", "2001:218:1::5", "10.8.4.7"):
        e = next(x for x in events if x["ip"] == ip)
        cc, prov, city = row(pg, e["id"], "coalesce(country_code, '-'), coalesce(province, '-'), "
                                          "coalesce(city, '-')")
        assert cc == (mmdb(ip, "country", "iso_code") or "-")
        assert prov == (mmdb(ip, "subdivisions", "0", "names", "en") or "-")
        assert city == (mmdb(ip, "city", "names", "en") or "-")
    assert row(pg, next(x for x in events if x["ip"] == "8.8.8.8")["id"], "country_code") == ["US"]
    assert row(pg, next(x for x in events if x["ip"] == "81.2.69.160")["id"],
               "country_code, country") == ["GB", "United Kingdom"]

    # user agents: browser/os/device type/bot for the known ones
    for ua, fam, ver, os_fam, dtype, bot in KNOWN_UAS:
        e = next(x for x in events if x["user_agent"] == ua)
        got = row(pg, e["id"], "browser_type, browser_version, os_type, device_type, is_bot")
        assert got[0] == fam and got[1].startswith(ver) and got[2] == os_fam, (ua, got)
        assert got[3] == dtype and got[4] == ("t" if bot else "f"), (ua, got)
    # uap-core's own expectations for the browser family
    checked = 0
    for ua, fam in uap:
        if fam is None:
            continue
        e = next(x for x in events if x["user_agent"] == ua)
        assert row(pg, e["id"], "browser_type")[0] == fam, ua
        checked += 1
    assert checked >= 10

    # other derived columns
    e = next(x for x in events if x["referer"] == "https://www.Google.com/search?q=x")
    assert row(pg, e["id"], "referer_host") == ["www.google.com"]
    # a referer that is not a URL has no host, whatever came before it (libcurl
    # resolved it against the previous referer until the fifteenth session)
    hosts = pg.psql("SELECT DISTINCT coalesce(referer_host, '-') FROM visit_record"
                    " WHERE referer = 'not a url'").splitlines()
    assert sum(1 for x in events if x["referer"] == "not a url") > 10
    assert hosts == ["-"], hosts
    e = next(x for x in events if x["accept_language"] == "de;q=0.5, fr")
    assert row(pg, e["id"], "language") == ["fr"]
    e = next(x for x in events if x["accept_language"] == "zh-CN,zh;q=0.9,en;q=0.8")
    assert row(pg, e["id"], "language") == ["zh-cn"]
    e = next(x for x in events if x["query"] is not None)
    assert row(pg, e["id"], "query_string") == [e["query"]]
    e = next(x for x in events if x["user_agent"] is None)
    assert row(pg, e["id"], "user_agent IS NULL, host IS NULL, is_bot") == ["t", "t", "t"]
    # orphans: url_link_id NULL, counted in orphan_day
    orphans = sum(1 for x in events if x["link_id"] is None)
    assert orphans > 0
    assert pg.psql("SELECT count(*) FROM visit_record WHERE url_link_id IS NULL") == str(orphans)
    assert pg.psql("SELECT sum(visits + bot_visits) FROM orphan_day") == str(orphans)
    assert_rollups(pg)
    # offsets stored with the rows: next offset of each partition = its message count
    stored = int(pg.psql("SELECT sum(next_offset) FROM ingest_offset"))
    assert stored == len(events)
    # the backlog found at assignment was spread over the two loading lanes
    # evenly: within the biggest partition's messages of each other
    m = re.search(r"lane 0: (\d+) partitions, (\d+) messages behind; "
                  r"lane 1: (\d+) partitions, (\d+) messages behind", ing.output())
    assert m, ing.output()[-3000:]
    parts0, behind0, parts1, behind1 = map(int, m.groups())
    biggest = int(pg.psql("SELECT max(next_offset) FROM ingest_offset"))
    nparts = int(pg.psql("SELECT count(*) FROM ingest_offset"))
    assert behind0 + behind1 == len(events) and parts0 + parts1 >= nparts, m.group(0)
    assert abs(behind0 - behind1) <= biggest, (m.group(0), biggest)


def test_malformed_events_rejected_and_replays_stored_once(procs, pg, broker):
    gen = EventGen(seed=5)
    # version 2 arrays (what redirectors write) and version 1 objects (what
    # older ones wrote, still in the topic or a spool) alike
    good = [gen.event(v=1 if i % 4 == 0 else 2) for i in range(200)]
    missing = gen.event(v=1)
    del missing["ts"]

    def arr(**over):
        return json.loads(lpstack.encode_event(gen.event(**over)))
    bad = [
        (b"{not json", "bad JSON"),
        (json.dumps(missing).encode(), "missing field: ts"),
        (json.dumps(gen.event(v=1, status="302")).encode(), "wrong type: status"),
        (json.dumps(gen.event(v=3)).encode(), "unknown schema version: 3"),
        (json.dumps(gen.event(v=1, extra=1)).encode(), "unknown field: extra"),
        (json.dumps(gen.event(v=1, id=1.5)).encode(), "wrong type: id"),
        (json.dumps(gen.event(v=1, status=200)).encode(), "bad value: status"),
        (b"", "bad JSON"),
        (b"\xff\xfe garbage", "bad JSON"),
        (json.dumps([1, 2]).encode(), "unknown schema version: 1 (an array must be version 2)"),
        (json.dumps(arr()[:5]).encode(), "missing field: status"),
        (json.dumps(arr() + [0]).encode(), "unknown field: [12]"),
        (json.dumps(arr(status="302")).encode(), "wrong type: status"),
        (json.dumps(arr(ts=-5)).encode(), "bad value: ts"),
        (json.dumps(arr(user_agent=7)).encode(), "wrong type: user_agent"),
        # reasons that quote input cut to 64 bytes: a cut inside a character
        # would make PostgreSQL refuse the reject and block the partition
        (json.dumps(gen.event(v=1, **{"a" + "\u00e9" * 40: 1}), ensure_ascii=False).encode(),
         "unknown field: a\u00e9\u00e9"),
        (json.dumps(gen.event(v="\u00e9" * 40), ensure_ascii=False).encode(),
         'unknown schema version: "\u00e9\u00e9'),
    ]
    assert len(bad) <= len(good) // 10
    mixed = []
    for i, g in enumerate(good):
        mixed.append(g)
        if i % 10 == 0 and i // 10 < len(bad):
            mixed.append(bad[i // 10][0])
    # replays: the same event again in the same and in other partitions
    dups = good[:30]
    produce(broker.bootstrap, broker.topic, mixed)
    produce(broker.bootstrap, broker.topic, dups, partition=3)
    produce(broker.bootstrap, broker.topic, dups[:10], partition=11)
    ing = start_ingest(procs, pg, broker, batch_max_events=50)
    wait_counts(pg, len(good), len(bad), proc=ing)
    # later replays in a later batch still change nothing
    produce(broker.bootstrap, broker.topic, good[50:80])
    deadline = time.time() + 30
    total = len(mixed) + 40 + 30
    while time.time() < deadline:
        if pg.psql("SELECT sum(next_offset) FROM ingest_offset") == str(total):
            break
        time.sleep(0.3)
    assert pg.psql("SELECT sum(next_offset) FROM ingest_offset") == str(total)
    assert counts(pg) == (len(good), len(bad))
    # batches load without probing for stored ids until a COPY meets one: that
    # batch is rolled back and loaded again without the stored visits (the
    # counts above and the rollups below show nothing was doubled)
    assert "a batch holds visits already stored" in ing.output(), ing.output()[-3000:]
    rej = pg.psql("SELECT reason, raw, kafka_partition >= 0, kafka_offset >= 0 FROM visit_reject "
                  "ORDER BY id").splitlines()
    reasons = [r.split("|")[0] for r in rej]
    for raw, why in bad:
        assert any(x.startswith(why) for x in reasons), (why, reasons)
    # raw bytes kept as received, with partition and offset pointing at them
    raws = pg.psql("SELECT encode(raw, 'hex') FROM visit_reject").splitlines()
    assert sorted(raws) == sorted(r.hex() for r, _ in bad)
    assert all(r.endswith("|t|t") for r in rej)
    assert_rollups(pg)
    assert int(pg.psql("SELECT sum(visits) FROM link_total")) == \
        sum(1 for g in good if g["link_id"] is not None)


def test_reject_at_a_reused_offset_is_kept(procs, pg, broker):
    """After a topic is recreated its offsets start again: a malformed
    message at an offset where an old reject is stored is kept as well (it
    was dropped by ON CONFLICT on topic, partition and offset); the same
    message loaded twice is still kept once."""
    pg.psql(f"INSERT INTO visit_reject (topic, kafka_partition, kafka_offset, raw, reason) "
            f"VALUES ('{broker.topic}', 0, 0, 'old'::bytea, 'bad JSON (an older topic)')")
    ing = start_ingest(procs, pg, broker, batch_max_events=50)
    produce(broker.bootstrap, broker.topic, [b"{not json"], partition=0)
    wait_counts(pg, 0, 2, proc=ing)
    assert pg.psql("SELECT string_agg(convert_from(raw, 'UTF8'), ',' ORDER BY id) "
                   "FROM visit_reject WHERE kafka_partition = 0 AND kafka_offset = 0") == \
        "old,{not json"
    r = pg.psql(f"INSERT INTO visit_reject (topic, kafka_partition, kafka_offset, raw, reason) "
                f"VALUES ('{broker.topic}', 0, 0, '{{not json'::bytea, 'again') "
                f"ON CONFLICT (topic, kafka_partition, kafka_offset, md5(raw)) DO NOTHING "
                f"RETURNING id")
    assert r in ("", "INSERT 0 0"), r  # no row: the same message is kept once


def test_user_agents_cut_inside_a_character_are_stored(procs, pg, broker):
    """uap-core's groups count bytes ("[^;]{0,30}"): on a multibyte user agent
    one can end inside a character. The fields keep whole characters, so the
    batch loads (PostgreSQL refused the half character, and the batch failed
    on every retry: one request could stop a partition for good)."""
    gen = EventGen(seed=21)
    uas = {
        "HbbTV/1.1.1 (;Panasonic;VIERA 2012 " + "\u00fc" * 10 + ";1.261;)":
            "VIERA 2012 " + "\u00fc" * 9,
        "SAMSUNG-ANDROID-MMS/x" + "\u00e9" * 60: "x" + "\u00e9" * 49,
        "HbbTV/1.1.1 (;Panasonic;" + "\U0001F600" * 700: None,  # cut at 2048 bytes
    }
    events = [gen.event(user_agent=ua) for ua in uas for _ in range(3)]
    events += [gen.event() for _ in range(20)]
    produce(broker.bootstrap, broker.topic, events)
    ing = start_ingest(procs, pg, broker, batch_max_events=10)
    wait_counts(pg, len(events), 0, proc=ing)
    for ua, model in uas.items():
        got = pg.psql("SELECT DISTINCT device_model FROM visit_record WHERE user_agent = "
                      f"'{ua}'").splitlines()
        assert len(got) == 1, (ua[:40], got)
        if model is not None:
            assert got[0] == model, (ua[:40], got)
    assert_rollups(pg)


def test_city_without_province_keeps_its_country(procs, pg, broker):
    """GeoIP gives Singapore a city and no subdivision: the city breakdown is
    'SG//Singapore', as report_visit_dims (0006) and the comments define it
    (ingest wrote '/Singapore': the country lost, and reports split the
    city between whole days and range edges)."""
    gen = EventGen(seed=22)
    link = gen.links[0]
    events = [gen.event(ip="202.166.0.1", link_id=link, code=f"c{link}", status=302)
              for _ in range(10)]
    produce(broker.bootstrap, broker.topic, events)
    ing = start_ingest(procs, pg, broker)
    wait_counts(pg, len(events), 0, proc=ing)
    assert pg.psql("SELECT DISTINCT country_code, coalesce(province, '-'), city "
                   "FROM visit_record") == "SG|-|Singapore"
    assert pg.psql("SELECT DISTINCT value FROM link_day_dim WHERE dimension = 'city'") == \
        "SG//Singapore"
    assert_rollups(pg)


def test_referer_hosts_that_are_not_utf8_do_not_stop_the_partition(procs, pg, broker):
    """libcurl percent-decodes a referer's host and lets bytes above 0x7f
    through: "%ff" gave a host PostgreSQL refuses as text, which failed the
    batch on every retry and held its partition for good. Such hosts are
    stored as NULL now; international names in punycode, one spelling each;
    "en_US" is language en-us."""
    gen = EventGen(seed=23)
    refs = ["http://%ff.example/", "https://%C0%80x/", "http://Example.COM./a",
            "http://B\u00dcCHER.example/", "http://b%C3%BCcher.example/", None]
    events = [gen.event(referer=refs[i % len(refs)], accept_language="en_US,fr;q=0.5")
              for i in range(60)]
    produce(broker.bootstrap, broker.topic, events)
    ing = start_ingest(procs, pg, broker)
    wait_counts(pg, len(events), 0, proc=ing)
    got = pg.psql("SELECT coalesce(referer_host, '-'), count(*) FROM visit_record "
                  "GROUP BY 1 ORDER BY 1").splitlines()
    assert got == ["-|30", "example.com|10", "xn--bcher-kva.example|20"]
    assert pg.psql("SELECT DISTINCT language FROM visit_record") == "en-us"
    assert_rollups(pg)


def test_breakdowns_batch_rows_odd_values_and_compaction(procs, pg, broker):
    """link_day_dim (0007) is a view over per-batch array rows and compacted
    rows: values with array syntax in them survive, sums match visit_record
    before and after link_day_dim_compact(), and loading goes on after it."""
    odd = 'Peapod/a"b\\c,{d}.2.3'  # browser_version major: a"b\c,{d}
    uas = [odd, "Peapod/NULL.1.1", "Peapod/\\N.1.1", KNOWN_UAS[0][0]]
    gen = EventGen(seed=9, uas=uas)
    events = [gen.event() for _ in range(400)]
    produce(broker.bootstrap, broker.topic, events + events[:40])  # and replays
    ing = start_ingest(procs, pg, broker, batch_max_events=60)
    wait_counts(pg, len(events), proc=ing)
    assert_rollups(pg)
    assert int(pg.psql("SELECT count(*) FROM link_day_dim_batch")) > 0
    values = pg.psql("SELECT DISTINCT value FROM link_day_dim WHERE dimension = "
                     "'browser_version' AND value LIKE 'Peapod%'").splitlines()
    assert sorted(values) == sorted(['Peapod a"b\\c,{d}', "Peapod NULL", "Peapod \\N"])
    keys = ("SELECT count(*) FROM (SELECT 1 FROM link_day_dim GROUP BY url_link_id, day, "
            "dimension, value, is_bot HAVING count(*) > 1) x")
    assert int(pg.psql(keys)) > 0  # several batches per key before compaction
    folded = int(pg.psql("SELECT link_day_dim_compact()"))
    assert folded > 0
    assert pg.psql("SELECT count(*) FROM link_day_dim_batch") == "0"
    assert pg.psql(keys) == "0"
    assert_rollups(pg)
    assert int(pg.psql("SELECT count(*) FROM link_month_dim")) > 0
    more = [gen.event() for _ in range(100)]
    produce(broker.bootstrap, broker.topic, more)
    wait_counts(pg, len(events) + len(more), proc=ing)
    assert_rollups(pg)
    assert int(pg.psql("SELECT count(*) FROM link_day_dim_batch")) > 0


def test_compaction_ignores_the_dsns_statement_timeout(procs, pg, broker):
    """A statement_timeout from pg_dsn (or the role) is for the loading lanes,
    which set their own (pg_statement_timeout_ms); the compaction folds every
    batch row in one statement and sets none: with 1 ms it was cancelled at
    every turn, for good."""
    gen = EventGen(seed=29)
    ing = start_ingest(procs, pg, broker, batch_max_events=50, compact_interval_s=1,
                       pg_dsn=pg.dsn + " options='-c statement_timeout=1'")
    events = [gen.event() for _ in range(600)]
    produce(broker.bootstrap, broker.topic, events)
    wait_counts(pg, len(events), proc=ing)
    deadline = time.time() + 30
    while time.time() < deadline and pg.psql("SELECT count(*) FROM link_day_dim_batch") != "0":
        time.sleep(0.3)
    assert pg.psql("SELECT count(*) FROM link_day_dim_batch") == "0", ing.output()[-3000:]
    assert "batch rows compacted" in ing.output()
    assert "statement timeout" not in ing.output()
    assert_rollups(pg)
    assert ing.stop() == 0, ing.output()[-2000:]


def test_stop_cancels_a_compaction(procs, pg, broker):
    """SIGTERM while a compaction waits (here on a lock of link_day_dim_row):
    it is cancelled and ingest exits 0 at once; its batch rows stay for the
    next run."""
    import psycopg2
    gen = EventGen(seed=31)
    ing = start_ingest(procs, pg, broker, batch_max_events=50, compact_interval_s=3600)
    events = [gen.event() for _ in range(200)]
    produce(broker.bootstrap, broker.topic, events)
    wait_counts(pg, len(events), proc=ing)
    assert ing.stop() == 0
    lock = psycopg2.connect(pg.dsn)
    try:
        lock.cursor().execute("LOCK TABLE link_day_dim_row IN ACCESS EXCLUSIVE MODE")
        ing = start_ingest(procs, pg, broker, compact_interval_s=1)
        deadline = time.time() + 30
        while time.time() < deadline and pg.psql(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                "'linkpulse-ingest-compactor' AND wait_event_type = 'Lock'") != "1":
            time.sleep(0.2)
        t0 = time.time()
        assert ing.stop() == 0, ing.output()[-2000:]
        assert time.time() - t0 < 5
        assert "compaction cancelled: stopping" in ing.output()
    finally:
        lock.rollback()
        lock.close()
    assert int(pg.psql("SELECT count(*) FROM link_day_dim_batch")) > 0
    assert_rollups(pg)


def test_background_compaction_beside_loading(procs, pg, broker):
    """compact_interval_s: ingest compacts link_day_dim on its own connection
    while batches keep loading; the rollups stay equal to visit_record at
    every step and the batch rows are folded once loading is idle."""
    gen = EventGen(seed=23)
    ing = start_ingest(procs, pg, broker, batch_max_events=50, compact_interval_s=1)
    total = 0
    for _ in range(4):
        more = [gen.event() for _ in range(150)]
        produce(broker.bootstrap, broker.topic, more)
        total += len(more)
        wait_counts(pg, total, proc=ing)
        assert_rollups(pg)
    deadline = time.time() + 30
    while time.time() < deadline and pg.psql("SELECT count(*) FROM link_day_dim_batch") != "0":
        time.sleep(0.3)
    assert pg.psql("SELECT count(*) FROM link_day_dim_batch") == "0"
    assert "batch rows compacted" in ing.output()
    assert int(pg.psql("SELECT count(*) FROM link_month_dim")) > 0
    assert_rollups(pg)
    assert ing.stop() == 0, ing.output()[-2000:]
