/* test_codes.c - redirector/codes.c against tests/data/base62_cases.txt and
 * tests/data/codes_cases.txt (golden hash and sequence vectors, reserved
 * words, alias rules), plus the properties: % 62 coverage, the sequence
 * bijection, random-code uniformity. Run from the repository root. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../redirector/codes.h"
#include "unit.h"

#define BASE62_CASES "tests/data/base62_cases.txt"
#define CODES_CASES "tests/data/codes_cases.txt"
#define SECRET "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* Passes an array to CHECK_STR as a pointer (its NULL tests would warn). */
static const char *
str(const char *s)
{
	return s;
}

typedef void case_fn(const char *where, char **f, int n, int *ncases);

/* Calls fn for each non-comment line of path, split into up to 9 fields. */
static void
read_cases(const char *path, case_fn *fn, int *ncases)
{
	FILE *fp = fopen(path, "r");
	char *line = NULL, where[128];
	size_t cap = 0;
	int lineno = 0;

	CHECK(fp != NULL, "cannot open %s (run from the repository root)", path);
	if (fp == NULL)
		return;
	while (getline(&line, &cap, fp) != -1) {
		char *f[9];
		int n;

		lineno++;
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		snprintf(where, sizeof(where), "%s:%d", path, lineno);
		n = unit_split_tabs(line, f, 9);
		fn(where, f, n, ncases);
	}
	free(line);
	fclose(fp);
}

static void
base62_case(const char *where, char **f, int n, int *ncases)
{
	char got[32];
	uint64_t v = 12345;
	int rc;

	CHECK(n >= 3, "%s: too few fields", where);
	if (n < 3)
		return;
	(*ncases)++;
	if (strcmp(f[0], "encode") == 0) {
		CHECK(n == 4, "%s: encode wants 4 fields", where);
		if (n != 4)
			return;
		memset(got, 'Q', sizeof(got));
		rc = codes_base62_encode(strtoull(f[1], NULL, 10), atoi(f[2]), got);
		if (strcmp(f[3], "ERR") == 0) {
			CHECK(rc == -1, "%s: encode(%s, %s) should fail", where, f[1], f[2]);
			CHECK(got[0] == '\0', "%s: failed encode left \"%s\"", where, got);
		} else {
			CHECK(rc == 0, "%s: encode(%s, %s) failed", where, f[1], f[2]);
			CHECK_STR(str(got), f[3], where);
			CHECK(got[strlen(f[3]) + 1] == 'Q', "%s: wrote past width + 1", where);
		}
	} else if (strcmp(f[0], "decode") == 0) {
		CHECK(n == 3 && unit_unescape(f[1]) >= 0, "%s: bad decode line", where);
		rc = codes_base62_decode(f[1], &v);
		if (strcmp(f[2], "ERR") == 0) {
			CHECK(rc == -1, "%s: decode(\"%s\") should fail", where, f[1]);
			CHECK(v == 12345, "%s: failed decode changed the value", where);
		} else {
			CHECK(rc == 0 && v == strtoull(f[2], NULL, 10),
			    "%s: decode(\"%s\") = %d, %llu; want %s", where, f[1], rc,
			    (unsigned long long)v, f[2]);
		}
	} else {
		CHECK(0, "%s: unknown kind %s", where, f[0]);
	}
}

