"""Foundation: every program's command line and config table, the migrations
(applied, recorded, idempotent, every table and column commented) and the dev
Kafka broker (real protocol, brokers down and up on request)."""
import os
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import lpstack

PROGRAMS = ["redirector", "ingest", "reports", "devbroker"]


def run(name, *args, env=None):
    return subprocess.run([os.path.join(lpstack.BIN, name)] + list(args), capture_output=True,
                          text=True, env=dict(os.environ, **(env or {})), timeout=60)


@pytest.mark.parametrize("name", PROGRAMS)
def test_help(name):
    r = run(name, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: "), r.stdout[:200]
    assert "log_level" in r.stdout


@pytest.mark.parametrize("name", PROGRAMS)
def test_check_config_good_file(name, workdir):
    path = os.path.join(workdir, "good.conf")
    with open(path, "w") as f:
        f.write("# a comment\n\nlog_level = debug   # trailing comment\n")
    r = run(name, "-c", path, "--check-config")
    assert (r.returncode, r.stdout.strip()) == (0, "configuration OK"), r.stderr


@pytest.mark.parametrize("name", PROGRAMS)
def test_bad_value_names_file_and_line(name, workdir):
    path = os.path.join(workdir, "bad.conf")
    with open(path, "w") as f:
        f.write("log_level = info\n\nlog_level = loud\n")
    r = run(name, "-c", path, "--check-config")
    assert r.returncode != 0
    assert f"{path}:3: log_level" in r.stderr, r.stderr


@pytest.mark.parametrize("name", PROGRAMS)
def test_unknown_key_is_an_error(name, workdir):
    path = os.path.join(workdir, "unknown.conf")
    with open(path, "w") as f:
        f.write("no_such_setting = 1\n")
    r = run(name, "-c", path, "--check-config")
    assert r.returncode != 0
    assert f"{path}:1: unknown setting \"no_such_setting\"" in r.stderr, r.stderr


@pytest.mark.parametrize("name", PROGRAMS)
def test_nul_byte_in_a_line_is_an_error(name, workdir):
    """The line's text went up to the NUL: "info\\0junk" was taken for info."""
    path = os.path.join(workdir, "nul.conf")
    with open(path, "wb") as f:
        f.write(b"# settings\nlog_level = info\0junk\n")
    r = run(name, "-c", path, "--check-config")
    assert r.returncode != 0
    assert f"{path}:2: a NUL byte in the line" in r.stderr, r.stderr


def test_env_override_is_validated():
    r = run("reports", "--check-config", env={"LINKPULSE_LOG_LEVEL": "loud"})
    assert r.returncode != 0
    assert "LINKPULSE_LOG_LEVEL" in r.stderr


def migration_versions():
    """The versions schemas/migrate.sh applies, in order (file names)."""
    return sorted(f[:-4] for f in os.listdir(os.path.join(lpstack.ROOT, "schemas/migrations"))
                  if f.endswith(".sql"))


def test_migrations_recorded_and_idempotent(pg):
    versions = pg.psql("SELECT version FROM schema_migrations ORDER BY version").split()
    assert versions == migration_versions()
    assert pg.migrate().strip() == "", "a second run must apply nothing"
    # 0011: the per-batch breakdown arrays are compressed with lz4 (Debian's
    # PostgreSQL is built with it)
    assert pg.psql("SELECT string_agg(attname || '=' || attcompression::text, ',' ORDER BY attname) "
                   "FROM pg_attribute WHERE attrelid = 'link_day_dim_batch'::regclass "
                   "AND attnum > 0 AND attcompression::text <> ''") == \
        "dimension=l,value=l,visits=l"


def test_every_table_and_column_is_commented(pg):
    missing_tables = pg.psql("""
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND obj_description(c.oid, 'pg_class') IS NULL""")
    assert missing_tables == "", f"tables without COMMENT: {missing_tables}"
    missing_cols = pg.psql("""
        SELECT c.relname || '.' || a.attname FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND a.attnum > 0 AND NOT a.attisdropped
          AND col_description(c.oid, a.attnum) IS NULL""")
    assert missing_cols == "", f"columns without COMMENT: {missing_cols}"


def test_visit_partitions_created_on_demand(pg):
    assert pg.psql("SELECT visit_record_ensure_partition('2031-05-17 12:00+00')") == \
        "visit_record_203105"
    pg.psql("""INSERT INTO visit_record (id, unique_code, client_id, visit_time, http_status)
               VALUES (1, 'abc', repeat('0', 40), '2031-05-31 23:59:59+00', 302)""")
    assert pg.psql("SELECT count(*) FROM visit_record_203105") == "1"


def test_two_migrate_runs_at_once(empty_db):
    """Two deploy jobs running migrate.sh on one new database: each file is
    applied once (checked again under the advisory lock) and both succeed."""
    runs = [subprocess.Popen([os.path.join(lpstack.ROOT, "schemas/migrate.sh"), empty_db.url],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in runs]
    assert [p.returncode for p in runs] == [0, 0], outs
    files = migration_versions()
    applied = sorted(line.split()[-1] for out, _ in outs for line in out.splitlines())
    assert applied == files, outs
    assert empty_db.psql("SELECT version FROM schema_migrations ORDER BY 1").split() == files


def test_partition_bounds_are_utc_months_in_any_session_zone(empty_db):
    """Migrations and visit_record_ensure_partition bound each partition by
    its UTC month whatever the session's TimeZone (PGTZ): in Europe/Berlin,
    adding the month to a timestamptz made October overlap November (0002
    failed from September to December), in America/New_York it left March
    ending on the 28th. 0015 repairs empty misplaced partitions and names
    the ones holding rows."""
    env = dict(os.environ, PGTZ="Europe/Berlin")
    r = subprocess.run([os.path.join(lpstack.ROOT, "schemas/migrate.sh"), empty_db.url],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    env["PGTZ"] = "America/New_York"
    for ts in ("2031-03-15 12:00+00", "2031-10-15 12:00+00", "2031-11-15 12:00+00"):
        r = subprocess.run(["psql", "-XAtq", "-d", empty_db.url, "-c",
                            f"SELECT visit_record_ensure_partition('{ts}')"],
                           capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
    # a zone printed as an ambiguous abbreviation (DateStyle SQL: Shanghai's
    # CST read back as US Central) made June start at 14:00 UTC (0019)
    for tz, ts in (("Asia/Shanghai", "2031-06-15 12:00+00"), ("Asia/Kolkata", "2031-08-15 12:00+00")):
        r = subprocess.run(["psql", "-XAtq", "-d", empty_db.url, "-c",
                            f"SELECT visit_record_ensure_partition('{ts}')"], capture_output=True,
                           text=True, env=dict(env, PGTZ=tz, PGDATESTYLE="SQL, DMY"))
        assert r.returncode == 0, r.stderr

    def bounds():
        return dict(line.split("|") for line in empty_db.psql(
            "SET TimeZone = 'UTC'; SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'visit_record'::regclass").splitlines() if "|" in line)
    got = bounds()
    assert len(got) >= 7, got
    for rel, bound in got.items():
        y, m = int(rel[-6:-2]), int(rel[-2:])
        ny, nm = (y + 1, 1) if m == 12 else (y, m + 1)
        assert bound == (f"FOR VALUES FROM ('{y:04d}-{m:02d}-01 00:00:00+00') "
                         f"TO ('{ny:04d}-{nm:02d}-01 00:00:00+00')"), (rel, bound)
    empty_db.psql("INSERT INTO visit_record (id, unique_code, client_id, visit_time, http_status) "
            "VALUES (1, 'abc', repeat('0', 40), '2031-03-31 23:30:00+00', 302)")
    assert empty_db.psql("SELECT count(*) FROM visit_record_203103") == "1"
    # partitions an old function made in New York: 0015 makes the empty
    # one again and names the one holding a row
    empty_db.psql("CREATE TABLE visit_record_209903 PARTITION OF visit_record FOR VALUES "
            "FROM ('2099-03-01 00:00+00') TO ('2099-03-28 23:00+00'); "
            "CREATE TABLE visit_record_209905 PARTITION OF visit_record FOR VALUES "
            "FROM ('2099-05-01 00:00+00') TO ('2099-05-31 00:00+00'); "
            "INSERT INTO visit_record (id, unique_code, client_id, visit_time, http_status) "
            "VALUES (2, 'abc', repeat('0', 40), '2099-05-02 00:00+00', 302)")
    r = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-1", "-d", empty_db.url, "-f",
                        os.path.join(lpstack.ROOT,
                                     "schemas/migrations/0015_partition_bounds_utc.sql")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    got = bounds()
    assert got["visit_record_209903"] == ("FOR VALUES FROM ('2099-03-01 00:00:00+00') "
                                          "TO ('2099-04-01 00:00:00+00')")
    assert got["visit_record_209905"].endswith("TO ('2099-05-31 00:00:00+00')")
    assert "visit_record_209905: bounds" in r.stderr and "holds rows" in r.stderr, r.stderr
    assert "209903" not in r.stderr


def test_two_sessions_make_one_month_at_once(pg):
    """Two lanes (or consumers) at a new month's first batch: the second
    waits for the first's partition and uses it. It failed with "relation
    already exists" (42P07): to_regclass's answer from before the wait was
    cached in the session (0019)."""
    first = subprocess.Popen(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", pg.url, "-c",
                              "BEGIN; SELECT visit_record_ensure_partition('2032-05-10'); "
                              "SELECT pg_sleep(3); COMMIT;"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 10
    while pg.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'") == "0":
        assert time.time() < deadline and first.poll() is None, first.communicate()
        time.sleep(0.05)
    second = subprocess.run(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", pg.url, "-c",
                             "SELECT visit_record_ensure_partition('2032-05-20')"],
                            capture_output=True, text=True, timeout=30)
    out, err = first.communicate(timeout=30)
    assert first.returncode == 0, err
    assert second.returncode == 0 and second.stdout.strip() == "visit_record_203205", second


def test_detached_month_is_named(pg):
    """A month detached and not yet dropped (retention's first step) is not
    taken for a partition: rows of that month would fail with "no partition
    found"; the function says which table is in the way (0019)."""
    assert pg.psql("SELECT visit_record_ensure_partition('2031-07-15')") == "visit_record_203107"
    pg.psql("ALTER TABLE visit_record DETACH PARTITION visit_record_203107")
    r = subprocess.run(["psql", "-XAtq", "-d", pg.url, "-c",
                        "SELECT visit_record_ensure_partition('2031-07-20')"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "not a partition of visit_record" in r.stderr, r
    pg.psql("DROP TABLE visit_record_203107")
    assert pg.psql("SELECT visit_record_ensure_partition('2031-07-20')") == "visit_record_203107"


def test_links_of_a_period_use_an_index(pg):
    """reports --all's list of links with visits in a range reads an index
    on (hour, url_link_id), not the whole link_hour table (0019)."""
    plan = pg.psql("SET enable_seqscan = off; EXPLAIN SELECT DISTINCT url_link_id FROM link_hour "
                   "WHERE hour >= '2024-05-01' AND hour < '2024-05-03'")
    assert "link_hour_period_idx" in plan, plan


def test_migrations_as_a_database_owner_who_is_not_a_superuser(empty_db):
    """hll is not a trusted extension: an owner who is not a superuser may
    not create it, and 0004 stopped the whole run. It falls back to exact
    visitor sets (link_hour_visitor)."""
    role = f"lp_owner_{os.getpid()}"
    # PostgreSQL 15: schema public belongs to pg_database_owner, the owner creates there
    empty_db.psql(f"CREATE ROLE {role} LOGIN; ALTER DATABASE {empty_db.dbname} OWNER TO {role}",
                  db="postgres")
    try:
        url = f"postgresql://{role}@127.0.0.1:{empty_db.port}/{empty_db.dbname}"
        r = subprocess.run([os.path.join(lpstack.ROOT, "schemas/migrate.sh"), url],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        assert empty_db.psql("SELECT count(*) FROM pg_extension WHERE extname = 'hll'") == "0"
        assert empty_db.psql("SELECT to_regclass('link_hour_visitor') IS NOT NULL") == "t"
        assert empty_db.psql("SELECT count(*) FROM schema_migrations") == \
            str(len(migration_versions()))
    finally:
        empty_db.psql(f"ALTER DATABASE {empty_db.dbname} OWNER TO postgres", db="postgres")
        empty_db.psql(f"REASSIGN OWNED BY {role} TO postgres; DROP OWNED BY {role}")
        empty_db.psql(f"DROP ROLE {role}", db="postgres")


def _produce(bootstrap, n, timeout=10.0):
    delivered = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "message.timeout.ms": int(timeout * 1000)})
    for i in range(n):
        p.produce("visits", key=f"k{i}", value=f"v{i}",
                  on_delivery=lambda err, msg: delivered.append(err))
    p.flush(timeout + 5)
    return delivered


def _consume_all(bootstrap, partitions, expect, timeout=20.0):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False})
    c.assign([TopicPartition("visits", p, 0) for p in range(partitions)])
    got = []
    deadline = time.time() + timeout
    while len(got) < expect and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value().decode())
    c.close()
    return got


def test_devbroker_speaks_kafka(broker):
    md = Producer({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert len(md.brokers) == 3
    assert len(md.topics["visits"].partitions) == 16
    errs = _produce(broker.bootstrap, 200)
    assert errs == [None] * 200
    got = _consume_all(broker.bootstrap, 16, 200)
    assert sorted(got) == sorted(f"v{i}" for i in range(200))


def test_devbroker_down_and_up(broker):
    broker.brokers_down()
    time.sleep(0.5)
    errs = _produce(broker.bootstrap, 5, timeout=2.0)
    assert len(errs) == 5 and all(e is not None for e in errs), errs
    broker.brokers_up()
    errs = _produce(broker.bootstrap, 5, timeout=10.0)
    assert errs == [None] * 5


@pytest.mark.parametrize("name", ["visit_event.schema.json", "report.schema.json"])
def test_json_schemas_are_valid(name):
    import json
    import jsonschema
    with open(os.path.join(lpstack.ROOT, "schemas", name)) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)


def test_visit_event_schema_accepts_example_and_rejects_bad():
    import json
    import jsonschema
    with open(os.path.join(lpstack.ROOT, "schemas/visit_event.schema.json")) as f:
        v = jsonschema.Draft202012Validator(json.load(f))
    ok = {"v": 1, "id": 123, "ts": 1700000000000000, "code": "abc123", "link_id": None,
          "status": 404, "ip": "203.0.113.9", "user_agent": "curl/8", "referer": None,
          "accept_language": None, "host": "s.test", "query": None}
    # version 1: an object with the fields' names
    assert not list(v.iter_errors(ok))
    assert list(v.iter_errors(dict(ok, v=2)))
    assert list(v.iter_errors(dict(ok, extra=1)))
    # version 2: the same fields as a positional array
    arr = json.loads(lpstack.encode_event(dict(ok, v=2)))
    assert arr[0] == 2 and arr[1:] == [ok[k] for k in lpstack.EVENT_FIELDS[1:]]
    assert not list(v.iter_errors(arr))
    assert lpstack.decode_event(json.dumps(arr)) == dict(ok, v=2)
    assert list(v.iter_errors([1] + arr[1:]))
    assert list(v.iter_errors(arr + [None]))
    assert list(v.iter_errors(arr[:-1]))
    assert list(v.iter_errors(arr[:5] + ["302"] + arr[6:]))
    # what ingest rejects (tests/data/event_cases.txt) the schema refuses too:
    # a NUL in a string, ids past 64 bits, ts past year 9999
    assert list(v.iter_errors(dict(ok, user_agent="a\u0000b")))
    assert list(v.iter_errors(dict(ok, code="a\u0000")))
    assert list(v.iter_errors(dict(ok, id=2 ** 63)))
    assert list(v.iter_errors(dict(ok, link_id=-2 ** 63 - 1)))
    assert list(v.iter_errors(dict(ok, ts=253402300800000000)))
    assert not list(v.iter_errors(dict(ok, id=2 ** 63 - 1, link_id=-2 ** 63,
                                       ts=253402300799999999)))
