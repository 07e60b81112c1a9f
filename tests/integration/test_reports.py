"""reports against a real PostgreSQL filled the way production fills it: known
visit events produced to the dev Kafka broker and loaded by ingest (visit_record
and the rollups). Totals and breakdowns are asserted as literal figures for a
hand-made link, and for a random link against plain SQL over visit_record, in
UTC, a whole-hour zone (Asia/Shanghai), a zone with a half-hour offset
(Asia/Kolkata: hours cut by local midnight come from visit_record) and a DST
zone. Runs once with hll sketches and once with the exact visitor fallback."""
import csv
import fcntl
import io
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import zlib

import jsonschema
import pytest

import lpstack
from test_ingest import GEOIP, KNOWN_UAS, mmdb, produce, wait_counts

SCHEMA_PATH = os.path.join(lpstack.ROOT, "schemas/report.schema.json")
EPOCH_2024_MS = 1704067200000
CHROME, IPHONE, IPAD, GOOGLEBOT, CURL = (u[0] for u in KNOWN_UAS)
GB_IP, US_IP, PRIVATE_IP = "81.2.69.160", "8.8.8.8", "10.8.4.7"
DIMS = ["country", "province", "city", "isp", "browser", "browser_version", "os",
        "device_type", "referer_host", "language"]

# rpA's hand-made visits: (UTC time, ip, user agent). Clients (ip & ua):
# X = GB Chrome, Y = US iPhone, Z = private Chrome, W = GB iPad.
RPA = [
    ("2024-05-01 10:00:00", GB_IP, CHROME),       # X  UTC May 1, Shanghai May 1 18:00
    ("2024-05-01 23:30:00", US_IP, IPHONE),       # Y  UTC May 1, Shanghai May 2 07:30
    ("2024-05-02 01:00:00", US_IP, IPHONE),       # Y  UTC May 2, Shanghai May 2 09:00
    ("2024-05-02 12:00:00", PRIVATE_IP, CHROME),  # Z  UTC May 2, Shanghai May 2 20:00
    ("2024-05-01 11:00:00", US_IP, GOOGLEBOT),    # bot, Shanghai May 1 19:00
    ("2024-05-03 15:45:00", PRIVATE_IP, CURL),    # bot, Shanghai May 3 23:45
    ("2024-05-03 16:30:00", GB_IP, CHROME),       # X  UTC May 3, Shanghai May 4 00:30
    ("2024-04-30 16:30:00", GB_IP, IPAD),         # W  UTC Apr 30, Shanghai May 1 00:30
    ("2024-04-30 15:59:59", US_IP, CHROME),       # UTC Apr 30, Shanghai Apr 30 23:59:59
]
RPB = [
    ("2024-05-01 12:00:00", GB_IP, CHROME),       # X again (another link)
    ("2024-05-02 09:00:00", US_IP, IPHONE),       # Y again
]
IPS = [GB_IP, US_IP, PRIVATE_IP, "89.160.20.112", "202.96.134.133", "2.125.160.216"]
REFERERS = [None, "https://www.google.com/search?q=x", "http://t.co/abc"]
LANGS = [None, "en-US,en;q=0.9", "zh-CN,zh;q=0.9"]



def visible(out):
    """The report files of an --out directory: not the hidden .NAME.tmp
    (a refresh's previous versions) nor .reports.lock (one run at a time)."""
    return sorted(n for n in os.listdir(out) if not n.startswith("."))

def _ts(s):
    import datetime
    return int(datetime.datetime.strptime(s, "%Y-%m-%d %H:%M:%S").replace(
        tzinfo=datetime.timezone.utc).timestamp() * 1_000_000)


class Events:
    def __init__(self):
        self.seq = 0
        self.out = []

    def add(self, link_id, code, when_us, ip, ua, referer=None, lang=None):
        self.seq += 1
        ms = when_us // 1000
        self.out.append({
            "v": 2, "id": ((ms - EPOCH_2024_MS) << 22) | (5 << 12) | (self.seq & 0xFFF),
            "ts": when_us, "code": code, "link_id": link_id,
            "status": 302 if link_id else 404, "ip": ip, "user_agent": ua,
            "referer": referer, "accept_language": lang, "host": "s.test", "query": None})


def _stop_checked(p, what):
    rc = p.stop()
    out = p.output()
    rep = lpstack.sanitizer_report(out)
    assert not rep, f"{what}: sanitizer report {rep}:\n{out[-6000:]}"
    assert rc == 0, f"{what} exited {rc}:\n{out[-4000:]}"


@pytest.fixture(scope="module", params=["hll", "exact"])
def db(request, pg_cluster):
    """One database for the module, loaded through Kafka and ingest; "exact"
    drops link_hour.visitors and link_day.visitors first so ingest and reports
    use link_hour_visitor."""
    name = f"lp_rep{os.getpid()}_{request.param}"
    pg_cluster.psql(f"CREATE DATABASE {name} TEMPLATE lp_template", db="postgres")
    d = lpstack.Postgres(pg_cluster.datadir, port=pg_cluster.port)
    d.dbname = name
    work = tempfile.mkdtemp(prefix="lp-rep-", dir="/tmp")
    try:
        if request.param == "exact":
            d.psql("ALTER TABLE link_hour DROP COLUMN visitors; "
                   "ALTER TABLE link_day DROP COLUMN visitors")
        ids = {}
        for code, tags, deleted in [("rpA", "{spring,sms}", 0), ("rpB", "{spring}", 0),
                                    ("rpR", "{bulk}", 0), ("rpE", "{spring}", 0),
                                    ("rpX", "{}", 1)]:
            ids[code] = int(d.psql(
                "INSERT INTO url_link (code, short_url, long_url, long_url_md5, tags, deleted) "
                f"VALUES ('{code}', 'http://s.test/{code}', 'https://example.com/{code}?a=1&b=<x>', "
                f"md5('{code}'), '{tags}', {deleted}) RETURNING id").split()[0])
        ev = Events()
        for t, ip, ua in RPA:
            ev.add(ids["rpA"], "rpA", _ts(t), ip, ua)
        for t, ip, ua in RPB:
            ev.add(ids["rpB"], "rpB", _ts(t), ip, ua)
        rng = random.Random(7)
        base = _ts("2024-05-01 00:00:00")
        for _ in range(400):  # rpR: random visits over 2024-04-30 .. 2024-05-10
            when = base - 86400_000_000 + rng.randrange(11 * 86400) * 1_000_000 + rng.randrange(10**6)
            ev.add(ids["rpR"], "rpR", when, rng.choice(IPS), rng.choice([u[0] for u in KNOWN_UAS]),
                   rng.choice(REFERERS), rng.choice(LANGS))
        ev.add(ids["rpX"], "rpX", _ts("2024-05-02 08:00:00"), GB_IP, CHROME)
        ev.add(None, "nope", _ts("2024-05-02 08:00:00"), GB_IP, CHROME)  # orphan
        broker = lpstack.Broker(os.path.join(work, "kafka"), partitions=8).up()
        try:
            produce(broker.bootstrap, broker.topic, ev.out)
            ing = lpstack.program("ingest", work, {
                "pg_dsn": d.dsn, "kafka_bootstrap": broker.bootstrap,
                "kafka_topic": broker.topic, "geoip_city_db": GEOIP,
                "metrics_port": lpstack.free_port(), "batch_max_ms": 200,
                "log_level": "info"}).start()
            try:
                wait_counts(d, len(ev.out), 0, proc=ing)
            finally:
                _stop_checked(ing, "ingest")
        finally:
            _stop_checked(broker, "devbroker")
        d.ids = ids
        d.mode = request.param
        d.work = work
        yield d
    finally:
        pg_cluster.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", db="postgres", check=False)
        shutil.rmtree(work, ignore_errors=True)


