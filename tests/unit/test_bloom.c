/* test_bloom.c - redirector/bloom.c: the hash against SMHasher's verification
 * value, sizing, no false negatives, the measured false-positive rate against
 * the target, counts, and concurrent adds and lookups. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../redirector/bloom.h"
#include "unit.h"

/* SMHasher's VerificationTest: hash keys {}, {0}, {0,1}, ... {0..254} with
 * seeds 256, 255, ... 2, then the 256 concatenated results with seed 0; the
 * first 4 bytes, little-endian, are 0x6384BA69 for MurmurHash3_x64_128. */
static void
test_hash_verification(void)
{
	unsigned char key[256], hashes[16 * 256];
	uint64_t h[2];
	uint32_t v;
	int i, j;

	for (i = 0; i < 256; i++) {
		key[i] = (unsigned char)i;
		bloom_hash128(key, (size_t)i, (uint32_t)(256 - i), h);
		for (j = 0; j < 8; j++) {
			hashes[16 * i + j] = (unsigned char)(h[0] >> (8 * j));
			hashes[16 * i + 8 + j] = (unsigned char)(h[1] >> (8 * j));
		}
	}
	bloom_hash128(hashes, sizeof(hashes), 0, h);
	v = (uint32_t)h[0];
	CHECK(v == 0x6384BA69u, "MurmurHash3_x64_128 verification 0x%08X, want 0x6384BA69", v);
}

static void
test_params(void)
{
	char err[128];
	struct bloom *b;

	err[0] = '\0';
	CHECK(bloom_new(0, 0.01, err, sizeof(err)) == NULL && err[0] != '\0', "n = 0 accepted");
	CHECK(bloom_new(10, 0.0, err, sizeof(err)) == NULL, "p = 0 accepted");
	CHECK(bloom_new(10, 1.0, err, sizeof(err)) == NULL, "p = 1 accepted");
	CHECK(bloom_new(10, -0.5, err, sizeof(err)) == NULL, "p < 0 accepted");
	CHECK(bloom_new(10, NAN, err, sizeof(err)) == NULL, "p = NaN accepted");
	err[0] = '\0';
	CHECK(bloom_new(UINT64_MAX / 2, 1e-9, err, sizeof(err)) == NULL && err[0] != '\0',
	    "an impossible size accepted");
	CHECK(bloom_new(0, 0.01, NULL, 0) == NULL, "NULL errstr");
	bloom_free(NULL);

	/* The textbook sizes: n = 100,000, p = 0.001 -> 1,437,759 bits, 10 hashes. */
	b = bloom_new(100000, 0.001, err, sizeof(err));
	CHECK(b != NULL, "bloom_new: %s", err);
	if (b != NULL) {
		CHECK(bloom_bits(b) == 1437759, "m = %llu", (unsigned long long)bloom_bits(b));
		CHECK(bloom_hashes(b) == 10, "k = %d", bloom_hashes(b));
		CHECK(bloom_count(b) == 0 && bloom_fpr_estimate(b) == 0.0, "empty filter");
		bloom_free(b);
	}
	/* Tiny filters still work. */
	b = bloom_new(1, 0.5, err, sizeof(err));
	CHECK(b != NULL && bloom_hashes(b) >= 1 && bloom_bits(b) >= 64, "n = 1: %s", err);
	if (b != NULL) {
		CHECK(bloom_add(b, NULL, 0) == 1 && bloom_maybe(b, "", 0) == 1, "empty key");
		bloom_free(b);
	}
}

