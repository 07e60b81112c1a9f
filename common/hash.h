/* hash.h - a fast 64-bit hash of short byte strings for in-process tables
 * (cache slots, aggregation keys); not for anything an attacker chooses
 * against a fixed seed, nor stable across versions. */
#ifndef LP_HASH_H
#define LP_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Hash of n bytes at s (s may be NULL when n is 0) under seed; every bit
 * depends on every input bit, so 'h & (slots - 1)' picks a slot. */
uint64_t hash_bytes(const void *s, size_t n, uint64_t seed);

/* A random seed drawn once per process (getrandom; the clock and pid if it
 * fails), for tables whose keys come from outside (Referer hosts, codes
 * asked for): colliding keys cannot be worked out ahead of time. */
uint64_t hash_process_seed(void);

#endif