def run(db, *args, check=True, env=None):
    r = subprocess.run([os.path.join(lpstack.BIN, "reports"), "-o", f"pg_dsn={db.dsn}"]
                       + list(args), capture_output=True, timeout=120,
                       env=None if env is None else {**os.environ, **env})
    # bytes decoded by hand: CSV's CRLF must reach the test untranslated
    r.stdout, r.stderr = r.stdout.decode("utf-8"), r.stderr.decode("utf-8", "replace")
    rep = lpstack.sanitizer_report(r.stderr)
    assert not rep, f"sanitizer report {rep}:\n{r.stderr[-6000:]}"
    if check:
        assert r.returncode == 0, f"reports {args} exited {r.returncode}:\n{r.stderr}"
    return r


def report(db, *args):
    r = run(db, *args)
    doc = json.loads(r.stdout)
    validator().validate(doc)
    return doc


_validator = []


def validator(sub=None):
    with open(SCHEMA_PATH) as f:
        schema = json.load(f)
    if sub:
        schema = dict(schema["$defs"][sub], **{"$defs": schema["$defs"]})
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def daily(doc, key="visits"):
    return {d["date"]: d[key] for d in doc["daily"]}


def tops(doc):
    return {dim: [(e["value"], e["visits"], e.get("bot_visits")) for e in doc["top"][dim]]
            for dim in DIMS}


# --------------------------------------------------------- plain SQL baseline

def sql_expect(db, code, frm, to, tz, top_n=10):
    """The same figures computed from visit_record alone (never the rollups)."""
    win = (f"visit_time >= '{frm}'::date::timestamp AT TIME ZONE '{tz}' AND "
           f"visit_time < ('{to}'::date + 1)::timestamp AT TIME ZONE '{tz}'")
    where = f"unique_code = '{code}' AND {win}"
    tot = db.psql(f"SELECT count(*) FILTER (WHERE NOT is_bot), count(DISTINCT client_id) "
                  f"FILTER (WHERE NOT is_bot), count(*) FILTER (WHERE is_bot) FROM visit_record "
                  f"WHERE {where}").split("|")
    days = {}
    for line in db.psql(f"SELECT to_char((visit_time AT TIME ZONE '{tz}')::date, 'YYYY-MM-DD'), "
                        f"count(*) FILTER (WHERE NOT is_bot), count(DISTINCT client_id) FILTER "
                        f"(WHERE NOT is_bot), count(*) FILTER (WHERE is_bot) FROM visit_record "
                        f"WHERE {where} GROUP BY 1").splitlines():
        d, v, u, b = line.split("|")
        days[d] = (int(v), int(u), int(b))
    top = {dim: [] for dim in DIMS}
    for line in db.psql(f"""
        WITH s AS (SELECT x.dimension, x.value, count(*) FILTER (WHERE NOT v.is_bot) AS h,
                          count(*) FILTER (WHERE v.is_bot) AS b
                   FROM visit_record v CROSS JOIN LATERAL report_visit_dims(v.country_code::text,
                     v.province, v.city, v.isp, v.browser_type, v.browser_version, v.os_type,
                     v.device_type, v.referer_host, v.language) x
                   WHERE {where} GROUP BY 1, 2)
        SELECT dimension, value, h, b FROM (SELECT *, row_number() OVER (PARTITION BY dimension
          ORDER BY h DESC, b DESC, value) AS rn FROM s WHERE h > 0) k WHERE rn <= {top_n}
        ORDER BY dimension, rn""").splitlines():
        dim, val, h, b = line.split("|")
        top[dim].append((val or None, int(h), int(b)))
    return (int(tot[0]), int(tot[1]), int(tot[2])), days, top


def assert_matches_sql(db, doc, code, frm, to, tz):
    (v, u, b), days, top = sql_expect(db, code, frm, to, tz)
    t = doc["totals"]
    assert (t["visits"], t["uniques"], t["bot_visits"]) == (v, u, b)
    for d in doc["daily"]:
        assert (d["visits"], d["uniques"], d["bot_visits"]) == days.get(d["date"], (0, 0, 0)), d
    assert sum(d["visits"] for d in doc["daily"]) == v
    assert tops(doc) == top


# ------------------------------------------------------------------ tests

