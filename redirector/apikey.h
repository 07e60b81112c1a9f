/* apikey.h - API keys: created and revoked by `redirector apikey ...`, stored
 * as SHA-256 hashes in PostgreSQL, checked per request through a small cache
 * (a revocation takes effect within APIKEY_CACHE_TTL_MS). */
#ifndef LP_APIKEY_H
#define LP_APIKEY_H

#include "pgpool.h"

#include <stddef.h>

#define APIKEY_CACHE_TTL_MS 5000
/* The key query's longest run (a cache miss, on an API thread): then -1. */
#define APIKEY_QUERY_TIMEOUT_MS 5000
#define APIKEY_NOT_CACHED (-2)

/* Creates a key named name; writes the key ("lp_" + 48 hex) to key_out
 * (at least 64 bytes). It is shown once: only its hash is stored. */
int apikey_create(PGconn *c, const char *name, char *key_out, size_t key_out_size,
                  long long *id_out, char *errstr, size_t errstr_size);

/* Revokes the key with this id, prefix or full key. Returns the number of
 * keys revoked (0 when none matched), or -1 with errstr. */
int apikey_revoke(PGconn *c, const char *what, char *errstr, size_t errstr_size);

/* Prints id, prefix, name, created, revoked for every key. */
int apikey_list(PGconn *c, FILE *out, char *errstr, size_t errstr_size);

/* 1 when key has the shape apikey_create makes ("lp_" + 48 lower-case
 * hex), which apikey_check needs before it asks PostgreSQL. */
int apikey_shaped(const char *key);

/* Checks a presented key. Returns its id (> 0), 0 when unknown or revoked
 * (at once, without a query, when it is not "lp_" + 48 lower-case hex), -1
 * when PostgreSQL could not be asked (errstr). Thread-safe; cached. */
long long apikey_check(struct pgpool *pool, const char *key, char *errstr, size_t errstr_size);

/* apikey_check from its cache alone, never blocking: the key's id, 0 when
 * unknown, revoked or ill-shaped, APIKEY_NOT_CACHED when only PostgreSQL
 * can tell. */
long long apikey_check_cached(const char *key);

/* Frees the check cache (at exit). */
void apikey_cache_free(void);

#endif
