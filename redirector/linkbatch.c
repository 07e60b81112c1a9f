/* linkbatch.c - set-based random-strategy creation: pipelined SPOP n + HMGET
 * of the MD5 map in Redis, then one statement that dedupes and inserts
 * url_link (its unique code is the claim); a queue batches concurrent singles. */
#include "linkbatch.h"
#include "digest.h"
#include "log.h"
#include "pool.h"
#include "codes.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Item states inside linkbatch_run. */
/* Where an item's code came from (decides how the statement takes it). */
enum {
	SRC_POOL,    /* popped from the Redis pool (status 2): url_link claims it */
	SRC_FRESH,   /* generated here: inserted into unique_code as used */
	SRC_CLAIMED  /* claimed from PostgreSQL already (Redis down) */
};

enum {
	ST_NEW,      /* not yet handled */
	ST_DONE,     /* finished (rc, out, err set) */
	ST_DONE_PG,  /* finished without its popped code (PostgreSQL dedupe, or the
	              * statement failed and rolled back): the code goes back */
	ST_DUP,      /* same link as an earlier item (dup_of) */
	ST_CODE,     /* holds a popped code for the statement */
	ST_FALLBACK  /* to the single path (pool short, Redis down, code taken) */
};

struct linkbatch {
	struct links *L;
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* workers: queue not empty or stop */
	struct linkbatch_item *head, *tail;
	int stop;
	int max_batch;
	int nthr;
	pthread_t *thr;
};

/* ------------------------------------------------------ text buffers */

struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

static void
sb_grow(struct sbuf *b, size_t more)
{
	char *np;
	size_t cap;

	if (b->oom || b->len + more + 1 <= b->cap)
		return;
	cap = b->cap ? b->cap : 4096;
	while (cap < b->len + more + 1)
		cap *= 2;
	if ((np = realloc(b->p, cap)) == NULL) {
		b->oom = 1;
		return;
	}
	b->p = np;
	b->cap = cap;
}

