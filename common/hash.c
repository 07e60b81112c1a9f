/* hash.c - hash_bytes: 8 bytes at a time, a multiply and a shift per word,
 * then a final mix (MurmurHash3's fmix64 constants) into the low bits; and
 * a per-process random seed for it. */
#include "hash.h"

#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static uint64_t process_seed;
static pthread_once_t seed_once = PTHREAD_ONCE_INIT;

static void
draw_seed(void)
{
	struct timespec ts;

	if (getrandom(&process_seed, sizeof(process_seed), 0) == (ssize_t)sizeof(process_seed))
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	process_seed = hash_bytes(&ts, sizeof(ts), (uint64_t)getpid());
}

uint64_t
hash_process_seed(void)
{
	pthread_once(&seed_once, draw_seed);
	return process_seed;
}

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