def test_literal_totals_days_and_breakdowns_utc(db):
    doc = report(db, "--link", "rpA", "--from", "2024-05-01", "--to", "2024-05-03")
    assert doc["link"]["code"] == "rpA"
    assert doc["link"]["tags"] == ["spring", "sms"]
    assert doc["link"]["long_url"] == "https://example.com/rpA?a=1&b=<x>"
    assert doc["range"] == {"from": "2024-05-01", "to": "2024-05-03", "tz": "UTC",
                            "exclude_bots": False, "top_n": 10, "days": 3}
    t = doc["totals"]
    assert (t["visits"], t["uniques"], t["bot_visits"]) == (5, 3, 2)
    assert t["first_visit"] == "2024-05-01T10:00:00.000000+00:00"
    assert t["last_visit"] == "2024-05-03T16:30:00.000000+00:00"
    assert daily(doc) == {"2024-05-01": 2, "2024-05-02": 2, "2024-05-03": 1}
    assert daily(doc, "uniques") == {"2024-05-01": 2, "2024-05-02": 2, "2024-05-03": 1}
    assert daily(doc, "bot_visits") == {"2024-05-01": 1, "2024-05-02": 0, "2024-05-03": 1}
    # 3 days: hourly present, 72 hours, the 23:30 visit in the 23:00 hour
    hours = {h["hour"]: h["visits"] for h in doc["hourly"]}
    assert len(hours) == 72 and sum(hours.values()) == 5
    assert hours["2024-05-01T23:00:00+00:00"] == 1
    assert doc["all_time_visits"] == 9 and doc["all_time_bot_visits"] == 2
    top = tops(doc)
    assert top["browser"] == [("Chrome", 3, 0), ("Mobile Safari", 2, 0)]
    assert top["browser_version"] == [("Chrome 120", 3, 0), ("Mobile Safari 17", 2, 0)]
    assert top["device_type"] == [("desktop", 3, 0), ("mobile", 2, 0)]
    us, gb = mmdb(US_IP, "country", "iso_code"), mmdb(GB_IP, "country", "iso_code")
    assert us and gb
    # ties on human visits: more bot visits first
    assert top["country"] == [(us, 2, 1), (gb, 2, 0), (None, 1, 1)]
    assert top["referer_host"] == [(None, 5, 2)]
    assert_matches_sql(db, doc, "rpA", "2024-05-01", "2024-05-03", "UTC")


def test_days_split_in_shanghai(db):
    doc = report(db, "--link", "rpA", "--from", "2024-05-01", "--to", "2024-05-03",
                 "--tz", "Asia/Shanghai")
    t = doc["totals"]
    # 23:30 UTC on May 1 is May 2 in Shanghai; 16:30 UTC Apr 30 is May 1
    assert daily(doc) == {"2024-05-01": 2, "2024-05-02": 3, "2024-05-03": 0}
    assert daily(doc, "uniques") == {"2024-05-01": 2, "2024-05-02": 2, "2024-05-03": 0}
    assert daily(doc, "bot_visits") == {"2024-05-01": 1, "2024-05-02": 0, "2024-05-03": 1}
    assert (t["visits"], t["uniques"], t["bot_visits"]) == (5, 4, 2)
    assert t["first_visit"] == "2024-05-01T00:30:00.000000+08:00"
    assert t["last_visit"] == "2024-05-03T23:45:00.000000+08:00"
    hours = {h["hour"]: h["visits"] for h in doc["hourly"]}
    assert hours["2024-05-02T07:00:00+08:00"] == 1 and sum(hours.values()) == 5
    top = tops(doc)
    # edges of the range (Apr 30 16:00-24:00 and May 3 00:00-16:00 UTC) come
    # from visit_record, the rest from link_day_dim
    assert top["device_type"] == [("desktop", 2, 0), ("mobile", 2, 0), ("tablet", 1, 0)]
    assert top["browser"] == [("Mobile Safari", 3, 0), ("Chrome", 2, 0)]
    assert_matches_sql(db, doc, "rpA", "2024-05-01", "2024-05-03", "Asia/Shanghai")


@pytest.mark.parametrize("tz", ["UTC", "Asia/Shanghai", "Asia/Kolkata", "America/New_York"])
def test_random_link_equals_plain_sql(db, tz):
    doc = report(db, "--link", "rpR", "--from", "2024-05-01", "--to", "2024-05-09", "--tz", tz,
                 "--top", "5")
    assert "hourly" not in doc  # 9 days
    assert len(doc["daily"]) == 9
    assert doc["totals"]["visits"] > 100
    (v, u, b), days, _ = sql_expect(db, "rpR", "2024-05-01", "2024-05-09", tz)
    assert (doc["totals"]["visits"], doc["totals"]["uniques"], doc["totals"]["bot_visits"]) == (v, u, b)
    for d in doc["daily"]:
        assert (d["visits"], d["uniques"], d["bot_visits"]) == days.get(d["date"], (0, 0, 0)), d
    top = sql_expect(db, "rpR", "2024-05-01", "2024-05-09", tz, top_n=5)[2]
    assert tops(doc) == top
    assert all(len(x) <= 5 for x in top.values())
    first, last = db.psql(
        f"SET TimeZone = '{tz}'; SELECT to_char(min(visit_time), 'YYYY-MM-DD\"T\"HH24:MI:SS.USTZH:TZM'),"
        f" to_char(max(visit_time), 'YYYY-MM-DD\"T\"HH24:MI:SS.USTZH:TZM') FROM visit_record"
        f" WHERE unique_code = 'rpR' AND visit_time >= '2024-05-01'::timestamp AT TIME ZONE '{tz}'"
        f" AND visit_time < '2024-05-10'::timestamp AT TIME ZONE '{tz}'").split("\n")[-1].split("|")
    assert (doc["totals"]["first_visit"], doc["totals"]["last_visit"]) == (first, last)


