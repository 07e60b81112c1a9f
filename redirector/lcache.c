/* lcache.c - 64 shards, each a mutex, a chained hash table and an LRU list.
 * Entries are reference counted so callers use them without holding a lock;
 * a loading entry in the table is the single-flight marker. */
#include "lcache.h"
#include "errstr.h"
#include "hash.h"
#include "monotime.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SHARD_BITS 6 /* a shard takes the hash's low bits, a bucket the next */
#define NSHARDS (1 << SHARD_BITS)
#define WAIT_MS 5000
/* Redirects an entry served that its count did not hold yet, kept when the
 * entry leaves the table (an edit's invalidation, an eviction) for the next
 * load of the same link: CARRIES per shard, the oldest replaced, each for
 * CARRY_MS (by then ingest's count holds them, or the load takes them off). */
#define CARRIES 4
#define CARRY_MS 600000

struct carry {
	long long id;       /* rec.id; 0 = free */
	long long hits;     /* rec.hits when they were served */
	long long local;    /* hits_local */
	int64_t until_ms;
};

struct shard {
	pthread_mutex_t mtx;
	pthread_cond_t cond;           /* a load finished */
	struct lcache_entry **buckets; /* owned */
	size_t mask;
	struct lcache_entry *head, *tail; /* LRU: head most recent */
	long long entries;
	size_t bytes;
	uint64_t gen;                  /* invalidations in this shard so far */
	struct carry carry[CARRIES];
	uint64_t hits, misses, loads, load_errors, stale, evictions, waits;
} __attribute__((aligned(64)));

struct lcache {
	struct lcache_conf conf;
	long long max_entries;         /* per shard */
	size_t max_bytes;              /* per shard */
	uint64_t seed;                 /* hash_process_seed() */
	struct shard shards[NSHARDS];
};

static struct shard *
shard_of(struct lcache *c, uint32_t h)
{
	return &c->shards[h & (NSHARDS - 1)];
}

/* A shard's bucket for hash h: the bits above the shard's, as every entry of
 * a shard has the same low SHARD_BITS. */
static struct lcache_entry **
bucket(struct shard *s, uint32_t h)
{
	return &s->buckets[(h >> SHARD_BITS) & s->mask];
}

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Seeded per process: codes come from the requests, and with a fixed hash
 * (FNV-1a until the forty-sixth session) made-up codes worked out ahead to
 * share one bucket would make its chain as long as the shard. */
static uint32_t
hash_code(const struct lcache *c, const char *s)
{
	uint64_t h = hash_bytes(s, strlen(s), c->seed);

	return (uint32_t)(h ^ (h >> 32));
}

/* Keeps e's uncounted redirects as it leaves the table (shard locked). */
static void
carry_keep(struct shard *s, const struct lcache_entry *e, int64_t now)
{
	long long local = atomic_load(&e->hits_local);
	struct carry *slot = &s->carry[0];

	if (e->loading || e->rec.id <= 0 || local <= 0)
		return;
	for (int i = 0; i < CARRIES; i++) {
		if (s->carry[i].id == e->rec.id) {
			slot = &s->carry[i];
			break;
		}
		if (s->carry[i].until_ms < slot->until_ms)
			slot = &s->carry[i];
	}
	slot->id = e->rec.id;
	slot->hits = e->rec.hits;
	slot->local = local;
	slot->until_ms = now + CARRY_MS;
}

/* Gives a freshly loaded entry what carry_keep kept of its link: what was
 * served less what the count rose by since, at least 0; with take 0 only
 * forgets it (a refresh carries its old entry's own). Shard locked. */
static void
carry_take(struct shard *s, struct lcache_entry *e, int64_t now, int take)
{
	for (int i = 0; i < CARRIES; i++) {
		struct carry *k = &s->carry[i];

		if (k->id != e->rec.id || k->id == 0)
			continue;
		if (take && now < k->until_ms) {
			long long pending = k->local - (e->rec.hits - k->hits);

			atomic_store(&e->hits_local, pending > 0 ? pending : 0);
		}
		memset(k, 0, sizeof(*k));
		return;
	}
}

