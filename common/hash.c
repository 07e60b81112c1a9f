/* hash.c - hash_bytes: 8 bytes at a time, a multiply and a shift per word,
 * then a final mix (MurmurHash3's fmix64 constants) into the low bits. */
#include "hash.h"

#include <string.h>

uint64_t
hash_bytes(const void *s, size_t n, uint64_t seed)
{
	const unsigned char *p = s;
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ n ^ seed, w;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	if (i < n) {
		w = 0;
		memcpy(&w, p + i, n - i);
		h = (h ^ w) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}