def test_whole_months_and_weeks_from_rollups_after_compaction(db):
    """Whole UTC months of a range are read from link_month_dim (0008) and
    whole ISO weeks of the rest from link_week_dim (also 0008), which only
    link_day_dim_compact() fills: reports before compaction, after a
    compaction that leaves part of the batch rows uncompacted (months, weeks
    and batch rows add up), and after a full one are identical and equal
    plain SQL, in UTC and in zones whose range edges cut days and months."""
    ranges = [("2024-04-01", "2024-06-30", "UTC"), ("2024-04-01", "2024-06-30", "Asia/Shanghai"),
              ("2024-05-01", "2024-05-31", "Asia/Kolkata"), ("2024-04-15", "2024-06-02", "UTC"),
              ("2024-04-29", "2024-05-12", "UTC"), ("2024-04-29", "2024-05-12", "America/New_York"),
              ("2024-05-02", "2024-05-09", "UTC")]
    args = [("--link", "rpR", "--from", f, "--to", t, "--tz", tz, "--top", "5") for f, t, tz in ranges]
    before = [report(db, *a) for a in args]
    rid = db.ids["rpR"]
    # keep rpR's batch rows of May 1-4 out of the first compaction
    db.psql(f"CREATE TABLE stash AS SELECT * FROM link_day_dim_batch WHERE url_link_id = {rid} "
            f"AND day < '2024-05-05'; DELETE FROM link_day_dim_batch WHERE url_link_id = {rid} "
            f"AND day < '2024-05-05'")
    try:  # the module's later tests read rpR: its rows go back whatever happens
        assert int(db.psql("SELECT count(*) FROM stash")) > 0
        db.psql("SELECT link_day_dim_compact()")
    finally:
        db.psql("INSERT INTO link_day_dim_batch SELECT * FROM stash; DROP TABLE stash")
    assert int(db.psql(f"SELECT count(*) FROM link_month_dim WHERE url_link_id = {rid} "
                       f"AND month = '2024-05-01'")) > 0
    assert int(db.psql(f"SELECT count(*) FROM link_week_dim WHERE url_link_id = {rid} "
                       f"AND week = '2024-04-29'")) > 0
    mixed = [report(db, *a) for a in args]
    # --all reads several links at once as unsummed rollup rows that reports
    # sums itself (months, weeks, days and batch rows of one value): each of
    # its files equals the one-link report, which PostgreSQL sums
    for i, (f, t, tz) in enumerate(ranges):
        out = os.path.join(db.work, f"mixed-all-{i}")
        run(db, "--all", "--from", f, "--to", t, "--tz", tz, "--top", "5", "--out", out)
        names = sorted(n for n in visible(out) if n != "index.json")
        assert len(names) > 1 and "link-rpR.json" in names
        for name in names:
            with open(os.path.join(out, name)) as fh:
                doc = json.load(fh)
            one = report(db, "--link", doc["link"]["code"], "--from", f, "--to", t, "--tz", tz,
                         "--top", "5")
            doc.pop("generated_at")
            one.pop("generated_at")
            assert doc == one, (f, t, tz, name)
    db.psql("SELECT link_day_dim_compact()")
    assert db.psql("SELECT count(*) FROM link_day_dim_batch") == "0"
    after = [report(db, *a) for a in args]
    for (f, t, tz), b, m, a in zip(ranges, before, mixed, after):
        for doc in (b, m, a):
            doc.pop("generated_at")
        assert b == m == a, (f, t, tz)
        assert a["totals"]["visits"] > 100
        (v, u, bots), days, top = sql_expect(db, "rpR", f, t, tz, top_n=5)
        assert (a["totals"]["visits"], a["totals"]["uniques"], a["totals"]["bot_visits"]) == \
            (v, u, bots)
        assert tops(a) == top, (f, t, tz)


def test_short_range_in_half_hour_zone_has_exact_hours(db):
    doc = report(db, "--link", "rpR", "--from", "2024-05-03", "--to", "2024-05-03",
                 "--tz", "Asia/Kolkata")
    assert len(doc["hourly"]) == 25  # 24 local hours cut into 25 UTC-hour pieces
    assert doc["hourly"][0]["hour"] == "2024-05-03T00:00:00+05:30"
    assert sum(h["visits"] for h in doc["hourly"]) == doc["totals"]["visits"]
    assert_matches_sql(db, doc, "rpR", "2024-05-03", "2024-05-03", "Asia/Kolkata")


def test_exclude_bots(db):
    doc = report(db, "--link", "rpA", "--from", "2024-05-01", "--to", "2024-05-03",
                 "--tz", "Asia/Shanghai", "--exclude-bots")
    t = doc["totals"]
    assert (t["visits"], t["uniques"], t["bot_visits"]) == (5, 4, None)
    assert t["last_visit"] == "2024-05-02T20:00:00.000000+08:00"  # the human one
    assert doc["range"]["exclude_bots"] is True
    assert all("bot_visits" not in d for d in doc["daily"] + doc["hourly"])
    assert all("bot_visits" not in e for dim in DIMS for e in doc["top"][dim])
    assert [e["value"] for e in doc["top"]["browser"]] == ["Mobile Safari", "Chrome"]


def test_exclude_bots_range_with_only_bots(db):
    """Shanghai's May 3 holds one visit of rpA, curl's: without bots the
    totals have no first or last visit (link_hour's edges count bots)."""
    args = ("--link", "rpA", "--from", "2024-05-03", "--to", "2024-05-03", "--tz", "Asia/Shanghai")
    t = report(db, *args)["totals"]
    assert (t["visits"], t["bot_visits"]) == (0, 1), t  # visits are humans
    assert t["first_visit"] == t["last_visit"] == "2024-05-03T23:45:00.000000+08:00"
    t = report(db, *args, "--exclude-bots")["totals"]
    assert (t["visits"], t["first_visit"], t["last_visit"]) == (0, None, None), t
    csv_text = run(db, *args, "--exclude-bots", "--format", "csv").stdout
    edges = {row[2]: row[3] for row in csv.reader(io.StringIO(csv_text, newline=""))
             if row[1] == "totals" and row[2] in ("first_visit", "last_visit")}
    assert edges == {"first_visit": "", "last_visit": ""}, csv_text


def test_link_out_keeps_a_long_code_in_the_file_name(db):
    """--link CODE --out DIR writes DIR/link-CODE.EXT for codes up to 64
    characters (a 64-byte name buffer cut the code and the extension)."""
    code = "L" * 64
    db.psql("INSERT INTO url_link (code, short_url, long_url, long_url_md5, tags) VALUES "
            f"('{code}', 'http://s.test/{code}', 'https://example.com/long', md5('{code}'), '{{}}')")
    try:
        out = os.path.join(db.work, "long-code")
        for fmt in ("json", "csv", "html"):
            run(db, "--link", code, "--format", fmt, "--out", out)
        assert sorted(visible(out)) == [f"link-{code}.{e}" for e in ("csv", "html", "json")]
    finally:
        db.psql(f"DELETE FROM url_link WHERE code = '{code}'")


def test_session_date_style_and_encoding_do_not_change_reports(db):
    """Dates are read as text and values as UTF-8: a PGDATESTYLE of 'SQL, DMY'
    gave "--from 01/05/2024 is after --to 03/05/2024"-style failures and
    dates outside the schema, a PGCLIENTENCODING of LATIN1 values that are not
    UTF-8. Reports set both for their session; the output is the same."""
    args = ("--link", "rpA", "--from", "2024-04-28", "--to", "2024-05-03", "--tz", "Asia/Shanghai")
    want = json.loads(run(db, *args).stdout)
    want.pop("generated_at")  # the run's own second
    for env in ({"PGDATESTYLE": "SQL, DMY"}, {"PGDATESTYLE": "German"},
                {"PGCLIENTENCODING": "LATIN1"}):
        got = json.loads(run(db, *args, env=env).stdout)
        got.pop("generated_at")
        assert got == want, env
    assert want["range"]["from"] == "2024-04-28", want["range"]


