"""lpstack - starts and stops the real components of a linkpulse stack:
PostgreSQL (initdb/pg_ctl, as the postgres user when run as root), Redis, the
dev Kafka broker and the linkpulse programs. Used by the tests (conftest.py)
and by `make run` (python3 tests/lpstack.py run)."""
import argparse
import fcntl
import hashlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("LP_BIN", os.path.join(ROOT, "build/rel/bin"))
SANITIZE = os.environ.get("LP_SANITIZE") == "1"
# Development: extra server options for every cluster started here, e.g.
# LP_PG_OPTS="-c huge_pages=on" (needs vm.nr_hugepages reserved).
PG_OPTS = os.environ.get("LP_PG_OPTS", "")
PG_BIN = "/usr/lib/postgresql/15/bin"
# hll.so preloaded into the postmaster when the extension is installed: every
# backend then inherits it mapped and initialised instead of loading it at its
# first hll call (a report over a new connection: 4-10 ms less here).
HLL_SO = os.path.join(os.path.dirname(PG_BIN), "lib", "hll.so")
IS_ROOT = os.geteuid() == 0

SANITIZER_RE = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|"
                          r"SUMMARY: (Address|Undefined|Leak)")


# The visit event's fields in schema version 2's array order
# (schemas/visit_event.schema.json; version 1 is an object with these names).
EVENT_FIELDS = ("v", "id", "ts", "code", "link_id", "status", "ip", "user_agent", "referer",
                "accept_language", "host", "query")


def encode_event(ev, compact=True):
    """The bytes of event dict ev as a redirector writes them: version 2, a
    JSON array in EVENT_FIELDS order ("v" 2 or absent). A dict with "v" 1, or
    with missing or unknown keys, is sent as the object it is (version 1, or a
    malformed event)."""
    import json
    seps = (",", ":") if compact else None
    if ev.get("v", 2) == 2 and set(ev) <= set(EVENT_FIELDS) and \
            set(EVENT_FIELDS[1:]) <= set(ev):
        return json.dumps([2] + [ev[k] for k in EVENT_FIELDS[1:]], separators=seps).encode()
    return json.dumps(ev, separators=seps).encode()


def decode_event(raw):
    """A message value as a dict keyed by field name, whichever version."""
    import json
    ev = json.loads(raw)
    if isinstance(ev, list):
        assert len(ev) == len(EVENT_FIELDS) and ev[0] == 2, ev
        return dict(zip(EVENT_FIELDS, ev))
    return ev


def sanitizer_report(text):
    """Returns the first sanitizer report line in text, or None."""
    m = SANITIZER_RE.search(text or "")
    return m.group(0) if m else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=20.0, proc=None, what="service"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout}s")


def _as_postgres(cmd):
    if IS_ROOT:
        return ["runuser", "-u", "postgres", "--"] + cmd
    return cmd


def _chown_postgres(path):
    if IS_ROOT:
        pw = pwd.getpwnam("postgres")
        os.chown(path, pw.pw_uid, pw.pw_gid)