static void
codes_case(const char *where, char **f, int n, int *ncases)
{
	(*ncases)++;
	if (strcmp(f[0], "hash") == 0) {
		char got[CODES_HASH_CANDIDATES][CODES_GEN_SIZE];
		long len;
		int i;

		CHECK(n == 8, "%s: hash wants 8 fields, has %d", where, n);
		if (n != 8 || (len = unit_unescape(f[3])) < 0) {
			CHECK(0, "%s: bad hash line", where);
			return;
		}
		CHECK(codes_hash_candidates(f[3], (size_t)len, atoi(f[1]), atoi(f[2]), got) == 0,
		    "%s: codes_hash_candidates failed", where);
		for (i = 0; i < CODES_HASH_CANDIDATES; i++)
			CHECK_STR(str(got[i]), f[4 + i], where);
	} else if (strcmp(f[0], "seq") == 0) {
		struct codes_key key;
		char got[CODES_GEN_SIZE + 4], err[128];
		uint64_t counter = strtoull(f[3], NULL, 10), back = 0;

		CHECK(n == 5 && unit_unescape(f[1]) >= 0, "%s: bad seq line", where);
		if (n != 5)
			return;
		CHECK(codes_seq_key_from_secret(f[1], &key) == 0, "%s: key", where);
		err[0] = '\0';
		CHECK(codes_seq_encode(&key, counter, atoi(f[2]), got, err, sizeof(err)) == 0,
		    "%s: codes_seq_encode: %s", where, err);
		CHECK_STR(str(got), f[4], where);
		CHECK(codes_seq_decode(&key, f[4], &back, err, sizeof(err)) == 0 && back == counter,
		    "%s: codes_seq_decode(\"%s\") = %llu: %s", where, f[4],
		    (unsigned long long)back, err);
	} else if (strcmp(f[0], "reserved") == 0 || strcmp(f[0], "alias") == 0 ||
	    strcmp(f[0], "generated") == 0) {
		int want, got;

		CHECK(n == 3 && unit_unescape(f[1]) >= 0, "%s: bad %s line", where, f[0]);
		if (n != 3)
			return;
		want = atoi(f[2]);
		if (f[0][0] == 'r')
			got = codes_is_reserved(f[1]);
		else if (f[0][0] == 'a')
			got = codes_valid_alias(f[1]);
		else
			got = codes_valid_generated(f[1]);
		CHECK(got == want, "%s: %s(\"%s\") = %d, want %d", where, f[0], f[1], got, want);
	} else {
		CHECK(0, "%s: unknown kind %s", where, f[0]);
	}
}

static void
test_case_files(void)
{
	int n = 0;

	read_cases(BASE62_CASES, base62_case, &n);
	CHECK(n >= 40, "%s: only %d cases", BASE62_CASES, n);
	n = 0;
	read_cases(CODES_CASES, codes_case, &n);
	CHECK(n >= 200, "%s: only %d cases", CODES_CASES, n);
}

/* Every value below 62^w survives encode -> decode, at every width. */
static void
test_base62_roundtrip(void)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL, v, back;
	char buf[16];
	int i, w, bad = 0;

	CHECK(codes_space(0) == 0 && codes_space(1) == 62 && codes_space(6) == 56800235584ULL &&
	    codes_space(10) == 839299365868340224ULL && codes_space(11) == 0, "codes_space");
	for (i = 0; i < 100000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		for (w = 1; w <= CODES_BASE62_MAX; w++) {
			v = w < CODES_BASE62_MAX ? x % codes_space(w) : x;
			if (codes_base62_encode(v, w, buf) != 0 || (int)strlen(buf) != w ||
			    codes_base62_decode(buf, &back) != 0 || back != v)
				bad++;
		}
	}
	CHECK(bad == 0, "base62 round trip: %d failures", bad);
}

/* The seed's `& 0x3D` keeps only 32 of the 62 characters; % 62 must reach
 * all 62 over 10,000 URLs, and candidates must be valid codes. */
static void
test_hash_coverage(void)
{
	char c[CODES_HASH_CANDIDATES][CODES_GEN_SIZE], url[64];
	int seen[256] = { 0 }, masked[64] = { 0 }, i, j, k, nseen = 0, nmasked = 0, bad = 0;

	for (i = 0; i < 64; i++)
		masked[i & 0x3D] = 1;
	for (i = 0; i < 64; i++)
		nmasked += masked[i];
	CHECK(nmasked == 32, "the seed's & 0x3D reaches %d characters, expected 32", nmasked);

	for (i = 0; i < 10000; i++) {
		snprintf(url, sizeof(url), "https://example.com/p/%d", i);
		if (codes_hash_candidates(url, strlen(url), 1 + i % 8, 0, c) != 0) {
			bad++;
			continue;
		}
		for (j = 0; j < CODES_HASH_CANDIDATES; j++) {
			if (!codes_valid_generated(c[j]) || (int)strlen(c[j]) != 1 + i % 8)
				bad++;
			for (k = 0; c[j][k] != '\0'; k++)
				seen[(unsigned char)c[j][k]]++;
		}
	}
	for (i = 0; i < CODES_BASE; i++)
		nseen += seen[(unsigned char)CODES_ALPHABET[i]] > 0;
	CHECK(bad == 0, "hash candidates: %d bad", bad);
	CHECK(nseen == 62, "hash candidates cover %d of the 62 characters", nseen);
	/* 'c' is one the seed's mask could never produce. */
	CHECK(seen['c'] > 0 && seen['Z'] > 0, "'c' and 'Z' never appeared");
}

