/* pool.c - random-code pool: generate (CSPRNG), screen with the Bloom filter,
 * insert into unique_code (its unique constraint decides), SADD to Redis;
 * a refill thread keeps the Redis set above its low-water mark. */
#include "pool.h"
#include "codes.h"
#include "log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL_KEY_FMT "lp:pool:%d"

struct pool {
	struct pgpool *pg;
	struct kv *kv;
	struct bloom *bloom;
	int length;
	long long low_water, batch;
	char key[32];
	pthread_t thr;
	int running;
	int stop;
	int kicked;
	pthread_mutex_t mtx;
	pthread_cond_t cond;
	_Atomic long long size;
};

struct pool *
pool_new(struct pgpool *pg, struct kv *kv, struct bloom *bloom, int length,
         long long low_water, long long batch, char *errstr, size_t errstr_size)
{
	struct pool *p = calloc(1, sizeof(*p));

	if (p == NULL) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	p->pg = pg;
	p->kv = kv;
	p->bloom = bloom;
	p->length = length;
	p->low_water = low_water;
	p->batch = batch;
	p->size = -1;
	snprintf(p->key, sizeof(p->key), POOL_KEY_FMT, length);
	pthread_mutex_init(&p->mtx, NULL);
	pthread_cond_init(&p->cond, NULL);
	return p;
}

int
pool_length(const struct pool *p)
{
	return p->length;
}

long long
pool_size(const struct pool *p)
{
	return atomic_load(&p->size);
}

static void
kick(struct pool *p)
{
	pthread_mutex_lock(&p->mtx);
	p->kicked = 1;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->mtx);
}

int
pool_take(struct pool *p, char *out)
{
	redisReply *r = kv_cmd(p->kv, "SPOP %s", p->key);
	int got = 0;

	if (r != NULL && r->type == REDIS_REPLY_STRING && r->len > 0 && r->len < CODES_GEN_SIZE) {
		memcpy(out, r->str, r->len);
		out[r->len] = '\0';
		got = 1;
	}
	if (r != NULL)
		freeReplyObject(r);
	if (atomic_fetch_sub(&p->size, 1) <= p->low_water || !got)
		kick(p);
	return got;
}

const char *
pool_key(const struct pool *p)
{
	return p->key;
}

void
pool_taken(struct pool *p, long long want, long long got)
{
	if (atomic_fetch_sub(&p->size, got) - got <= p->low_water || got < want)
		kick(p);
}

void
pool_give_back(struct pool *p, const char *code)
{
	redisReply *r = kv_cmd(p->kv, "SADD %s %s", p->key, code);

	if (r != NULL)
		freeReplyObject(r);
}

/* Inserts the candidate codes; returns the PGresult of those that were new
 * (caller PQclear()s it) or NULL. */
static PGresult *
insert_codes(struct pool *p, char (*codes)[CODES_GEN_SIZE], long long n, char *errstr,
             size_t errstr_size)
{
	size_t cap = (size_t)n * (CODES_GEN_SIZE + 1) + 3;
	char *arr = malloc(cap), *w = arr;
	const char *params[1];
	PGconn *c;
	PGresult *r;

	if (arr == NULL) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	*w++ = '{';
	for (long long i = 0; i < n; i++) {
		size_t len = strlen(codes[i]);

		if (i > 0)
			*w++ = ',';
		memcpy(w, codes[i], len);
		w += len;
	}
	*w++ = '}';
	*w = '\0';
	params[0] = arr;
	if ((c = pgpool_get(p->pg, 5000, errstr, errstr_size)) == NULL) {
		free(arr);
		return NULL;
	}
	r = pgpool_exec(c, "INSERT INTO unique_code (code, status, type) "
	    "SELECT unnest($1::text[]), 0, 0 ON CONFLICT (code) DO NOTHING RETURNING code",
	    1, params, NULL, errstr, errstr_size);
	pgpool_put(p->pg, c);
	free(arr);
	return r;
}

/* Unused pooled codes in PostgreSQL, or -1. */
static long long
pg_unused(struct pool *p)
{
	char len[8], errstr[256];
	const char *params[1] = { len };
	PGconn *c = pgpool_get(p->pg, 5000, errstr, sizeof(errstr));
	PGresult *r;
	long long n = -1;

	if (c == NULL)
		return -1;
	snprintf(len, sizeof(len), "%d", p->length);
	r = pgpool_exec(c, "SELECT count(*) FROM unique_code WHERE status = 0 AND type = 0 "
	    "AND length(code) = $1::int", 1, params, NULL, errstr, sizeof(errstr));
	pgpool_put(p->pg, c);
	if (r != NULL) {
		n = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
		PQclear(r);
	}
	return n;
}