def test_connection_error_is_one_line(db):
    """libpq's messages span lines ("\tIs the server running ...?"): the
    README promises every error on one line of stderr, exit 1."""
    r = run(db, "--link", "rpA", "-o", f"pg_dsn=host=127.0.0.1 port={lpstack.free_port()} "
            "dbname=x connect_timeout=3", check=False)
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("reports: PostgreSQL: "), r.stderr
    assert "\t" not in r.stderr and "  " not in lines[0], r.stderr


def test_csv_parses_back_and_equals_json(db):
    args = ["--link", "rpA", "--from", "2024-05-01", "--to", "2024-05-03", "--tz", "Asia/Shanghai"]
    doc = report(db, *args)
    r = run(db, *args, "--format", "csv")
    raw = r.stdout.encode()
    assert raw.startswith(b"code,section,dimension,value,visits,uniques,bot_visits\r\n")
    raw.decode("utf-8")
    rows = list(csv.DictReader(io.StringIO(r.stdout, newline="")))
    assert all(row["code"] == "rpA" for row in rows)
    link = {row["dimension"]: row["value"] for row in rows if row["section"] == "link"
            and row["dimension"] != "tag"}
    assert link["long_url"] == "https://example.com/rpA?a=1&b=<x>"
    assert [row["value"] for row in rows if row["dimension"] == "tag"] == ["spring", "sms"]
    tot = [row for row in rows if row["section"] == "totals" and row["dimension"] == ""]
    assert [(int(x["visits"]), int(x["uniques"]), int(x["bot_visits"])) for x in tot] == [(5, 4, 2)]
    days = {row["value"]: (int(row["visits"]), int(row["uniques"]), int(row["bot_visits"]))
            for row in rows if row["section"] == "daily"}
    assert days == {d["date"]: (d["visits"], d["uniques"], d["bot_visits"]) for d in doc["daily"]}
    hours = [row for row in rows if row["section"] == "hourly"]
    assert len(hours) == len(doc["hourly"]) == 72
    top = {}
    for row in rows:
        if row["section"] == "top":
            top.setdefault(row["dimension"], []).append(
                (row["value"] or None, int(row["visits"]), int(row["bot_visits"])))
    assert top == {k: v for k, v in tops(doc).items() if v}


def test_csv_quotes_rfc4180(db):
    db.psql("UPDATE url_link SET tags = ARRAY['a,b', 'say \"hi\"', 'multi\nline', 'ünï']::text[] "
            "WHERE code = 'rpE'")
    try:
        r = run(db, "--link", "rpE", "--format", "csv", "--from", "2024-05-01", "--to", "2024-05-01")
    finally:
        db.psql("UPDATE url_link SET tags = '{spring}' WHERE code = 'rpE'")
    assert '"a,b"' in r.stdout and '"say ""hi"""' in r.stdout and '"multi\nline"' in r.stdout
    tags = [row[3] for row in csv.reader(io.StringIO(r.stdout, newline=""))
            if row[1:3] == ["link", "tag"]]
    assert tags == ["a,b", 'say "hi"', "multi\nline", "ünï"]


def test_csv_values_a_spreadsheet_would_run_are_text(db):
    """A value starting with = + - @ (a tag here; device and browser names
    from user agents, referer hosts, likewise) gets a leading apostrophe in
    the CSV, so a spreadsheet shows it instead of running it; the JSON keeps
    the value as stored."""
    bad = ['=HYPERLINK("http://evil.test","x")', "+1+2", "-3", "@SUM(1)", "ok=1"]
    db.psql("UPDATE url_link SET tags = ARRAY['%s']::text[] WHERE code = 'rpE'"
            % "','".join(t.replace("'", "''") for t in bad))
    try:
        args = ["--link", "rpE", "--from", "2024-05-01", "--to", "2024-05-01"]
        r = run(db, *args, "--format", "csv")
        doc = report(db, *args)
    finally:
        db.psql("UPDATE url_link SET tags = '{spring}' WHERE code = 'rpE'")
    tags = [row[3] for row in csv.reader(io.StringIO(r.stdout, newline=""))
            if row[1:3] == ["link", "tag"]]
    assert tags == ["'" + t for t in bad[:4]] + ["ok=1"], tags
    assert doc["link"]["tags"] == bad


def test_empty_range_gives_zeros(db):
    doc = report(db, "--link", "rpA", "--from", "2023-01-01", "--to", "2023-01-31")
    assert doc["totals"] == {"visits": 0, "uniques": 0, "bot_visits": 0, "first_visit": None,
                             "last_visit": None}
    assert len(doc["daily"]) == 31 and all(d["visits"] == d["uniques"] == 0 for d in doc["daily"])
    assert all(doc["top"][dim] == [] for dim in DIMS)
    assert doc["all_time_visits"] == 9
    doc = report(db, "--link", "rpE", "--from", "2024-05-01", "--to", "2024-05-02")
    assert doc["totals"]["visits"] == 0 and len(doc["hourly"]) == 48


def test_tag_files_and_combined(db):
    out = os.path.join(db.work, "tag-out")
    run(db, "--tag", "spring", "--from", "2024-05-01", "--to", "2024-05-03", "--out", out)
    assert sorted(visible(out)) == ["combined.json", "index.json", "link-rpA.json",
                                       "link-rpB.json", "link-rpE.json"]
    with open(os.path.join(out, "combined.json")) as f:
        comb = json.load(f)
    validator().validate(comb)
    assert comb["tag"] == "spring" and comb["links"] == ["rpA", "rpB", "rpE"]
    # X and Y visited both links: counted once in the combined uniques
    assert (comb["totals"]["visits"], comb["totals"]["uniques"], comb["totals"]["bot_visits"]) == (7, 3, 2)
    assert daily(comb) == {"2024-05-01": 3, "2024-05-02": 3, "2024-05-03": 1}
    assert comb["all_time_visits"] == 11
    assert dict((v, n) for v, n, _ in tops(comb)["browser"]) == {"Chrome": 4, "Mobile Safari": 3}
    with open(os.path.join(out, "index.json")) as f:
        idx = json.load(f)
    validator("index").validate(idx)
    assert [(e["code"], e["visits"]) for e in idx["links"]] == [("rpA", 5), ("rpB", 2), ("rpE", 0)]
    assert idx["combined"]["file"] == "combined.json" and idx["combined"]["visits"] == 7
    # to stdout: the combined summary only
    assert report(db, "--tag", "spring", "--from", "2024-05-01", "--to", "2024-05-03")["totals"] == \
        comb["totals"]