struct lcache *
lcache_new(const struct lcache_conf *conf, char *errstr, size_t errstr_size)
{
	struct lcache *c = calloc(1, sizeof(*c));
	size_t nb = 16;

	if (c == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	c->conf = *conf;
	c->seed = hash_process_seed();
	c->max_entries = conf->max_entries / NSHARDS > 0 ? conf->max_entries / NSHARDS : 1;
	c->max_bytes = (size_t)(conf->max_bytes / NSHARDS > 0 ? conf->max_bytes / NSHARDS : 1);
	while ((long long)nb < c->max_entries && nb < (1u << 20))
		nb <<= 1;
	for (int i = 0; i < NSHARDS; i++) {
		struct shard *s = &c->shards[i];

		pthread_mutex_init(&s->mtx, NULL);
		s->mask = nb - 1;
		if (monotime_cond_init(&s->cond) < 0 ||
		    (s->buckets = calloc(nb, sizeof(*s->buckets))) == NULL) {
			lcache_free(c);
			errstr_set(errstr, errstr_size, "out of memory or no CLOCK_MONOTONIC");
			return NULL;
		}
	}
	return c;
}

static void
destroy(struct lcache *c, struct lcache_entry *e)
{
	if (e->aux != NULL && c->conf.free_aux != NULL)
		c->conf.free_aux(e->aux);
	free(e->rec.long_url);
	free(e->code);
	free(e);
}

static void
put(struct lcache *c, struct lcache_entry *e)
{
	if (atomic_fetch_sub(&e->refs, 1) == 1)
		destroy(c, e);
}

void
lcache_release(struct lcache *c, struct lcache_entry *e)
{
	if (e != NULL)
		put(c, e);
}

/* The LRU list of a shard (head most recent, tail next to be evicted).
 * Shard locked. */
static void
lru_remove(struct shard *s, struct lcache_entry *e)
{
	if (e->lru_prev)
		e->lru_prev->lru_next = e->lru_next;
	else
		s->head = e->lru_next;
	if (e->lru_next)
		e->lru_next->lru_prev = e->lru_prev;
	else
		s->tail = e->lru_prev;
	e->lru_prev = e->lru_next = NULL;
}

static void
lru_push_front(struct shard *s, struct lcache_entry *e)
{
	e->lru_prev = NULL;
	e->lru_next = s->head;
	if (s->head)
		s->head->lru_prev = e;
	s->head = e;
	if (s->tail == NULL)
		s->tail = e;
}

/* Removes e from its shard's table and LRU; the table's reference is the
 * caller's to drop. Shard locked. */
static void
unlink_entry(struct shard *s, struct lcache_entry *e)
{
	struct lcache_entry **pp = bucket(s, e->hash);

	while (*pp != NULL && *pp != e)
		pp = &(*pp)->next;
	if (*pp == e)
		*pp = e->next;
	lru_remove(s, e);
	e->next = NULL;
	e->in_table = 0;
	s->entries--;
	s->bytes -= e->bytes;
}

static void
lru_front(struct shard *s, struct lcache_entry *e)
{
	if (s->head == e)
		return;
	lru_remove(s, e);
	lru_push_front(s, e);
}

/* Moves e to the LRU's end, the next to be evicted. */
static void
lru_back(struct shard *s, struct lcache_entry *e)
{
	if (s->tail == e)
		return;
	lru_remove(s, e);
	e->lru_prev = s->tail;
	s->tail->lru_next = e;
	s->tail = e;
}

/* Evicts least recently used ready entries (never keep) while over bounds. */
static void
evict(struct lcache *c, struct shard *s, struct lcache_entry *keep)
{
	struct lcache_entry *e = s->tail;

	while (e != NULL && (s->entries > c->max_entries || s->bytes > c->max_bytes)) {
		struct lcache_entry *prev = e->lru_prev;

		if (e != keep && !e->loading) {
			carry_keep(s, e, now_ms());
			unlink_entry(s, e);
			put(c, e);
			s->evictions++;
		}
		e = prev;
	}
}

static void
insert(struct lcache *c, struct shard *s, struct lcache_entry *e)
{
	struct lcache_entry **b = bucket(s, e->hash);

	e->next = *b;
	*b = e;
	lru_push_front(s, e);
	e->in_table = 1;
	s->entries++;
	s->bytes += e->bytes;
	evict(c, s, e);
}

static struct lcache_entry *
find(struct shard *s, const char *code, uint32_t h)
{
	for (struct lcache_entry *e = *bucket(s, h); e != NULL; e = e->next)
		if (e->hash == h && strcmp(e->code, code) == 0)
			return e;
	return NULL;
}

static struct lcache_entry *
new_entry(const char *code, uint32_t h)
{
	struct lcache_entry *e = calloc(1, sizeof(*e));

	if (e == NULL || (e->code = strdup(code)) == NULL) {
		free(e);
		return NULL;
	}
	e->hash = h;
	e->bytes = sizeof(*e) + strlen(code) + 1;
	return e;
}

/* Loads code into rec/aux outside any lock. Returns the loader's result. */
static int
load(struct lcache *c, const char *code, struct lcache_rec *rec, void **aux, char *errstr,
     size_t errstr_size)
{
	int rc;

	memset(rec, 0, sizeof(*rec));
	*aux = NULL;
	rc = c->conf.load(c->conf.ctx, code, rec, errstr, errstr_size);
	if (rc == 0) {
		free(rec->long_url);
		memset(rec, 0, sizeof(*rec));
	}
	if (rc > 0 && c->conf.make_aux != NULL)
		*aux = c->conf.make_aux(c->conf.ctx, code, rec);
	return rc;
}

/* Fills a loaded entry (shard locked). */
static void
fill(struct lcache *c, struct shard *s, struct lcache_entry *e, struct lcache_rec *rec,
     void *aux, int rc, int64_t now)
{
	size_t add = (rec->long_url ? strlen(rec->long_url) + 1 : 0) + (aux ? c->conf.aux_bytes : 0);

	e->rec = *rec;
	e->aux = aux;
	/* only into an entry the table keeps: a load invalidated meanwhile
	 * serves its callers once and goes, and would use the carry up */
	if (rc > 0 && e->in_table)
		carry_take(s, e, now, 1);
	e->expires_ms = now + (rc > 0 ? c->conf.ttl_ms : c->conf.negative_ttl_ms);
	e->loading = 0;
	e->bytes += add;
	if (e->in_table) {
		s->bytes += add;
		/* An unknown code goes to the LRU's end until it is asked for
		 * again: a flood of made-up codes then evicts its own entries,
		 * not the links in use. */
		if (rc == 0)
			lru_back(s, e);
		evict(c, s, e);
	}
}

/* Reloads an expired entry old (referenced by the caller, marked
 * refreshing when the shard's generation was gen0); returns the entry to
 * use (referenced). */
static struct lcache_entry *
refresh(struct lcache *c, struct shard *s, struct lcache_entry *old, uint64_t gen0)
{
	struct lcache_rec rec;
	struct lcache_entry *ne;
	char errstr[256];
	void *aux;
	int rc = load(c, old->code, &rec, &aux, errstr, sizeof(errstr));
	int64_t now = now_ms();

	ne = rc >= 0 ? new_entry(old->code, old->hash) : NULL;
	pthread_mutex_lock(&s->mtx);
	s->loads++;
	if (ne == NULL) {
		/* Keep serving what we had; try again a little later. */
		old->refreshing = 0;
		old->expires_ms = now + c->conf.negative_ttl_ms;
		s->load_errors++;
		pthread_mutex_unlock(&s->mtx);
		if (rc >= 0) {
			free(rec.long_url);
			if (aux && c->conf.free_aux)
				c->conf.free_aux(aux);
		}
		return old;
	}
	fill(c, s, ne, &rec, aux, rc, now);
	/* Redirects served from old that the reloaded count does not hold yet
	 * (ingest's lag) stay counted: new = old local - what the count rose
	 * by, at least 0. Starting again from 0 let a link pass max_visits by
	 * its rate times the lag at every refresh. */
	if (rc > 0 && old->rec.id == ne->rec.id) {
		long long pending = atomic_load(&old->hits_local) - (ne->rec.hits - old->rec.hits);

		atomic_store(&ne->hits_local, pending > 0 ? pending : 0);
	}
	atomic_store(&ne->refs, 2); /* table + caller */
	if (old->in_table) { /* not evicted nor invalidated meanwhile */
		unlink_entry(s, old);
		put(c, old);
	}
	/* Not cached when any code of the shard was invalidated meanwhile: the
	 * load may have read the row before that edit, and old may have been
	 * evicted before it, so no mark on old would tell. */
	if (s->gen == gen0 && find(s, ne->code, ne->hash) == NULL) {
		if (rc > 0) /* carried from old above; an older carry is stale */
			carry_take(s, ne, now, 0);
		insert(c, s, ne);
	} else {
		atomic_store(&ne->refs, 1); /* invalidated, or another load inserted */
	}
	pthread_mutex_unlock(&s->mtx);
	put(c, old);
	return ne;
}

/* An entry a caller can use now: loaded, and fresh or being reloaded by
 * another caller (shard locked). */
static int
usable(const struct lcache_entry *e, int64_t now)
{
	return !e->loading && (now < e->expires_ms || e->refreshing);
}

/* Hands e out as a hit (shard locked): a reference for the caller. */
static void
take_hit(struct shard *s, struct lcache_entry *e, int64_t now)
{
	atomic_fetch_add(&e->refs, 1);
	lru_front(s, e);
	if (now >= e->expires_ms)
		s->stale++;
	s->hits++;
}

struct lcache_entry *
lcache_peek(struct lcache *c, const char *code)
{
	uint32_t h = hash_code(c, code);
	struct shard *s = shard_of(c, h);
	struct lcache_entry *e;
	int64_t now = now_ms();

	pthread_mutex_lock(&s->mtx);
	e = find(s, code, h);
	if (e != NULL && usable(e, now))
		take_hit(s, e, now);
	else
		e = NULL;
	pthread_mutex_unlock(&s->mtx);
	return e;
}

struct lcache_entry *
lcache_get(struct lcache *c, const char *code, char *errstr, size_t errstr_size)
{
	uint32_t h = hash_code(c, code);
	struct shard *s = shard_of(c, h);
	struct lcache_entry *e;
	struct lcache_rec rec;
	int64_t now = now_ms();
	struct lcache_waiter *w;
	uint64_t gen0;
	void *aux;
	int rc;

	pthread_mutex_lock(&s->mtx);
	e = find(s, code, h);
	if (e != NULL && usable(e, now)) {
		take_hit(s, e, now);
		pthread_mutex_unlock(&s->mtx);
		return e;
	}
	if (e != NULL && !e->loading) { /* expired, nobody reloading it */
		atomic_fetch_add(&e->refs, 1);
		lru_front(s, e);
		e->refreshing = 1;
		s->misses++;
		gen0 = s->gen;
		pthread_mutex_unlock(&s->mtx);
		return refresh(c, s, e, gen0);
	}
	if (e != NULL) {
		/* Someone is loading this code: wait for that one query. */
		struct timespec ts;

		atomic_fetch_add(&e->refs, 1);
		s->waits++;
		monotime_deadline(&ts, WAIT_MS);
		while (e->loading && !e->failed &&
		    pthread_cond_timedwait(&s->cond, &s->mtx, &ts) == 0)
			;
		rc = e->loading;
		pthread_mutex_unlock(&s->mtx);
		if (rc) {
			put(c, e);
			errstr_set(errstr, errstr_size, "the lookup of \"%s\" failed", code);
			return NULL;
		}
		return e;
	}
	s->misses++;
	if ((e = new_entry(code, h)) == NULL) {
		pthread_mutex_unlock(&s->mtx);
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	e->loading = 1;
	atomic_store(&e->refs, 2); /* table + us */
	insert(c, s, e);
	pthread_mutex_unlock(&s->mtx);

	rc = load(c, code, &rec, &aux, errstr, errstr_size);
	now = now_ms();
	pthread_mutex_lock(&s->mtx);
	s->loads++;
	if (rc < 0) {
		s->load_errors++;
		e->failed = 1;
		if (e->in_table) {
			unlink_entry(s, e);
			put(c, e);
		}
	} else {
		fill(c, s, e, &rec, aux, rc, now);
	}
	w = e->waiters;
	e->waiters = NULL;
	for (struct lcache_waiter *x = w; x != NULL && rc >= 0; x = x->next)
		atomic_fetch_add(&e->refs, 1); /* one for each waiter */
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->mtx);
	while (w != NULL) {
		struct lcache_waiter *next = w->next; /* w is the waiter's after fn */

		w->fn(w->arg, rc < 0 ? NULL : e);
		w = next;
	}
	if (rc < 0) {
		put(c, e);
		return NULL;
	}
	return e;
}

int
lcache_wait(struct lcache *c, const char *code, struct lcache_waiter *w)
{
	uint32_t h = hash_code(c, code);
	struct shard *s = shard_of(c, h);
	struct lcache_entry *e;
	int queued = 0;

	pthread_mutex_lock(&s->mtx);
	e = find(s, code, h);
	if (e != NULL && e->loading) {
		w->next = e->waiters;
		e->waiters = w;
		s->waits++;
		queued = 1;
	}
	pthread_mutex_unlock(&s->mtx);
	return queued;
}

void
lcache_invalidate(struct lcache *c, const char *code)
{
	uint32_t h = hash_code(c, code);
	struct shard *s = shard_of(c, h);
	struct lcache_entry *e;

	pthread_mutex_lock(&s->mtx);
	s->gen++; /* refreshes under way in the shard will not cache */
	if ((e = find(s, code, h)) != NULL) {
		/* a cold load under way keeps its waiters, leaves the table;
		 * a loaded entry's uncounted redirects go to the next load
		 * (they were lost: after an edit a max_visits link could pass
		 * its limit by the redirects ingest had not counted yet) */
		carry_keep(s, e, now_ms());
		unlink_entry(s, e);
		put(c, e);
	}
	pthread_mutex_unlock(&s->mtx);
}

void
lcache_stats(struct lcache *c, struct lcache_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < NSHARDS; i++) {
		struct shard *s = &c->shards[i];

		pthread_mutex_lock(&s->mtx);
		out->hits += s->hits;
		out->misses += s->misses;
		out->loads += s->loads;
		out->load_errors += s->load_errors;
		out->stale_served += s->stale;
		out->evictions += s->evictions;
		out->waits += s->waits;
		out->entries += (uint64_t)s->entries;
		out->bytes += s->bytes;
		pthread_mutex_unlock(&s->mtx);
	}
}

size_t
lcache_longest_chain(struct lcache *c)
{
	size_t longest = 0;

	for (int i = 0; i < NSHARDS; i++) {
		struct shard *s = &c->shards[i];

		pthread_mutex_lock(&s->mtx);
		for (size_t b = 0; b <= s->mask; b++) {
			size_t n = 0;

			for (struct lcache_entry *e = s->buckets[b]; e != NULL; e = e->next)
				n++;
			if (n > longest)
				longest = n;
		}
		pthread_mutex_unlock(&s->mtx);
	}
	return longest;
}

void
lcache_free(struct lcache *c)
{
	if (c == NULL)
		return;
	for (int i = 0; i < NSHARDS; i++) {
		struct shard *s = &c->shards[i];

		while (s->head != NULL) {
			struct lcache_entry *e = s->head;

			unlink_entry(s, e);
			put(c, e);
		}
		free(s->buckets);
		pthread_cond_destroy(&s->cond);
		pthread_mutex_destroy(&s->mtx);
	}
	free(c);
}
