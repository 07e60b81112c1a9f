/* pool.c - random-code pool: generate (CSPRNG), screen with the Bloom filter,
 * insert into unique_code (its unique constraint decides), SADD to Redis; a
 * refill thread keeps the Redis set above its low-water mark and a reserve of
 * unused codes in PostgreSQL for creation while Redis is down. */
#include "pool.h"
#include "codes.h"
#include "log.h"
#include "monotime.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL_KEY_FMT "lp:pool:%d"
#define SADD_CHUNK 1000          /* codes per SADD to the Redis set */

struct pool {
	struct pgpool *pg;
	struct kv *kv;
	struct bloom *bloom;
	int length;
	long long low_water, batch, reserve;
	time_t reserve_checked;    /* last count of the PostgreSQL reserve */
	time_t mirror_failed_until; /* the set refused codes: as if Redis were down */
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
         long long low_water, long long batch, long long reserve, char *errstr,
         size_t errstr_size)
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
	p->reserve = reserve;
	p->size = -1;
	snprintf(p->key, sizeof(p->key), POOL_KEY_FMT, length);
	pthread_mutex_init(&p->mtx, NULL);
	if (monotime_cond_init(&p->cond) < 0) {
		pthread_cond_destroy(&p->cond);
		pthread_mutex_destroy(&p->mtx);
		free(p);
		snprintf(errstr, errstr_size, "pool: no CLOCK_MONOTONIC condition variable");
		return NULL;
	}
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

/* Inserts the candidate codes, the first nreserve unused (status 0: the
 * PostgreSQL reserve), the others pooled (status 2: for the Redis set).
 * Returns the PGresult (code, status) of those that were new (caller
 * PQclear()s it) or NULL. The Bloom filter has screened out the codes this
 * process knows, so a plain INSERT runs first and the whole batch again with
 * ON CONFLICT only if a code was taken after all (another redirector's):
 * ON CONFLICT's pre-check is one more descent of the random code index per
 * code, and every pooled code is one link's share of the refill's cost.
 * Codes go in in code order, as creation's batches insert theirs (no
 * deadlock between them); a deadlock reported anyway runs it again once. */
#define INSERT_CODES(ON_CONFLICT) \
	"INSERT INTO unique_code (code, status, type) " \
	"SELECT t.code, CASE WHEN t.n <= $2::bigint THEN 0 ELSE 2 END, 0 " \
	"FROM unnest($1::text[]) WITH ORDINALITY AS t(code, n) " \
	"ORDER BY t.code COLLATE \"C\"" ON_CONFLICT " RETURNING code, status"

static PGresult *
insert_codes(struct pool *p, char (*codes)[CODES_GEN_SIZE], long long n, long long nreserve,
             char *errstr, size_t errstr_size)
{
	size_t cap = (size_t)n * (CODES_GEN_SIZE + 3) + 3;
	char *arr = malloc(cap), *w = arr;
	char nres[24], sqlstate[6] = "";
	const char *params[2] = { NULL, nres };
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
		/* quoted: unquoted, a code spelled NULL (any case) would be an
		 * SQL NULL element and fail the whole round */
		*w++ = '"';
		memcpy(w, codes[i], len);
		w += len;
		*w++ = '"';
	}
	*w++ = '}';
	*w = '\0';
	params[0] = arr;
	snprintf(nres, sizeof(nres), "%lld", nreserve);
	if ((c = pgpool_get(p->pg, 5000, errstr, errstr_size)) == NULL) {
		free(arr);
		return NULL;
	}
	r = pgpool_exec(c, INSERT_CODES(""), 2, params, sqlstate, errstr, errstr_size);
	if (r == NULL && pgpool_conflict(sqlstate))
		r = pgpool_exec(c, INSERT_CODES(" ON CONFLICT (code) DO NOTHING"), 2, params, NULL,
		    errstr, errstr_size);
	pgpool_put(p->pg, c);
	free(arr);
	return r;
}

/* Unused codes of the pool's length in PostgreSQL (the reserve), counted up
 * to at most, or -1. */