def test_all_with_index(db):
    out = os.path.join(db.work, "all-out")
    run(db, "--all", "--from", "2024-05-01", "--to", "2024-05-03", "--out", out,
        "-o", "batch_links=2")
    assert sorted(visible(out)) == ["index.json", "link-rpA.json", "link-rpB.json",
                                       "link-rpR.json", "link-rpX.json"]
    with open(os.path.join(out, "index.json")) as f:
        idx = json.load(f)
    validator("index").validate(idx)
    assert [e["code"] for e in idx["links"]] == ["rpA", "rpB", "rpR", "rpX"]
    for e in idx["links"]:
        with open(os.path.join(out, e["file"])) as f:
            doc = json.load(f)
        validator().validate(doc)
        assert (e["visits"], e["uniques"], e["bot_visits"]) == (
            doc["totals"]["visits"], doc["totals"]["uniques"], doc["totals"]["bot_visits"])
    assert idx["links"][0]["visits"] == 5
    out2 = os.path.join(db.work, "all-empty")
    run(db, "--all", "--include-empty", "--from", "2024-05-01", "--to", "2024-05-03",
        "--out", out2, "--format", "csv")
    assert sorted(visible(out2)) == ["index.json", "link-rpA.csv", "link-rpB.csv",
                                        "link-rpE.csv", "link-rpR.csv", "link-rpX.csv"]


def test_all_rounds_in_flight_match_one_round(db):
    """--all reads two rounds at once on two queries of their own: with one
    link per round (four rounds, alternating queries) every file equals the
    one a single round writes, and each equals --link for its code. Each
    round's values come from an arena taken back when the round's slot is
    used again (reports/arena.c): the index built across rounds and the JSON
    log lines the round threads write at debug level come out whole."""
    files = {}
    for key, batch, logs in (("1", "1", ()), ("500", "500", ()),
                             ("1-debug", "1", ("-o", "log_level=debug", "-o", "log_format=json"))):
        out = os.path.join(db.work, f"all-rounds-{key}")
        r = run(db, "--all", "--from", "2024-05-01", "--to", "2024-05-03", "--out", out,
                "-o", f"batch_links={batch}", *logs)
        if logs:
            lines = [json.loads(line) for line in r.stderr.splitlines()]
            assert sum("top-N" in e["msg"] for e in lines) == 4, r.stderr
        docs = {}
        for name in sorted(visible(out)):
            with open(os.path.join(out, name)) as f:
                doc = json.load(f)
            doc.pop("generated_at", None)
            docs[name] = doc
        files[key] = docs
    assert files["1"] == files["500"] == files["1-debug"]
    assert len(files["1"]) == 5
    for name, doc in files["1"].items():
        if name == "index.json":
            continue
        one = report(db, "--link", doc["link"]["code"], "--from", "2024-05-01", "--to", "2024-05-03")
        one.pop("generated_at", None)
        assert one == doc, name


def test_through_pgbouncer_equals_direct(db):
    """deploy/ runs reports through pgbouncer in session mode: a pooled
    server connection carries one client's session settings (reports sets
    TimeZone, work_mem, ...) to the next unless DISCARD ALL resets it. With
    two server connections reused by every run, each zone's report and an
    --all run (four connections at once) equal the direct ones."""
    bouncer = lpstack.PgBouncer(db, pool_size=4).up()
    try:
        via = lpstack.Postgres(db.datadir, port=bouncer.port)
        via.dbname = db.dbname
        pids = {via.psql("SELECT pg_backend_pid()") for _ in range(3)}
        assert len(pids) == 1, pids  # one server connection, reused
        via.psql("SET TimeZone = 'Asia/Tokyo'")
        assert via.psql("SHOW TimeZone") == db.psql("SHOW TimeZone")
        for tz in ["Asia/Shanghai", "UTC", "America/New_York", "Asia/Kolkata", "Asia/Shanghai"]:
            for args in (["--from", "2024-05-01", "--to", "2024-05-09"],
                         ["--from", "2024-05-02", "--to", "2024-05-03", "--exclude-bots"]):
                args = ["--link", "rpR", "--tz", tz, "--top", "5"] + args
                pooled, direct = report(via, *args), report(db, *args)
                pooled.pop("generated_at")
                direct.pop("generated_at")
                assert pooled == direct, (tz, args)
        docs = []
        for who in (via, db):
            out = os.path.join(db.work, f"all-pgb-{len(docs)}")
            run(who, "--all", "--from", "2024-05-01", "--to", "2024-05-03", "--tz", "Asia/Kolkata",
                "--out", out, "-o", "batch_links=1")
            files = {}
            for name in sorted(visible(out)):
                with open(os.path.join(out, name)) as f:
                    files[name] = json.load(f)
                files[name].pop("generated_at", None)
            docs.append(files)
        assert docs[0] == docs[1] and len(docs[0]) == 5
    finally:
        assert bouncer.stop() == 0, bouncer.log_text


def test_all_write_failure_midway(db):
    """A file that cannot be written (a directory in its place) while the
    next round is being read: exit 1 naming it, no temporary file left, and
    no leak or race under the sanitizers (run() checks)."""
    out = os.path.join(db.work, "all-fail")
    os.makedirs(os.path.join(out, "link-rpB.json"))
    r = run(db, "--all", "--from", "2024-05-01", "--to", "2024-05-03", "--out", out,
            "-o", "batch_links=1", check=False)
    assert r.returncode == 1, r.stderr
    assert "link-rpB.json" in r.stderr
    assert not [f for f in os.listdir(out) if f.endswith(".tmp")]
    assert "index.json" not in visible(out)



