"""Links API against a real redirector, PostgreSQL and Redis: every endpoint,
the three code strategies, validation rules, and creation with Redis down."""
import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest
import requests

import lpstack


class Api:
    def __init__(self, base, key, pg, proc, redis):
        self.base, self.key, self.pg, self.proc, self.redis = base, key, pg, proc, redis
        self.s = requests.Session()

    def req(self, method, path, body=None, key=None, raw=None):
        h = {"Authorization": f"Bearer {key or self.key}"}
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        return self.s.request(method, self.base + path, data=data, headers=h, timeout=30,
                              allow_redirects=False)

    def create(self, **body):
        return self.req("POST", "/api/v1/links", body)

    def bulk_created(self, urls):
        """One bulk request creating urls; asserts every item got 201 and
        returns the results."""
        r = self.req("POST", "/api/v1/links/bulk", {"links": [{"url": u} for u in urls]})
        assert r.status_code == 200, r.text
        res = r.json()["results"]
        assert all(x["status"] == 201 for x in res), [x for x in res if x["status"] != 201][:3]
        return res


def start_redirector(procs, pg, redis, extra=None):
    port = lpstack.free_port()
    base = f"http://127.0.0.1:{port}"
    settings = {"pg_dsn": pg.dsn, "redis_url": redis.url if redis else "",
                "listen_port": port, "base_url": "http://s.test", "pool_low_water": 500,
                "pool_batch": 1000, "bloom_expected": 100000, "log_level": "warn",
                "kafka_bootstrap": "", "spool_dir": os.path.join(procs.workdir, "spool")}
    settings.update(extra or {})
    p = procs.start("redirector", settings)
    lpstack.wait_port(port, proc=p.proc, what="redirector")
    r = subprocess.run([os.path.join(lpstack.BIN, "redirector"), "-o", f"pg_dsn={pg.dsn}",
                        "apikey", "create", "test"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return Api(base, r.stdout.split()[-1], pg, p, redis)


@pytest.fixture
def api(procs, pg, redis):
    return start_redirector(procs, pg, redis)


def wait_pool(api, length=6):
    """Until the refill thread's first round has put codes in the Redis
    pool: a create that comes before it takes a code generated inline
    (status 1), as it should, which tests of the pooled path must not see."""
    deadline = time.time() + 20
    while int(api.redis.cli("SCARD", f"lp:pool:{length}") or 0) == 0:
        assert time.time() < deadline, "the code pool was never filled"
        time.sleep(0.05)


def test_create_get_redirect(api):
    wait_pool(api)
    r = api.create(url="https://example.com/a?b=1", tags=["spring", "sms"])
    assert r.status_code == 201, r.text
    link = r.json()
    assert link["short_url"] == "http://s.test/" + link["code"]
    assert len(link["code"]) == 6 and link["strategy"] == "random"
    assert link["tags"] == ["spring", "sms"] and link["hits"] == 0
    g = api.req("GET", "/api/v1/links/" + link["code"])
    assert g.status_code == 200 and g.json()["long_url"] == "https://example.com/a?b=1"
    # the created link as the create answered it is the link as stored
    assert {k: v for k, v in g.json().items()} == link
    assert link["created_at"] == link["updated_at"] and link["created_at"].endswith("+00:00")
    rr = api.req("GET", "/" + link["code"])
    assert (rr.status_code, rr.headers["Location"]) == (302, "https://example.com/a?b=1")
    rq = api.req("GET", "/?" + link["code"])
    assert (rq.status_code, rq.headers["Location"]) == (302, "https://example.com/a?b=1")
    row = api.pg.psql(f"SELECT long_url, long_url_md5 = md5(long_url), deleted FROM url_link "
                      f"WHERE code = '{link['code']}'")
    assert row == "https://example.com/a?b=1|t|0"
    # a pooled code (status 2, 0012): url_link's unique code is its claim
    assert api.pg.psql(f"SELECT status FROM unique_code WHERE code = '{link['code']}'") == "2"


def test_dedupe_returns_existing(api):
    a = api.create(url="https://example.com/same")
    b = api.create(url="https://example.com/same")
    assert (a.status_code, b.status_code) == (201, 200)
    assert a.json()["code"] == b.json()["code"]
    c = api.create(url="https://example.com/same", dedupe=False)
    assert c.status_code == 201 and c.json()["code"] != a.json()["code"]
    d = api.create(url="https://example.com/same", redirect_type=301)
    assert d.status_code == 201 and d.json()["redirect_type"] == 301
    # tags asked for make a new link (the existing one would not carry them);
    # an empty list does not
    e = api.create(url="https://example.com/same", tags=["spring"])
    assert e.status_code == 201 and e.json()["tags"] == ["spring"]
    assert api.req("GET", "/api/v1/links?tag=spring").json()["links"][0]["code"] == \
        e.json()["code"]
    f = api.create(url="https://example.com/same", tags=[])
    assert f.status_code == 200 and f.json()["code"] == a.json()["code"]
    # nor do null expiry, start or limit (none: what the existing link has)
    g = api.create(url="https://example.com/same", expires_at=None, valid_since=None,
                   max_visits=None)
    assert g.status_code == 200 and g.json()["code"] == a.json()["code"], g.text
    assert api.pg.psql("SELECT count(*) FROM url_link") == "4"


def test_alias_and_conflicts(api):
    r = api.create(url="https://example.com/x", alias="Spring_Sale-2026")
    assert r.status_code == 201 and r.json()["code"] == "Spring_Sale-2026"
    assert r.json()["strategy"] == "alias"
    r2 = api.create(url="https://example.com/y", alias="Spring_Sale-2026")
    assert r2.status_code == 409 and r2.json()["error"]["field"] == "alias"
    for bad in ["api", "HEALTHZ", "metrics", "bulk", "Resolve"]:  # the last two: /links/{code}
        r3 = api.create(url="https://example.com/z", alias=bad)
        assert r3.status_code == 400 and r3.json()["error"]["code"] == "reserved_alias"
    r4 = api.create(url="https://example.com/z", alias="has space")
    assert r4.status_code == 400 and r4.json()["error"]["field"] == "alias"
    r5 = api.create(url="https://example.com/z", alias="x" * 65)
    assert r5.status_code == 400
    assert api.pg.psql("SELECT count(*) FROM url_link") == "1"


@pytest.mark.parametrize("url,field,code", [
    ("ftp://example.com/", "url", "invalid_url"),
    ("javascript:alert(1)", "url", "invalid_url"),
    ("https://", "url", "invalid_url"),
    ("not a url", "url", "invalid_url"),
    ("https://example.com/\r\nSet-Cookie: x", "url", "invalid_url"),
    ("https://example.com/\x01", "url", "invalid_url"),
    ("https://example.com/" + "a" * 4100, "url", "invalid_url"),
    ("http://s.test/abc", "url", "redirect_loop"),
    ("http://S.TEST:80/abc", "url", "redirect_loop"),
    ("http://s.test./abc", "url", "redirect_loop"),  # the same host, fully qualified
    # as the Location sends it (punycode by UTS #46, which folds these to s.test)
    ("https://\uff53.test/loop", "url", "redirect_loop"),        # fullwidth s
    ("https://%EF%BD%93.test/loop", "url", "redirect_loop"),      # the same, percent-encoded
    ("https://s\u00ad.test/loop", "url", "redirect_loop"),       # a soft hyphen, dropped
    ("https://\u017f.test/loop", "url", "redirect_loop"),        # long s
])
def test_bad_urls_rejected(api, url, field, code):
    r = api.create(url=url)
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["field"], r.json()["error"]["code"]) == (field, code)
    assert api.pg.psql("SELECT count(*) FROM url_link") == "0"


def test_international_base_host_is_its_own_host(procs, pg, redis):
    """With an international base_url, its host is compared as a Location
    sends it: the Unicode, upper-case and punycode spellings all loop."""
    api = start_redirector(procs, pg, redis, {"base_url": "http://k\u00fcrz.test"})
    for url in ("https://k\u00fcrz.test/a", "https://K\u00dcRZ.test/a", "https://xn--krz-hoa.test/a"):
        r = api.create(url=url)
        assert r.status_code == 400 and r.json()["error"]["code"] == "redirect_loop", (url, r.text)
    assert api.create(url="https://kurz.test/a").status_code == 201


@pytest.mark.parametrize("body,field", [
    ({"url": 5}, "url"),
    ({}, "url"),
    ({"url": "https://e.com", "colour": "red"}, "colour"),
    ({"url": "https://e.com", "length": 9}, "length"),
    ({"url": "https://e.com", "length": "6"}, "length"),
    ({"url": "https://e.com", "redirect_type": 303}, "redirect_type"),
    ({"url": "https://e.com", "expires_at": "tomorrow"}, "expires_at"),
    # dates PostgreSQL would refuse, or store past what is read back
    ({"url": "https://e.com", "expires_at": "2030-02-31T00:00:00Z"}, "expires_at"),
    ({"url": "https://e.com", "expires_at": "2030-02-29T00:00:00Z"}, "expires_at"),
    ({"url": "https://e.com", "valid_since": "0000-01-01T00:00:00Z"}, "valid_since"),
    ({"url": "https://e.com", "expires_at": "2030-01-01T00:00:00+99:00"}, "expires_at"),
    ({"url": "https://e.com", "expires_at": "2030-01-01T00:00:61Z"}, "expires_at"),
    ({"url": "https://e.com", "expires_at": "9999-12-31T23:59:59-14:00"}, "expires_at"),
    ({"url": "https://e.com", "max_visits": 0}, "max_visits"),
    ({"url": "https://e.com", "tags": "a"}, "tags"),
    ({"url": "https://e.com", "strategy": "magic"}, "strategy"),
    ({"url": "https://e.com", "dedupe": "yes"}, "dedupe"),
])
def test_bad_fields_named(api, body, field):
    r = api.create(**body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == field
    assert api.pg.psql("SELECT count(*) FROM url_link") == "0"


def test_bad_json_auth_and_size(api):
    r = api.req("POST", "/api/v1/links", raw="{not json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = api.req("POST", "/api/v1/links", raw='{"url": "https://a.com", "url": "https://b.com"}')
    assert r.status_code == 400
    r = api.req("POST", "/api/v1/links", {"url": "https://a.com"}, key="lp_wrong")
    assert r.status_code == 401 and "error" in r.json()
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="linkpulse"'  # RFC 9110
    r = requests.post(api.base + "/api/v1/links", data="{}", timeout=10)
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
    # without a key a body is read and dropped, never kept (was: 413 after
    # buffering max_body_bytes of it)
    r = requests.post(api.base + "/api/v1/links", data="x" * (9 * 1024 * 1024), timeout=30)
    assert r.status_code == 401, r.text
    big = json.dumps({"url": "https://a.com/" + "x" * (9 * 1024 * 1024)})
    r = api.req("POST", "/api/v1/links", raw=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    assert api.pg.psql("SELECT count(*) FROM url_link") == "0"


def test_revoked_key_rejected(api):
    assert api.create(url="https://example.com/k").status_code == 201
    r = subprocess.run([os.path.join(lpstack.BIN, "redirector"), "-o", f"pg_dsn={api.pg.dsn}",
                        "apikey", "revoke", api.key], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # A fresh key check (another process) must refuse at once.
    r = subprocess.run([os.path.join(lpstack.BIN, "redirector"), "-o", f"pg_dsn={api.pg.dsn}",
                        "apikey", "check", api.key], capture_output=True, text=True)
    assert r.returncode == 1
    # The running redirector, which checked the key a moment ago, refuses it
    # within its 5 s cache (README), and stores nothing for it.
    t0 = time.time()
    while api.create(url="https://example.com/revoked").status_code != 401:
        assert time.time() - t0 < 6.5, "the revoked key still works after 6.5 s"
        time.sleep(0.25)
    assert api.pg.psql("SELECT count(*) FROM url_link WHERE long_url = "
                       "'https://example.com/revoked'") in ("0", "1")
    n = api.pg.psql("SELECT count(*) FROM url_link")
    assert api.create(url="https://example.com/revoked2").status_code == 401
    assert api.pg.psql("SELECT count(*) FROM url_link") == n


def test_patch_and_delete(api):
    code = api.create(url="https://example.com/p").json()["code"]
    r = api.req("PATCH", f"/api/v1/links/{code}",
                {"url": "https://example.com/q", "redirect_type": 308, "tags": ["t1"]})
    assert r.status_code == 200, r.text
    assert (r.json()["long_url"], r.json()["redirect_type"], r.json()["tags"]) == \
        ("https://example.com/q", 308, ["t1"])
    rr = api.req("GET", "/" + code)
    assert (rr.status_code, rr.headers["Location"]) == (308, "https://example.com/q")
    assert api.req("PATCH", f"/api/v1/links/{code}", {"disabled": True}).status_code == 200
    assert api.req("GET", "/" + code).status_code == 410
    assert api.req("PATCH", f"/api/v1/links/{code}", {"code": "x"}).status_code == 400
    assert api.req("DELETE", f"/api/v1/links/{code}").status_code == 200
    assert api.req("GET", "/" + code).status_code == 410
    assert api.req("GET", f"/api/v1/links/{code}").json()["deleted"] is True
    assert api.req("DELETE", f"/api/v1/links/{code}").status_code == 404
    assert api.req("PATCH", f"/api/v1/links/nope", {"disabled": True}).status_code == 404
    assert api.pg.psql(f"SELECT deleted FROM url_link WHERE code = '{code}'") == "1"


def test_edit_fences_the_redis_record(procs, pg, api):
    """An edit sets lp:fence:<code> (60 s) and drops lp:link:<code> before its
    UPDATE, and no record of the code is written while the fence stands: a
    cold load that read the row before the edit committed would otherwise put
    the old record back after the edit's DEL, for cache_ttl_s (a day). Another
    redirector's cold load during the fence finds the new row and leaves
    Redis alone; once the fence is gone, records are cached again."""
    other = start_redirector(procs, pg, api.redis)
    code = api.create(url="https://example.com/f1").json()["code"]
    assert other.req("GET", "/" + code).headers["Location"] == "https://example.com/f1"
    assert '"https://example.com/f1"' in api.redis.cli("GET", f"lp:link:{code}")
    r = api.req("PATCH", f"/api/v1/links/{code}", {"url": "https://example.com/f2"})
    assert r.status_code == 200, r.text
    assert 0 < int(api.redis.cli("TTL", f"lp:fence:{code}")) <= 60
    assert api.redis.cli("EXISTS", f"lp:link:{code}") == "0"
    third = start_redirector(procs, pg, api.redis)
    assert third.req("GET", "/" + code).headers["Location"] == "https://example.com/f2"
    assert api.redis.cli("EXISTS", f"lp:link:{code}") == "0"  # fenced: not cached
    api.redis.cli("DEL", f"lp:fence:{code}")  # the fence expires
    fourth = start_redirector(procs, pg, api.redis)
    assert fourth.req("GET", "/" + code).headers["Location"] == "https://example.com/f2"
    assert '"https://example.com/f2"' in api.redis.cli("GET", f"lp:link:{code}")
    assert api.req("DELETE", f"/api/v1/links/{code}").status_code == 200
    assert api.redis.cli("EXISTS", f"lp:link:{code}") == "0"
    assert 0 < int(api.redis.cli("TTL", f"lp:fence:{code}")) <= 60


def test_fence_is_set_again_after_the_commit(api):
    """The fence set before an edit's UPDATE starts its minute then; an
    UPDATE that waits on a row lock used that minute up, and a load that
    read the old row before the commit could cache it after. The edit
    fences the code again once committed (here after a 4 s lock wait)."""
    code = api.create(url="https://example.com/lk1").json()["code"]
    locker = subprocess.Popen(
        [lpstack.PG_BIN + "/psql", "-X", "-q", "-d", api.pg.dsn, "-c",
         f"BEGIN; SELECT 1 FROM url_link WHERE code = '{code}' FOR UPDATE; "
         "SELECT pg_sleep(4); COMMIT;"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while api.pg.psql("SELECT count(*) FROM pg_stat_activity "
                          "WHERE wait_event = 'PgSleep'") == "0":
            assert time.time() < deadline, "the lock was never taken"
            time.sleep(0.05)
        t0 = time.time()
        r = api.req("PATCH", f"/api/v1/links/{code}", {"url": "https://example.com/lk2"})
        assert r.status_code == 200, r.text
        assert time.time() - t0 >= 2, "the UPDATE did not wait for the lock"
        assert int(api.redis.cli("TTL", f"lp:fence:{code}")) >= 58
    finally:
        locker.wait(timeout=30)


def test_dedupe_hit_respects_the_fence(api):
    """A single create that dedupes to an existing link writes that link's
    record through the batch path's pipeline: it honours an edit's fence as
    links_cache does (a plain SET there could put back a record read before
    the edit committed)."""
    code = api.create(url="https://example.com/dd").json()["code"]
    r = api.req("PATCH", f"/api/v1/links/{code}", {"redirect_type": 302})  # stays dedupable
    assert r.status_code == 200, r.text
    assert api.redis.cli("EXISTS", f"lp:fence:{code}") == "1"
    r = api.create(url="https://example.com/dd")
    assert (r.status_code, r.json()["code"]) == (200, code), r.text
    assert api.redis.cli("EXISTS", f"lp:link:{code}") == "0"
    api.redis.cli("DEL", f"lp:fence:{code}")
    r = api.create(url="https://example.com/dd")
    assert (r.status_code, r.json()["code"]) == (200, code), r.text
    assert '"https://example.com/dd"' in api.redis.cli("GET", f"lp:link:{code}")


def test_long_fraction_fails_only_its_own_create(api):
    """A date-time over PostgreSQL's 128-byte field buffer (here 200 fraction
    digits) passed the redirector's check and failed the batched statement:
    every create batched with it got 503. Nine digits at most now: 400 for
    that item alone."""
    bad = "2030-01-01T00:00:00." + "0" * 200 + "Z"
    r = api.req("POST", "/api/v1/links/bulk",
                {"links": [{"url": "https://a.example/", "expires_at": bad},
                           {"url": "https://b.example/"}]})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["status"] for x in res] == [400, 201], res
    assert res[0]["error"]["field"] == "expires_at", res
    r = api.create(url="https://c.example/", valid_since="2020-01-01T00:00:00.123456789Z")
    assert r.status_code == 201, r.text
    r = api.create(url="https://c.example/", valid_since=bad)
    assert r.status_code == 400 and r.json()["error"]["field"] == "valid_since", r.text


def test_failed_batch_returns_its_pool_codes(procs, own_pg, redis):
    """Creates failing with PostgreSQL down give their popped codes back to
    the Redis pool (they were lost: taken from the set, never used)."""
    api = start_redirector(procs, own_pg, redis)
    assert api.create(url="https://example.com/warm").status_code == 201
    key = "lp:pool:6"
    deadline = time.time() + 10
    while int(redis.cli("SCARD", key) or 0) < 900:
        assert time.time() < deadline, "the pool never filled"
        time.sleep(0.2)
    # the key check is cached for 5 s: this create renews it
    assert api.create(url="https://example.com/warm2").status_code == 201
    before = int(redis.cli("SCARD", key))

    def calls(cmd):
        m = re.search(rf"cmdstat_{cmd}:calls=(\d+)", redis.cli("INFO", "commandstats"))
        return int(m.group(1)) if m else 0
    spops, sadds = calls("spop"), calls("sadd")
    own_pg.stop(mode="fast")
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            st = list(ex.map(lambda i: api.create(url=f"https://example.com/pgdown{i}")
                             .status_code, range(16)))
        assert st == [503] * 16, st
        assert int(redis.cli("SCARD", key)) == before
        # codes were taken and given back (not merely never taken)
        assert calls("spop") > spops and calls("sadd") > sadds
    finally:
        own_pg.start()


def test_failed_batch_puts_reserve_codes_back(procs, own_pg, redis):
    """With Redis down a batch claims codes from the PostgreSQL reserve
    (status 0 -> 1) before its statement runs; when that statement fails
    the codes go back to the reserve instead of staying claimed with no
    link (they were lost for good). A trigger fails the statement."""
    api = start_redirector(procs, own_pg, redis)
    deadline = time.time() + 20
    while int(own_pg.psql("SELECT count(*) FROM unique_code WHERE status = 0")) < 50:
        assert time.time() < deadline, "the reserve never filled"
        time.sleep(0.2)
    own_pg.psql("CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF NEW.long_url LIKE '%boom%' THEN RAISE EXCEPTION 'boom'; END IF; "
                "RETURN NEW; END $$; CREATE TRIGGER boom BEFORE INSERT ON url_link "
                "FOR EACH ROW EXECUTE FUNCTION boom()")
    unused_claimed = ("SELECT count(*) FROM unique_code u WHERE u.status = 1 AND NOT EXISTS "
                      "(SELECT 1 FROM url_link l WHERE l.code = u.code)")
    assert own_pg.psql(unused_claimed) == "0"
    redis.stop()
    r = api.req("POST", "/api/v1/links/bulk",
                {"links": [{"url": f"https://boom.example/{i}"} for i in range(5)]})
    assert r.status_code == 200, r.text
    assert [x["status"] for x in r.json()["results"]] == [503] * 5, r.text
    assert own_pg.psql(unused_claimed) == "0"
    # five were claimed and put back (a put-back code's update_time is past
    # its create_time; a refill's insert has them equal)
    assert own_pg.psql("SELECT count(*) FROM unique_code WHERE status = 0 "
                       "AND update_time > create_time") == "5"
    # the reserve still serves: a create that does not trip the trigger
    r = api.req("POST", "/api/v1/links/bulk", {"links": [{"url": "https://fine.example/"}]})
    assert r.json()["results"][0]["status"] == 201, r.text
    code = r.json()["results"][0]["link"]["code"]
    assert own_pg.psql(f"SELECT status FROM unique_code WHERE code = '{code}'") == "1"
    assert own_pg.psql(unused_claimed) == "0"


def test_edit_reaches_other_running_redirectors(procs, pg, api):
    """An edit through one redirector is seen at once there and within
    cache_ttl_ms on another that had the link cached (README, Lookup)."""
    other = start_redirector(procs, pg, api.redis, {"cache_ttl_ms": 1000})
    code = api.create(url="https://example.com/o1").json()["code"]
    for r in (api.req("GET", "/" + code), other.req("GET", "/" + code)):
        assert r.headers["Location"] == "https://example.com/o1"
    t0 = time.time()
    assert api.req("PATCH", f"/api/v1/links/{code}",
                   {"url": "https://example.com/o2"}).status_code == 200
    assert api.req("GET", "/" + code).headers["Location"] == "https://example.com/o2"
    while other.req("GET", "/" + code).headers["Location"] != "https://example.com/o2":
        assert time.time() - t0 < 4, "the other redirector served the old URL past its TTL"
        time.sleep(0.05)
    assert api.req("DELETE", f"/api/v1/links/{code}").status_code == 200
    t0 = time.time()
    while other.req("GET", "/" + code).status_code != 410:
        assert time.time() - t0 < 4, "the other redirector served a deleted link past its TTL"
        time.sleep(0.05)


def test_edit_with_redis_stopped_is_refused(api):
    """With Redis configured but unreachable an edit cannot drop the cached
    record other redirectors read, so it is refused (503, nothing changed)
    instead of leaving the old link served for a day; creates and redirects
    go on without Redis."""
    code = api.create(url="https://example.com/r1").json()["code"]
    api.redis.stop()
    for method, body in (("PATCH", {"url": "https://example.com/r2"}), ("DELETE", None)):
        r = api.req(method, f"/api/v1/links/{code}", body)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "cache_unavailable", r.text
    assert api.pg.psql(f"SELECT long_url, deleted FROM url_link WHERE code = '{code}'") == \
        "https://example.com/r1|0"
    assert api.create(url="https://example.com/r3").status_code == 201
    rr = api.req("GET", "/" + code)
    assert (rr.status_code, rr.headers["Location"]) == (302, "https://example.com/r1")
    api.redis.up()
    deadline = time.time() + 10
    while True:
        r = api.req("PATCH", f"/api/v1/links/{code}", {"url": "https://example.com/r2"})
        if r.status_code == 200 or time.time() > deadline:
            break
        time.sleep(0.3)
    assert r.status_code == 200, r.text


def test_link_states(api):
    past, future = "2020-01-01T00:00:00Z", "2099-01-01T00:00:00+08:00"
    exp = api.create(url="https://example.com/e", expires_at=past).json()["code"]
    notyet = api.create(url="https://example.com/n", valid_since=future).json()["code"]
    ok = api.create(url="https://example.com/o", expires_at=future, redirect_type=307).json()
    assert api.req("GET", "/" + exp).status_code == 410
    assert api.req("GET", "/" + notyet).status_code == 404
    assert api.req("GET", "/" + ok["code"]).status_code == 307
    assert api.req("HEAD", "/" + ok["code"]).status_code == 307
    assert api.req("GET", "/doesNotExist").status_code == 404


def test_bulk_in_order_with_errors(api):
    items = [{"url": f"https://example.com/b{i}"} for i in range(20)]
    items[3] = {"url": "ftp://bad"}
    items[7] = {"url": "https://example.com/c", "alias": "bulk-alias"}
    items[8] = {"url": "https://example.com/d", "alias": "bulk-alias"}
    r = api.req("POST", "/api/v1/links/bulk", {"links": items})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert len(res) == 20
    assert res[3]["status"] == 400 and res[3]["error"]["index"] == 3
    assert res[7]["status"] == 201 and res[7]["link"]["code"] == "bulk-alias"
    assert res[8]["status"] == 409
    for i in set(range(20)) - {3, 7, 8}:
        assert res[i]["status"] == 201 and res[i]["link"]["long_url"] == items[i]["url"]
    assert api.pg.psql("SELECT count(*) FROM url_link") == "18"
    r = api.req("POST", "/api/v1/links/bulk", {"links": [{"url": "https://a.com"}] * 1001})
    assert r.status_code == 413


def test_bulk_set_based_dedupe_and_fields(api):
    """The set-based path: duplicates inside one request, dedupe against
    links in PostgreSQL (Redis cache flushed) and in Redis, per-item fields
    and tags, and every created code registered in unique_code."""
    first = api.create(url="https://example.com/exists").json()
    api.redis.cli("DEL", f"lp:link:{first['code']}", "lp:md5code")
    second = api.create(url="https://example.com/cached").json()
    tagged = api.create(url="https://example.com/tagged", tags=["x"]).json()
    items = [{"url": f"https://example.com/s{i}"} for i in range(300)]
    items[10] = {"url": "https://example.com/s5"}            # same as item 5
    items[20] = {"url": "https://example.com/exists"}        # in PostgreSQL only
    items[30] = {"url": "https://example.com/cached"}        # in the Redis MD5 map
    items[40] = {"url": "https://example.com/s5", "dedupe": False}
    items[50] = {"url": "https://example.com/t", "tags": ["q\"uote", "back\\slash", "a,b"],
                 "expires_at": "2099-01-01T00:00:00Z", "max_visits": 7, "redirect_type": 301}
    items[60] = {"url": "https://example.com/s5", "redirect_type": 307}  # differs: new link
    items[70] = {"url": "https://example.com/s5", "tags": ["t70"]}  # tags: new link
    items[80] = {"url": "https://example.com/tagged"}  # a tagged link is never handed out
    r = api.req("POST", "/api/v1/links/bulk", {"links": items})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["status"] for x in res].count(201) == 297
    assert res[5]["status"] == 201
    assert res[10]["status"] == 200 and res[10]["link"]["code"] == res[5]["link"]["code"]
    assert res[20]["status"] == 200 and res[20]["link"]["code"] == first["code"]
    assert res[30]["status"] == 200 and res[30]["link"]["code"] == second["code"]
    assert res[40]["status"] == 201 and res[40]["link"]["code"] != res[5]["link"]["code"]
    assert res[60]["status"] == 201 and res[60]["link"]["redirect_type"] == 307
    assert res[70]["status"] == 201 and res[70]["link"]["tags"] == ["t70"]
    assert res[70]["link"]["code"] != res[5]["link"]["code"]
    assert res[80]["status"] == 201 and res[80]["link"]["code"] != tagged["code"]
    assert res[80]["link"]["tags"] == []
    for k in (5, 50, 299):  # created items answer with the link as stored
        assert api.req("GET", "/api/v1/links/" + res[k]["link"]["code"]).json() == res[k]["link"]
    t = res[50]["link"]
    assert (t["tags"], t["max_visits"], t["redirect_type"]) == \
        (["q\"uote", "back\\slash", "a,b"], 7, 301)
    assert t["expires_at"].startswith("2099-01-01")
    codes = [x["link"]["code"] for x in res if x["status"] == 201]
    assert len(set(codes)) == len(codes) == 297
    assert api.pg.psql("SELECT count(*) FROM url_link") == "300"
    # every link's code is in unique_code, pooled (2) or used (1), none in the reserve
    assert api.pg.psql("SELECT count(*) FROM url_link l LEFT JOIN unique_code u "
                       "ON u.code = l.code WHERE u.status IS NULL OR u.status NOT IN (1, 2)") \
        == "0"
    # the pool's codes went to Redis, the reserve's did not
    assert int(api.pg.psql("SELECT count(*) FROM unique_code WHERE status = 0")) >= 1000
    pooled = set(api.redis.cli("SMEMBERS", "lp:pool:6").split())
    reserve = set(api.pg.psql("SELECT code FROM unique_code WHERE status = 0").split())
    assert pooled and not pooled & reserve
    # a bulk run fills the Redis caches lazily: a created link's record and
    # MD5 map entry are not written; the first redirect caches the record,
    # the first create that finds the link in PostgreSQL the map entry
    c7, md5_7 = res[7]["link"]["code"], res[7]["link"]["long_url_md5"]
    assert api.redis.cli("EXISTS", f"lp:link:{c7}") == "0"
    assert api.redis.cli("HEXISTS", "lp:md5code", md5_7) == "0"
    g = api.req("GET", "/" + c7)
    assert (g.status_code, g.headers["Location"]) == (302, "https://example.com/s7")
    assert json.loads(api.redis.cli("GET", f"lp:link:{c7}"))["code"] == c7
    again = api.create(url="https://example.com/s7")
    assert again.status_code == 200 and again.json()["code"] == c7
    assert api.redis.cli("HGET", "lp:md5code", md5_7) == c7
    # the bulk run's dedupe hit in PostgreSQL (item 20) went into the map
    assert api.redis.cli("HGET", "lp:md5code", first["long_url_md5"]) == first["code"]


def test_bulk_when_pool_runs_dry(procs, pg, redis):
    """A pool far smaller than the request: the batch generates the missing
    codes itself (CSPRNG, inserted into unique_code as used) and succeeds."""
    api = start_redirector(procs, pg, redis, {"pool_low_water": 1, "pool_batch": 10})
    res = api.bulk_created([f"https://dry.example/{i}" for i in range(1000)])
    codes = {x["link"]["code"] for x in res}
    assert len(codes) == 1000 and all(len(c) == 6 for c in codes)
    assert api.pg.psql("SELECT count(*) FROM url_link l JOIN unique_code u USING (code) "
                       "WHERE u.status IN (1, 2)") == "1000"
    # most were generated inline (status 1), the rest came from the tiny pool (2)
    assert int(api.pg.psql("SELECT count(*) FROM url_link l JOIN unique_code u USING (code) "
                           "WHERE u.status = 1")) >= 900


def test_pool_refill_stops_while_redis_refuses_writes(procs, own_pg, redis):
    """Redis answering reads but refusing writes (here min-replicas-to-write
    with no replica: NOREPLICAS; in production MISCONF after a failed save or
    OOM under noeviction): the refill stops putting pooled codes in
    PostgreSQL that cannot reach the set (it added pool_batch of them each
    second, counted as pooled), and creates go on from PostgreSQL's reserve."""
    api = start_redirector(procs, own_pg, redis, {"pool_low_water": 100000, "pool_batch": 500,
                                                  "pool_pg_reserve": 200})
    wait_pool(api)
    pooled = lambda: int(own_pg.psql("SELECT count(*) FROM unique_code WHERE status = 2"))  # noqa: E731
    redis.cli("CONFIG", "SET", "min-replicas-to-write", "1")
    try:
        time.sleep(1.5)  # the round under way, and one that meets the refusal
        before = pooled()
        for i in range(20):  # each failed SPOP kicks the refill
            assert api.create(url=f"https://refused.example/{i}").status_code == 201
        time.sleep(3)
        assert pooled() - before <= 500, (before, pooled())
    finally:
        redis.cli("CONFIG", "SET", "min-replicas-to-write", "0")


def test_refill_with_codes_taken_elsewhere(procs, pg, redis):
    """Codes another redirector generated (unknown to this one's Bloom filter)
    make the refill's plain INSERT fail; the batch goes again with ON CONFLICT
    and pools only free codes."""
    with open(pg.logfile) as f:
        log_at = len(f.read())  # the session cluster's log: this test's lines only
    api = start_redirector(procs, pg, redis, {"code_length": 2, "pool_low_water": 200,
                                              "pool_batch": 300, "pool_pg_reserve": 0})
    deadline = time.time() + 20
    while int(api.redis.cli("SCARD", "lp:pool:2") or 0) < 200:
        assert time.time() < deadline, "the pool never filled"
        time.sleep(0.1)
    abc = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    api.pg.psql("INSERT INTO unique_code (code, status, type) SELECT a || b, 1, 0 "
                f"FROM regexp_split_to_table('{abc}', '') a, regexp_split_to_table('{abc}', '') b "
                "WHERE NOT EXISTS (SELECT 1 FROM unique_code u WHERE u.code = a || b) "
                "ORDER BY random() LIMIT 2500")
    foreign = set(api.pg.psql("SELECT code FROM unique_code WHERE status = 1").split())
    res = api.bulk_created([f"https://elsewhere.example/{i}" for i in range(400)])
    codes = {x["link"]["code"] for x in res}
    # each item its own code (a batch that generates codes itself can draw one
    # twice from a 3,844-code space: the second item must not report the first's)
    assert len(codes) == 400 and not codes & foreign
    deadline = time.time() + 20
    while int(api.redis.cli("SCARD", "lp:pool:2") or 0) == 0:
        assert time.time() < deadline, "the pool was never refilled"
        time.sleep(0.1)
    pooled = set(api.redis.cli("SMEMBERS", "lp:pool:2").split())
    assert pooled and not pooled & foreign and not pooled & codes
    assert api.pg.psql("SELECT count(*) FROM unique_code WHERE status = 2 AND code = ANY('{%s}')"
                       % ",".join(pooled)) == str(len(pooled))
    with open(pg.logfile) as f:
        assert 'violates unique constraint "unique_code_code_key"' in f.read()[log_at:]
    assert api.pg.psql("SELECT count(*) = count(DISTINCT code) FROM url_link") == "t"


def test_concurrent_singles_batched(api):
    """Single creates from many connections at once go through the batch
    queue: each gets its own link, same-URL requests get one link."""
    def one(i):
        s = requests.Session()
        out = []
        for j in range(25):
            url = f"https://conc.example/{i}/{j}" if j % 5 else "https://conc.example/same"
            r = s.post(api.base + "/api/v1/links", data=json.dumps({"url": url}),
                       headers={"Authorization": f"Bearer {api.key}"}, timeout=30)
            assert r.status_code in (200, 201), r.text
            out.append((url, r.json()["code"]))
        return out
    with concurrent.futures.ThreadPoolExecutor(24) as ex:
        got = [x for part in ex.map(one, range(24)) for x in part]
    distinct = {u: set() for u, _ in got}
    for u, c in got:
        distinct[u].add(c)
    assert len(got) == 600
    for u, cs in distinct.items():
        assert len(cs) == 1 or u == "https://conc.example/same", (u, cs)
    # identical concurrent creates may race into separate links, but never share a code
    n = int(api.pg.psql("SELECT count(*) FROM url_link"))
    assert n == int(api.pg.psql("SELECT count(DISTINCT code) FROM url_link"))
    assert n >= 480 + 1



def test_singles_do_not_hold_http_threads(procs, pg, redis):
    """A queued single create suspends its connection instead of blocking an
    HTTP thread. With 2 HTTP threads, 16 clients creating at once while
    url_link is locked all get into the queue, so their links come from a few
    transactions (rows sharing an xmin), not one or two at a time. Then
    SIGTERM in the middle of a create stream answers every create already
    received before the process exits 0: each 201 names a stored link. In
    the drain's second half a create sent on a connection still open gets
    503 "unavailable" with "Connection: close" (README, Server), nothing
    else 5xx, and nothing is stored for it."""
    api = start_redirector(procs, pg, redis, {"http_threads": 2})
    lock = subprocess.Popen(["psql", "-X", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres",
                             "-d", pg.dbname, "-c", "BEGIN; LOCK TABLE url_link IN EXCLUSIVE MODE; "
                             "SELECT pg_sleep(2); COMMIT;"], stdout=subprocess.DEVNULL)
    deadline = time.time() + 20
    while pg.psql("SELECT count(*) FROM pg_locks WHERE relation = 'url_link'::regclass "
                  "AND mode = 'ExclusiveLock' AND granted") != "1":
        assert lock.poll() is None and time.time() < deadline, "the lock was never taken"
        time.sleep(0.02)

    def single(i):
        r = requests.post(api.base + "/api/v1/links", data=json.dumps({"url": f"https://held.example/{i}"}),
                          headers={"Authorization": f"Bearer {api.key}"}, timeout=30)
        assert r.status_code == 201, r.text
        return r.json()["code"]
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        codes = list(ex.map(single, range(16)))
    assert lock.wait(10) == 0
    in_list = ",".join(f"'{c}'" for c in codes)
    xacts = int(pg.psql(f"SELECT count(DISTINCT xmin::text) FROM url_link WHERE code IN ({in_list})"))
    assert xacts <= 6, xacts  # blocked HTTP threads: at most 2 in flight, >= 8

    stop = threading.Event()
    refused = []

    def stream(i):
        s = requests.Session()
        got = []
        j = 0
        while not stop.is_set() or j < 30:
            try:
                r = s.post(api.base + "/api/v1/links", timeout=30,
                           data=json.dumps({"url": f"https://held.example/{i}/{j}"}),
                           headers={"Authorization": f"Bearer {api.key}"})
            except requests.ConnectionError:
                assert stop.is_set()  # refused or closed only once stopping
                break
            if r.status_code == 503:
                assert stop.is_set() and r.json()["error"]["code"] == "unavailable", r.text
                assert r.headers.get("Connection") == "close", r.headers
                refused.append(j)
                continue
            got.append((r.status_code, r.json().get("code")))
            j += 1
        return got

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        futs = [ex.submit(stream, i) for i in range(16)]
        deadline = time.time() + 120
        try:
            while int(pg.psql("SELECT count(*) FROM url_link")) < 400:
                assert time.time() < deadline and api.proc.alive(), "the create stream stalled"
                assert not any(f.done() for f in futs), [f.exception() for f in futs if f.done()]
                time.sleep(0.05)
        except BaseException:
            stop.set()  # the streams end (else leaving the pool waited on them forever)
            api.proc.send_signal(signal.SIGTERM)
            raise
        stop.set()
        api.proc.send_signal(signal.SIGTERM)
        got = [x for f in futs for x in f.result()]
    rc = api.proc.proc.wait(30)
    assert rc == 0, api.proc.output()[-3000:]
    assert got and all(st == 201 for st, _ in got), {st for st, _ in got}
    codes = [c for _, c in got]
    stored = int(pg.psql("SELECT count(*) FROM url_link WHERE code IN (%s)"
                         % ",".join(f"'{c}'" for c in codes)))
    assert stored == len(codes) == len(set(codes))
    # and nothing else: no row for a create answered 503
    assert int(pg.psql("SELECT count(*) FROM url_link "
                       "WHERE long_url LIKE 'https://held.example/%/%'")) == len(codes), refused

def test_resolve(api):
    a = api.create(url="https://example.com/r1").json()["code"]
    b = api.create(url="https://example.com/r2").json()["code"]
    api.req("DELETE", f"/api/v1/links/{b}")
    # "null" and "NULL" are aliases like any other (unquoted in an array
    # literal they would be NULL elements)
    assert api.create(url="https://example.com/n1", alias="null").status_code == 201
    assert api.create(url="https://example.com/n2", alias="NULL").status_code == 201
    r = api.req("POST", "/api/v1/links/resolve",
                {"codes": [b, "zzzzzz", a, "bad code!", a, "null", "NULL", "\u00e9"]})
    assert r.status_code == 200
    assert r.json()["urls"] == [None, None, "https://example.com/r1", None,
                                "https://example.com/r1", "https://example.com/n1",
                                "https://example.com/n2", None]


def test_bad_bytes_get_4xx_not_503(api):
    """Request bytes PostgreSQL would refuse (invalid UTF-8, numbers past
    bigint) are answered 4xx with a JSON body by the redirector itself, and
    error messages that quote cut input stay valid UTF-8 (a body jansson
    refused would drop the connection, or a bulk item's result)."""
    for method, body in (("GET", None), ("PATCH", {"disabled": True}), ("DELETE", None)):
        r = api.req(method, "/api/v1/links/%FF", body)
        assert r.status_code == 404, (method, r.text)
        assert r.json()["error"]["code"] == "not_found"
    r = api.req("GET", "/api/v1/links?tag=%FF")
    assert r.status_code == 400 and r.json()["error"]["field"] == "tag", r.text
    r = api.req("GET", "/api/v1/links?cursor=9999999999999999999")
    assert r.status_code == 400 and r.json()["error"]["field"] == "cursor", r.text
    r = api.req("GET", "/api/v1/links?cursor=9223372036854775807")
    assert r.status_code == 200 and len(r.json()["links"]) == 0, r.text
    r = api.req("GET", "/api/v1/%FF")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
    # an unknown field named by 200 three-byte characters: its name is cut
    # in the message, on a character boundary
    name = "\u20ac" * 200
    r = api.create(url="https://example.com/u", **{name: 1})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"].startswith("unknown field")
    items = [{"url": "https://example.com/b0"}, {"url": "https://example.com/b1", name: 1},
             {"url": "https://example.com/b2"}]
    r = api.req("POST", "/api/v1/links/bulk", {"links": items})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["status"] for x in res] == [201, 400, 201]
    assert res[1]["error"]["index"] == 1
    assert api.pg.psql("SELECT count(*) FROM url_link") == "2"


def test_list_keyset_pagination(api):
    for i in range(7):
        api.create(url=f"https://example.com/l{i}", tags=["even" if i % 2 == 0 else "odd"])
    seen, cursor = [], None
    while True:
        q = "/api/v1/links?limit=3" + (f"&cursor={cursor}" if cursor else "")
        page = api.req("GET", q).json()
        seen += [l["long_url"] for l in page["links"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"https://example.com/l{i}" for i in range(6, -1, -1)]
    even = api.req("GET", "/api/v1/links?tag=even").json()["links"]
    assert len(even) == 4
    assert api.req("GET", "/api/v1/links?limit=0").status_code == 400


def test_link_indexes_used(api):
    """0013: dedupe probes find links through the hash index on the MD5, and
    listing by tag through the partial GIN index."""
    r = api.create(url="https://example.com/idx", tags=["idx"])
    assert r.status_code == 201, r.text
    md5 = r.json()["long_url_md5"]
    plan = api.pg.psql("SET enable_seqscan = off; EXPLAIN SELECT id FROM url_link "
                       f"WHERE long_url_md5 = '{md5}' AND deleted = 0")
    assert "url_link_md5_idx" in plan, plan
    plan = api.pg.psql("SET enable_seqscan = off; EXPLAIN SELECT id FROM url_link "
                       "WHERE tags @> ARRAY['idx'] AND tags <> '{}'")
    assert "url_link_tags_idx" in plan, plan
    r = api.req("GET", "/api/v1/links?tag=idx")
    assert [x["code"] for x in r.json()["links"]] == [api.req("GET", "/api/v1/links").json()
                                                       ["links"][0]["code"]]


def test_hash_strategy_collisions(api):
    """length 1 has 62 codes: candidates collide quickly, salted retries go on."""
    codes = set()
    for i in range(40):
        r = api.create(url=f"https://example.com/h{i}", strategy="hash", length=1)
        assert r.status_code == 201, r.text
        codes.add(r.json()["code"])
    assert len(codes) == 40
    r = api.create(url="https://example.com/hashed", strategy="hash", length=8)
    assert r.status_code == 201 and len(r.json()["code"]) == 8
    assert api.pg.psql("SELECT count(*) FROM unique_code WHERE type = 2") == "41"


def test_hash_strategy_many_links_for_one_url(api):
    """One URL, 100 hash links (tags keep dedupe out of it): the (k+1)-th
    walks past k taken candidates, which the Bloom filter skips without a
    query. It gave up after 64 candidates (503 code_space_busy, for good)."""
    codes = []
    for i in range(100):
        r = api.create(url="https://example.com/landing", strategy="hash", tags=[f"c{i}"])
        assert r.status_code == 201, (i, r.text)
        codes.append(r.json()["code"])
    assert len(set(codes)) == 100
    assert api.pg.psql("SELECT count(*) FROM url_link WHERE long_url = "
                       "'https://example.com/landing'") == "100"


def test_sequence_strategy(api):
    codes = [api.create(url=f"https://example.com/s{i}", strategy="sequence").json()["code"]
             for i in range(30)]
    assert len(set(codes)) == 30 and all(len(c) == 6 for c in codes)
    # consecutive codes share few positions
    same = sum(x == y for a, b in zip(codes, codes[1:]) for x, y in zip(a, b))
    assert same < 29 * 6 / 4


def test_public_sequence_secret_refused_off_loopback(pg):
    """The built-in sequence_secret is in the sources: anyone could compute
    that key's codes in order. A redirector with it (or the examples'
    change-me placeholder, or a key under 16 bytes) and a base_url whose host
    is not a loopback one refuses to start, naming the setting; on a loopback
    host (a development machine) it starts."""
    dev = "linkpulse-dev-sequence-secret"
    for base, secret in (("https://lnk.example.com", dev), ("http://10.0.0.5:8080", dev),
                         ("http://[2001:db8::1]/", dev),
                         ("https://lnk.example.com", "change-me-to-32-random-bytes"),
                         ("https://lnk.example.com", "short-secret")):
        r = subprocess.run([os.path.join(lpstack.BIN, "redirector"), "-o", f"pg_dsn={pg.dsn}",
                            "-o", "redis_url=", "-o", "kafka_bootstrap=", "-o",
                            f"listen_port={lpstack.free_port()}", "-o", f"base_url={base}",
                            "-o", f"sequence_secret={secret}", "-o", "bloom_expected=1000"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "sequence_secret" in r.stderr, (base, r.returncode, r.stderr)
    for base in ("http://127.0.0.1:8080", "http://localhost", "http://s.localhost",
                 "http://[::1]:8080"):
        port = lpstack.free_port()
        p = subprocess.Popen([os.path.join(lpstack.BIN, "redirector"), "-o", f"pg_dsn={pg.dsn}",
                              "-o", "redis_url=", "-o", "kafka_bootstrap=", "-o",
                              f"listen_port={port}", "-o", f"base_url={base}",
                              "-o", f"sequence_secret={dev}", "-o", "bloom_expected=1000"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            lpstack.wait_port(port, proc=p, what="redirector")
        finally:
            p.terminate()
            _, err = p.communicate(timeout=60)
        assert p.returncode == 0, (base, p.returncode, err)


def test_pool_concurrent_no_duplicates(api):
    """Many connections creating at once while the pool refills."""
    wait_pool(api)
    def work(w):
        s = requests.Session()
        out = []
        for i in range(60):
            r = s.post(api.base + "/api/v1/links",
                       json={"url": f"https://example.com/c{w}/{i}"},
                       headers={"Authorization": f"Bearer {api.key}"}, timeout=30)
            assert r.status_code == 201, r.text
            out.append(r.json()["code"])
        return out
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        codes = [c for chunk in ex.map(work, range(16)) for c in chunk]
    assert len(codes) == 960 and len(set(codes)) == 960
    assert api.pg.psql("SELECT count(*), count(DISTINCT code) FROM url_link") == "960|960"
    # each code a pooled one (status 2) taken by exactly one link
    assert api.pg.psql("SELECT count(*) FROM url_link l JOIN unique_code u USING (code) "
                       "WHERE u.status = 2") == "960"


def test_pool_restored_with_used_codes(api):
    """Redis back from an old snapshot: its pool set holds codes already in use.
    url_link's unique code is the claim: every item still gets a code of its
    own and no link is overwritten or lost (bulk and singles)."""
    used = [x["link"]["code"] for x in
            api.bulk_created([f"https://example.com/old{i}" for i in range(300)])]
    api.redis.cli("DEL", "lp:pool:6")
    api.redis.cli("SADD", "lp:pool:6", *used)
    new = [x["link"]["code"] for x in
           api.bulk_created([f"https://example.com/new{i}" for i in range(300)])]
    assert len(set(new)) == 300 and not set(new) & set(used)
    api.redis.cli("SADD", "lp:pool:6", *used[:50])
    for i in range(20):
        r = api.create(url=f"https://example.com/single{i}")
        assert r.status_code == 201, r.text
        assert r.json()["code"] not in used
    assert api.pg.psql("SELECT count(*), count(DISTINCT code) FROM url_link") == "620|620"
    # the old links still point where they did
    assert api.pg.psql("SELECT count(*) FROM url_link WHERE code = ANY('{%s}') "
                       "AND long_url LIKE 'https://example.com/old%%'" % ",".join(used)) == "300"


def test_create_with_redis_stopped(api):
    assert api.create(url="https://example.com/before").status_code == 201
    api.redis.stop()
    codes = []
    for i in range(20):
        r = api.create(url=f"https://example.com/noredis{i}")
        assert r.status_code == 201, r.text
        codes.append(r.json()["code"])
    assert len(set(codes)) == 20
    rr = api.req("GET", "/" + codes[0])
    assert rr.status_code == 302
    # the codes were claimed from the pre-generated pool in PostgreSQL
    pre = api.pg.psql("SELECT count(*) FROM unique_code WHERE code = ANY('{%s}') AND status = 1 "
                      "AND create_time < update_time" % ",".join(codes))
    assert pre == "20"
    # bulk and concurrent singles too (set-based claim, FOR UPDATE SKIP LOCKED)
    api.bulk_created([f"https://example.com/nrb{i}" for i in range(200)])
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        st = list(ex.map(lambda i: api.create(url=f"https://example.com/nrc{i}").status_code,
                         range(80)))
    assert st == [201] * 80
    assert api.pg.psql("SELECT count(*) = count(DISTINCT code) FROM url_link") == "t"
    assert api.pg.psql("SELECT count(*) FROM url_link l LEFT JOIN unique_code u USING (code) "
                       "WHERE u.status IS NULL OR u.status NOT IN (1, 2)") == "0"


def test_health(api):
    assert requests.get(api.base + "/healthz", timeout=5).json()["status"] == "ok"
    assert requests.get(api.base + "/readyz", timeout=5).status_code == 200


def test_bodies_without_a_valid_key_are_not_kept(api):
    """A POST whose Authorization header names no valid key has its body
    read and dropped, not kept: sixteen connections each sending 4 MB of an
    8 MB body with a made-up key left the process 64 MB or more larger (it
    kept every body until the key was checked at the end); now its memory
    stays about where it was, and each is answered 401 once complete. A
    valid key's create still reads its body."""
    def rss_kb():
        with open(f"/proc/{api.proc.proc.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    port = int(api.base.rsplit(":", 1)[1])
    assert api.create(url="https://example.com/kept").status_code == 201
    before = rss_kb()
    socks = []
    chunk = b"x" * 65536
    try:
        for _ in range(16):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"POST /api/v1/links HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer "
                      b"lp_" + b"0" * 48 + b"\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 8000000\r\n\r\n")
            for _ in range(4000000 // len(chunk)):
                s.sendall(chunk)
            socks.append(s)
        time.sleep(0.5)
        grown = rss_kb() - before
        assert grown < 24000, f"{grown} kB more with 16 bodies of a made-up key"
        s = socks[0]
        rest = 8000000 - (4000000 // len(chunk)) * len(chunk)
        while rest > 0:
            n = min(rest, len(chunk))
            s.sendall(chunk[:n])
            rest -= n
        assert s.recv(64).startswith(b"HTTP/1.1 401"), "the complete request got no 401"
    finally:
        for s in socks:
            s.close()
    assert api.create(url="https://example.com/kept2").status_code == 201


def test_sigterm_closes_the_listener_then_drains(procs, pg, redis):
    """SIGTERM closes the listening socket at once (a new connection is
    refused) while a create it had received still waits on a locked url_link;
    that create is answered 201 once the lock goes, and the process exits 0.
    Then eight start/SIGTERM rounds under keep-alive load on 4 HTTP threads,
    half of them with max_connections 4 (one per thread: the workers keep
    reaching their limit and taking the listening socket out of their epoll
    sets and back): each exits 0 without any libmicrohttpd panic (its
    MHD_quiesce_daemon raced its own epoll workers and the process could
    crash in the panic handler; a listening descriptor replaced under the
    workers made the one at its limit panic)."""
    api = start_redirector(procs, pg, redis, {"http_threads": 2})
    wait_pool(api)
    lock = subprocess.Popen(["psql", "-X", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres",
                             "-d", pg.dbname, "-c", "BEGIN; LOCK TABLE url_link IN EXCLUSIVE MODE; "
                             "SELECT pg_sleep(3); COMMIT;"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while pg.psql("SELECT count(*) FROM pg_locks WHERE relation = 'url_link'::regclass "
                      "AND mode = 'ExclusiveLock' AND granted") != "1":
            assert lock.poll() is None and time.time() < deadline, "the lock was never taken"
            time.sleep(0.02)
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            held = ex.submit(api.create, url="https://held.example/sigterm")
            while pg.psql("SELECT count(*) FROM pg_locks WHERE relation = 'url_link'::regclass "
                          "AND NOT granted") == "0":
                assert not held.done() and time.time() < deadline, "the create never waited"
                time.sleep(0.02)
            api.proc.send_signal(signal.SIGTERM)
            port = int(api.base.rsplit(":", 1)[1])
            refused = False
            while not refused:
                assert time.time() < deadline, "still accepting after SIGTERM"
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    time.sleep(0.02)
                except ConnectionResetError:
                    # in the listener's backlog as it stopped listening
                    time.sleep(0.02)
                except ConnectionRefusedError:
                    refused = True
            assert not held.done() and api.proc.alive(), "the create ended before the lock did"
            r = held.result(30)
        assert r.status_code == 201, r.text
        assert pg.psql(f"SELECT long_url FROM url_link WHERE code = '{r.json()['code']}'") == \
            "https://held.example/sigterm"
    finally:
        lock.wait(30)
    assert api.proc.proc.wait(30) == 0, api.proc.output()[-3000:]
    assert "libmicrohttpd" not in api.proc.output(), api.proc.output()[-3000:]

    def hammer(port, stop, per_connection):
        """per_connection requests on each connection (0: keep it)."""
        while not stop.is_set():
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                k = 0
                while not stop.is_set() and (per_connection == 0 or k < per_connection):
                    c.request("GET", "/nothere")
                    c.getresponse().read()
                    k += 1
                c.close()
            except (OSError, http.client.HTTPException):
                time.sleep(0.005)

    for n in range(8):
        red = start_redirector(procs, pg, redis, {"http_threads": 4, "log_level": "info",
                                                  "max_connections": 4 if n % 2 else 10000})
        port = int(red.base.rsplit(":", 1)[1])
        stop = threading.Event()
        clients = [threading.Thread(target=hammer, args=(port, stop, 2 if n % 2 else 0),
                                    daemon=True) for _ in range(6)]
        for t in clients:
            t.start()
        try:
            time.sleep(0.3)
            rc = red.proc.stop()
        finally:
            stop.set()
        for t in clients:
            t.join(10)
        out = red.proc.output()
        assert rc == 0, (n, out[-3000:])
        assert "libmicrohttpd" not in out, (n, out[-3000:])