class Postgres:
    """A PostgreSQL cluster of our own in datadir, on 127.0.0.1:port."""

    def __init__(self, datadir, port=None, fast=False):
        self.datadir = os.path.abspath(datadir)
        self.port = port or free_port()
        self.fast = fast  # fsync off: for throwaway test clusters only
        self.dbname = "linkpulse"

    @property
    def dsn(self):
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={self.dbname}"

    @property
    def url(self):
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.dbname}"

    @property
    def logfile(self):
        return os.path.join(self.datadir, "server.log")

    def init(self):
        if os.path.exists(os.path.join(self.datadir, "PG_VERSION")):
            return
        os.makedirs(self.datadir, exist_ok=True)
        os.chmod(self.datadir, 0o700)
        _chown_postgres(self.datadir)
        subprocess.run(_as_postgres([f"{PG_BIN}/initdb", "-D", self.datadir, "-U", "postgres",
                                     "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"]),
                       check=True, stdout=subprocess.DEVNULL)

    def start(self):
        opts = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.datadir} "
                "-c max_connections=200 -c shared_buffers=256MB")
        if os.path.exists(HLL_SO):
            opts += " -c shared_preload_libraries=hll"
        if self.fast:
            opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        if PG_OPTS:
            opts += " " + PG_OPTS
        subprocess.run(_as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.datadir, "-l", self.logfile,
                                     "-o", opts, "-w", "-t", "60", "start"]),
                       check=True, stdout=subprocess.DEVNULL)

    def stop(self, mode="fast"):
        subprocess.run(_as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.datadir, "-m", mode, "-w",
                                     "stop"]), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)

    def cpu_secs(self):
        """CPU seconds of the cluster: the postmaster with its reaped children
        (backends and autovacuum workers gone since), and its live ones."""
        with open(os.path.join(self.datadir, "postmaster.pid")) as f:
            pm = int(f.readline())
        return cpu_secs([pm], reaped=True) + cpu_secs(family(pm)[1:])

    def psql(self, sql, db=None, check=True):
        """Runs sql with psql; returns stdout (unaligned, tuples only)."""
        # The binary itself: /usr/bin/psql is Debian's pg_wrapper, a Perl
        # script that costs tens of ms of CPU per call.
        r = subprocess.run([f"{PG_BIN}/psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                            "-p", str(self.port), "-U", "postgres", "-d", db or self.dbname,
                            "-c", sql], capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"psql failed: {sql}\n{r.stderr}")
        return r.stdout.strip()

    def create_db(self):
        exists = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{self.dbname}'",
                           db="postgres")
        if not exists:
            self.psql(f"CREATE DATABASE {self.dbname}", db="postgres")

    def migrate(self):
        r = subprocess.run([os.path.join(ROOT, "schemas/migrate.sh"), self.url],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"migrations failed:\n{r.stdout}{r.stderr}")
        return r.stdout

    def warm_up(self, rows=1000000):
        """Brings a new cluster to the state of one that has been running: a
        scratch table of ~330 MB written with plain INSERTs (no bulk-write ring,
        so every page of shared_buffers is touched and mapped) and dropped,
        then a CHECKPOINT, after which its WAL segments are recycled instead
        of removed. A new cluster otherwise zero-fills each new 16 MB WAL
        segment (XLogFileInit) and page-faults shared memory in on first use:
        ~9% of the CPU of the first 200k-event ingest run (perf, 2026-11-25),
        costs a long-running server does not pay. Returns the seconds taken."""
        t = time.time()
        self.psql("CREATE TABLE lpstack_warm (a bigint, b text); "
                  f"INSERT INTO lpstack_warm SELECT g, repeat('x', 300) FROM generate_series(1, {rows}) g; "
                  "DROP TABLE lpstack_warm; CHECKPOINT", db="postgres")
        return time.time() - t

    def up(self):
        self.init()
        self.start()
        try:
            self.create_db()
            self.migrate()
        except BaseException:
            # pg_ctl daemonized it: nothing else would stop it
            self.stop(mode="immediate")
            raise
        return self


