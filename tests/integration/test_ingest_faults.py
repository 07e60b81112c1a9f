"""ingest fault tests, each counting events in and rows out: SIGKILL mid-batch
and restart, two consumers in one group through a join and a leave,
PostgreSQL stopped for 20 s during a stream, offsets the broker no longer
has (retention) landing in ingest_lost, a statement error on a working
connection retried with backoff, and a statement stuck on a lock timed out
and retried."""
import contextlib
import os
import re
import signal
import subprocess
import threading
import time

import requests

import lpstack

from test_ingest import (EventGen, assert_rollups, counts, produce, producer, start_ingest,
                         wait_counts)


class Stream(threading.Thread):
    """Produces n events at about rate per second in the background."""

    def __init__(self, bootstrap, topic, events, rate, hold_after=None):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.events, self.rate = bootstrap, topic, events, rate
        self.error = None
        self.sent = 0
        # after hold_after events the stream waits for release(): "mid-stream"
        # then holds however fast the consumer catches up
        self.hold_after = hold_after
        self.gate = threading.Event()

    def release(self):
        self.gate.set()

    def run(self):
        try:
            p = producer(self.bootstrap)
            chunk = max(1, self.rate // 10)
            for i in range(0, len(self.events), chunk):
                if self.hold_after is not None and i >= self.hold_after:
                    self.gate.wait()
                produce(self.bootstrap, self.topic, self.events[i:i + chunk], prod=p)
                self.sent += len(self.events[i:i + chunk])
                time.sleep(0.1)
        except Exception as e:  # reported by the test
            self.error = e


def wait_rows_at_least(pg, n, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if counts(pg)[0] >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {n} rows after {timeout}s: {counts(pg)}")



@contextlib.contextmanager
def table_locked(pg, table):
    """A psql session holding ACCESS EXCLUSIVE on table (as an operator's
    LOCK TABLE would) until the block ends: cancelled then, not on a timer."""
    locker = subprocess.Popen(
        [lpstack.PG_BIN + "/psql", "-X", "-q", "-d", pg.dsn, "-c",
         f"BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(60); COMMIT;"],
        stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while pg.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'") == "0":
            assert time.time() < deadline, "the lock was never taken"
            time.sleep(0.05)
        yield
    finally:
        pg.psql("SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
                "WHERE wait_event = 'PgSleep'")
        locker.wait(timeout=30)

def test_sigkill_mid_batch_and_restart(procs, pg, broker):
    gen = EventGen(seed=11)
    events = [gen.event() for _ in range(4000)]
    replays = events[100:300]  # also replayed later, across the restart
    ing = start_ingest(procs, pg, broker, batch_max_events=300, batch_max_ms=1000)
    # held after 1,200 events until the kill, so it lands mid-stream however
    # late ingest joins its group
    s = Stream(broker.bootstrap, broker.topic, events, rate=800, hold_after=1200)
    s.start()
    wait_rows_at_least(pg, 600)
    ing.send_signal(signal.SIGKILL)
    ing.proc.wait()
    s.release()
    ing.expect_failure = True
    loaded_before = counts(pg)[0]
    assert 0 < loaded_before < len(events)
    ing2 = start_ingest(procs, pg, broker, batch_max_events=300, batch_max_ms=1000)
    s.join(120)
    assert s.error is None and s.sent == len(events)
    produce(broker.bootstrap, broker.topic, replays)
    wait_counts(pg, len(events), 0, timeout=120, proc=ing2)
    total = len(events) + len(replays)
    deadline = time.time() + 30
    while time.time() < deadline and pg.psql(
            "SELECT sum(next_offset) FROM ingest_offset") != str(total):
        time.sleep(0.3)
    assert pg.psql("SELECT sum(next_offset) FROM ingest_offset") == str(total)
    assert counts(pg) == (len(events), 0)
    assert pg.psql("SELECT count(DISTINCT id) FROM visit_record") == str(len(events))
    assert_rollups(pg)


def test_two_consumers_in_one_group_join_and_leave(procs, pg, broker):
    """ingest is one member of a consumer group (README): a second process
    joins while events stream (the partitions are shared out again), then
    the first stops and the second takes them all. Every event is stored
    exactly once, the stored offsets add up to the events, the rollups
    match visit_record."""
    gen = EventGen(seed=31)
    events = [gen.event() for _ in range(6000)]
    a = start_ingest(procs, pg, broker, batch_max_events=300, batch_max_ms=500)
    # the last 2,000 wait until the second has taken every partition
    s = Stream(broker.bootstrap, broker.topic, events, rate=1000, hold_after=4000)
    s.start()
    wait_rows_at_least(pg, 1000)
    b = start_ingest(procs, pg, broker, logdir=os.path.join(procs.workdir, "second"),
                     batch_max_events=300, batch_max_ms=500)
    deadline = time.time() + 60
    while not re.search(r"assigned [1-9]\d* partitions", b.output()):
        assert time.time() < deadline and b.alive(), b.output()[-3000:]
        time.sleep(0.2)
    wait_rows_at_least(pg, 3000)
    a.send_signal(signal.SIGTERM)
    assert a.proc.wait(60) == 0, a.output()[-3000:]
    deadline = time.time() + 60
    while not re.search(r"(?<!re-)assigned 16 partitions", b.output()):
        assert time.time() < deadline and b.alive(), b.output()[-3000:]
        time.sleep(0.2)
    s.release()
    s.join(120)
    assert s.error is None and s.sent == len(events)
    wait_counts(pg, len(events), 0, timeout=120, proc=b)
    deadline = time.time() + 30
    while pg.psql("SELECT sum(next_offset) FROM ingest_offset") != str(len(events)):
        assert time.time() < deadline, pg.psql("SELECT sum(next_offset) FROM ingest_offset")
        time.sleep(0.3)
    assert pg.psql("SELECT count(DISTINCT id) FROM visit_record") == str(len(events))
    # the second held some partitions while the first ran, then all 16
    parts = [int(n) for n in re.findall(r"(?<!re-)assigned (\d+) partitions", b.output())]
    assert parts and 0 < parts[0] < 16 and parts[-1] == 16, parts
    assert_rollups(pg)


def test_postgres_down_20s_during_stream(procs, broker, own_pg):
    gen = EventGen(seed=12)
    events = [gen.event() for _ in range(3000)]
    ing = start_ingest(procs, own_pg, broker, batch_max_events=200, batch_max_ms=300)
    s = Stream(broker.bootstrap, broker.topic, events, rate=100)
    s.start()
    wait_rows_at_least(own_pg, 300)
    own_pg.stop(mode="fast")
    time.sleep(20)
    assert ing.alive()
    own_pg.start()
    s.join(120)
    assert s.error is None and s.sent == len(events)
    wait_counts(own_pg, len(events), 0, timeout=120, proc=ing)
    assert own_pg.psql("SELECT sum(next_offset) FROM ingest_offset") == str(len(events))
    assert own_pg.psql("SELECT count(DISTINCT id) FROM visit_record") == str(len(events))
    assert_rollups(own_pg)
    out = ing.output()
    assert "rolled back" in out or "PostgreSQL unavailable" in out
    assert "recovered" in out
    ing.stop()


def test_sigterm_with_postgres_down_exits_1_and_loses_nothing(procs, broker, own_pg):
    """SIGTERM while PostgreSQL is down: the last batch cannot be loaded, so
    ingest says so and exits 1 (it exited 0); its events stay in Kafka with
    the offsets where they were, and the next start loads them once."""
    gen = EventGen(seed=14)
    first, second = [gen.event() for _ in range(100)], [gen.event() for _ in range(50)]
    ing = start_ingest(procs, own_pg, broker, batch_max_ms=300)
    produce(broker.bootstrap, broker.topic, first)
    wait_counts(own_pg, 100, 0, proc=ing)
    own_pg.stop(mode="fast")
    produce(broker.bootstrap, broker.topic, second)
    # the batch holding them has been tried and rolled back (a fixed wait
    # could send SIGTERM before ingest had taken them: exit 0)
    deadline = time.time() + 60
    while "rolled back" not in ing.output():
        assert time.time() < deadline, ing.output()[-3000:]
        time.sleep(0.1)
    ing.expect_failure = True
    assert ing.stop(timeout=60) == 1, ing.output()[-3000:]
    assert "the last batch could not be loaded" in ing.output()
    own_pg.start()
    ing2 = start_ingest(procs, own_pg, broker, batch_max_ms=300)
    wait_counts(own_pg, 150, 0, proc=ing2)
    assert own_pg.psql("SELECT sum(next_offset) FROM ingest_offset") == "150"
    assert own_pg.psql("SELECT count(DISTINCT id) FROM visit_record") == "150"
    assert_rollups(own_pg)
    ing2.stop()


def test_offsets_dropped_by_broker_land_in_ingest_lost(procs, pg, broker):
    """The dev broker keeps at most 5 MiB per partition: 7 MiB into partition 0
    before ingest starts makes the first offsets unreadable."""
    gen = EventGen(seed=13)
    pad = "p" * 900
    events = [gen.event(query=pad) for _ in range(7500)]
    produce(broker.bootstrap, broker.topic, events, partition=0)
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe"})
    low, high = c.get_watermark_offsets(TopicPartition(broker.topic, 0), timeout=10)
    c.close()
    assert high == len(events) and low > 0, (low, high)
    ing = start_ingest(procs, pg, broker)
    wait_counts(pg, high - low, 0, proc=ing)
    lost = pg.psql("SELECT kafka_partition, from_offset, to_offset, reason FROM ingest_lost")
    part, frm, to, reason = lost.split("|")
    assert (int(part), int(frm), int(to)) == (0, 0, low), lost
    assert "no longer on the broker" in reason
    assert pg.psql("SELECT next_offset FROM ingest_offset WHERE kafka_partition = 0") == str(high)
    # loudly: at error level in the log
    assert "LOST EVENTS" in ing.output()
    # every event still on the broker was loaded, none of the dropped ones
    kept = {e["id"] for e in events[low:]}
    ids = {int(x) for x in pg.psql("SELECT id FROM visit_record").split()}
    assert ids == kept
    assert_rollups(pg)


def test_statement_error_retried_with_backoff(procs, pg, broker):
    """A batch failing on a working connection (here a trigger refusing one
    reject; in production a full disk or a lock timeout): nothing of it is
    stored, no offset advances, ingest retries with growing waits instead of
    re-reading the topic in a tight loop, and once the cause is gone every
    event is stored exactly once."""
    pg.psql("CREATE FUNCTION refuse_reject() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN IF NEW.reason LIKE 'bad JSON%' THEN RAISE EXCEPTION 'refused for the test'; "
            "END IF; RETURN NEW; END $$; "
            "CREATE TRIGGER refuse_reject BEFORE INSERT ON visit_reject "
            "FOR EACH ROW EXECUTE FUNCTION refuse_reject()")
    gen = EventGen(seed=14)
    events = [gen.event() for _ in range(50)]
    ing = start_ingest(procs, pg, broker, batch_max_events=1000, batch_max_ms=200)
    p = producer(broker.bootstrap)
    # the refused one first: nothing after it in its partition can commit
    produce(broker.bootstrap, broker.topic, [b"{not json"], prod=p, partition=0)
    produce(broker.bootstrap, broker.topic, events, prod=p, partition=0)
    deadline = time.time() + 60
    while time.time() < deadline and ing.output().count("loading failed again") < 3:
        time.sleep(0.2)
    out = ing.output()
    assert out.count("loading failed again") >= 3, out[-3000:]
    waits = [int(line.split("retrying in ")[1].split(" ms")[0])
             for line in out.splitlines() if "loading failed again" in line]
    assert waits[:3] == [200, 400, 800], waits
    # partition 0's batches all failed: nothing of them stored
    assert counts(pg) == (0, 0)
    assert pg.psql("SELECT coalesce(sum(next_offset), 0) FROM ingest_offset "
                   "WHERE kafka_partition = 0") == "0"
    pg.psql("DROP TRIGGER refuse_reject ON visit_reject")
    wait_counts(pg, len(events), 1, timeout=60, proc=ing)
    assert pg.psql("SELECT sum(next_offset) FROM ingest_offset") == str(len(events) + 1)
    assert_rollups(pg)
    ing.stop()


def test_lock_wait_fails_the_batch_and_is_retried(procs, pg, broker):
    """A loading statement stuck behind a lock (here an operator's LOCK
    TABLE on link_total; in production a report's long query ahead of a new
    month's partition) fails after pg_statement_timeout_ms: the batch rolls
    back, /healthz says 503 and the batch is retried with backoff. Without
    the timeout the lane waited as long as the lock stood, silently. Once
    the lock is gone every event is stored exactly once."""
    port = lpstack.free_port()
    ing = start_ingest(procs, pg, broker, batch_max_ms=200, pg_statement_timeout_ms=1000,
                       metrics_port=port)
    gen = EventGen(seed=15)
    events = [gen.event() for _ in range(400)]
    p = producer(broker.bootstrap)
    produce(broker.bootstrap, broker.topic, events[:100], prod=p)
    wait_counts(pg, 100, 0, timeout=60, proc=ing)
    with table_locked(pg, "link_total"):  # gone when the test is done with it
        produce(broker.bootstrap, broker.topic, events[100:], prod=p)
        # /healthz says 503 while a failed batch waits for its retry (it
        # is 200 again once ingest has reconnected and re-read the offsets)
        deadline, seen = time.time() + 20, set()
        while 503 not in seen or "statement timeout" not in ing.output():
            assert time.time() < deadline, (seen, ing.output()[-3000:])
            seen.add(requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code)
            time.sleep(0.02)
        assert "rolled back" in ing.output()
        assert counts(pg) == (100, 0)
    wait_counts(pg, len(events), 0, timeout=60, proc=ing)
    assert pg.psql("SELECT sum(next_offset) FROM ingest_offset") == str(len(events))
    assert_rollups(pg)
    deadline = time.time() + 10
    while requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code != 200:
        assert time.time() < deadline, "/healthz stayed 503 after the loads succeeded"
        time.sleep(0.2)
    ing.stop()


def test_sigterm_while_stored_offsets_cannot_be_read(procs, pg, broker):
    """The stored offsets read at an assignment runs 10 s at most whatever
    pg_statement_timeout_ms says (0 here: no limit; librdkafka's rebalance
    callback must return in time), and a SIGTERM while the partitions wait
    for it (nothing consumed, nothing lost) exits 0. Until the forty-fifth
    session the callback retried by itself; in that session's first change
    such a stop exited 1 saying a batch could not be loaded."""
    produce(broker.bootstrap, broker.topic, [EventGen(seed=17).event() for _ in range(5)])
    with table_locked(pg, "ingest_offset"):
        ing = start_ingest(procs, pg, broker, pg_statement_timeout_ms=0)
        deadline = time.time() + 40
        while "until their stored offsets can be read" not in ing.output():
            assert time.time() < deadline, ing.output()[-3000:]
            time.sleep(0.1)
        assert "canceling statement due to statement timeout" in ing.output(), \
            ing.output()[-3000:]
        rc = ing.stop()
    out = ing.output()
    assert rc == 0, out[-3000:]
    assert "could not be loaded" not in out, out[-3000:]
    assert counts(pg) == (0, 0)


def test_sigterm_in_a_recovery_backoff_exits_0(procs, pg, broker):
    """Stored offsets unreadable (ingest_offset locked, each read cancelled
    after 300 ms) and the recovery retrying with backoff: a SIGTERM that
    lands in the backoff (most of the time once it has grown) exits 0, as
    one during the read does: nothing was consumed. It exited 1 ("the last
    batch could not be loaded") when the failed re-seek's flag was still
    set."""
    produce(broker.bootstrap, broker.topic, [EventGen(seed=18).event() for _ in range(5)])
    with table_locked(pg, "ingest_offset"):
        ing = start_ingest(procs, pg, broker, pg_statement_timeout_ms=300)
        deadline = time.time() + 40
        while ing.output().count("after recovering; retrying in") < 4:
            assert time.time() < deadline, ing.output()[-3000:]
            time.sleep(0.1)
        rc = ing.stop()
    out = ing.output()
    assert rc == 0, out[-3000:]
    assert "could not be loaded" not in out, out[-3000:]
    assert counts(pg) == (0, 0)


def test_healthz_503_while_stored_offsets_cannot_be_read(procs, pg, broker):
    """While the stored offsets cannot be read (here ingest_offset locked by
    an operator, each read failing after pg_statement_timeout_ms; at a
    recovery's re-seek, PostgreSQL failing again), nothing loads and
    /healthz answers 503 naming it; until the forty-third session it said
    200 throughout. Once the lock is gone the events load and it is 200."""
    port = lpstack.free_port()
    gen = EventGen(seed=16)
    events = [gen.event() for _ in range(50)]
    produce(broker.bootstrap, broker.topic, events)
    with table_locked(pg, "ingest_offset"):
        ing = start_ingest(procs, pg, broker, pg_statement_timeout_ms=1000, metrics_port=port)
        deadline = time.time() + 30
        while "reading stored offsets" not in ing.output():
            assert time.time() < deadline, ing.output()[-3000:]
            time.sleep(0.05)
        for _ in range(5):
            h = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
            assert h.status_code == 503 and "stored offsets" in h.text, (h.status_code, h.text)
            time.sleep(0.3)
        assert counts(pg) == (0, 0)
        # the group's assignment is not held up in librdkafka's callback
        # (a member that stops polling for max.poll.interval.ms is dropped):
        # the partitions wait for the main loop's recovery, which polls
        assert "until their stored offsets can be read" in ing.output(), ing.output()[-3000:]
    wait_counts(pg, len(events), 0, timeout=60, proc=ing)
    assert "re-assigned" in ing.output(), ing.output()[-3000:]
    deadline = time.time() + 10
    while requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code != 200:
        assert time.time() < deadline, "/healthz stayed 503 after the offsets were read"
        time.sleep(0.2)
    ing.stop()