def test_all_refresh_swaps_in_place(db):
    """--all over an earlier run's files (the nightly refresh): every visible
    file equals what a run into a new directory writes, also when the new
    reports are shorter than the old ones (the hidden .NAME.tmp a refresh
    writes over holds the previous, longer report), and a third run over
    those still does."""
    def docs(out):
        got = {}
        for name in sorted(visible(out)):
            if name.startswith("."):
                continue
            with open(os.path.join(out, name)) as f:
                got[name] = json.load(f)
            got[name].pop("generated_at", None)
        return got

    out = os.path.join(db.work, "all-refresh")
    ranges = [("2024-05-01", "2024-05-03"), ("2024-05-02", "2024-05-02"), ("2024-05-01", "2024-05-03")]
    for i, (frm, to) in enumerate(ranges):
        fresh = os.path.join(db.work, f"all-refresh-new-{i}")
        for d in (out, fresh):
            run(db, "--all", "--include-empty", "--from", frm, "--to", to, "--out", d,
                "-o", "batch_links=1")
        assert docs(out) == docs(fresh), (frm, to)
        assert docs(out)["index.json"]["range"]["from"] == frm
        if i > 0:  # a refresh leaves one hidden previous version per link file
            hidden = sorted(n for n in os.listdir(out) if n.startswith(".") and n != ".reports.lock")
            assert hidden == sorted(f".{n}.tmp" for n in visible(out) if n.startswith("link-"))


def test_an_open_report_never_changes(db):
    """A dashboard that opened link-CODE.json (or index.json) keeps reading
    the report it opened while --link runs again and again: each run writes
    a new file and renames it over the name. Until the forty-sixth session
    the second run swapped the open file out to .NAME.tmp and the third
    wrote the new report into it, under the reader."""
    out = os.path.join(db.work, "open-reader")
    args = ("--from", "2024-05-01", "--to", "2024-05-03", "--out", out)
    run(db, "--link", "rpA", *args)
    run(db, "--tag", "spring", *args)
    held = {}
    for name in ("link-rpA.json", "index.json", "combined.json"):
        f = open(os.path.join(out, name), "rb")
        held[name] = (f, f.read())
        f.seek(0)
    for _ in range(2):
        time.sleep(1.1)  # generated_at moves on
        run(db, "--link", "rpA", *args)
        run(db, "--tag", "spring", "-o", "batch_links=1", *args)
    for name, (f, before) in held.items():
        assert f.read() == before, name
        assert os.fstat(f.fileno()).st_nlink == 0, name  # replaced, not reused
        f.close()
        with open(os.path.join(out, name), "rb") as g:
            assert g.read() != before, name  # the name has the new report
    assert not [n for n in os.listdir(out)
                if n.endswith(".tmp") and not n.startswith(".link-")]


