"""reports bench: one link with 1M visits over 90 days and 10,000 links with
visits. visit_record rows are generated here and loaded with COPY; the rollups
are then built with set-based SQL following 0004_rollups.sql's definitions
(this is a bench, not a test: ingest's own rollups are tested elsewhere).
Times `reports --link` (target <= 50 ms) and `reports --all --out DIR`
(target <= 5 s) next to the same figures computed by plain SQL over
visit_record in the same run, with ratios."""
import datetime
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import lpstack  # noqa: E402

DAYS = 90
BIG_VISITS = 1_000_000
SMALL_LINKS = 10_000
SMALL_VISITS = 20  # per small link, within 3 days
START = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
FROM, TO = "2024-01-01", "2024-03-30"

COUNTRIES = ["US", "CN", "GB", "DE", "FR", "IN", "BR", "JP", "KR", "CA", "AU", "ES", "IT", "MX",
             "NL", "SE", "PL", "TR", "RU", "ID", "VN", "TH", "SG", "AR", "ZA", "EG", "NG", "SA",
             "AE", ""]
BROWSERS = [("Chrome", ["120.0.0", "119.0.1", "118.0.2"]), ("Mobile Safari", ["17.1", "16.6"]),
            ("Firefox", ["121.0", "120.0"]), ("Edge", ["120.0.2210"]), ("Samsung Internet", ["23.0"]),
            ("WeChat", ["8.0.42"]), ("Opera", ["105.0"])]
OSES = ["Windows", "Mac OS X", "iOS", "Android", "Linux", "Chrome OS"]
DEVICES = ["desktop", "mobile", "tablet", "other"]
REFERERS = ["", "", "", "www.google.com", "t.co", "m.facebook.com", "weixin.qq.com",
            "l.instagram.com", "www.bing.com", "news.ycombinator.com", "lnkd.in", "www.reddit.com"]
LANGS = ["en-us", "zh-cn", "de-de", "fr-fr", "es-es", "ja-jp", "pt-br", "", "en-gb", "ko-kr"]
ISPS = [f"ISP {i}" for i in range(20)] + [""]

COLS = ("id, url_link_id, unique_code, client_id, visit_time, http_status, country_code, province, "
        "city, isp, browser_type, browser_version, os_type, device_type, referer_host, language, "
        "is_bot")

ROLLUP_SQL = """
INSERT INTO link_hour (url_link_id, hour, visits, bot_visits, first_visit, last_visit{vis_col})
SELECT url_link_id, date_trunc('hour', visit_time, 'UTC'), count(*) FILTER (WHERE NOT is_bot),
       count(*) FILTER (WHERE is_bot), min(visit_time), max(visit_time){vis_agg}
FROM visit_record WHERE url_link_id IS NOT NULL GROUP BY 1, 2;
INSERT INTO link_day (url_link_id, day, visits, bot_visits, first_visit, last_visit{vis_col})
SELECT url_link_id, (hour AT TIME ZONE 'UTC')::date, sum(visits), sum(bot_visits), min(first_visit),
       max(last_visit){day_agg}
FROM link_hour GROUP BY 1, 2;
INSERT INTO {dim_table} (url_link_id, day, dimension, value, is_bot, visits)
SELECT v.url_link_id, (v.visit_time AT TIME ZONE 'UTC')::date, x.dimension, x.value, v.is_bot, count(*)
FROM visit_record v CROSS JOIN LATERAL report_visit_dims(v.country_code::text, v.province, v.city,
  v.isp, v.browser_type, v.browser_version, v.os_type, v.device_type, v.referer_host, v.language) x
WHERE v.url_link_id IS NOT NULL GROUP BY 1, 2, 3, 4, 5;
INSERT INTO link_total (url_link_id, visits, bot_visits, first_visit, last_visit)
SELECT url_link_id, count(*), count(*) FILTER (WHERE is_bot), min(visit_time), max(visit_time)
FROM visit_record WHERE url_link_id IS NOT NULL GROUP BY 1;
"""