long long
pool_refill(struct pool *p, char *errstr, size_t errstr_size)
{
	char (*codes)[CODES_GEN_SIZE];
	long long n = 0, added, size = -1;
	redisReply *r;
	PGresult *res;

	if ((r = kv_cmd(p->kv, "SCARD %s", p->key)) != NULL) {
		size = r->integer;
		freeReplyObject(r);
	}
	atomic_store(&p->size, size);
	if (size >= p->low_water)
		return 0;
	/* Redis down: still keep unused codes in PostgreSQL for the fallback. */
	if (size < 0 && pg_unused(p) >= p->batch)
		return 0;
	if ((codes = calloc((size_t)p->batch, sizeof(*codes))) == NULL) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	for (long long i = 0; i < p->batch; i++) {
		if (codes_random(p->length, codes[n], errstr, errstr_size) < 0) {
			free(codes);
			return -1;
		}
		if (p->bloom != NULL && bloom_maybe(p->bloom, codes[n], strlen(codes[n])))
			continue;
		n++;
	}
	res = insert_codes(p, codes, n, errstr, errstr_size);
	free(codes);
	if (res == NULL)
		return -1;
	added = PQntuples(res);
	for (int i = 0; i < PQntuples(res) && p->bloom != NULL; i++)
		bloom_add(p->bloom, PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0));
	/* Mirror into Redis in chunks. */
	for (int i = 0; size >= 0 && i < PQntuples(res); i += 1000) {
		int m = PQntuples(res) - i < 1000 ? PQntuples(res) - i : 1000;
		const char **argv = calloc((size_t)m + 2, sizeof(char *));
		size_t *lens = calloc((size_t)m + 2, sizeof(size_t));
		const char *const *cargv;
		const size_t *clens;
		int argc = m + 2;
		redisReply *rep;

		if (argv == NULL || lens == NULL) {
			free(argv);
			free(lens);
			break;
		}
		argv[0] = "SADD";
		lens[0] = 4;
		argv[1] = p->key;
		lens[1] = strlen(p->key);
		for (int j = 0; j < m; j++) {
			argv[j + 2] = PQgetvalue(res, i + j, 0);
			lens[j + 2] = (size_t)PQgetlength(res, i + j, 0);
		}
		cargv = argv;
		clens = lens;
		kv_pipeline(p->kv, 1, &argc, &cargv, &clens, &rep);
		if (rep != NULL)
			freeReplyObject(rep);
		free(argv);
		free(lens);
	}
	PQclear(res);
	if (size >= 0)
		atomic_store(&p->size, size + added);
	log_debug("pool: added %lld codes of length %d (set had %lld)", added, p->length, size);
	return added;
}

static void *
refill_main(void *arg)
{
	struct pool *p = arg;
	char errstr[512];

	pthread_mutex_lock(&p->mtx);
	while (!p->stop) {
		struct timespec until;

		p->kicked = 0;
		pthread_mutex_unlock(&p->mtx);
		if (pool_refill(p, errstr, sizeof(errstr)) < 0)
			log_warnx("pool refill: %s", errstr);
		pthread_mutex_lock(&p->mtx);
		if (p->stop || p->kicked)
			continue;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 1;
		pthread_cond_timedwait(&p->cond, &p->mtx, &until);
	}
	pthread_mutex_unlock(&p->mtx);
	return NULL;
}

int
pool_start(struct pool *p, char *errstr, size_t errstr_size)
{
	if (pthread_create(&p->thr, NULL, refill_main, p) != 0) {
		snprintf(errstr, errstr_size, "could not start the pool refill thread");
		return -1;
	}
	p->running = 1;
	return 0;
}

void
pool_free(struct pool *p)
{
	if (p == NULL)
		return;
	if (p->running) {
		pthread_mutex_lock(&p->mtx);
		p->stop = 1;
		pthread_cond_signal(&p->cond);
		pthread_mutex_unlock(&p->mtx);
		pthread_join(p->thr, NULL);
	}
	pthread_mutex_destroy(&p->mtx);
	pthread_cond_destroy(&p->cond);
	free(p);
}
