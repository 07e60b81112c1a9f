/* apikey.c - API key creation, revocation and cached verification; keys come
 * from OpenSSL's CSPRNG and are stored as SHA-256 hex. */
#include "apikey.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CACHE_SLOTS 256

struct cache_slot {
	char hash[65];
	long long id;          /* 0 = known bad */
	long long expires_ms;
};

static struct cache_slot cache[CACHE_SLOTS];
static pthread_mutex_t cache_mtx = PTHREAD_MUTEX_INITIALIZER;

static long long
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
hex(const unsigned char *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static int
sha256_hex(const char *s, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (EVP_Digest(s, strlen(s), md, &n, EVP_sha256(), NULL) != 1 || n != 32)
		return -1;
	hex(md, 32, out);
	return 0;
}

int
apikey_create(PGconn *c, const char *name, char *key_out, size_t key_out_size,
              long long *id_out, char *errstr, size_t errstr_size)
{
	unsigned char rnd[24];
	char key[64], hash[65], prefix[11];
	const char *params[3];
	PGresult *r;

	if (key_out_size < sizeof(key) || RAND_bytes(rnd, sizeof(rnd)) != 1) {
		snprintf(errstr, errstr_size, "could not make a random key");
		return -1;
	}
	memcpy(key, "lp_", 3);
	hex(rnd, sizeof(rnd), key + 3);
	if (sha256_hex(key, hash) < 0) {
		snprintf(errstr, errstr_size, "SHA-256 failed");
		return -1;
	}
	snprintf(prefix, sizeof(prefix), "%.10s", key);
	params[0] = name;
	params[1] = prefix;
	params[2] = hash;
	r = pgpool_exec(c, "INSERT INTO api_key (name, key_prefix, key_hash) VALUES ($1, $2, $3) "
	    "RETURNING id", 3, params, NULL, errstr, errstr_size);
	if (r == NULL)
		return -1;
	if (id_out != NULL)
		*id_out = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	snprintf(key_out, key_out_size, "%s", key);
	return 0;
}

int
apikey_revoke(PGconn *c, const char *what, char *errstr, size_t errstr_size)
{
	char hash[65] = "";
	const char *params[2];
	PGresult *r;
	int n;

	if (strlen(what) == 51 && strncmp(what, "lp_", 3) == 0)
		sha256_hex(what, hash);
	params[0] = what;
	params[1] = hash;
	r = pgpool_exec(c, "UPDATE api_key SET revoke_time = now() WHERE revoke_time IS NULL AND "
	    "(id::text = $1 OR key_prefix = $1 OR key_hash = $2)", 2, params, NULL,
	    errstr, errstr_size);
	if (r == NULL)
		return -1;
	n = atoi(PQcmdTuples(r));
	PQclear(r);
	return n;
}

int
apikey_list(PGconn *c, FILE *out, char *errstr, size_t errstr_size)
{
	PGresult *r = pgpool_exec(c, "SELECT id, key_prefix, name, create_time, "
	    "coalesce(revoke_time::text, '-') FROM api_key ORDER BY id", 0, NULL, NULL,
	    errstr, errstr_size);

	if (r == NULL)
		return -1;
	fprintf(out, "%-6s %-12s %-32s %-32s %s\n", "id", "prefix", "name", "created", "revoked");
	for (int i = 0; i < PQntuples(r); i++)
		fprintf(out, "%-6s %-12s %-32s %-32s %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
		    PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), PQgetvalue(r, i, 4));
	PQclear(r);
	return 0;
}

int
apikey_shaped(const char *key)
{
	return key != NULL && strlen(key) == 51 && strncmp(key, "lp_", 3) == 0 &&
	    strspn(key + 3, "0123456789abcdef") == 48;
}

/* The key's cached answer (id, 0 known bad) or -1, its hash in hash and
 * its cache slot in *slot; 0 without a slot when the key is ill-shaped. */
static long long
cached(const char *key, char hash[65], struct cache_slot **slot)
{
	long long id = -1;
	unsigned idx;

	*slot = NULL;
	/* Not the shape apikey_create makes: unknown without asking
	 * PostgreSQL, so that made-up keys cost no query. */
	if (!apikey_shaped(key) || sha256_hex(key, hash) < 0)
		return 0;
	idx = (unsigned)strtoul((char[9]){ hash[0], hash[1], hash[2], hash[3], hash[4],
	    hash[5], hash[6], hash[7], 0 }, NULL, 16) % CACHE_SLOTS;
	*slot = &cache[idx];
	pthread_mutex_lock(&cache_mtx);
	if (strcmp((*slot)->hash, hash) == 0 && (*slot)->expires_ms > now_ms())
		id = (*slot)->id;
	pthread_mutex_unlock(&cache_mtx);
	return id;
}

long long
apikey_check_cached(const char *key)
{
	char hash[65];
	struct cache_slot *slot;
	long long id = cached(key, hash, &slot);

	return id < 0 ? APIKEY_NOT_CACHED : id;
}

long long
apikey_check(struct pgpool *pool, const char *key, char *errstr, size_t errstr_size)
{
	char hash[65];
	const char *params[1];
	struct cache_slot *slot;
	long long id = cached(key, hash, &slot), now = now_ms();
	PGconn *c;
	PGresult *r;

	if (id >= 0)
		return id;
	if ((c = pgpool_get(pool, 2000, errstr, errstr_size)) == NULL)
		return -1;
	params[0] = hash;
	r = pgpool_exec_timeout(c, "SELECT id FROM api_key WHERE key_hash = $1 AND revoke_time IS NULL",
	    1, params, APIKEY_QUERY_TIMEOUT_MS, NULL, errstr, errstr_size);
	pgpool_put(pool, c);
	if (r == NULL)
		return -1;
	id = PQntuples(r) == 1 ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
	PQclear(r);
	pthread_mutex_lock(&cache_mtx);
	/* A check of the same key that began later (e.g. after a revocation)
	 * and has stored its answer already is newer than this one: kept. */
	if (strcmp(slot->hash, hash) != 0 || slot->expires_ms <= now + APIKEY_CACHE_TTL_MS) {
		memcpy(slot->hash, hash, sizeof(hash));
		slot->id = id;
		slot->expires_ms = now + APIKEY_CACHE_TTL_MS;
	}
	pthread_mutex_unlock(&cache_mtx);
	return id;
}

void
apikey_cache_free(void)
{
	pthread_mutex_lock(&cache_mtx);
	memset(cache, 0, sizeof(cache));
	pthread_mutex_unlock(&cache_mtx);
}