# The report's figures from visit_record alone: totals, per day, top 10 per
# dimension. {where} selects the links; {grp} groups per link or not.
PLAIN_SQL = """
SELECT url_link_id, count(*) FILTER (WHERE NOT is_bot), count(DISTINCT client_id) FILTER (WHERE NOT is_bot),
       count(*) FILTER (WHERE is_bot), min(visit_time), max(visit_time)
FROM visit_record WHERE {where} GROUP BY 1;
SELECT url_link_id, (visit_time AT TIME ZONE 'UTC')::date, count(*) FILTER (WHERE NOT is_bot),
       count(DISTINCT client_id) FILTER (WHERE NOT is_bot), count(*) FILTER (WHERE is_bot)
FROM visit_record WHERE {where} GROUP BY 1, 2;
WITH s AS (SELECT v.url_link_id, x.dimension, x.value, count(*) FILTER (WHERE NOT v.is_bot) AS h,
                  count(*) FILTER (WHERE v.is_bot) AS b
           FROM visit_record v CROSS JOIN LATERAL report_visit_dims(v.country_code::text, v.province,
             v.city, v.isp, v.browser_type, v.browser_version, v.os_type, v.device_type,
             v.referer_host, v.language) x WHERE {where} GROUP BY 1, 2, 3)
SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY url_link_id, dimension
  ORDER BY h DESC, b DESC, value) AS rn FROM s WHERE h > 0) k WHERE rn <= 10;
"""


def _rows(rng, first_id, link_id, code, n, t0, span_s, clients):
    buf = io.StringIO()
    for i in range(n):
        t = t0 + datetime.timedelta(seconds=rng.random() * span_s)
        bot = rng.random() < 0.05
        cc = rng.choice(COUNTRIES)
        prov = f"P{rng.randrange(3)}" if cc else ""
        city = f"C{rng.randrange(4)}" if cc else ""
        fam, vers = rng.choice(BROWSERS)
        buf.write(f"{first_id + i},{link_id},{code},{rng.randrange(clients):040x},"
                  f"{t.isoformat()},302,{cc},{prov},{city},{rng.choice(ISPS)},"
                  f"{'Googlebot' if bot else fam},{'2.1' if bot else rng.choice(vers)},"
                  f"{rng.choice(OSES)},{'bot' if bot else rng.choice(DEVICES)},"
                  f"{rng.choice(REFERERS)},{rng.choice(LANGS)},{'t' if bot else 'f'}\n")
    buf.seek(0)
    return buf


def load(pg):
    import psycopg2
    t0 = time.time()
    conn = psycopg2.connect(pg.dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SET synchronous_commit = on")  # see VACUUM below
    for m in range(1, 5):
        cur.execute("SELECT visit_record_ensure_partition(%s)", (f"2024-{m:02d}-15",))
    cur.execute("INSERT INTO url_link (code, short_url, long_url, long_url_md5, tags) "
                "SELECT 'big', 'http://s.bench/big', 'https://bench.example/big', md5('big'), "
                "'{bench}'::text[] UNION ALL SELECT 'l' || lpad(i::text, 5, '0'), "
                "'http://s.bench/l' || i, 'https://bench.example/' || i, md5(i::text), '{bench}'::text[] "
                "FROM generate_series(1, %s) i", (SMALL_LINKS,))
    cur.execute("SELECT id, code FROM url_link ORDER BY id")
    links = cur.fetchall()
    rng = random.Random(42)
    copy = f"COPY visit_record ({COLS}) FROM STDIN WITH (FORMAT csv)"
    big_id = links[0][0]
    next_id = 1
    for chunk in range(0, BIG_VISITS, 200_000):
        cur.copy_expert(copy, _rows(rng, next_id, big_id, "big", 200_000, START, DAYS * 86400,
                                    200_000))
        next_id += 200_000
    buf = io.StringIO()
    for link_id, code in links[1:]:
        t = START + datetime.timedelta(days=rng.randrange(DAYS - 3))
        part = _rows(rng, next_id, link_id, code, SMALL_VISITS, t, 3 * 86400, 1_000_000)
        buf.write(part.getvalue())
        next_id += SMALL_VISITS
    buf.seek(0)
    cur.copy_expert(copy, buf)
    t_copy = time.time() - t0
    cur.execute("SELECT count(*) FROM pg_attribute WHERE attrelid = 'link_hour'::regclass "
                "AND attname = 'visitors'")
    hll = cur.fetchone()[0] == 1
    # With 0007 link_day_dim is a view whose INSTEAD OF trigger upserts row
    # by row: load its compacted table directly.
    cur.execute("SELECT to_regclass('link_day_dim_row') IS NOT NULL")
    dim_table = "link_day_dim_row" if cur.fetchone()[0] else "link_day_dim"
    cur.execute(ROLLUP_SQL.format(
        dim_table=dim_table,
        vis_col=", visitors" if hll else "",
        day_agg=", hll_union_agg(visitors)" if hll else "",
        vis_agg=(", coalesce(hll_add_agg(hll_hash_text(client_id::text)) FILTER (WHERE NOT is_bot),"
                 " hll_empty())") if hll else ""))
    # 0008: the monthly and weekly sums of the compacted day rows (what
    # link_day_dim_compact() keeps in step with them)
    for unit in ("month", "week"):
        cur.execute(f"INSERT INTO link_{unit}_dim (url_link_id, {unit}, dimension, value, is_bot, visits) "
                    f"SELECT url_link_id, date_trunc('{unit}', day)::date, dimension, value, "
                    f"is_bot, sum(visits) FROM link_day_dim_row GROUP BY 1, 2, 3, 4, 5")
    if not hll:
        cur.execute("INSERT INTO link_hour_visitor SELECT DISTINCT url_link_id, "
                    "date_trunc('hour', visit_time, 'UTC'), client_id FROM visit_record "
                    "WHERE url_link_id IS NOT NULL AND NOT is_bot")
    # What autovacuum does in production: the visibility map lets the rollups
    # be read by index-only scans. The cluster runs with synchronous_commit
    # off, and VACUUM cannot mark a page all-visible while the commit of its
    # rows is not yet flushed: the rollups above committed with it on (see
    # the SET at the start), and an autovacuum still holding an older
    # snapshot is waited for.
    for _ in range(120):
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL "
                    "AND pid <> pg_backend_pid()")
        if cur.fetchone()[0] == 0:
            break
        time.sleep(0.5)
    cur.execute("VACUUM ANALYZE")
    cur.execute("SELECT (SELECT count(*) FROM visit_record), (SELECT count(*) FROM link_hour), "
                "(SELECT count(*) FROM link_day_dim)")
    n_visits, n_hours, n_dims = cur.fetchone()
    cur.execute("SELECT sum(relallvisible), sum(relpages) FROM pg_class "
                "WHERE relname IN ('link_hour', 'link_day', 'link_month_dim', 'link_week_dim', %s)", (dim_table,))
    vis, pages = cur.fetchone()
    conn.close()
    print(f"reports_load {n_visits} visits (COPY {t_copy:.1f} s), rollups {n_hours} link_hour + "
          f"{n_dims} link_day_dim rows ({vis}/{pages} pages all-visible), "
          f"{time.time() - t0:.1f} s total, hll={hll}", flush=True)


