/* bloom.c - thread-safe Bloom filter: a calloc'd bit array set with
 * __atomic_fetch_or and read with __atomic_load_n, k positions per key by
 * enhanced double hashing over one MurmurHash3_x64_128. */
#include "bloom.h"
#include "errstr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define BLOOM_MAX_BITS ((uint64_t)1 << 40)
#define BLOOM_MAX_HASHES 32

struct bloom {
	uint64_t *words;        /* owned: m bits, rounded up to whole words */
	uint64_t m;             /* bits */
	int k;                  /* positions per key */
	uint64_t count;         /* adds that set a new bit; atomic */
	uint64_t set;           /* bits set; atomic */
};

static uint64_t
rotl64(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

static uint64_t
fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return k;
}

/* 8 little-endian bytes, whatever the host's order. */
static uint64_t
load64le(const unsigned char *p)
{
	return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
	    (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 |
	    (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

void
bloom_hash128(const void *key, size_t len, uint32_t seed, uint64_t out[2])
{
	static const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
	const unsigned char *data = key, *tail;
	uint64_t h1 = seed, h2 = seed, k1, k2;
	size_t i, nblocks = len / 16, rest = len & 15;

	for (i = 0; i < nblocks; i++) {
		k1 = load64le(data + 16 * i);
		k2 = load64le(data + 16 * i + 8);

		k1 *= c1;
		k1 = rotl64(k1, 31);
		k1 *= c2;
		h1 ^= k1;
		h1 = rotl64(h1, 27);
		h1 += h2;
		h1 = h1 * 5 + 0x52dce729;

		k2 *= c2;
		k2 = rotl64(k2, 33);
		k2 *= c1;
		h2 ^= k2;
		h2 = rotl64(h2, 31);
		h2 += h1;
		h2 = h2 * 5 + 0x38495ab5;
	}

	tail = data + 16 * nblocks;
	k1 = k2 = 0;
	for (i = rest; i > 8; i--)
		k2 ^= (uint64_t)tail[i - 1] << (8 * (i - 9));
	if (rest > 8) {
		k2 *= c2;
		k2 = rotl64(k2, 33);
		k2 *= c1;
		h2 ^= k2;
	}
	for (i = rest < 8 ? rest : 8; i > 0; i--)
		k1 ^= (uint64_t)tail[i - 1] << (8 * (i - 1));
	if (rest > 0) {
		k1 *= c1;
		k1 = rotl64(k1, 31);
		k1 *= c2;
		h1 ^= k1;
	}

	h1 ^= (uint64_t)len;
	h2 ^= (uint64_t)len;
	h1 += h2;
	h2 += h1;
	h1 = fmix64(h1);
	h2 = fmix64(h2);
	h1 += h2;
	h2 += h1;
	out[0] = h1;
	out[1] = h2;
}

struct bloom *
bloom_new(uint64_t n, double p, char *errstr, size_t errstr_size)
{
	struct bloom *b;
	double bits, k;
	uint64_t nwords;

	if (n == 0) {
		errstr_set(errstr, errstr_size, "bloom: expected key count must be at least 1");
		return NULL;
	}
	if (!(p > 0.0 && p < 1.0)) {
		errstr_set(errstr, errstr_size, "bloom: false-positive rate %g is not in (0, 1)", p);
		return NULL;
	}
	bits = ceil(-(double)n * log(p) / (M_LN2 * M_LN2));
	if (!(bits <= (double)BLOOM_MAX_BITS)) {
		errstr_set(errstr, errstr_size, "bloom: %llu keys at rate %g need %.0f bits, "
		    "more than 2^40", (unsigned long long)n, p, bits);
		return NULL;
	}
	if (bits < 64)
		bits = 64;
	k = round(bits / (double)n * M_LN2);
	if (k < 1)
		k = 1;
	if (k > BLOOM_MAX_HASHES)
		k = BLOOM_MAX_HASHES;

	if ((b = calloc(1, sizeof(*b))) == NULL) {
		errstr_set(errstr, errstr_size, "bloom: out of memory");
		return NULL;
	}
	b->m = (uint64_t)bits;
	b->k = (int)k;
	nwords = (b->m + 63) / 64;
	if ((b->words = calloc(nwords, sizeof(uint64_t))) == NULL) {
		errstr_set(errstr, errstr_size, "bloom: out of memory for %llu bytes",
		    (unsigned long long)(nwords * sizeof(uint64_t)));
		free(b);
		return NULL;
	}
	return b;
}

void
bloom_free(struct bloom *b)
{
	if (b == NULL)
		return;
	free(b->words);
	free(b);
}

/* Enhanced double hashing (Dillinger and Manolios): position i is
 * x_i with x_0 = h1 mod m, y_0 = h2 mod m, x_{i+1} = x_i + y_i,
 * y_{i+1} = y_i + i (mod m). The state lives in *x, *y. */
static void
bloom_start(const struct bloom *b, const char *key, size_t len, uint64_t *x, uint64_t *y)
{
	uint64_t h[2];
	static const char empty[1];

	bloom_hash128(key != NULL ? key : empty, len, 0, h);
	*x = h[0] % b->m;
	*y = h[1] % b->m;
}

static uint64_t
bloom_next(const struct bloom *b, uint64_t *x, uint64_t *y, int i)
{
	uint64_t pos = *x;

	*x += *y;
	if (*x >= b->m)
		*x -= b->m;
	*y += (uint64_t)i;
	if (*y >= b->m)
		*y -= b->m;
	return pos;
}

int
bloom_add(struct bloom *b, const char *key, size_t len)
{
	uint64_t x, y, pos, bit, old, fresh = 0;
	int i;

	bloom_start(b, key, len, &x, &y);
	for (i = 0; i < b->k; i++) {
		pos = bloom_next(b, &x, &y, i);
		bit = (uint64_t)1 << (pos & 63);
		/* Skip the write (and its cache-line ownership) when set. */
		if (__atomic_load_n(&b->words[pos >> 6], __ATOMIC_RELAXED) & bit)
			continue;
		old = __atomic_fetch_or(&b->words[pos >> 6], bit, __ATOMIC_RELEASE);
		if (!(old & bit))
			fresh++;
	}
	if (fresh == 0)
		return 0;
	__atomic_fetch_add(&b->set, fresh, __ATOMIC_RELAXED);
	__atomic_fetch_add(&b->count, 1, __ATOMIC_RELAXED);
	return 1;
}

int
bloom_maybe(const struct bloom *b, const char *key, size_t len)
{
	uint64_t x, y, pos;
	int i;

	bloom_start(b, key, len, &x, &y);
	for (i = 0; i < b->k; i++) {
		pos = bloom_next(b, &x, &y, i);
		if (!(__atomic_load_n(&b->words[pos >> 6], __ATOMIC_ACQUIRE) &
		    ((uint64_t)1 << (pos & 63))))
			return 0;
	}
	return 1;
}

uint64_t
bloom_bits(const struct bloom *b)
{
	return b->m;
}

int
bloom_hashes(const struct bloom *b)
{
	return b->k;
}

uint64_t
bloom_count(const struct bloom *b)
{
	return __atomic_load_n(&b->count, __ATOMIC_RELAXED);
}

double
bloom_fpr_estimate(const struct bloom *b)
{
	uint64_t set = __atomic_load_n(&b->set, __ATOMIC_RELAXED);

	return pow((double)set / (double)b->m, b->k);
}
