/* pool.h - the random-code pool (seed 000): codes from a CSPRNG are stored in
 * unique_code (status 2) and mirrored in a Redis set; creation pops one
 * (SPOP). A background thread tops the set up below a low-water mark. */
#ifndef LP_POOL_H
#define LP_POOL_H

#include "bloom.h"
#include "kv.h"
#include "pgpool.h"

#include <stddef.h>

struct pool;

/* Borrows pg, kv and bloom. length: code length of pooled codes; batch:
 * codes per refill round; reserve: unused codes (status 0) kept in
 * PostgreSQL only, for creation while Redis is down (topped up at most batch
 * a round). */
struct pool *pool_new(struct pgpool *pg, struct kv *kv, struct bloom *bloom, int length,
                      long long low_water, long long batch, long long reserve, char *errstr,
                      size_t errstr_size);
/* Starts the refill thread. */
int pool_start(struct pool *p, char *errstr, size_t errstr_size);
/* Stops the refill thread and frees. */
void pool_free(struct pool *p);

/* Pops a code of the pool's length from Redis into out (CODES_GEN_SIZE).
 * Returns 1 with a code, 0 when Redis is down or the set is empty (the
 * caller then claims from PostgreSQL). Wakes the refill thread when low. */
int pool_take(struct pool *p, char *out);

/* Puts an unused popped code back (e.g. dedupe found an existing link). */
void pool_give_back(struct pool *p, const char *code);

/* Redis key of the pooled set (lp:pool:<length>), for pipelined SPOP n. */
const char *pool_key(const struct pool *p);

/* Records that a pipelined SPOP asked for want codes and got got; wakes the
 * refill thread when the set runs low. */
void pool_taken(struct pool *p, long long want, long long got);

/* Length of pooled codes. */
int pool_length(const struct pool *p);

/* Last seen size of the Redis set (-1 unknown), for metrics. */
long long pool_size(const struct pool *p);

/* Runs one refill round now (tests, startup). Returns codes added or -1. */
long long pool_refill(struct pool *p, char *errstr, size_t errstr_size);

#endif
