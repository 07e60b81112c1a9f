/* bloom.h - an in-process Bloom filter sized from the expected number of keys
 * and a target false-positive rate, safe to use from many threads at once:
 * adds set bits with atomic OR, lookups are lock-free atomic loads. */
#ifndef LP_BLOOM_H
#define LP_BLOOM_H

#include <stddef.h>
#include <stdint.h>

struct bloom;

/* A filter for about n keys (n >= 1) with false-positive rate p (0 < p < 1)
 * once they are all added: m = ceil(-n ln p / (ln 2)^2) bits (at least 64) and
 * k = round(m / n ln 2) hash functions (1..32), the k bit positions derived
 * by enhanced double hashing from one 128-bit MurmurHash3_x64_128 of the key.
 * At most 2^40 bits (128 GiB). The caller owns the result and frees it with
 * bloom_free. Returns NULL with errstr set for bad parameters or no memory. */
struct bloom *bloom_new(uint64_t n, double p, char *errstr, size_t errstr_size);

/* Frees b (NULL is fine). No other thread may be using it. */
void bloom_free(struct bloom *b);

/* Adds the len bytes at key (borrowed; may be NULL when len is 0). Returns 1
 * when this call set at least one new bit (the key was certainly not in the
 * filter), 0 when all its bits were already set (it probably was).
 * Thread-safe, lock-free. */
int bloom_add(struct bloom *b, const char *key, size_t len);

/* 1 when the key may have been added (false positives at about the target
 * rate; never a false negative for a key whose bloom_add returned before
 * this call began), 0 when it certainly was not. Thread-safe, lock-free. */
int bloom_maybe(const struct bloom *b, const char *key, size_t len);

/* m, the number of bits. */
uint64_t bloom_bits(const struct bloom *b);

/* k, the number of bit positions per key. */
int bloom_hashes(const struct bloom *b);

/* Approximate number of distinct keys added: the bloom_add calls that
 * returned 1. Re-adding a key does not count; a new key whose bits were all
 * set already (a false positive) is missed, so it may run slightly low. */
uint64_t bloom_count(const struct bloom *b);

/* The false-positive rate a lookup of a never-added key has now, from the
 * current fill: (bits set / m)^k. Compare with the target p to know when the
 * filter is fuller than it was sized for. */
double bloom_fpr_estimate(const struct bloom *b);

/* MurmurHash3_x64_128 (Austin Appleby's, public domain) of the len bytes at
 * key with seed, as the two 64-bit halves h1, h2 into the caller's out;
 * exported so the tests can check it against SMHasher's verification
 * value. The filter hashes with seed 0. */
void bloom_hash128(const void *key, size_t len, uint32_t seed, uint64_t out[2]);

#endif