static void
test_rates(void)
{
	enum { N = 100000, PROBES = 1000000 };
	const double p = 0.001;
	char key[64], err[128] = "";
	struct bloom *b = bloom_new(N, p, err, sizeof(err));
	long fn = 0, fp = 0, fresh = 0;
	double rate, est;
	int i, len;

	CHECK(b != NULL, "bloom_new: %s", err);
	if (b == NULL)
		return;
	for (i = 0; i < N; i++) {
		len = snprintf(key, sizeof(key), "https://example.com/k/%d", i);
		fresh += bloom_add(b, key, (size_t)len);
	}
	for (i = 0; i < N; i++) {
		len = snprintf(key, sizeof(key), "https://example.com/k/%d", i);
		fn += !bloom_maybe(b, key, (size_t)len);
	}
	CHECK(fn == 0, "%ld false negatives over %d keys", fn, N);
	CHECK((uint64_t)fresh == bloom_count(b), "count %llu, adds that returned 1: %ld",
	    (unsigned long long)bloom_count(b), fresh);
	CHECK(bloom_count(b) > N - N / 1000 && bloom_count(b) <= N, "count %llu for %d keys",
	    (unsigned long long)bloom_count(b), N);

	/* Adding again changes nothing. */
	len = snprintf(key, sizeof(key), "https://example.com/k/%d", 42);
	CHECK(bloom_add(b, key, (size_t)len) == 0, "re-add reported a new key");
	CHECK((uint64_t)fresh == bloom_count(b), "re-add counted");

	for (i = 0; i < PROBES; i++) {
		len = snprintf(key, sizeof(key), "https://example.org/other/%d", i);
		fp += bloom_maybe(b, key, (size_t)len);
	}
	rate = (double)fp / PROBES;
	est = bloom_fpr_estimate(b);
	printf("bloom n=%d p=%g: m=%llu k=%d, measured fpr %.5f, estimate %.5f\n", N, p,
	    (unsigned long long)bloom_bits(b), bloom_hashes(b), rate, est);
	CHECK(rate <= 1.5 * p && rate >= p / 1.5, "measured fpr %.5f, target %g", rate, p);
	CHECK(est <= 1.5 * p && est >= p / 1.5, "estimated fpr %.5f, target %g", est, p);
	bloom_free(b);
}

struct worker {
	struct bloom *b;
	int id;
	long fn, fresh;
};

enum { THREADS = 4, PER_THREAD = 50000 };

/* Adds its own keys and checks each one right away (and an earlier one),
 * while the other threads write the same words. */
static void *
worker_run(void *arg)
{
	struct worker *w = arg;
	char key[64];
	int i, len;

	for (i = 0; i < PER_THREAD; i++) {
		len = snprintf(key, sizeof(key), "t%d/%d", w->id, i);
		w->fresh += bloom_add(w->b, key, (size_t)len);
		w->fn += !bloom_maybe(w->b, key, (size_t)len);
		len = snprintf(key, sizeof(key), "t%d/%d", w->id, i / 2);
		w->fn += !bloom_maybe(w->b, key, (size_t)len);
	}
	return NULL;
}

static void
test_threads(void)
{
	pthread_t t[THREADS];
	struct worker w[THREADS];
	char key[64], err[128] = "";
	struct bloom *b = bloom_new(THREADS * PER_THREAD, 0.01, err, sizeof(err));
	long fn = 0, fresh = 0;
	int i, j, len, started = 0;

	CHECK(b != NULL, "bloom_new: %s", err);
	if (b == NULL)
		return;
	memset(w, 0, sizeof(w));
	for (i = 0; i < THREADS; i++) {
		w[i].b = b;
		w[i].id = i;
		if (pthread_create(&t[i], NULL, worker_run, &w[i]) == 0)
			started++;
	}
	CHECK(started == THREADS, "started %d of %d threads", started, THREADS);
	for (i = 0; i < started; i++) {
		pthread_join(t[i], NULL);
		CHECK(w[i].fn == 0, "thread %d: %ld false negatives", i, w[i].fn);
		fresh += w[i].fresh;
	}
	for (i = 0; i < started; i++)
		for (j = 0; j < PER_THREAD; j++) {
			len = snprintf(key, sizeof(key), "t%d/%d", i, j);
			fn += !bloom_maybe(b, key, (size_t)len);
		}
	CHECK(fn == 0, "%ld false negatives after concurrent adds", fn);
	CHECK(bloom_count(b) == (uint64_t)fresh, "count %llu, adds that returned 1: %ld",
	    (unsigned long long)bloom_count(b), fresh);
	CHECK(fresh > (long)started * PER_THREAD * 98 / 100, "only %ld of %d adds were new",
	    fresh, started * PER_THREAD);
	bloom_free(b);
}

int
main(void)
{
	test_hash_verification();
	test_params();
	test_rates();
	test_threads();
	return unit_done("test_bloom");
}
