"""deploy/: the compose file (yamllint, `docker-compose config`, every
LINKPULSE_* name accepted by the program that reads it, connection settings
pointing at services that exist, the topic that is created being the one the
programs use), the Dockerfile's runtime packages covering the libraries the
programs link, and the systemd units (systemd-analyze verify and offline
security score, plus the hardening and lifecycle keys read directly)."""
import glob
import os
import re
import shutil
import subprocess

import pytest
import yaml

from lpstack import BIN, ROOT, SANITIZE

DEPLOY = os.path.join(ROOT, "deploy")
COMPOSE = os.path.join(DEPLOY, "docker-compose.yml")
PROGRAMS = ["redirector", "ingest", "reports"]
# Settings whose defaults point at 127.0.0.1: a container must set them.
CONNECTIONS = ["pg_dsn", "kafka_bootstrap", "redis_url"]
SECRETS = {"POSTGRES_PASSWORD": "compose-test", "SEQUENCE_SECRET": "compose-test"}
ENV_NAME_RE = re.compile(r"\bLINKPULSE_[A-Z0-9_]+\b")


def config_names(prog):
    r = subprocess.run([os.path.join(BIN, prog), "--config-names"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, f"{prog} --config-names: {r.stderr}"
    names = {"LINKPULSE_" + n.upper() for n in r.stdout.split()}
    assert names, f"{prog} --config-names printed nothing"
    return names | {"LINKPULSE_CONFIG"}  # the file to read, taken by every program


def script_names(path):
    with open(path) as f:
        return set(ENV_NAME_RE.findall(f.read()))


@pytest.fixture(scope="module")
def compose():
    with open(COMPOSE) as f:
        return yaml.safe_load(f)  # resolves the << merge keys


def service_program(svc):
    """The linkpulse program a service runs (by its command), or None."""
    words = []
    for key in ("entrypoint", "command"):
        v = svc.get(key) or []
        words += (v.split() if isinstance(v, str) else [w for x in v for w in str(x).split()])
    for w in words:
        base = os.path.basename(w.strip(";"))
        if base in PROGRAMS or base == "migrate.sh":
            return base
    return None


def service_env(svc):
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: str(v) for k, v in env.items()}


def test_compose_yamllint():
    r = subprocess.run(["yamllint", "-s", "-c", os.path.join(DEPLOY, ".yamllint"), COMPOSE],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_compose_docker_config(tmp_path):
    """docker compose (v2 plugin) or docker-compose (Debian) validates the file
    offline against the compose schema, with interpolation."""
    if shutil.which("docker-compose"):
        cmd = ["docker-compose"]
    elif shutil.which("docker") and subprocess.run(["docker", "compose", "version"],
                                                   capture_output=True).returncode == 0:
        cmd = ["docker", "compose"]
    else:
        pytest.skip("neither docker-compose nor the docker compose plugin is installed")
    empty = tmp_path / "empty.env"
    empty.write_text("")
    env = dict(os.environ, **SECRETS)
    r = subprocess.run(cmd + ["--env-file", str(empty), "-f", COMPOSE, "config", "-q"],
                       capture_output=True, text=True, env=env, cwd=DEPLOY)
    assert r.returncode == 0, r.stdout + r.stderr
    # Secrets have no default: without them the file refuses to load. (No
    # env file either: a developer's deploy/.env would supply them.)
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    r = subprocess.run(cmd + ["--env-file", str(empty), "-f", COMPOSE, "config", "-q"],
                       capture_output=True, text=True, env=env, cwd=DEPLOY)
    assert r.returncode != 0 and "POSTGRES_PASSWORD" in r.stdout + r.stderr


def test_compose_names_are_accepted(compose):
    accepted = {p: config_names(p) for p in PROGRAMS}
    accepted["migrate.sh"] = script_names(os.path.join(ROOT, "schemas/migrate.sh"))
    used_by_services = set()
    problems = []
    for name, svc in compose["services"].items():
        env = service_env(svc)
        names = {k for k in env if k.startswith("LINKPULSE_")}
        used_by_services |= names
        prog = service_program(svc)
        if prog is None:
            assert not names, f"service {name} sets {sorted(names)} but runs no linkpulse program"
            continue
        unknown = names - accepted[prog]
        if unknown:
            problems.append(f"service {name} ({prog}) sets names {prog} does not accept: "
                            f"{sorted(unknown)}")
    assert not problems, "\n".join(problems)
    # No LINKPULSE_* name anywhere else in the file (e.g. an interpolation
    # that reads like a setting but is not one).
    with open(COMPOSE) as f:
        text = f.read()
    stray = set(ENV_NAME_RE.findall(text)) - used_by_services
    assert not stray, f"LINKPULSE_* names outside service environments: {sorted(stray)}"
    # Every program is deployed.
    deployed = {service_program(s) for s in compose["services"].values()}
    assert set(PROGRAMS) | {"migrate.sh"} <= deployed, deployed


def test_compose_wiring(compose):
    services = compose["services"]
    volumes = set((compose.get("volumes") or {}).keys())
    by_prog = {}
    for name, svc in services.items():
        prog = service_program(svc)
        if prog:
            by_prog.setdefault(prog, []).append((name, svc))
        for dep in svc.get("depends_on") or {}:
            assert dep in services, f"{name} depends on unknown service {dep}"
        for v in svc.get("volumes") or []:
            src = str(v).split(":")[0]
            if not src.startswith(("/", ".", "$")):
                assert src in volumes, f"{name}: volume {src} is not declared"
        build = svc.get("build")
        if build:
            ctx = os.path.normpath(os.path.join(DEPLOY, build.get("context", ".")))
            df = os.path.join(ctx, build.get("dockerfile", "Dockerfile"))
            assert os.path.isfile(df), f"{name}: no Dockerfile at {df}"

    accepted = {p: config_names(p) for p in PROGRAMS}
    topics = set()
    for prog in PROGRAMS:
        for name, svc in by_prog[prog]:
            env = service_env(svc)
            for setting in CONNECTIONS:
                var = "LINKPULSE_" + setting.upper()
                if var not in accepted[prog]:
                    continue
                assert var in env, f"service {name}: {var} must be set (its default is local)"
                host = re.sub(r"^[a-z]+://([^@/]*@)?", "", env[var]).split("/")[0].split(":")[0]
                assert host in services, f"service {name}: {var} points at {host}, no such service"
                if setting == "pg_dsn":
                    # a generated password may hold '/', '@' or '%': never in the URI
                    assert "PASSWORD" not in env[var], f"service {name}: password in {var}"
                    assert env.get("PGPASSWORD") == "${POSTGRES_PASSWORD}", \
                        f"service {name}: PGPASSWORD must carry the password"
            if "LINKPULSE_KAFKA_TOPIC" in env:
                topics.add(env["LINKPULSE_KAFKA_TOPIC"])
            if prog == "reports":
                cmd = " ".join(str(x) for x in svc.get("command") or [])
                out = re.search(r"--out (\S+?);?\s", cmd + " ").group(1)
                assert "--all" in cmd and any(str(v).split(":")[1] == out
                                              for v in svc.get("volumes") or []), \
                    f"{name}: reports --all --out DIR with DIR on a volume"
            else:
                deps = svc.get("depends_on") or {}
                assert deps.get("migrate", {}).get("condition") == \
                    "service_completed_successfully", f"{name} must wait for migrations"
    redirector = by_prog["redirector"][0][1]
    renv = service_env(redirector)
    assert renv["LINKPULSE_LISTEN_ADDR"] == "0.0.0.0"
    spool = renv["LINKPULSE_SPOOL_DIR"]
    assert any(str(v).split(":")[1] == spool for v in redirector.get("volumes") or []), \
        "the redirector's spool must be on a volume (it holds undelivered events)"
    assert int(str(redirector["stop_grace_period"]).rstrip("s")) >= 30

    # The topic kafka-init creates is the one the programs use, with enough
    # partitions for parallel consumers.
    init = " ".join(str(x) for x in services["kafka-init"]["command"])
    created = re.search(r"--topic[= ](\S+)", init).group(1)
    assert topics == {created}, (topics, created)
    assert int(re.search(r"--partitions[= ](\d+)", init).group(1)) >= 16
    kenv = service_env(services["kafka"])
    assert "controller" in kenv["KAFKA_PROCESS_ROLES"] and "ZOOKEEPER" not in " ".join(kenv)
    assert not any("zookeeper" in n for n in services)

    # Every ${VAR} without a default is documented in .env.example.
    with open(COMPOSE) as f:
        text = f.read()
    with open(os.path.join(DEPLOY, ".env.example")) as f:
        example = {l.split("=", 1)[0] for l in f if "=" in l and not l.startswith("#")}
    for var, default in re.findall(r"\$\{([A-Z0-9_]+)(:-[^}]*)?", text):
        if not default:
            assert var in example, f"${{{var}}} has no default and is not in .env.example"


def test_dockerfile_runtime_has_linked_libraries():
    """The runtime stage installs the Debian package of every shared library
    the built programs link directly (apt brings their dependencies)."""
    with open(os.path.join(DEPLOY, "Dockerfile")) as f:
        text = f.read()
    runtime = text.split("\nFROM debian:bookworm-slim\n", 1)[1]
    install = re.search(r"apt-get install[^\n]*\n((?:.*\\\n)+)", runtime).group(1)
    packages = set(re.findall(r"\b[a-z0-9][a-z0-9.+-]+\b", install.replace("\\", " ")))
    missing = []
    for prog in PROGRAMS:
        r = subprocess.run(["readelf", "-d", os.path.join(BIN, prog)], capture_output=True,
                           text=True, check=True)
        for lib in re.findall(r"\(NEEDED\).*\[(.+)\]", r.stdout):
            if lib.startswith(("libc.so", "libm.so", "libpthread", "libdl", "ld-linux",
                               "libgcc_s")) or (SANITIZE and ("san" in lib or "libstdc" in lib)):
                continue
            path = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
            m = re.search(r"\s" + re.escape(lib) + r" \(libc6,x86-64\) => (\S+)", path)
            assert m, f"{lib} not found by ldconfig"
            owner = subprocess.run(["dpkg", "-S", os.path.realpath(m.group(1))],
                                   capture_output=True, text=True)
            pkg = owner.stdout.split(":")[0]
            if pkg not in packages:
                missing.append(f"{prog}: {lib} ({pkg})")
    assert not missing, "runtime stage lacks: " + ", ".join(missing)
    # The build stage takes its -dev packages from deploy/packages.txt.
    assert "deploy/packages.txt" in text


def read_unit(path):
    """[(section, key, value)] of a systemd unit file (keys may repeat)."""
    out, section = [], None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            key, _, value = line.partition("=")
            out.append((section, key.strip(), value.strip()))
    return out


def unit_get(entries, key):
    return [v for _, k, v in entries if k == key]


UNITS = sorted(glob.glob(os.path.join(DEPLOY, "systemd", "*.service")))


@pytest.mark.parametrize("path", UNITS, ids=[os.path.basename(u) for u in UNITS])
def test_systemd_unit_keys(path):
    u = read_unit(path)
    prog = os.path.basename(path)[len("linkpulse-"):-len(".service")]
    one = lambda k: (unit_get(u, k) or [None])[-1]  # noqa: E731
    assert one("ExecStart").split()[0] == "/usr/local/bin/" + prog
    assert one("EnvironmentFile") == f"/etc/linkpulse/{prog}.env"
    assert one("DynamicUser") == "yes" or one("User")
    for key, want in [("ProtectSystem", "strict"), ("ProtectHome", "yes"),
                      ("NoNewPrivileges", "yes"), ("PrivateTmp", "yes"),
                      ("CapabilityBoundingSet", "")]:
        assert one(key) == want, f"{key}={one(key)!r}, expected {want!r}"
    assert "@system-service" in unit_get(u, "SystemCallFilter")
    assert one("RestrictAddressFamilies")
    assert one("StateDirectory")
    accepted = config_names(prog)
    for env in unit_get(u, "Environment"):
        name = env.split("=", 1)[0]
        assert name in accepted, f"Environment={env}: {prog} does not accept {name}"
    if prog == "reports":
        argv = one("ExecStart").split()
        assert one("Type") == "oneshot" and "--all" in argv
        out = argv[argv.index("--out") + 1]
        state = "/var/lib/" + one("StateDirectory").split()[0]
        assert out.startswith(state + "/"), f"--out {out} is not writable (ProtectSystem=strict)"
    else:
        assert one("Type") == "simple"
        assert one("ExecReload") == "/bin/kill -HUP $MAINPID"
        assert one("Restart") == "on-failure"
        assert one("KillSignal") == "SIGTERM"
        assert int(one("TimeoutStopSec").rstrip("s")) >= 60, "draining needs time"


def test_systemd_timer():
    u = read_unit(os.path.join(DEPLOY, "systemd", "linkpulse-reports.timer"))
    assert unit_get(u, "Unit") == ["linkpulse-reports.service"]
    assert unit_get(u, "OnCalendar") and unit_get(u, "Persistent") == ["yes"]
    assert os.path.isfile(os.path.join(DEPLOY, "systemd", "linkpulse-reports.service"))


@pytest.mark.parametrize("prog", PROGRAMS)
def test_systemd_env_examples(prog):
    """deploy/systemd/<prog>.env.example, the EnvironmentFile the docs tell
    you to write: every LINKPULSE_* name is one the program accepts, and it
    sets every connection setting the program has (their defaults point at
    127.0.0.1) and, for the redirector, what its defaults get wrong off a
    development machine."""
    path = os.path.join(DEPLOY, "systemd", f"{prog}.env.example")
    names = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                k, v = line.split("=", 1)
                names[k] = v
    accepted = config_names(prog)
    unknown = {k for k in names if k.startswith("LINKPULSE_")} - accepted
    assert not unknown, f"{path}: {prog} does not accept {sorted(unknown)}"
    want = {"LINKPULSE_" + c.upper() for c in CONNECTIONS} & accepted
    if prog == "redirector":
        want |= {"LINKPULSE_LISTEN_ADDR", "LINKPULSE_BASE_URL", "LINKPULSE_SEQUENCE_SECRET",
                 "LINKPULSE_WORKER_ID", "LINKPULSE_TRUSTED_PROXIES", "LINKPULSE_METRICS_ALLOW"}
    missing = want - set(names)
    assert not missing, f"{path} does not set {sorted(missing)}"
    assert names["LINKPULSE_PG_DSN"].startswith("postgresql://") and "PGPASSWORD" in names


@pytest.fixture
def units_here(tmp_path):
    """The units with ExecStart pointing at the built programs (verify
    checks that the executables exist)."""
    out = []
    for src in sorted(glob.glob(os.path.join(DEPLOY, "systemd", "linkpulse-*"))):
        with open(src) as f:
            text = f.read().replace("/usr/local/bin/", BIN.rstrip("/") + "/")
        dst = tmp_path / os.path.basename(src)
        dst.write_text(text)
        out.append(str(dst))
    return out


def test_systemd_analyze_verify(units_here):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed (the unit keys are still checked above)")
    r = subprocess.run(["systemd-analyze", "verify", "--man=no"] + units_here,
                       capture_output=True, text=True, cwd=os.path.dirname(units_here[0]))
    # verify exits 0 on unknown keys or bad values but reports them: any output fails.
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr


def test_systemd_security_exposure(units_here):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    for unit in units_here:
        if not unit.endswith(".service"):
            continue
        r = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", unit],
                           capture_output=True, text=True)
        m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout)
        assert m, r.stdout[-2000:] + r.stderr
        assert float(m.group(1)) <= 2.0, f"{unit}: exposure {m.group(1)}\n{r.stdout[-3000:]}"


def test_make_install(tmp_path):
    """make install puts the three programs in $(DESTDIR)$(PREFIX)/bin, as
    the units run them (docs/operations.md: make && sudo make install)."""
    args = ["make", "-s", "install", f"DESTDIR={tmp_path}"] + (["SANITIZE=1"] if SANITIZE else [])
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    for prog in PROGRAMS:
        path = os.path.join(tmp_path, "usr/local/bin", prog)
        assert os.access(path, os.X_OK), path
        h = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30)
        assert h.returncode == 0 and prog in h.stdout + h.stderr
    assert sorted(os.listdir(os.path.join(tmp_path, "usr/local/bin"))) == sorted(PROGRAMS)
