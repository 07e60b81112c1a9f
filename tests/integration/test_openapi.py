"""schemas/openapi.yaml and the redirector agree: every documented path and
method answers (not the router's 404/405), and every route the code
implements is documented."""
import os
import re

import pytest
import yaml

import lpstack
from test_api import start_redirector

SPEC = yaml.safe_load(open(os.path.join(lpstack.ROOT, "schemas/openapi.yaml")))


def implemented_paths():
    """Route literals in the redirector's routers."""
    src = open(os.path.join(lpstack.ROOT, "redirector/api.c")).read()
    paths = {"/api/v1" + p for p in re.findall(r'strcmp\(sub, "(/links[a-z/]*)"\)', src)}
    if 'strncmp(sub, "/links/", 7)' in src:
        paths.add("/api/v1/links/{code}")
    main = open(os.path.join(lpstack.ROOT, "redirector/main.c")).read()
    paths |= set(re.findall(r'strcmp\(p, "(/[a-z]+)"\) == 0', main))
    paths |= {"/", "/{code}"}
    return paths


def test_every_implemented_path_is_documented():
    missing = implemented_paths() - set(SPEC["paths"])
    assert not missing, f"implemented but not in openapi.yaml: {sorted(missing)}"


def test_every_documented_path_exists(procs, pg, redis):
    api = start_redirector(procs, pg, redis)
    code = api.create(url="https://example.com/doc").json()["code"]
    for path, ops in SPEC["paths"].items():
        for method in ops:
            if method == "parameters":
                continue
            p = path.replace("{code}", code)
            body = {"/api/v1/links": {"url": "https://example.com/o"},
                    "/api/v1/links/bulk": {"links": [{"url": "https://example.com/o"}]},
                    "/api/v1/links/resolve": {"codes": [code]}}.get(path, {})
            if method == "delete":
                p = path.replace("{code}", api.create(url="https://example.com/del").json()["code"])
            r = api.req(method.upper(), p, body if method in ("post", "patch") else None)
            assert r.status_code < 400, f"{method.upper()} {path}: {r.status_code} {r.text[:200]}"
            assert str(r.status_code) in ops[method]["responses"], \
                f"{method.upper()} {path}: status {r.status_code} is not documented"
