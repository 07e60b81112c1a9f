"""Runs every C unit test binary (tests/unit/test_*.c) from the repository root,
so the pytest summary line counts them with the integration tests.

Generators tests/unit/fixtures/make_* run once per session with an output
directory as their only argument; the binaries find it in $LP_FIXTURES."""
import glob
import os
import subprocess

import pytest

from lpstack import BIN, ROOT, sanitizer_report

# One binary per tests/unit/test_*.c: a source whose binary is missing (not
# built, or built elsewhere) fails test_unit_binaries_exist instead of
# silently running fewer tests.
SOURCES = sorted(os.path.basename(p)[:-2] for p in glob.glob(os.path.join(ROOT, "tests/unit/test_*.c")))
UNITS = [os.path.join(BIN, n) for n in SOURCES]


@pytest.fixture(scope="session")
def fixtures_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("unit-fixtures")
    for gen in sorted(glob.glob(os.path.join(ROOT, "tests/unit/fixtures/make_*"))):
        r = subprocess.run([gen, str(out)], cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, f"fixture generator {gen} failed:\n{r.stdout}{r.stderr}"
    return str(out)


def test_unit_binaries_exist():
    missing = [u for u in UNITS if not os.access(u, os.X_OK)]
    assert SOURCES and not missing, f"unit binaries missing in {BIN} (run make): {missing}"


@pytest.mark.parametrize("unit", UNITS, ids=[os.path.basename(u) for u in UNITS])
def test_unit(unit, fixtures_dir):
    env = dict(os.environ, LP_FIXTURES=fixtures_dir,
               LP_GEOIP_CITY=os.path.join(ROOT, "var/geoip/GeoLite2-City.mmdb"),
               LP_UAP_DIR="/usr/share/uap-core")
    r = subprocess.run([unit], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=900)
    out = r.stdout + r.stderr
    print(out[-4000:])
    assert not sanitizer_report(out), f"{unit}: sanitizer report:\n{out[-8000:]}"
    assert r.returncode == 0, f"{unit} exited {r.returncode}, expected 0:\n{out[-8000:]}"