class Process:
    """A child process with its output in a log file; stop() checks it ended well."""

    def __init__(self, name, argv, logdir, env=None):
        self.name = name
        # Its own session, so a signal to the test's process group misses it.
        # A session is also a scheduling group (autogroup) on Linux.
        self.new_session = True
        self.argv = argv
        os.makedirs(logdir, exist_ok=True)
        self.logpath = os.path.join(logdir, f"{name}.log")
        self.env = dict(os.environ, **(env or {}))
        self.proc = None

    def start(self):
        self.log = open(self.logpath, "ab")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=self.new_session)
        return self

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def output(self):
        with open(self.logpath, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Stops the process; returns its exit code (None if it had to be killed)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.log.close()
                return None
        self.log.close()
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Redis(Process):
    def __init__(self, workdir, port=None, persist=False):
        self.port = port or free_port()
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", workdir, "--appendonly", "no", "--protected-mode", "no"]
        argv += ["--save", "60 1"] if persist else ["--save", ""]
        super().__init__("redis", argv, workdir)

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def up(self):
        self.start()
        try:
            wait_port(self.port, proc=self.proc, what="redis-server")
        except RuntimeError:
            self.kill()  # its own session: nothing else would reap it
            raise
        return self

    def cli(self, *args):
        r = subprocess.run(["redis-cli", "-p", str(self.port)] + list(args),
                           capture_output=True, text=True)
        return r.stdout.strip()


class Broker(Process):
    """The dev Kafka broker (librdkafka mock cluster)."""

    def __init__(self, workdir, partitions=64, brokers=3, topic="visits"):
        os.makedirs(workdir, exist_ok=True)
        self.bootstrap_file = os.path.join(workdir, "kafka.bootstrap")
        self.topic = topic
        if os.path.exists(self.bootstrap_file):
            os.unlink(self.bootstrap_file)
        argv = [os.path.join(BIN, "devbroker"), "-o", f"bootstrap_file={self.bootstrap_file}",
                "-o", f"partitions={partitions}", "-o", f"brokers={brokers}",
                "-o", f"kafka_topic={topic}"]
        super().__init__("devbroker", argv, workdir)
        self.bootstrap = None

    def up(self, timeout=20):
        self.start()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if not self.alive():
                raise RuntimeError(f"devbroker exited:\n{self.output()}")
            if os.path.exists(self.bootstrap_file):
                with open(self.bootstrap_file) as f:
                    self.bootstrap = f.read().strip()
                return self
            time.sleep(0.05)
        self.kill()  # its own session: nothing else would reap it
        raise RuntimeError("devbroker wrote no bootstrap file")

    def brokers_down(self):
        self.send_signal(signal.SIGUSR1)

    def brokers_up(self):
        self.send_signal(signal.SIGUSR2)


class PgBouncer(Process):
    """pgbouncer (Debian package) in session mode in front of pg, on its own
    port: a client's connection takes an idle server connection (backend
    already forked, catalog caches warm) instead of forking a backend.
    DISCARD ALL resets each server connection's session when a client
    leaves. pool_size server connections at most: each reports process
    holds two, or four during --all."""

    def __init__(self, pg, pool_size=8):
        self.port = free_port()
        self.dbname = pg.dbname
        # Its own directory: the postgres user must read the files (a
        # caller's mkdtemp directory is root's alone).
        self.workdir = tempfile.mkdtemp(prefix="lp-pgbouncer-", dir="/tmp")
        os.chmod(self.workdir, 0o755)
        ini = os.path.join(self.workdir, "pgbouncer.ini")
        users = os.path.join(self.workdir, "users.txt")
        with open(users, "w") as f:
            f.write('"postgres" ""\n')
        with open(ini, "w") as f:
            f.write(f"""[databases]
{self.dbname} = host=127.0.0.1 port={pg.port} dbname={self.dbname} user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {users}
pool_mode = session
server_reset_query = DISCARD ALL
default_pool_size = {pool_size}
max_client_conn = 200
pidfile = {os.path.join(self.workdir, "pgbouncer.pid")}
""")
        _chown_postgres(self.workdir)
        for p in (ini, users):
            _chown_postgres(p)
        # As root: pgbouncer switches to postgres itself (-u), and signals
        # reach it directly.
        # by path: /usr/sbin is not on a non-root user's PATH on Debian
        argv = ["/usr/sbin/pgbouncer"] + (["-u", "postgres"] if IS_ROOT else []) + [ini]
        super().__init__("pgbouncer", argv, self.workdir)

    @property
    def dsn(self):
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={self.dbname}"

    def up(self):
        self.start()
        try:
            wait_port(self.port, proc=self.proc, what="pgbouncer")
        except RuntimeError as e:
            self.stop()
            raise RuntimeError(f"{e}:\n{self.log_text}")
        return self

    def stop(self, sig=signal.SIGINT, timeout=30):
        """SIGINT: pgbouncer's safe shutdown. Removes its directory; the
        log stays readable as log_text."""
        rc = super().stop(sig, timeout)
        self.log_text = self.output()
        shutil.rmtree(self.workdir, ignore_errors=True)
        return rc



def cpu_secs(pids, reaped=False):
    """utime + stime of pids (all their threads), in seconds; with reaped, also
    what their waited-for children used (cutime + cstime)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15 if reaped else 13])
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def family(pid):
    """pid and its direct children (nginx's master and workers, the
    postmaster and its backends)."""
    pids = [pid]
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                pids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return pids

def program(name, workdir, settings, extra_args=(), env=None):
    """A linkpulse program with -o name=value settings. A redirector gets a
    sequence_secret of its own unless settings name one (the built-in key is
    refused when base_url's host is not a loopback one)."""
    argv = [os.path.join(BIN, name)]
    if name == "redirector" and "sequence_secret" not in settings:
        settings = dict(settings, sequence_secret="lpstack-test-sequence-secret")
    for k, v in settings.items():
        argv += ["-o", f"{k}={v}"]
    argv += list(extra_args)
    return Process(name, argv, workdir, env)


def http_get(url, timeout=5):
    req = urllib.request.Request(url, method="GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


# ---------------------------------------------------------------- make run

def _write_env(path, values):
    """Mode 0600: it holds the dev API key (var/dev-api-key is 0600 too)."""
    tmp = path + ".tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        os.fchmod(f.fileno(), 0o600)
        for k, v in values.items():
            f.write(f"{k}='{v}'\n")
    os.replace(tmp, path)


def _dev_api_key(var, pg, bin_dir):
    """Returns the dev API key kept in var/dev-api-key, creating it when the
    file is missing or the key no longer exists in PostgreSQL."""
    path = os.path.join(var, "dev-api-key")
    if os.path.exists(path):
        with open(path) as f:
            key = f.read().strip()
        r = subprocess.run([os.path.join(bin_dir, "redirector"), "-o", f"pg_dsn={pg.dsn}",
                            "apikey", "check", key], capture_output=True, text=True)
        if r.returncode == 0:
            return key
    r = subprocess.run([os.path.join(bin_dir, "redirector"), "-o", f"pg_dsn={pg.dsn}",
                        "apikey", "create", "make-run dev key"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"could not create an API key:\n{r.stderr}")
    key = r.stdout.strip().split()[-1]
    with open(path, "w") as f:
        f.write(key + "\n")
    os.chmod(path, 0o600)
    return key


DEV_PG_ROOT = "/var/lib/linkpulse-dev"


def _pg_datadir(var):
    """var/pg, or, as root when the postgres user cannot reach var (a clone
    under /root, which is mode 0700), a directory under DEV_PG_ROOT named
    after var's real path that var/pg links to: the data still stays across
    runs and var/pg still leads to it."""
    path = os.path.join(var, "pg")
    if not IS_ROOT or subprocess.run(_as_postgres(["test", "-x", var]),
                                     stderr=subprocess.DEVNULL).returncode == 0:
        return path
    if os.path.islink(path):
        return os.path.realpath(path)
    name = hashlib.sha1(os.path.realpath(var).encode()).hexdigest()[:16]
    alt = os.path.join(DEV_PG_ROOT, name)
    os.makedirs(alt, exist_ok=True)
    os.chmod(DEV_PG_ROOT, 0o755)
    os.chmod(alt, 0o755)
    if os.path.isdir(path) and not os.listdir(path):
        os.rmdir(path)  # left empty by an initdb that could not reach it
    if os.path.exists(path):
        raise RuntimeError(f"{path}: the postgres user cannot reach {var} (make it "
                           "traversable, e.g. chmod o+x on its parents, or move it)")
    os.symlink(os.path.join(alt, "pg"), path)
    print(f"the postgres user cannot reach {var}: PostgreSQL's data is in "
          f"{alt}/pg (var/pg links to it)", flush=True)
    return os.path.join(alt, "pg")


def run_stack(bin_dir, var, port):
    global BIN
    BIN = bin_dir
    os.makedirs(var, exist_ok=True)
    logs = os.path.join(var, "log")
    os.makedirs(logs, exist_ok=True)
    # one stack per var: a second `make run` on the same checkout removed the
    # first one's run.env and, failing to start PostgreSQL on its live data
    # directory, stopped that server on its way out
    lock = open(os.path.join(var, "run.lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print(f"{var} is in use by another `make run` (stop that one first)", file=sys.stderr,
              flush=True)
        return 1
    pg_port_file = os.path.join(var, "pg.port")
    pg_port = None
    if os.path.exists(pg_port_file):
        with open(pg_port_file) as f:
            pg_port = int(f.read().strip())
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", pg_port))
            except OSError:
                pg_port = None
    try:
        os.unlink(os.path.join(var, "run.env"))
    except FileNotFoundError:
        pass
    pg = Postgres(_pg_datadir(var), port=pg_port)
    with open(pg_port_file, "w") as f:
        f.write(str(pg.port))
    procs = []
    try:
        print(f"starting PostgreSQL in {pg.datadir} on port {pg.port} ...", flush=True)
        pg.up()
        # listed before they start: a Ctrl-C during up() stops them too
        redis = Redis(os.path.join(var, "redis"), persist=True)
        procs.append(redis)
        redis.up()
        broker = Broker(os.path.join(var, "kafka"))
        procs.append(broker)
        broker.up()
        geo = os.path.join(var, "geoip/GeoLite2-City.mmdb")
        if not os.path.exists(geo):  # a --var elsewhere: the one `make setup` installed
            geo = os.path.join(ROOT, "var/geoip/GeoLite2-City.mmdb")
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
        except OSError:
            port = free_port()
        base = f"http://127.0.0.1:{port}"
        common = {"pg_dsn": pg.dsn, "redis_url": redis.url, "kafka_bootstrap": broker.bootstrap}
        red = program("redirector", logs, dict(common, listen_port=port, base_url=base,
                                               spool_dir=os.path.join(var, "spool")))
        procs.append(red)
        red.start()
        wait_port(port, proc=red.proc, what="redirector")
        ing = program("ingest", logs, {"pg_dsn": pg.dsn, "kafka_bootstrap": broker.bootstrap,
                                       "geoip_city_db": geo, "metrics_port": free_port()})
        procs.append(ing)
        ing.start()
        key = _dev_api_key(var, pg, bin_dir)
        _write_env(os.path.join(var, "run.env"), {
            "BASE_URL": base, "API_KEY": key, "PG_DSN": pg.dsn,
            "KAFKA_BOOTSTRAP": broker.bootstrap, "REDIS_URL": redis.url})
        print(f"""
linkpulse is running (logs in {logs}; settings in {var}/run.env)
  BASE_URL        {base}
  API_KEY         {key}
  PG_DSN          {pg.dsn}
  KAFKA_BOOTSTRAP {broker.bootstrap}
  REDIS_URL       {redis.url}

Create a first link:
  curl -s -X POST {base}/api/v1/links -H 'Authorization: Bearer {key}' \\
       -H 'Content-Type: application/json' -d '{{"url": "https://example.com/"}}'

Press Ctrl-C to stop everything (data stays in {var}).""", flush=True)
        while all(p.alive() for p in procs):
            time.sleep(0.5)
        dead = [p.name for p in procs if not p.alive()]
        print(f"stopping: {', '.join(dead)} exited (see {logs})", flush=True)
        return 1
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        for p in reversed(procs):
            p.stop()
        pg.stop()
        try:
            os.unlink(os.path.join(var, "run.env"))  # present only while the stack runs
        except FileNotFoundError:
            pass
        print("stopped", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="start the whole stack in the foreground")
    r.add_argument("--bin", default=BIN)
    r.add_argument("--var", default=os.path.join(ROOT, "var"))
    r.add_argument("--port", type=int, default=8080)
    a = ap.parse_args()
    def on_term(*_):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    # a closed terminal: the services (each in a session of its own) are
    # stopped as on Ctrl-C, not orphaned
    signal.signal(signal.SIGHUP, on_term)
    return run_stack(os.path.abspath(a.bin), os.path.abspath(a.var), a.port)


if __name__ == "__main__":
    sys.exit(main())