static void
sb_put(struct sbuf *b, const char *s, size_t n)
{
	sb_grow(b, n);
	if (b->oom)
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

/* Appends one element of a PostgreSQL array literal (NULL when s is NULL). */
static void
sb_elem(struct sbuf *b, const char *s)
{
	sb_put(b, b->len > 1 ? "," : "", b->len > 1);
	if (s == NULL) {
		sb_put(b, "NULL", 4);
		return;
	}
	sb_put(b, "\"", 1);
	for (const char *p = s; *p; p++) {
		size_t run = strcspn(p, "\"\\");

		sb_put(b, p, run);
		p += run;
		if (*p == '\0')
			break;
		sb_put(b, "\\", 1);
		sb_put(b, p, 1);
	}
	sb_put(b, "\"", 1);
}

/* --------------------------------------------------------- the batch */

int
linkbatch_eligible(const struct links *L, const struct fields *f)
{
	return L->pool != NULL && links_strategy_of(L, f) == LINKS_RANDOM &&
	    links_length_of(L, f) == pool_length(L->pool);
}

/* Marks later items that ask for the same dedupable link as an earlier one
 * (same URL MD5, URL and redirect type) as its duplicates. */
static void
mark_duplicates(struct linkbatch_item **it, size_t n)
{
	size_t cap = 16, mask;
	int *slot;

	while (cap < 2 * n)
		cap *= 2;
	mask = cap - 1;
	if ((slot = malloc(cap * sizeof(*slot))) == NULL)
		return; /* no intra-batch dedupe: PostgreSQL still dedupes across batches */
	for (size_t i = 0; i < cap; i++)
		slot[i] = -1;
	for (size_t i = 0; i < n; i++) {
		size_t h;

		if (!it[i]->dedupe)
			continue;
		{
			char hx[17];

			memcpy(hx, it[i]->md5, 16);
			hx[16] = '\0';
			h = (size_t)strtoull(hx, NULL, 16);
		}
		for (h &= mask;; h = (h + 1) & mask) {
			struct linkbatch_item *o;

			if (slot[h] < 0) {
				slot[h] = (int)i;
				break;
			}
			o = it[slot[h]];
			if (strcmp(o->md5, it[i]->md5) == 0 && strcmp(o->f->url, it[i]->f->url) == 0 &&
			    strcmp(o->f->redirect_type, it[i]->f->redirect_type) == 0) {
				it[i]->state = ST_DUP;
				it[i]->dup_of = slot[h];
				break;
			}
		}
	}
	free(slot);
}

static void
item_fail(struct linkbatch_item *it, const struct links_err *err)
{
	it->rc = -1;
	it->err = *err;
	it->state = ST_DONE;
}

static void
item_ok(struct linkbatch_item *it, json_t *link, int created)
{
	it->rc = 0;
	it->out = link;
	it->created = created;
	it->state = ST_DONE;
}

/* The pool ran short: a code from the CSPRNG, screened by the Bloom filter
 * and the reserved words; the statement inserts it into unique_code as
 * used (its unique constraint decides). ST_FALLBACK when none is found. */
static void
fresh_code(struct links *L, struct linkbatch_item *it)
{
	char errstr[128];
	int len = pool_length(L->pool);

	for (int tries = 0; tries < 8; tries++) {
		if (codes_random(len, it->code, errstr, sizeof(errstr)) < 0)
			break;
		if (codes_is_reserved(it->code) ||
		    (L->bloom != NULL && bloom_maybe(L->bloom, it->code, strlen(it->code))))
			continue;
		it->src = SRC_FRESH;
		it->state = ST_CODE;
		return;
	}
	it->state = ST_FALLBACK;
}

/* Redis is down: claims codes for the items still needing one straight
 * from PostgreSQL (FOR UPDATE SKIP LOCKED, so concurrent batches never get
 * the same code); generates the rest when unique_code has none unused. */
static void
pg_claim(struct links *L, struct linkbatch_item **it, size_t n)
{
	char len[8], cnt[24], errstr[512];
	const char *params[2] = { len, cnt };
	size_t need = 0, k = 0;
	PGconn *c;
	PGresult *r = NULL;

	for (size_t i = 0; i < n; i++)
		need += it[i]->state == ST_NEW;
	if (need == 0)
		return;
	snprintf(len, sizeof(len), "%d", pool_length(L->pool));
	snprintf(cnt, sizeof(cnt), "%zu", need);
	if ((c = pgpool_get(L->pg, 3000, errstr, sizeof(errstr))) != NULL) {
		r = pgpool_exec(c, "UPDATE unique_code SET status = 1, update_time = now() "
		    "WHERE id IN (SELECT id FROM unique_code WHERE status = 0 AND type = 0 "
		    "AND length(code) = $1::int ORDER BY id LIMIT $2::int FOR UPDATE SKIP LOCKED) "
		    "RETURNING code", 2, params, NULL, errstr, sizeof(errstr));
		pgpool_put(L->pg, c);
	}
	if (r == NULL)
		log_warnx("links: claiming codes from PostgreSQL: %s", errstr);
	for (size_t i = 0; i < n; i++) {
		if (it[i]->state != ST_NEW)
			continue;
		if (r != NULL && k < (size_t)PQntuples(r) &&
		    (size_t)PQgetlength(r, (int)k, 0) < sizeof(it[i]->code)) {
			snprintf(it[i]->code, sizeof(it[i]->code), "%s", PQgetvalue(r, (int)k++, 0));
			it[i]->src = SRC_CLAIMED;
			it[i]->state = ST_CODE;
		} else {
			fresh_code(L, it[i]);
		}
	}
	PQclear(r);
}

/* One pipeline: HMGET the MD5 map for dedupe items (warm runs only: a bulk
 * run's items dedupe against PostgreSQL alone, see run_items), SPOP codes
 * for all the others. Items whose cached link dedupes are finished here; the
 * rest get a code (ST_CODE) or, when the pool is short or Redis is down,
 * ST_FALLBACK. Returns the popped codes nobody used (caller frees; count in
 * *nunused). */
static char **
redis_round(struct links *L, struct linkbatch_item **it, size_t n, size_t *nunused, int warm)
{
	size_t nd = 0, need = 0, k, ncodes = 0, hit = 0;
	const char **a0 = NULL, **a1 = NULL;
	size_t *l0 = NULL, *l1 = NULL;
	char count[24], **unused = NULL;
	redisReply *rep[2] = { NULL, NULL }, *mrep = NULL;
	int *dix = NULL;

	*nunused = 0;
	for (size_t i = 0; i < n; i++) {
		if (it[i]->state != ST_NEW)
			continue;
		need++;
		nd += warm && it[i]->dedupe;
	}
	if (need == 0)
		return NULL;
	if (!kv_up(L->kv))
		goto fallback;
	a0 = calloc(nd + 2, sizeof(*a0));
	l0 = calloc(nd + 2, sizeof(*l0));
	dix = calloc(nd + 1, sizeof(*dix));
	if (a0 == NULL || l0 == NULL || dix == NULL)
		goto fallback;
	a0[0] = "HMGET";
	a0[1] = "lp:md5code";
	for (size_t i = 0, j = 0; i < n && nd > 0; i++)
		if (it[i]->state == ST_NEW && it[i]->dedupe) {
			a0[2 + j] = it[i]->md5;
			dix[j++] = (int)i;
		}
	for (size_t j = 0; j < nd + 2; j++)
		l0[j] = strlen(a0[j]);
	snprintf(count, sizeof(count), "%zu", need);
	{
		const char *spop[3] = { "SPOP", pool_key(L->pool), count };
		size_t spl[3] = { 4, strlen(pool_key(L->pool)), strlen(count) };
		const char *const *argv[2] = { a0, spop };
		const size_t *lens[2] = { l0, spl };
		int argc[2] = { (int)nd + 2, 3 };

		if (nd == 0) {
			argv[0] = spop;
			lens[0] = spl;
			argc[0] = 3;
		}
		if (kv_pipeline(L->kv, nd ? 2 : 1, argc, argv, lens, rep) < 0)
			goto fallback;
		if (nd == 0) {
			rep[1] = rep[0];
			rep[0] = NULL;
		}
	}
	/* Dedupe hits from the Redis MD5 map: fetch those links in one MGET. */
	if (rep[0] != NULL && rep[0]->type == REDIS_REPLY_ARRAY && rep[0]->elements == nd) {
		for (k = 0; k < nd; k++)
			hit += rep[0]->element[k]->type == REDIS_REPLY_STRING;
		if (hit > 0 && (a1 = calloc(hit + 1, sizeof(*a1))) != NULL &&
		    (l1 = calloc(hit + 1, sizeof(*l1))) != NULL) {
			char (*keys)[96] = calloc(hit, sizeof(*keys));
			size_t h = 0;

			a1[0] = "MGET";
			l1[0] = 4;
			for (k = 0; keys != NULL && k < nd; k++) {
				redisReply *e = rep[0]->element[k];

				if (e->type != REDIS_REPLY_STRING)
					continue;
				snprintf(keys[h], sizeof(keys[h]), "lp:link:%.64s", e->str);
				a1[1 + h] = keys[h];
				l1[1 + h] = strlen(keys[h]);
				h++;
			}
			if (keys != NULL) {
				const char *const *argv[1] = { a1 };
				const size_t *lens[1] = { l1 };
				int argc[1] = { (int)hit + 1 };

				if (kv_pipeline(L->kv, 1, argc, argv, lens, &mrep) == 0 &&
				    mrep->type == REDIS_REPLY_ARRAY && mrep->elements == hit) {
					h = 0;
					for (k = 0; k < nd; k++) {
						struct linkbatch_item *t = it[dix[k]];
						redisReply *e;
						json_t *link;

						if (rep[0]->element[k]->type != REDIS_REPLY_STRING)
							continue;
						e = mrep->element[h++];
						if (e->type != REDIS_REPLY_STRING)
							continue;
						link = json_loadb(e->str, e->len, 0, NULL);
						if (links_dedupable(link, t->f->url, t->f->redirect_type))
							item_ok(t, link, 0);
						else
							json_decref(link);
					}
				}
			}
			free(keys);
		}
	}
	/* Hand the popped codes to the items still needing one. */
	if (rep[1] != NULL && rep[1]->type == REDIS_REPLY_ARRAY)
		ncodes = rep[1]->elements;
	pool_taken(L->pool, (long long)need, (long long)ncodes);
	k = 0;
	for (size_t i = 0; i < n; i++) {
		redisReply *e;

		if (it[i]->state != ST_NEW)
			continue;
		while (k < ncodes && (rep[1]->element[k]->type != REDIS_REPLY_STRING ||
		    rep[1]->element[k]->len >= sizeof(it[i]->code)))
			k++;
		if (k == ncodes) {
			fresh_code(L, it[i]);
			continue;
		}
		e = rep[1]->element[k++];
		memcpy(it[i]->code, e->str, e->len);
		it[i]->code[e->len] = '\0';
		it[i]->state = ST_CODE;
	}
	if (k < ncodes && (unused = calloc(ncodes - k, sizeof(*unused))) != NULL)
		for (; k < ncodes; k++)
			if (rep[1]->element[k]->type == REDIS_REPLY_STRING)
				unused[(*nunused)++] = strdup(rep[1]->element[k]->str);
	goto out;
fallback:
	pg_claim(L, it, n);
out:
	if (rep[0] != NULL)
		freeReplyObject(rep[0]);
	if (rep[1] != NULL)
		freeReplyObject(rep[1]);
	if (mrep != NULL)
		freeReplyObject(mrep);
	free(a0);
	free(l0);
	free(a1);
	free(l1);
	free(dix);
	return unused;
}

/* The statement: input rows from parallel arrays; PostgreSQL-side dedupe
 * for items that allow it (LATERAL: one index probe per item, whatever the
 * planner guesses of unnest's size); codes generated here inserted into
 * unique_code as used, reserve codes a deduped item did not need put back;
 * and the insert in one go. A code popped from Redis (src 0, status 2 in
 * unique_code: 0012) is not written to unique_code: url_link's unique
 * constraint on code is its claim. Rows: created flag, input index,
 * LINK_COLS. Two variants (ON_CONFLICT): batch_sql_fast inserts plainly, so
 * a taken code fails the whole statement (23505); batch_sql skips a taken
 * code (ON CONFLICT DO NOTHING: no row back, the item falls back). The fast
 * one runs first: ON CONFLICT's pre-check is one more descent of the random
 * code index per link, ~19% of PostgreSQL's CPU per bulk link at 1.4M links,
 * and a taken pooled code only happens after Redis came back with old data.
 * Rows go in in code order, as the pool's refill inserts them, so that two
 * inserts waiting on each other's codes cannot deadlock; a deadlock reported
 * anyway (40P01) runs the batch again once. */
#define BATCH_SQL(ON_CONFLICT) \
    "WITH i AS (SELECT * FROM unnest($2::int[], $3::text[], $4::text[], $5::bpchar[], " \
    "$6::smallint[], $7::timestamptz[], $8::timestamptz[], $9::bigint[], $10::text[], " \
    "$11::bool[], $12::bigint[], $13::smallint[], $14::bool[]) AS t(idx, code, long_url, md5, " \
    "rt, vs, ea, mv, tags, dedupe, creator, src, fq)), " \
    "ex AS (SELECT i.idx, e.id FROM i CROSS JOIN LATERAL (SELECT l.id FROM url_link l " \
    "WHERE l.long_url_md5 = i.md5 AND l.long_url = i.long_url AND l.redirect_type = i.rt " \
    "AND " LINKS_DEDUPABLE_SQL " ORDER BY l.id LIMIT 1) e WHERE i.dedupe), " \
    "cn AS (INSERT INTO unique_code (code, status, type) SELECT i.code, 1, 0 FROM i " \
    "WHERE i.src = 1 AND NOT EXISTS (SELECT 1 FROM ex WHERE ex.idx = i.idx) " \
    "ORDER BY i.code COLLATE \"C\" " \
    "ON CONFLICT (code) DO NOTHING RETURNING code), " \
    "rb AS (UPDATE unique_code u SET status = 0, update_time = now() FROM i JOIN ex USING (idx) " \
    "WHERE i.src = 2 AND u.code = i.code), " \
    "c AS (SELECT code FROM cn UNION ALL SELECT i.code FROM i " \
    "WHERE i.src IN (0, 2) AND NOT EXISTS (SELECT 1 FROM ex WHERE ex.idx = i.idx)), " \
    "ins AS (INSERT INTO url_link (code, short_url, long_url, long_url_md5, strategy, " \
    "redirect_type, valid_since, expires_at, max_visits, tags, creator, updater, " \
    "forward_query) " \
    "SELECT i.code, $1 || '/' || i.code, i.long_url, i.md5, 0, i.rt, i.vs, i.ea, i.mv, " \
    "coalesce(i.tags::text[], '{}'), nullif(i.creator, 0), nullif(i.creator, 0), i.fq " \
    "FROM i JOIN c ON c.code = i.code ORDER BY i.code COLLATE \"C\"" ON_CONFLICT " RETURNING *) " \
    "SELECT 1, i.idx, " LINK_COLS_NEW " FROM ins l JOIN i ON i.code = l.code " \
    "UNION ALL SELECT 0, ex.idx, " LINK_COLS " FROM ex JOIN url_link l ON l.id = ex.id"

static const char batch_sql_fast[] = BATCH_SQL("");
static const char batch_sql[] = BATCH_SQL(" ON CONFLICT (code) DO NOTHING");

enum { A_IDX, A_CODE, A_URL, A_MD5, A_RT, A_VS, A_EA, A_MV, A_TAGS, A_DEDUPE, A_CREATOR, A_SRC,
    A_FQ, A_N };

struct code_at {
	const char *code;  /* borrowed from the item */
	size_t idx;
};

static int
cmp_code_at(const void *a, const void *b)
{
	const struct code_at *x = a, *y = b;
	int c = strcmp(x->code, y->code);

	return c != 0 ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

/* Two ST_CODE items with one code (two fresh codes alike, or a fresh one
 * equal to a popped one): the statement matches its rows to items by code,
 * so all but the first (in input order) go to the single path. */
static void
drop_repeated_codes(struct linkbatch_item **it, size_t n)
{
	struct code_at *v = malloc(n * sizeof(*v));
	size_t m = 0;

	if (v == NULL) {
		for (size_t i = 0; i < n; i++)
			if (it[i]->state == ST_CODE)
				it[i]->state = ST_FALLBACK;
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (it[i]->state == ST_CODE)
			v[m++] = (struct code_at){ it[i]->code, i };
	qsort(v, m, sizeof(*v), cmp_code_at);
	for (size_t i = 1; i < m; i++)
		if (strcmp(v[i].code, v[i - 1].code) == 0)
			it[v[i].idx]->state = ST_FALLBACK;
	free(v);
}

/* The batch's statement failed: puts the codes pg_claim took from the
 * PostgreSQL reserve back (status 1 -> 0) unless a link has one after all
 * (the statement committed and only its answer was lost). Best effort: with
 * PostgreSQL gone too they stay claimed, unused, and are logged. */
static void
unclaim(struct links *L, struct linkbatch_item **it, size_t n)
{
	struct sbuf codes;
	char errstr[512];
	const char *params[1];
	size_t m = 0;
	PGconn *c;
	PGresult *r = NULL;

	memset(&codes, 0, sizeof(codes));
	sb_put(&codes, "{", 1);
	for (size_t i = 0; i < n; i++)
		if (it[i]->state == ST_CODE && it[i]->src == SRC_CLAIMED) {
			sb_elem(&codes, it[i]->code);
			m++;
		}
	sb_put(&codes, "}", 1);
	if (m == 0 || codes.oom) {
		if (m > 0)
			log_warnx("links: %zu reserve codes stay claimed: out of memory", m);
		free(codes.p);
		return;
	}
	params[0] = codes.p;
	if ((c = pgpool_get(L->pg, 3000, errstr, sizeof(errstr))) != NULL) {
		r = pgpool_exec(c, "UPDATE unique_code u SET status = 0, update_time = now() "
		    "WHERE u.code = ANY($1::text[]) AND u.status = 1 "
		    "AND NOT EXISTS (SELECT 1 FROM url_link l WHERE l.code = u.code)",
		    1, params, NULL, errstr, sizeof(errstr));
		pgpool_put(L->pg, c);
	}
	if (r == NULL)
		log_warnx("links: %zu reserve codes stay claimed, unused: %s", m, errstr);
	PQclear(r);
	free(codes.p);
}

/* Runs the statement for the ST_CODE items. Items with no row back (their
 * code was taken after all) become ST_FALLBACK; a database failure fails
 * them all. Deduped items' codes go to unused via *give_back. */
static void
sql_round(struct links *L, struct linkbatch_item **it, size_t n)
{
	struct sbuf arr[A_N];
	const char *params[1 + A_N];
	char errstr[512], num[32], sqlstate[6] = "";
	size_t m = 0;
	PGconn *c;
	PGresult *r = NULL;
	struct links_err err;

	drop_repeated_codes(it, n);
	memset(arr, 0, sizeof(arr));
	for (int a = 0; a < A_N; a++)
		sb_put(&arr[a], "{", 1);
	for (size_t i = 0; i < n; i++) {
		const struct fields *f = it[i]->f;

		if (it[i]->state != ST_CODE)
			continue;
		m++;
		snprintf(num, sizeof(num), "%zu", i);
		sb_elem(&arr[A_IDX], num);
		sb_elem(&arr[A_CODE], it[i]->code);
		sb_elem(&arr[A_URL], f->url);
		sb_elem(&arr[A_MD5], it[i]->md5);
		sb_elem(&arr[A_RT], f->redirect_type);
		sb_elem(&arr[A_VS], f->valid_since);
		sb_elem(&arr[A_EA], f->expires_at);
		sb_elem(&arr[A_MV], f->max_visits[0] ? f->max_visits : NULL);
		sb_elem(&arr[A_TAGS], f->tags);
		sb_elem(&arr[A_DEDUPE], it[i]->dedupe ? "t" : "f");
		snprintf(num, sizeof(num), "%lld", it[i]->key_id);
		sb_elem(&arr[A_CREATOR], num);
		snprintf(num, sizeof(num), "%d", it[i]->src);
		sb_elem(&arr[A_SRC], num);
		sb_elem(&arr[A_FQ], f->forward_query ? "t" : "f");
	}
	if (m == 0)
		goto out;
	params[0] = L->base_url;
	for (int a = 0; a < A_N; a++) {
		sb_put(&arr[a], "}", 1);
		if (arr[a].oom) {
			links_fail(&err, 503, "internal", NULL, "out of memory");
			goto fail_all;
		}
		params[1 + a] = arr[a].p;
	}
	if ((c = pgpool_get(L->pg, 3000, errstr, sizeof(errstr))) == NULL) {
		links_db_fail(&err, errstr);
		goto fail_all;
	}
	r = pgpool_exec_prepared(c, "lp_link_batch_fast", batch_sql_fast, 1 + A_N, params,
	    sqlstate, errstr, sizeof(errstr));
	if (r == NULL && pgpool_conflict(sqlstate))
		r = pgpool_exec_prepared(c, "lp_link_batch", batch_sql, 1 + A_N, params, NULL,
		    errstr, sizeof(errstr));
	pgpool_put(L->pg, c);
	if (r == NULL) {
		links_db_fail(&err, errstr);
		/* the statement ran and failed: PostgreSQL answers, so the
		 * claimed codes can go back (no connection at all: they stay,
		 * rather than wait pgpool_get's 3 s again) */
		unclaim(L, it, n);
		goto fail_all;
	}
	for (int row = 0; row < PQntuples(r); row++) {
		size_t idx = strtoull(PQgetvalue(r, row, 1), NULL, 10);

		if (idx >= n || it[idx]->state != ST_CODE)
			continue;
		item_ok(it[idx], links_row_json_at(r, row, 2), PQgetvalue(r, row, 0)[0] == '1');
		if (!it[idx]->created)
			it[idx]->state = ST_DONE_PG;
	}
	PQclear(r);
	for (size_t i = 0; i < n; i++)
		if (it[i]->state == ST_CODE)
			it[i]->state = ST_FALLBACK;
	goto out;
fail_all:
	for (size_t i = 0; i < n; i++)
		if (it[i]->state == ST_CODE) {
			item_fail(it[i], &err);
			it[i]->state = ST_DONE_PG; /* was lost to the pool */
		}
out:
	for (int a = 0; a < A_N; a++)
		free(arr[a].p);
}

/* 1 when the item ends with a link of its own to cache (created or deduped,
 * not a repeat of an earlier item). */
static int
has_link(const struct linkbatch_item *it)
{
	return it->rc == 0 && it->out != NULL && it->state != ST_DUP;
}

/* 1 when a bulk run writes the item's MD5 map entry: the links it found in
 * PostgreSQL (dedupe hits), as a later lookup of a URL fills the map the
 * first time it finds the link. (A warm run's cache command writes each
 * link's entry with its record.) */
static int
md5_entry(const struct linkbatch_item *it, int warm)
{
	return has_link(it) && !warm && !it->created;
}

/* Caches links and returns unused codes to the pool, in one pipeline. A warm
 * run (queued singles) writes each link's record (lp:link:<code>) and MD5
 * map entry (lp:md5code) with links.c's cache command, which skips a code an
 * edit has fenced; a bulk run only the map entries of links it found, the
 * first redirect caching the record: for bulk items a JSON dump and a Redis
 * write per link were a third of a create's CPU outside PostgreSQL, and the
 * map's HMGET and HSET another ~2 us per link. */
static void
redis_finish(struct links *L, struct linkbatch_item **it, size_t n, char **unused,
             size_t nunused, int warm)
{
	size_t ncache = 0, nmd5 = 0, ncmd, c = 0, nback = nunused;
	const char ***argv;
	size_t **lens;
	int *argc;
	redisReply **rep;
	char ttl[16], (*keys)[2][96];
	char **json;

	if (!kv_up(L->kv))
		return;
	for (size_t i = 0; i < n; i++) {
		ncache += warm && has_link(it[i]);
		nmd5 += md5_entry(it[i], warm);
		if (it[i]->state == ST_DONE_PG && it[i]->src == SRC_POOL)
			nback++;
	}
	ncmd = ncache + (nmd5 > 0) + (nback > 0);
	if (ncmd == 0)
		return;
	snprintf(ttl, sizeof(ttl), "%d", L->cache_ttl_s);
	argv = calloc(ncmd, sizeof(*argv));
	lens = calloc(ncmd, sizeof(*lens));
	argc = calloc(ncmd, sizeof(*argc));
	rep = calloc(ncmd, sizeof(*rep));
	keys = calloc(ncache + 1, sizeof(*keys));
	json = calloc(ncache + 1, sizeof(*json));
	if (argv == NULL || lens == NULL || argc == NULL || rep == NULL || keys == NULL ||
	    json == NULL)
		goto out;
	for (size_t i = 0; i < n && c < ncache; i++) {
		const char *code, *md5;

		if (!has_link(it[i]))
			continue;
		code = json_string_value(json_object_get(it[i]->out, "code"));
		md5 = json_string_value(json_object_get(it[i]->out, "long_url_md5"));
		json[c] = json_dumps(it[i]->out, JSON_COMPACT);
		argv[c] = calloc(LINKS_CACHE_ARGC, sizeof(char *));
		lens[c] = calloc(LINKS_CACHE_ARGC, sizeof(size_t));
		if (code == NULL || md5 == NULL || json[c] == NULL || argv[c] == NULL ||
		    lens[c] == NULL)
			goto out;
		links_cache_argv(code, json[c], ttl, md5, keys[c], argv[c], lens[c]);
		argc[c++] = LINKS_CACHE_ARGC;
	}
	if (nmd5 > 0) {
		argv[c] = calloc(2 + 2 * nmd5, sizeof(char *));
		lens[c] = calloc(2 + 2 * nmd5, sizeof(size_t));
		if (argv[c] == NULL || lens[c] == NULL)
			goto out;
		argv[c][0] = "HSET";
		argv[c][1] = "lp:md5code";
		argc[c] = 2;
		for (size_t i = 0; i < n; i++) {
			if (!md5_entry(it[i], warm))
				continue;
			argv[c][argc[c]++] = json_string_value(json_object_get(it[i]->out, "long_url_md5"));
			argv[c][argc[c]++] = json_string_value(json_object_get(it[i]->out, "code"));
		}
		c++;
	}
	if (nback > 0) {
		argv[c] = calloc(2 + nback, sizeof(char *));
		lens[c] = calloc(2 + nback, sizeof(size_t));
		if (argv[c] == NULL || lens[c] == NULL)
			goto out;
		argv[c][0] = "SADD";
		argv[c][1] = pool_key(L->pool);
		argc[c] = 2;
		for (size_t i = 0; i < nunused; i++)
			if (unused[i] != NULL)
				argv[c][argc[c]++] = unused[i];
		for (size_t i = 0; i < n; i++)
			if (it[i]->state == ST_DONE_PG && it[i]->src == SRC_POOL)
				argv[c][argc[c]++] = it[i]->code;
		if (argc[c] == 2)
			argc[c] = 0;
		c++;
	}
	for (size_t k = ncache; k < c; k++) /* the cache commands' are set */
		for (int j = 0; j < argc[k]; j++)
			lens[k][j] = argv[k][j] ? strlen(argv[k][j]) : 0;
	if (argc[c - 1] == 0)
		c--;
	if (c > 0 && kv_pipeline(L->kv, (int)c, argc, (const char *const *const *)argv,
	    (const size_t *const *)lens, rep) == 0)
		for (size_t k = 0; k < c; k++)
			freeReplyObject(rep[k]);
out:
	for (size_t k = 0; argv != NULL && k < ncmd; k++) {
		free(argv[k]);
		free(lens[k]);
	}
	for (size_t k = 0; json != NULL && k < ncache; k++)
		free(json[k]);
	free(argv);
	free(lens);
	free(argc);
	free(rep);
	free(keys);
	free(json);
}

/* linkbatch_run (a bulk request), and the workers' runs of queued singles
 * (warm: they read and fill the Redis caches as a single create does). */
static void
run_items(struct links *L, struct linkbatch_item **it, size_t n, int warm)
{
	char **unused;
	size_t nunused = 0;

	for (size_t i = 0; i < n; i++) {
		it[i]->state = ST_NEW;
		it[i]->rc = -1;
		it[i]->out = NULL;
		it[i]->created = 0;
		it[i]->dup_of = -1;
		it[i]->src = SRC_POOL;
		it[i]->dedupe = links_fields_dedupe(it[i]->f);
		digest_md5_hex(it[i]->f->url, strlen(it[i]->f->url), it[i]->md5);
	}
	mark_duplicates(it, n);
	unused = redis_round(L, it, n, &nunused, warm);
	sql_round(L, it, n);
	redis_finish(L, it, n, unused, nunused, warm);
	for (size_t i = 0; i < nunused; i++)
		free(unused[i]);
	free(unused);
	for (size_t i = 0; i < n; i++) {
		if (it[i]->state == ST_FALLBACK)
			it[i]->rc = links_create_fields(L, it[i]->f, it[i]->key_id, &it[i]->out,
			    &it[i]->created, &it[i]->err);
		else if (it[i]->rc == 0 && it[i]->created && it[i]->src != SRC_POOL &&
		    L->bloom != NULL)
			/* A popped code went into the filter when the refill
			 * generated it (here, or in another redirector, whose
			 * codes the database constraint settles anyway). */
			bloom_add(L->bloom, it[i]->code, strlen(it[i]->code));
	}
	for (size_t i = 0; i < n; i++) {
		struct linkbatch_item *o;

		if (it[i]->state != ST_DUP)
			continue;
		o = it[it[i]->dup_of];
		it[i]->rc = o->rc;
		it[i]->err = o->err;
		it[i]->created = 0;
		it[i]->out = o->rc == 0 ? json_deep_copy(o->out) : NULL;
		if (o->rc == 0 && it[i]->out == NULL)
			item_fail(it[i], &(struct links_err){ 503, "internal", "", "out of memory" });
	}
}

void
linkbatch_run(struct links *L, struct linkbatch_item **it, size_t n)
{
	run_items(L, it, n, 0);
}

/* ------------------------------------------------ queue of singles */

static void *
worker(void *arg)
{
	struct linkbatch *b = arg;
	struct linkbatch_item *one, **items = calloc((size_t)b->max_batch, sizeof(*items));
	size_t cap = (size_t)b->max_batch;

	if (items == NULL) { /* out of memory: one at a time */
		items = &one;
		cap = 1;
	}
	pthread_mutex_lock(&b->mu);
	for (;;) {
		size_t n = 0;

		while (!b->stop && b->head == NULL)
			pthread_cond_wait(&b->cv, &b->mu);
		if (b->head == NULL)
			break;
		while (b->head != NULL && n < cap) {
			items[n++] = b->head;
			b->head = b->head->next;
		}
		if (b->head == NULL)
			b->tail = NULL;
		else
			pthread_cond_signal(&b->cv); /* more queued: wake another worker */
		pthread_mutex_unlock(&b->mu);
		run_items(b->L, items, n, 1);
		for (size_t i = 0; i < n; i++)
			items[i]->done(items[i]->done_arg); /* items[i] may be gone after */
		pthread_mutex_lock(&b->mu);
	}
	pthread_mutex_unlock(&b->mu);
	if (items != &one)
		free(items);
	return NULL;
}

struct linkbatch *
linkbatch_new(struct links *L, int workers, int max_batch, char *errstr, size_t errstr_size)
{
	struct linkbatch *b = calloc(1, sizeof(*b));

	if (b == NULL || (b->thr = calloc((size_t)workers, sizeof(*b->thr))) == NULL) {
		free(b);
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	b->L = L;
	b->max_batch = max_batch;
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->cv, NULL);
	for (; b->nthr < workers; b->nthr++)
		if (pthread_create(&b->thr[b->nthr], NULL, worker, b) != 0) {
			snprintf(errstr, errstr_size, "cannot start link batch worker");
			linkbatch_free(b);
			return NULL;
		}
	return b;
}

void
linkbatch_free(struct linkbatch *b)
{
	if (b == NULL)
		return;
	pthread_mutex_lock(&b->mu);
	b->stop = 1;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
	for (int i = 0; i < b->nthr; i++)
		pthread_join(b->thr[i], NULL);
	pthread_mutex_destroy(&b->mu);
	pthread_cond_destroy(&b->cv);
	free(b->thr);
	free(b);
}

void
linkbatch_enqueue(struct linkbatch *b, struct linkbatch_item *it)
{
	it->next = NULL;
	pthread_mutex_lock(&b->mu);
	if (b->tail != NULL)
		b->tail->next = it;
	else
		b->head = it;
	b->tail = it;
	pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->mu);
}

static void
post_done(void *arg)
{
	sem_post(arg); /* wakes exactly that submitter */
}

void
linkbatch_wait(struct linkbatch *b, struct linkbatch_item *it)
{
	sem_t done;

	if (sem_init(&done, 0, 0) != 0) {
		it->rc = links_create_fields(b->L, it->f, it->key_id, &it->out, &it->created,
		    &it->err);
		return;
	}
	it->done = post_done;
	it->done_arg = &done;
	linkbatch_enqueue(b, it);
	while (sem_wait(&done) != 0)
		; /* EINTR */
	sem_destroy(&done);
}