/* 1 when the two candidate sets are equal as strings. */
static int
same_candidates(char a[CODES_HASH_CANDIDATES][CODES_GEN_SIZE],
                char b[CODES_HASH_CANDIDATES][CODES_GEN_SIZE])
{
	int i;

	for (i = 0; i < CODES_HASH_CANDIDATES; i++)
		if (strcmp(a[i], b[i]) != 0)
			return 0;
	return 1;
}

static void
test_hash_args(void)
{
	char a[CODES_HASH_CANDIDATES][CODES_GEN_SIZE], b[CODES_HASH_CANDIDATES][CODES_GEN_SIZE];
	const char *u = "https://example.com/";
	int i, same = 0;

	memset(a, 'Q', sizeof(a));
	CHECK(codes_hash_candidates(u, strlen(u), 0, 0, a) == -1 && a[0][0] == '\0' &&
	    a[3][0] == '\0', "length 0 accepted");
	CHECK(codes_hash_candidates(u, strlen(u), 9, 0, a) == -1, "length 9 accepted");
	CHECK(codes_hash_candidates(u, strlen(u), 6, -1, a) == -1, "salt -1 accepted");
	CHECK(codes_hash_candidates(NULL, 0, 6, 0, a) == 0 &&
	    codes_hash_candidates("", 0, 6, 0, b) == 0 && same_candidates(a, b),
	    "NULL, 0 differs from \"\"");
	/* Only len bytes count. */
	CHECK(codes_hash_candidates("https://example.com/xyz", strlen(u), 6, 0, a) == 0 &&
	    codes_hash_candidates(u, strlen(u), 6, 0, b) == 0 && same_candidates(a, b),
	    "bytes past len were hashed");
	/* Salts give fresh candidates. */
	CHECK(codes_hash_candidates(u, strlen(u), 6, 1, b) == 0, "salt 1");
	for (i = 0; i < CODES_HASH_CANDIDATES; i++)
		same += strcmp(a[i], b[i]) == 0;
	CHECK(same == 0, "salt 1 repeated %d candidates", same);
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Exactly a bijection on [0, 62^length) for lengths 1..3, with decode its
 * inverse on every value. */
static void
test_seq_bijection(const struct codes_key *key)
{
	char code[CODES_GEN_SIZE], err[128] = "";
	int length;

	for (length = 1; length <= 3; length++) {
		uint64_t space = codes_space(length), x, v, back;
		unsigned char *hit = calloc(space, 1);
		long dup = 0, bad = 0, miss = 0;

		CHECK(hit != NULL, "out of memory");
		if (hit == NULL)
			return;
		for (x = 0; x < space; x++) {
			if (codes_seq_encode(key, x, length, code, err, sizeof(err)) != 0 ||
			    (int)strlen(code) != length || codes_base62_decode(code, &v) != 0 ||
			    v >= space) {
				bad++;
				continue;
			}
			if (hit[v]++)
				dup++;
			if (codes_seq_decode(key, code, &back, err, sizeof(err)) != 0 || back != x)
				bad++;
		}
		for (x = 0; x < space; x++)
			miss += hit[x] == 0;
		CHECK(bad == 0 && dup == 0 && miss == 0,
		    "length %d: %ld bad, %ld duplicates, %ld values never produced (%s)",
		    length, bad, dup, miss, err);
		free(hit);
	}
}

/* 1,000,000 consecutive counters at length 6: no repeat, consecutive codes
 * differ in most positions, decode inverts encode. */
static void
test_seq_million(const struct codes_key *key)
{
	enum { N = 1000000, LEN = 6 };
	uint64_t *vals = malloc(N * sizeof(*vals)), back;
	char code[CODES_GEN_SIZE], prev[CODES_GEN_SIZE] = "", err[128] = "";
	long bad = 0, dup = 0, hamming = 0, same_first = 0;
	int i, j;

	CHECK(vals != NULL, "out of memory");
	if (vals == NULL)
		return;
	for (i = 0; i < N; i++) {
		if (codes_seq_encode(key, (uint64_t)i, LEN, code, err, sizeof(err)) != 0 ||
		    codes_base62_decode(code, &vals[i]) != 0) {
			bad++;
			vals[i] = UINT64_MAX - (uint64_t)i;
			continue;
		}
		if (i > 0) {
			for (j = 0; j < LEN; j++)
				hamming += code[j] != prev[j];
			same_first += code[0] == prev[0];
		}
		if (i % 97 == 0 && (codes_seq_decode(key, code, &back, err, sizeof(err)) != 0 ||
		    back != (uint64_t)i))
			bad++;
		memcpy(prev, code, sizeof(prev));
	}
	printf("seq length 6: %d counters, mean Hamming distance of consecutive codes "
	    "%.3f of 6\n", N, (double)hamming / (N - 1));
	qsort(vals, N, sizeof(*vals), cmp_u64);
	for (i = 1; i < N; i++)
		dup += vals[i] == vals[i - 1];
	CHECK(bad == 0, "length 6: %ld failures (%s)", bad, err);
	CHECK(dup == 0, "length 6: %ld repeated codes over %d counters", dup, N);
	CHECK((double)hamming / (N - 1) > 4.0, "consecutive codes differ in %.2f of 6 positions",
	    (double)hamming / (N - 1));
	/* Random codes share the first character 1 time in 62. */
	CHECK(same_first < N / 62 * 2, "consecutive codes share the first character %ld times",
	    same_first);
	free(vals);
}

static void
test_seq_edges(const struct codes_key *key)
{
	struct codes_key other, again;
	char code[CODES_GEN_SIZE + 8], code2[CODES_GEN_SIZE], err[128];
	uint64_t back = 777;
	int length, i, differ = 0;

	CHECK(codes_seq_key_from_secret(NULL, &other) == -1, "NULL secret accepted");
	CHECK(codes_seq_key_from_secret("", &other) == -1, "empty secret accepted");
	CHECK(codes_seq_key_from_secret(SECRET, &again) == 0 &&
	    memcmp(again.k, key->k, sizeof(again.k)) == 0, "key derivation not deterministic");
	CHECK(codes_seq_key_from_secret(SECRET "x", &other) == 0, "other key");

	for (length = 1; length <= CODES_GEN_MAX; length++) {
		uint64_t top = codes_space(length) - 1;

		err[0] = '\0';
		CHECK(codes_seq_encode(key, top, length, code, err, sizeof(err)) == 0 &&
		    (int)strlen(code) == length && codes_valid_generated(code),
		    "length %d: last counter: %s", length, err);
		CHECK(codes_seq_decode(key, code, &back, err, sizeof(err)) == 0 && back == top,
		    "length %d: decode of the last counter: %s", length, err);
		err[0] = '\0';
		memset(code, 'Q', sizeof(code));
		CHECK(codes_seq_encode(key, top + 1, length, code, err, sizeof(err)) == -1 &&
		    code[0] == '\0' && err[0] != '\0', "length %d: counter 62^%d accepted",
		    length, length);
	}
	err[0] = '\0';
	CHECK(codes_seq_encode(key, 0, 0, code, err, sizeof(err)) == -1 && err[0] != '\0',
	    "length 0 accepted");
	CHECK(codes_seq_encode(key, 0, 9, code, err, sizeof(err)) == -1, "length 9 accepted");
	CHECK(codes_seq_encode(key, UINT64_MAX, 8, code, NULL, 0) == -1, "NULL errstr");
	back = 777;
	CHECK(codes_seq_decode(key, "", &back, err, sizeof(err)) == -1 && back == 777,
	    "empty code decoded");
	CHECK(codes_seq_decode(key, "abc-d", &back, err, sizeof(err)) == -1, "'-' decoded");
	CHECK(codes_seq_decode(key, "abcdefghi", &back, err, sizeof(err)) == -1,
	    "9 characters decoded");
	CHECK(codes_seq_decode(key, NULL, &back, err, sizeof(err)) == -1, "NULL decoded");

	/* Another secret, another permutation. */
	for (i = 0; i < 1000; i++) {
		if (codes_seq_encode(key, (uint64_t)i, 6, code, err, sizeof(err)) == 0 &&
		    codes_seq_encode(&other, (uint64_t)i, 6, code2, err, sizeof(err)) == 0)
			differ += strcmp(code, code2) != 0;
	}
	CHECK(differ >= 990, "another secret changed only %d of 1000 codes", differ);
}

/* Random codes: valid, the requested length, and each position uniform over
 * the 62 characters (chi-square, 61 degrees of freedom: mean 61, sd 11). */
static void
test_random(void)
{
	enum { N = 100000, LEN = 8 };
	static long count[LEN][256];
	char code[CODES_GEN_SIZE + 8], err[128] = "";
	double worst = 0;
	long bad = 0, repeats = 0;
	char prev[CODES_GEN_SIZE] = "";
	int i, j, length;

	for (length = CODES_GEN_MIN; length <= CODES_GEN_MAX; length++) {
		memset(code, 'Q', sizeof(code));
		CHECK(codes_random(length, code, err, sizeof(err)) == 0 &&
		    (int)strlen(code) == length && codes_valid_generated(code),
		    "random length %d: \"%s\" %s", length, code, err);
	}
	/* one-character codes: 58 of 62, never the reserved "s" or "r" (any case) */
	for (i = 0; i < 20000; i++) {
		if (codes_random(1, code, err, sizeof(err)) != 0 || codes_is_reserved(code))
			bad++;
		count[0][(unsigned char)code[0]]++;
	}
	for (i = 0, j = 0; i < CODES_BASE; i++)
		j += count[0][(unsigned char)CODES_ALPHABET[i]] > 0;
	CHECK(bad == 0 && j == CODES_BASE - 4, "length 1: %ld reserved or failed, %d characters seen",
	    bad, j);
	memset(count, 0, sizeof(count));
	err[0] = '\0';
	CHECK(codes_random(0, code, err, sizeof(err)) == -1 && err[0] != '\0' && code[0] == '\0',
	    "length 0 accepted");
	CHECK(codes_random(9, code, err, sizeof(err)) == -1, "length 9 accepted");

	for (i = 0; i < N; i++) {
		if (codes_random(LEN, code, err, sizeof(err)) != 0 || !codes_valid_generated(code) ||
		    strlen(code) != LEN) {
			bad++;
			continue;
		}
		repeats += strcmp(code, prev) == 0;
		memcpy(prev, code, sizeof(prev));
		for (j = 0; j < LEN; j++)
			count[j][(unsigned char)code[j]]++;
	}
	CHECK(bad == 0 && repeats == 0, "random: %ld bad, %ld repeats (%s)", bad, repeats, err);
	for (j = 0; j < LEN; j++) {
		double expect = (double)(N - bad) / CODES_BASE, chi2 = 0;
		long total = 0;

		for (i = 0; i < CODES_BASE; i++) {
			double d = (double)count[j][(unsigned char)CODES_ALPHABET[i]] - expect;

			chi2 += d * d / expect;
			total += count[j][(unsigned char)CODES_ALPHABET[i]];
		}
		CHECK(total == N - bad, "position %d: characters outside the alphabet", j);
		if (chi2 > worst)
			worst = chi2;
	}
	printf("random: %d codes of %d, worst per-position chi-square %.1f (61 dof)\n",
	    N, LEN, worst);
	/* p(chi2 > 150 | 61 dof) < 1e-8 per position; `byte % 62` without
	 * rejection gives about 660 at this N, a missing character more. */
	CHECK(worst < 150, "random: chi-square %.1f over 61 degrees of freedom", worst);
}

struct worker {
	const struct codes_key *key;
	int bad;
};

static void *
worker_run(void *arg)
{
	struct worker *w = arg;
	char code[CODES_GEN_SIZE], c[CODES_HASH_CANDIDATES][CODES_GEN_SIZE], err[128];
	uint64_t back;
	int i;

	for (i = 0; i < 5000; i++) {
		if (codes_seq_encode(w->key, (uint64_t)i * 7919, 7, code, err, sizeof(err)) != 0 ||
		    codes_seq_decode(w->key, code, &back, err, sizeof(err)) != 0 ||
		    back != (uint64_t)i * 7919)
			w->bad++;
		if (codes_hash_candidates("https://example.com/", 20, 6, 0, c) != 0 ||
		    strcmp(c[0], "Js1Dom") != 0)
			w->bad++;
		if (codes_random(8, code, err, sizeof(err)) != 0)
			w->bad++;
	}
	return NULL;
}

/* The first calls race on the one-time set-up. */
static void
test_threads(const struct codes_key *key)
{
	pthread_t t[4];
	struct worker w[4];
	int i, started = 0;

	for (i = 0; i < 4; i++) {
		w[i].key = key;
		w[i].bad = 0;
	}
	for (i = 0; i < 4; i++)
		if (pthread_create(&t[i], NULL, worker_run, &w[i]) == 0)
			started++;
	CHECK(started == 4, "started %d of 4 threads", started);
	for (i = 0; i < started; i++) {
		pthread_join(t[i], NULL);
		CHECK(w[i].bad == 0, "thread %d: %d failures", i, w[i].bad);
	}
}

int
main(void)
{
	struct codes_key key;

	CHECK(codes_seq_key_from_secret(SECRET, &key) == 0, "key from secret");
	test_threads(&key);
	test_case_files();
	test_base62_roundtrip();
	test_hash_coverage();
	test_hash_args();
	test_seq_bijection(&key);
	test_seq_million(&key);
	test_seq_edges(&key);
	test_random();
	return unit_done("test_codes");
}