def timed(argv, reps, runs=None):
    times = runs if runs is not None else []
    out = None
    for _ in range(reps):
        t = time.perf_counter()
        r = subprocess.run(argv, capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        if r.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed:\n{r.stderr[-2000:]}")
        out = r.stdout
    return statistics.median(times), out


def psql_argv(pg, sql):
    # The psql binary itself: /usr/bin/psql is Debian's pg_wrapper, a Perl
    # script that costs about 40 ms more per start here.
    return [os.path.join(lpstack.PG_BIN, "psql"), "-X", "-q", "-At", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres",
            "-d", pg.dbname, "-o", "/dev/null", "-c", sql]


def strip_generated(doc):
    """A report's JSON without its generated_at time."""
    d = json.loads(doc)
    d.pop("generated_at", None)
    return d


def libs(path):
    r = subprocess.run(["ldd", path], capture_output=True, text=True)
    return [line for line in r.stdout.splitlines() if "=>" in line]


def loaded(pg):
    return pg.psql("SELECT count(*) FROM url_link WHERE code = 'big'") == "1"


def run(bin_dir, work):
    # Development only: LP_BENCH_REPORTS_PGDIR=/some/dir keeps the loaded
    # cluster there between runs (loading takes minutes); unset, as in make
    # bench, every run loads a fresh cluster in work.
    keep = os.environ.get("LP_BENCH_REPORTS_PGDIR")
    pg = lpstack.Postgres(keep or os.path.join(work, "pg"), fast=True).up()
    try:
        if not (keep and loaded(pg)):
            load(pg)
        rep = os.path.join(bin_dir, "reports")
        base = [rep, "-o", f"pg_dsn={pg.dsn}", "--from", FROM, "--to", TO]
        timed(base + ["--link", "big"], 1)  # warm the cache
        runs = []
        t_link, out = timed(base + ["--link", "big"], 9, runs)
        doc = json.loads(out)
        big_where = ("url_link_id = (SELECT id FROM url_link WHERE code = 'big') AND "
                     f"visit_time >= '{FROM}' AND visit_time < '{TO}'::date + 1")
        exact = pg.psql(f"SELECT count(DISTINCT client_id) FILTER (WHERE NOT is_bot) FROM "
                        f"visit_record WHERE {big_where}")
        t_plain, _ = timed(psql_argv(pg, PLAIN_SQL.format(where=big_where)), 3)
        print(f"reports_link_1M_visits_ms {t_link * 1000:.1f}  (direct connection, a backend forked per run; median of 9 process runs, best "
              f"{min(runs) * 1000:.1f}; target <= 50; 90 days, "
              f"{doc['totals']['visits']} human visits, uniques {doc['totals']['uniques']} "
              f"(hll) vs exact {exact})", flush=True)
        print(f"reports_link_plain_sql_ms {t_plain * 1000:.1f}  (same figures by SQL over "
              f"visit_record; ratio plain/reports {t_plain / t_link:.1f}x)", flush=True)
        # What any process pays here before a report's own queries: start,
        # connect (a PostgreSQL backend is forked per connection), one query.
        t_floor, _ = timed(psql_argv(pg, "SELECT 1"), 9)
        print(f"reports_link_floor_ms {t_floor * 1000:.1f}  ({lpstack.PG_BIN}/psql -c 'SELECT 1', "
              f"median of 9: process start, connection and one query on this machine)", flush=True)
        # The same through pgbouncer (session mode, DISCARD ALL between
        # clients), as deploy/pgbouncer/ sets it up: connecting takes a pooled
        # backend, already forked and with warm catalog caches, instead of
        # forking a new one.
        bouncer = lpstack.PgBouncer(pg).up()
        try:
            pooled = [rep, "-o", f"pg_dsn={bouncer.dsn}", "--from", FROM, "--to", TO, "--link", "big"]
            timed(pooled, 2)  # warms the pool's two server connections
            runs_pooled = []
            t_pooled, out_pooled = timed(pooled, 9, runs_pooled)
            same = strip_generated(out_pooled) == strip_generated(out)
            t_pool_floor, _ = timed(psql_argv(bouncer, "SELECT 1"), 9)
        finally:
            bouncer.stop()
        print(f"reports_link_pooled_ms {t_pooled * 1000:.1f}  (through pgbouncer, median of 9, best "
              f"{min(runs_pooled) * 1000:.1f}; target <= 50; output {'identical' if same else 'DIFFERS'}; "
              f"ratio direct/pooled {t_link / t_pooled:.1f}x)", flush=True)
        print(f"reports_link_pooled_floor_ms {t_pool_floor * 1000:.1f}  (psql -c 'SELECT 1' through "
              f"pgbouncer, median of 9)", flush=True)
        t_start, _ = timed([rep, "--help"], 9)
        print(f"reports_start_ms {t_start * 1000:.1f}  (reports --help, median of 9: loading "
              f"the program and its {len(libs(rep))} shared libraries, no connection)", flush=True)
        out_dir = os.path.join(work, "all")
        t_all, _ = timed(base + ["--all", "--out", out_dir], 1)
        n_files = len([n for n in os.listdir(out_dir) if not n.startswith(".")]) - 1
        # The nightly refresh: the same run over yesterday's files. Each file
        # replaced atomically frees the old inode, and ext4 without a journal
        # (this machine's) skips inodes freed in the last minute when it
        # allocates the next ones, so this costs more system time.
        t_over, _ = timed(base + ["--all", "--out", out_dir], 1)
        all_where = f"visit_time >= '{FROM}' AND visit_time < '{TO}'::date + 1 AND url_link_id IS NOT NULL"
        t_all_plain, _ = timed(psql_argv(pg, PLAIN_SQL.format(where=all_where)), 1)
        print(f"reports_all_s {t_all:.2f}  (target <= 5; {n_files} link files + index.json, "
              f"90 days each, into a new directory)", flush=True)
        print(f"reports_all_overwrite_s {t_over:.2f}  (target <= 5; the same run again over "
              f"those files)", flush=True)
        print(f"reports_all_plain_sql_s {t_all_plain:.2f}  (same figures by SQL over visit_record, "
              f"no files written; ratio plain/reports {t_all_plain / t_all:.1f}x)", flush=True)
        shutil.rmtree(out_dir, ignore_errors=True)
    finally:
        pg.stop()


if __name__ == "__main__":
    import tempfile
    w = tempfile.mkdtemp(prefix="lp-bench-reports-", dir="/tmp")
    os.chmod(w, 0o755)
    try:
        run(sys.argv[1] if len(sys.argv) > 1 else lpstack.BIN, w)
    finally:
        shutil.rmtree(w, ignore_errors=True)
