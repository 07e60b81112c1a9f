"""pytest fixtures: every test gets real components started here (PostgreSQL,
Redis, the dev Kafka broker, linkpulse programs) and stopped afterwards; no
test relies on a service that happens to run on the machine."""
import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lpstack  # noqa: E402


@pytest.fixture(scope="session")
def pg_cluster():
    """One throwaway PostgreSQL cluster per session with a migrated template
    database; tests get their own database copied from it (see `pg`)."""
    d = tempfile.mkdtemp(prefix="lp-pg-", dir="/tmp")
    os.chmod(d, 0o755)
    pg = lpstack.Postgres(os.path.join(d, "data"), fast=True)
    pg.dbname = "lp_template"
    pg.up()
    yield pg
    pg.stop(mode="immediate")
    shutil.rmtree(d, ignore_errors=True)


_db_counter = [0]


@pytest.fixture
def pg(pg_cluster):
    """A fresh, migrated database of its own for one test."""
    _db_counter[0] += 1
    name = f"lp_t{os.getpid()}_{_db_counter[0]}"
    pg_cluster.psql(f"CREATE DATABASE {name} TEMPLATE lp_template", db="postgres")
    db = lpstack.Postgres(pg_cluster.datadir, port=pg_cluster.port)
    db.dbname = name
    yield db
    pg_cluster.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", db="postgres", check=False)


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="lp-test-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def own_pg(workdir):
    """A PostgreSQL cluster of the test's own (fsync off, migrated), for
    tests that stop and start it; stopped at the end."""
    os.chmod(workdir, 0o755)  # the postgres user must reach its data directory
    pg = lpstack.Postgres(os.path.join(workdir, "pgown"), fast=True).up()
    yield pg
    pg.stop(mode="immediate")


@pytest.fixture
def empty_db(pg_cluster):
    """A new database of the session cluster with no migration applied,
    dropped at the end."""
    name = f"lp_e{os.getpid()}_{_db_counter[0]}"
    _db_counter[0] += 1
    pg_cluster.psql(f"CREATE DATABASE {name}", db="postgres")
    db = lpstack.Postgres(pg_cluster.datadir, port=pg_cluster.port)
    db.dbname = name
    yield db
    pg_cluster.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", db="postgres", check=False)


@pytest.fixture
def redis(workdir):
    r = lpstack.Redis(os.path.join(workdir, "redis")).up()
    yield r
    r.stop()


@pytest.fixture
def broker(workdir):
    b = lpstack.Broker(os.path.join(workdir, "kafka"), partitions=16).up()
    yield b
    rc = b.stop()
    assert rc == 0, f"devbroker exited {rc}:\n{b.output()[-4000:]}"


class Procs:
    """Starts linkpulse programs for a test and checks at the end that each
    stopped with exit code 0 and wrote no sanitizer report."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.procs = []

    def start(self, name, settings, extra_args=(), env=None):
        p = lpstack.program(name, self.workdir, settings, extra_args, env).start()
        self.procs.append(p)
        return p

    def stop_all(self):
        errors = []
        for p in reversed(self.procs):
            rc = p.stop()
            out = p.output()
            rep = lpstack.sanitizer_report(out)
            if rep:
                errors.append(f"{p.name}: sanitizer report {rep}:\n{out[-6000:]}")
            elif rc not in (0, None) and not getattr(p, "expect_failure", False):
                errors.append(f"{p.name}: exit code {rc}, expected 0:\n{out[-4000:]}")
            elif rc is None:
                errors.append(f"{p.name}: did not stop within 30 s of SIGTERM:\n{out[-4000:]}")
        return errors


@pytest.fixture
def procs(request, workdir):
    # The services the test uses are set up first so that they are torn
    # down after its programs: pytest tears fixtures down in reverse order
    # of setup, and a test naming procs first had its broker, Redis and
    # database gone before the programs were stopped (their exits then ran
    # through error paths: a 5 s flush to no broker, a dropped database).
    for name in ("pg", "own_pg", "empty_db", "redis", "broker"):
        if name in request.fixturenames:
            request.getfixturevalue(name)
    p = Procs(workdir)
    yield p
    errors = p.stop_all()
    assert not errors, "\n\n".join(errors)