static long long
pg_unused(struct pool *p, long long at_most)
{
	char len[8], lim[24], errstr[256];
	const char *params[2] = { len, lim };
	PGconn *c = pgpool_get(p->pg, 5000, errstr, sizeof(errstr));
	PGresult *r;
	long long n = -1;

	if (c == NULL)
		return -1;
	snprintf(len, sizeof(len), "%d", p->length);
	snprintf(lim, sizeof(lim), "%lld", at_most);
	r = pgpool_exec(c, "SELECT count(*) FROM (SELECT 1 FROM unique_code WHERE status = 0 "
	    "AND type = 0 AND length(code) = $1::int LIMIT $2::bigint) s",
	    2, params, NULL, errstr, sizeof(errstr));
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
	long long n = 0, added, pooled = 0, size = -1, want = 0, nreserve = 0;
	time_t now = time(NULL);
	redisReply *r;
	PGresult *res;

	if ((r = kv_cmd(p->kv, "SCARD %s", p->key)) != NULL) {
		size = r->integer;
		freeReplyObject(r);
	}
	/* A set that refused its last codes (Redis read-only: MISCONF after a
	 * failed save, OOM under noeviction) is taken as Redis down for 30 s:
	 * each round put pool_batch pooled codes in PostgreSQL that never
	 * reached it, back to back, counted as pooled. */
	if (size >= 0 && now < p->mirror_failed_until)
		size = -1;
	atomic_store(&p->size, size);
	if (size < 0) {
		/* Redis down: keep unused codes in PostgreSQL for the fallback. */
		if (pg_unused(p, p->batch) >= p->batch)
			return 0;
		want = nreserve = p->batch;
	} else {
		if (size < p->low_water)
			want = p->batch;
		/* The reserve is counted when the set is refilled anyway, or
		 * every 30 s (a Redis outage may have used it up). */
		if (p->reserve > 0 && (want > 0 || now - p->reserve_checked >= 30)) {
			long long unused = pg_unused(p, p->reserve);

			p->reserve_checked = now;
			if (unused >= 0 && unused < p->reserve)
				nreserve = p->reserve - unused < p->batch ? p->reserve - unused : p->batch;
		}
		want += nreserve;
	}
	if (want == 0)
		return 0;
	if ((codes = calloc((size_t)want, sizeof(*codes))) == NULL) {
		snprintf(errstr, errstr_size, "out of memory");
		return -1;
	}
	for (long long i = 0; i < want; i++) {
		if (codes_random(p->length, codes[n], errstr, errstr_size) < 0) {
			free(codes);
			return -1;
		}
		if (p->bloom != NULL && bloom_maybe(p->bloom, codes[n], strlen(codes[n])))
			continue;
		n++;
	}
	res = insert_codes(p, codes, n, nreserve, errstr, errstr_size);
	free(codes);
	if (res == NULL)
		return -1;
	added = PQntuples(res);
	for (int i = 0; i < PQntuples(res) && p->bloom != NULL; i++)
		bloom_add(p->bloom, PQgetvalue(res, i, 0), (size_t)PQgetlength(res, i, 0));
	/* Mirror the pooled ones (status 2) into Redis, SADD_CHUNK at a time. */
	if (size >= 0) {
		const char **argv = calloc(SADD_CHUNK + 2, sizeof(char *));
		size_t *lens = calloc(SADD_CHUNK + 2, sizeof(size_t));

		if (argv != NULL && lens != NULL) {
			argv[0] = "SADD";
			lens[0] = 4;
			argv[1] = p->key;
			lens[1] = strlen(p->key);
		}
		for (int i = 0; argv != NULL && lens != NULL && i < PQntuples(res); ) {
			const char *const *cargv = argv;
			const size_t *clens = lens;
			int argc = 2;
			redisReply *rep = NULL;

			for (; i < PQntuples(res) && argc < SADD_CHUNK + 2; i++) {
				if (strcmp(PQgetvalue(res, i, 1), "2") != 0)
					continue;
				argv[argc] = PQgetvalue(res, i, 0);
				lens[argc++] = (size_t)PQgetlength(res, i, 0);
			}
			if (argc > 2)
				kv_pipeline(p->kv, 1, &argc, &cargv, &clens, &rep);
			if (rep != NULL && rep->type == REDIS_REPLY_ERROR) {
				log_warnx("pool: Redis refused the new codes (%s): creates take codes "
				    "from PostgreSQL's reserve for 30 s", rep->str);
				p->mirror_failed_until = now + 30;
				freeReplyObject(rep);
				break;
			}
			if (rep != NULL) {
				pooled += argc - 2;
				freeReplyObject(rep);
			}
		}
		free(argv);
		free(lens);
	}
	PQclear(res);
	if (size >= 0)
		atomic_store(&p->size, size + pooled);
	log_debug("pool: added %lld codes of length %d, %lld to the set (it had %lld)", added,
	    p->length, pooled, size);
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
		long long added;
		int heed;

		p->kicked = 0;
		pthread_mutex_unlock(&p->mtx);
		if ((added = pool_refill(p, errstr, sizeof(errstr))) < 0)
			log_warnx("pool refill: %s", errstr);
		/* Kicks come from creates finding the set low or empty. After a
		 * failed refill or with Redis down every create kicks, and heeding
		 * them ran the refill's queries back to back: then wait the second.
		 * Without Redis every create kicks too: heeded only while the
		 * rounds find the PostgreSQL reserve short (one counted it per
		 * create before). */
		heed = added >= 0 && time(NULL) >= p->mirror_failed_until &&
		    (kv_up(p->kv) || (!kv_enabled(p->kv) && added > 0));
		pthread_mutex_lock(&p->mtx);
		monotime_deadline(&until, 1000);
		while (!p->stop && !(p->kicked && heed) &&
		    pthread_cond_timedwait(&p->cond, &p->mtx, &until) == 0)
			;
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