def _png_stats(path):
    """(width, height, distinct colours, non-white pixels) of an 8-bit RGB/RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    colours, nonwhite = set(), 0
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        for x in range(0, stride, bpp * 2):  # every other pixel is plenty
            px = bytes(line[x:x + 3])
            colours.add(px)
            if px != b"\xff\xff\xff":
                nonwhite += 1
        prev = line
    return w, h, len(colours), nonwhite * 2


def test_html_self_contained_and_renders_in_chromium(db):
    out = os.path.join(db.work, "html")
    run(db, "--link", "rpR", "--from", "2024-05-01", "--to", "2024-05-09", "--format", "html",
        "--out", out)
    path = os.path.join(out, "link-rpR.html")
    with open(path, encoding="utf-8") as f:
        page = f.read()
    low = page.lower()
    assert "<script" not in low and "<link" not in low and "@import" not in low
    assert "url(" not in low and "src=" not in low
    assert 'name="viewport"' in page and "<svg" in page and "<polyline" in page
    assert "https://example.com/rpR?a=1&amp;b=&lt;x&gt;" in page and "<x>" not in page
    png = os.path.join(out, "shot.png")
    r = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-background-networking", f"--screenshot={png}",
                        "--window-size=412,1200", "--hide-scrollbars", "file://" + path],
                       capture_output=True, text=True, timeout=120)
    assert os.path.exists(png), r.stderr[-3000:]
    w, h, colours, nonwhite = _png_stats(png)
    assert (w, h) == (412, 1200)
    assert colours >= 8, colours
    assert nonwhite > w * h // 4, (nonwhite, w * h)


@pytest.mark.parametrize("args,code,msg", [
    (["--link", "noSuchCode"], 3, 'unknown code "noSuchCode"'),
    (["--link", "rpA", "--from", "2024-02-30"], 2, "--from \"2024-02-30\": not a date"),
    (["--link", "rpA", "--to", "yesterday"], 2, "--to \"yesterday\": not a date"),
    (["--link", "rpA", "--from", "2024-05-03", "--to", "2024-05-01"], 2, "is after --to"),
    (["--link", "rpA", "--tz", "Mars/Olympus_Mons"], 2, 'unknown time zone "Mars/Olympus_Mons"'),
    # the SQL standard's form: TimeZone takes it, AT TIME ZONE reads it otherwise
    (["--link", "rpA", "--tz", "INTERVAL '+08:00'"], 2, "time zone \"INTERVAL '+08:00'\" is ambiguous"),
    (["--link", "rpA", "--tz", "INTERVAL '+08:00' HOUR TO MINUTE"], 2, "unknown time zone"),
    (["--link", "rpA", "--format", "pdf"], 2, "--format \"pdf\""),
    # PostgreSQL reads these one way as TimeZone (labels) and another in AT
    # TIME ZONE (day bounds): until the forty-third session they gave days
    # 16 hours (+8) or, in summer, one hour (CET) off their labels
    (["--link", "rpA", "--tz", "+8"], 2, 'time zone "+8" is ambiguous'),
    (["--link", "rpA", "--tz", "CET"], 2, 'time zone "CET" is ambiguous'),
    (["--link", os.fsdecode(b"\xff")], 2, "--link: not valid UTF-8"),
    (["--tag", os.fsdecode(b"a\xff")], 2, "--tag: not valid UTF-8"),
    (["--tag", "no-such-tag"], 3, 'no link has the tag "no-such-tag"'),
    (["--all"], 2, "give --out DIR"),
    (["--link", "rpA", "--all", "--out", "/tmp"], 2, "exactly one of"),
    (["--all", "--out", "/proc/1/reports"], 1, "--out /proc/1/reports"),
    (["--bogus"], 2, 'unknown argument "--bogus"'),
])
def test_errors(db, args, code, msg):
    r = run(db, *args, check=False)
    assert r.returncode == code, (r.returncode, r.stderr)
    assert msg in r.stderr, r.stderr
    assert r.stdout == ""


def test_zones_read_one_way_and_the_last_year(db):
    """Zone names that are also abbreviations without summer time (EST) and
    Etc/GMT offsets are read the same way everywhere and accepted; a range
    ending on 9999-12-31 (its day bounds end in year 10000) works."""
    for tz in ("EST", "Etc/GMT-8", "UTC", "Asia/Kolkata"):
        doc = report(db, "--link", "rpA", "--from", "2024-05-01", "--to", "2024-05-03", "--tz", tz)
        assert doc["range"]["tz"] == tz and doc["range"]["days"] == 3
    doc = report(db, "--link", "rpA", "--from", "9999-12-30", "--to", "9999-12-31")
    assert doc["range"]["days"] == 2 and doc["totals"]["visits"] == 0


def test_one_run_at_a_time_per_out_dir(db):
    """A second run into the same --out waits for the first (they shared
    .NAME.tmp: one could truncate the file the other had put in place)."""
    out = os.path.join(db.work, "locked-out")
    os.makedirs(out)
    with open(os.path.join(out, ".reports.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        p = subprocess.Popen([os.path.join(lpstack.BIN, "reports"), "-o", f"pg_dsn={db.dsn}",
                              "--link", "rpA", "--out", out], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        time.sleep(1.5)
        assert p.poll() is None and not os.path.exists(os.path.join(out, "link-rpA.json"))
        fcntl.flock(lock, fcntl.LOCK_UN)
        _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert visible(out) == ["link-rpA.json"]


def test_unwritable_out_dir(db):
    blocker = os.path.join(db.work, "a-file")
    with open(blocker, "w") as f:
        f.write("x")
    r = run(db, "--link", "rpA", "--out", os.path.join(blocker, "sub"), check=False)
    assert r.returncode == 1 and "cannot create directory" in r.stderr, r.stderr


def test_help_documents_flags(db):
    r = run(db, "--help")
    for flag in ("--link", "--tag", "--all", "--from", "--to", "--tz", "--format", "--out",
                 "--exclude-bots", "--include-empty", "--top", "pg_dsn", "top_n", "base_url"):
        assert flag in r.stdout, flag


def test_base_url_setting_and_default_range(db):
    doc = report(db, "--link", "rpA", "-o", "base_url=https://go.example/")
    assert doc["link"]["short_url"] == "https://go.example/rpA"
    assert doc["range"]["days"] == 30
    assert "hourly" not in doc


def _ber(tag, content):
    """One BER TLV (definite length)."""
    n = len(content)
    if n < 0x80:
        return bytes([tag, n]) + content
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(size)]) + size + content


def _ber_read(buf, i):
    """(tag, content, next index) of the TLV at buf[i]."""
    tag, n = buf[i], buf[i + 1]
    i += 2
    if n & 0x80:
        k = n & 0x7F
        n = int.from_bytes(buf[i:i + k], "big")
        i += k
    return tag, buf[i:i + n], i + n


class LdapDirectory(threading.Thread):
    """An LDAP server of one entry on a free port, enough for libpq's service
    lookup: answers an anonymous bind and any search with one entry whose
    attribute `conninfo` holds value, and records the operations it saw."""

    def __init__(self, value):
        super().__init__(daemon=True)
        self.value = value.encode()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(30)
        self.port = self.sock.getsockname()[1]
        self.ops = []
        self.start()

    def run(self):
        ok = _ber(0x0A, b"\x00") + _ber(0x04, b"") + _ber(0x04, b"")  # success, "", ""
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        buf = b""
        with conn:
            conn.settimeout(30)
            while True:
                try:
                    data = conn.recv(4096)
                except OSError:
                    return
                if not data:
                    return
                buf += data
                while len(buf) >= 2:
                    _, msg, end = _ber_read(buf, 0)
                    if end > len(buf):  # the message is not all here yet
                        break
                    buf = buf[end:]
                    _, msgid, j = _ber_read(msg, 0)
                    op = msg[j]
                    mid = _ber(0x02, msgid)
                    if op == 0x60:  # BindRequest -> BindResponse
                        self.ops.append("bind")
                        conn.sendall(_ber(0x30, mid + _ber(0x61, ok)))
                    elif op == 0x63:  # SearchRequest -> one entry, done
                        self.ops.append("search")
                        attr = _ber(0x30, _ber(0x04, b"conninfo") + _ber(0x31, _ber(0x04, self.value)))
                        entry = _ber(0x64, _ber(0x04, b"cn=linkpulse,dc=lp") + _ber(0x30, attr))
                        conn.sendall(_ber(0x30, mid + entry) + _ber(0x30, mid + _ber(0x65, ok)))
                    elif op == 0x42:  # UnbindRequest
                        self.ops.append("unbind")
                        return


def test_ldap_service_lookup_loads_libldap_on_demand(db):
    """reports links libpq statically and loads libldap only when a connection
    service names an LDAP URL (reports/ldapload.c), so a run does not map it
    and the GnuTLS chain behind it. Such a service still works: libpq's lookup
    goes through libldap to a directory on the wire, and the report equals the
    direct one."""
    rep = os.path.join(lpstack.BIN, "reports")
    mapped = subprocess.run(["ldd", rep], capture_output=True, text=True, check=True).stdout
    assert "libldap" not in mapped and "libgnutls" not in mapped, mapped
    directory = LdapDirectory(f"host=127.0.0.1 port={db.port} dbname={db.dbname} user=postgres")
    services = os.path.join(db.work, "pg_service.conf")
    with open(services, "w") as f:
        f.write(f"[lpldap]\nldap://127.0.0.1:{directory.port}/dc=lp?conninfo?base?(objectClass=*)\n")
    args = ["--link", "rpR", "--from", "2024-05-01", "--to", "2024-05-09", "--tz", "Asia/Shanghai"]
    r = subprocess.run([rep, "-o", "pg_dsn=service=lpldap"] + args, capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PGSERVICEFILE=services))
    assert not lpstack.sanitizer_report(r.stderr), r.stderr
    assert r.returncode == 0, r.stderr
    directory.join(10)
    assert directory.ops[:2] == ["bind", "search"], directory.ops
    via, direct = json.loads(r.stdout), report(db, *args)
    via.pop("generated_at")
    direct.pop("generated_at")
    assert via == direct
