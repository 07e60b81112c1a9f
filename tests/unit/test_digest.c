/* test_digest.c - digest_* against the known vectors in
 * tests/data/digest_cases.txt, plus NULL handling, buffer bounds and
 * concurrent use. Run from the repository root. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "unit.h"

#define CASES "tests/data/digest_cases.txt"

static void
hex_of(const unsigned char *b, size_t n, char *out)
{
	size_t i;

	for (i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
	out[2 * n] = '\0';
}

static void
run_hash_case(const char *where, const char *kind, char *input, const char *want)
{
	char algo[16], got[DIGEST_SHA1_HEX_SIZE + 8];
	unsigned char raw[DIGEST_MD5_LEN];
	const char *star = strchr(kind, '*');
	long one, reps = 1, i;
	char *data;
	size_t len;
	int rc;

	snprintf(algo, sizeof(algo), "%.*s", star ? (int)(star - kind) : (int)strlen(kind), kind);
	if (star != NULL)
		reps = strtol(star + 1, NULL, 10);
	one = unit_unescape(input);
	CHECK(one >= 0 && reps > 0, "%s: bad input field", where);
	if (one < 0 || reps <= 0)
		return;
	len = (size_t)one * (size_t)reps;
	if ((data = malloc(len + 1)) == NULL) {
		CHECK(0, "%s: out of memory", where);
		return;
	}
	for (i = 0; i < reps; i++)
		memcpy(data + (size_t)i * (size_t)one, input, (size_t)one);

	memset(got, 'Z', sizeof(got));
	if (strcmp(algo, "sha1") == 0) {
		rc = digest_sha1_hex(data, len, got);
		CHECK(got[DIGEST_SHA1_HEX_SIZE] == 'Z', "%s: wrote past 41 bytes", where);
	} else if (strcmp(algo, "md5") == 0) {
		rc = digest_md5_hex(data, len, got);
		CHECK(got[DIGEST_MD5_HEX_SIZE] == 'Z', "%s: wrote past 33 bytes", where);
	} else if (strcmp(algo, "md5raw") == 0) {
		rc = digest_md5_raw(data, len, raw);
		hex_of(raw, sizeof(raw), got);
	} else {
		CHECK(0, "%s: unknown kind %s", where, kind);
		free(data);
		return;
	}
	CHECK(rc == 0, "%s: %s returned %d", where, algo, rc);
	CHECK_STR(got, want, where);
	free(data);
}

static void
run_cases(void)
{
	FILE *f = fopen(CASES, "r");
	char line[4096], where[64];
	int lineno = 0, ncases = 0;

	CHECK(f != NULL, "cannot open %s (run from the repository root)", CASES);
	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *fld[5];
		int n;

		lineno++;
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		snprintf(where, sizeof(where), "%s:%d", CASES, lineno);
		n = unit_split_tabs(line, fld, 5);
		if (strcmp(fld[0], "client_id") == 0) {
			char got[DIGEST_SHA1_HEX_SIZE + 8];
			const char *ip = fld[1], *ua = n > 2 ? fld[2] : NULL;

			CHECK(n == 4, "%s: client_id wants 4 fields, has %d", where, n);
			if (n != 4)
				continue;
			ip = strcmp(fld[1], "\\N") == 0 ? NULL : fld[1];
			ua = strcmp(fld[2], "\\N") == 0 ? NULL : fld[2];
			memset(got, 'Z', sizeof(got));
			CHECK(digest_client_id(ip, ua, got) == 0, "%s: digest_client_id failed", where);
			CHECK(got[DIGEST_SHA1_HEX_SIZE] == 'Z', "%s: wrote past 41 bytes", where);
			CHECK_STR(got, fld[3], where);
		} else {
			CHECK(n == 3, "%s: wants 3 fields, has %d", where, n);
			if (n != 3)
				continue;
			run_hash_case(where, fld[0], fld[1], fld[2]);
		}
		ncases++;
	}
	fclose(f);
	CHECK(ncases >= 20, "%s: only %d cases", CASES, ncases);
}

/* NULL data with length 0 is the empty message. */
static void
test_null_data(void)
{
	char sha[DIGEST_SHA1_HEX_SIZE], md5[DIGEST_MD5_HEX_SIZE];
	unsigned char raw[DIGEST_MD5_LEN];

	CHECK(digest_sha1_hex(NULL, 0, sha) == 0, "sha1(NULL, 0) failed");
	CHECK_STR(sha, "da39a3ee5e6b4b0d3255bfef95601890afd80709", "sha1(NULL, 0)");
	CHECK(digest_md5_hex(NULL, 0, md5) == 0, "md5(NULL, 0) failed");
	CHECK_STR(md5, "d41d8cd98f00b204e9800998ecf8427e", "md5(NULL, 0)");
	CHECK(digest_md5_raw(NULL, 0, raw) == 0 && raw[0] == 0xd4 && raw[15] == 0x7e,
	    "md5_raw(NULL, 0) bytes");
}

/* client_id must equal sha1 over the concatenation it documents. */
static void
test_client_id_definition(void)
{
	static const char *ua = "Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/128.0";
	char buf[256], a[DIGEST_SHA1_HEX_SIZE], b[DIGEST_SHA1_HEX_SIZE];

	snprintf(buf, sizeof(buf), "%s&%s", "192.0.2.44", ua);
	CHECK(digest_sha1_hex(buf, strlen(buf), a) == 0, "sha1 of concat");
	CHECK(digest_client_id("192.0.2.44", ua, b) == 0, "client_id");
	CHECK_STR(b, a, "client_id == sha1(ip & ua)");
}

struct worker {
	int bad;
};

static void *
worker_run(void *arg)
{
	struct worker *w = arg;
	char got[DIGEST_SHA1_HEX_SIZE], md5[DIGEST_MD5_HEX_SIZE];
	int i;

	for (i = 0; i < 20000; i++) {
		if (digest_client_id("10.8.4.7", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) "
		    "AppleWebKit/537.36 (KHTML, like Gecko) Chrome/104.0.0.0 Safari/537.36", got) != 0 ||
		    strcmp(got, "7fb0070a4cb212b7dc0efce2cd08b017477787ae") != 0)
			w->bad++;
		if (digest_md5_hex("abc", 3, md5) != 0 ||
		    strcmp(md5, "900150983cd24fb0d6963f7d28e17f72") != 0)
			w->bad++;
	}
	return NULL;
}

/* The first calls race on the one-time EVP_MD fetch. */
static void
test_threads(void)
{
	pthread_t t[4];
	struct worker w[4];
	int i, started = 0;

	memset(w, 0, sizeof(w));
	for (i = 0; i < 4; i++)
		if (pthread_create(&t[i], NULL, worker_run, &w[i]) == 0)
			started++;
	CHECK(started == 4, "started %d of 4 threads", started);
	for (i = 0; i < started; i++) {
		pthread_join(t[i], NULL);
		CHECK(w[i].bad == 0, "thread %d: %d wrong digests", i, w[i].bad);
	}
}

int
main(void)
{
	test_threads();
	run_cases();
	test_null_data();
	test_client_id_definition();
	return unit_done("test_digest");
}
