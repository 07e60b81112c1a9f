/* ua_cache.c - bounded, thread-safe cache of parsed user agents: the key space
 * is split over mutex-guarded stripes, each a chained hash with S3-FIFO
 * eviction (small probation FIFO, main FIFO with reinsertion, ghost hashes). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ua_int.h"

#define NIL UINT32_MAX
#define FREQ_MAX 3
#define STRIPES_MAX 64

/* One cached string: blob holds the key bytes, then the packed result. */
struct cent {
	uint64_t hash;
	uint32_t hnext;    /* next in bucket chain, or NIL */
	uint32_t keylen;
	uint8_t freq;      /* hits since insertion / last pass, capped */
	uint8_t in_main;   /* 0 small FIFO, 1 main FIFO */
	unsigned char *blob; /* owned */
};

/* A FIFO of entry indices: push at head, pop at tail. */
struct ring {
	uint32_t *v;
	uint32_t cap, head, n;
};

struct stripe {
	pthread_mutex_t mu;
	struct cent *ents;   /* cap entries */
	uint32_t *buckets;   /* nbuckets heads */
	uint32_t nbuckets;   /* power of two */
	uint32_t cap, n;
	uint32_t small_target;
	uint32_t freelist;   /* chained through hnext */
	struct ring small, main;
	uint64_t *ghost;     /* direct-mapped hashes recently dropped from small */
	uint32_t nghost;     /* power of two */
	uint64_t hits, misses, evictions;
	char pad[64];
};

struct ua_cache {
	struct stripe *st;
	uint32_t nstripes;   /* power of two */
	int stripe_shift;
	size_t capacity;
	uint64_t seed;
};

static uint32_t
pow2_at_least(uint32_t v)
{
	uint32_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

static void
ring_push(struct ring *r, uint32_t e)
{
	r->v[(r->head + r->n) % r->cap] = e; /* newest at the back */
	r->n++;
}

static uint32_t
ring_pop(struct ring *r)
{
	uint32_t e = r->v[r->head];

	r->head = (r->head + 1) % r->cap;
	r->n--;
	return e;
}

struct ua_cache *
ua_cache_new(size_t entries)
{
	struct ua_cache *c;
	uint32_t ns;
	struct timespec ts;

	if (entries == 0 || entries > UINT32_MAX / 2)
		return NULL;
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	/* about 256+ entries per stripe, at most STRIPES_MAX stripes */
	ns = 1;
	while (ns < STRIPES_MAX && (size_t)ns * 2 * 256 <= entries)
		ns <<= 1;
	c->nstripes = ns;
	c->stripe_shift = 0;
	while ((1u << c->stripe_shift) < ns)
		c->stripe_shift++;
	c->capacity = entries;
	clock_gettime(CLOCK_REALTIME, &ts);
	c->seed = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)c;
	if ((c->st = calloc(ns, sizeof(*c->st))) == NULL) {
		free(c);
		return NULL;
	}
	for (uint32_t i = 0; i < ns; i++) {
		struct stripe *s = &c->st[i];
		uint32_t cap = (uint32_t)(entries / ns + (i < entries % ns ? 1 : 0));

		pthread_mutex_init(&s->mu, NULL);
		s->cap = cap;
		s->small_target = cap / 10 ? cap / 10 : 1;
		s->nbuckets = pow2_at_least(cap);
		s->nghost = pow2_at_least(cap);
		s->ents = calloc(cap, sizeof(*s->ents));
		s->buckets = malloc(s->nbuckets * sizeof(*s->buckets));
		s->ghost = calloc(s->nghost, sizeof(*s->ghost));
		s->small.v = malloc(cap * sizeof(uint32_t));
		s->main.v = malloc(cap * sizeof(uint32_t));
		s->small.cap = s->main.cap = cap;
		if (s->ents == NULL || s->buckets == NULL || s->ghost == NULL ||
		    s->small.v == NULL || s->main.v == NULL) {
			c->nstripes = i + 1;
			ua_cache_free(c);
			return NULL;
		}
		for (uint32_t b = 0; b < s->nbuckets; b++)
			s->buckets[b] = NIL;
		for (uint32_t e = 0; e < cap; e++)
			s->ents[e].hnext = e + 1 < cap ? e + 1 : NIL;
		s->freelist = cap ? 0 : NIL;
	}
	return c;
}

void
ua_cache_free(struct ua_cache *c)
{
	if (c == NULL)
		return;
	for (uint32_t i = 0; i < c->nstripes; i++) {
		struct stripe *s = &c->st[i];

		if (s->ents != NULL)
			for (uint32_t e = 0; e < s->cap; e++)
				free(s->ents[e].blob);
		free(s->ents);
		free(s->buckets);
		free(s->ghost);
		free(s->small.v);
		free(s->main.v);
		pthread_mutex_destroy(&s->mu);
	}
	free(c->st);
	free(c);
}

static inline uint64_t
rd64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static inline uint64_t
mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

uint64_t
ua_cache_hash(const struct ua_cache *c, const char *key, size_t n)
{
	const unsigned char *p = (const unsigned char *)key;
	uint64_t a = c->seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL), b = ~c->seed;
	size_t i = 0;

	for (; i + 16 <= n; i += 16) {
		a = (a ^ rd64(p + i)) * 0x87c37b91114253d5ULL;
		b = (b ^ rd64(p + i + 8)) * 0x4cf5ad432745937fULL;
		a = (a << 31) | (a >> 33);
		b = (b << 29) | (b >> 35);
	}
	if (i + 8 <= n) {
		a = ((a ^ rd64(p + i)) * 0x87c37b91114253d5ULL);
		a = (a << 31) | (a >> 33);
		i += 8;
	}
	if (i < n) {
		uint64_t t = 0;

		memcpy(&t, p + i, n - i);
		b = (b ^ t) * 0x4cf5ad432745937fULL;
	}
	return mix(a ^ mix(b));
}

/* ---- packed results: type, bot, then 13 fields as (u8 len, bytes) ------- */

#define NFIELDS 13

static void
fields_of(struct ua_result *r, char **f, size_t *sz)
{
	int i = 0;

	f[i] = r->browser.family;      sz[i++] = sizeof(r->browser.family);
	f[i] = r->browser.major;       sz[i++] = sizeof(r->browser.major);
	f[i] = r->browser.minor;       sz[i++] = sizeof(r->browser.minor);
	f[i] = r->browser.patch;       sz[i++] = sizeof(r->browser.patch);
	f[i] = r->browser.patch_minor; sz[i++] = sizeof(r->browser.patch_minor);
	f[i] = r->os.family;           sz[i++] = sizeof(r->os.family);
	f[i] = r->os.major;            sz[i++] = sizeof(r->os.major);
	f[i] = r->os.minor;            sz[i++] = sizeof(r->os.minor);
	f[i] = r->os.patch;            sz[i++] = sizeof(r->os.patch);
	f[i] = r->os.patch_minor;      sz[i++] = sizeof(r->os.patch_minor);
	f[i] = r->device.family;       sz[i++] = sizeof(r->device.family);
	f[i] = r->device.brand;        sz[i++] = sizeof(r->device.brand);
	f[i] = r->device.model;        sz[i++] = sizeof(r->device.model);
}

/* Key then packed result in one allocation; NULL on ENOMEM. */
static unsigned char *
pack(const char *key, size_t n, const struct ua_result *r)
{
	char *f[NFIELDS];
	size_t sz[NFIELDS], len[NFIELDS], total = n + 2;
	unsigned char *b, *p;

	fields_of((struct ua_result *)r, f, sz);
	for (int i = 0; i < NFIELDS; i++) {
		len[i] = strnlen(f[i], sz[i] - 1);
		if (len[i] > 255)
			len[i] = 255; /* never: every field is < 256 bytes */
		total += 1 + len[i];
	}
	if ((b = malloc(total)) == NULL)
		return NULL;
	memcpy(b, key, n);
	p = b + n;
	*p++ = (unsigned char)r->type;
	*p++ = (unsigned char)(r->is_bot ? 1 : 0);
	for (int i = 0; i < NFIELDS; i++) {
		*p++ = (unsigned char)len[i];
		memcpy(p, f[i], len[i]);
		p += len[i];
	}
	return b;
}

static void
unpack(const unsigned char *p, struct ua_result *r)
{
	char *f[NFIELDS];
	size_t sz[NFIELDS];

	fields_of(r, f, sz);
	r->type = (enum ua_device_type)*p++;
	r->device_type = ua_device_type_name(r->type);
	r->is_bot = *p++;
	for (int i = 0; i < NFIELDS; i++) {
		size_t l = *p++;

		memcpy(f[i], p, l);
		f[i][l] = '\0';
		p += l;
	}
}

/* ---- lookups ------------------------------------------------------------- */

static inline struct stripe *
stripe_of(struct ua_cache *c, uint64_t h)
{
	return &c->st[c->stripe_shift ? (uint32_t)(h >> (64 - c->stripe_shift)) : 0];
}

static uint32_t
find(struct stripe *s, uint64_t h, const char *key, size_t n)
{
	uint32_t e = s->buckets[h & (s->nbuckets - 1)];

	while (e != NIL) {
		struct cent *x = &s->ents[e];

		if (x->hash == h && x->keylen == n && memcmp(x->blob, key, n) == 0)
			return e;
		e = x->hnext;
	}
	return NIL;
}

int
ua_cache_get(struct ua_cache *c, uint64_t h, const char *key, size_t n, struct ua_result *out)
{
	struct stripe *s = stripe_of(c, h);
	uint32_t e;

	pthread_mutex_lock(&s->mu);
	e = find(s, h, key, n);
	if (e == NIL) {
		s->misses++;
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	if (s->ents[e].freq < FREQ_MAX)
		s->ents[e].freq++;
	s->hits++;
	unpack(s->ents[e].blob + n, out);
	pthread_mutex_unlock(&s->mu);
	return 1;
}

static void
unlink_bucket(struct stripe *s, uint32_t e)
{
	uint32_t *pp = &s->buckets[s->ents[e].hash & (s->nbuckets - 1)];

	while (*pp != e)
		pp = &s->ents[*pp].hnext;
	*pp = s->ents[e].hnext;
}

/* S3-FIFO: frees one slot; returns the victim's blob for the caller to free
 * outside the lock. */
static unsigned char *
evict_one(struct stripe *s)
{
	for (;;) {
		uint32_t e;
		struct cent *x;

		if (s->small.n > 0 && (s->small.n >= s->small_target || s->main.n == 0)) {
			e = ring_pop(&s->small);
			x = &s->ents[e];
			if (x->freq > 0) { /* seen again while on probation: promote */
				x->freq = 0;
				x->in_main = 1;
				ring_push(&s->main, e);
				continue;
			}
			s->ghost[x->hash & (s->nghost - 1)] = x->hash;
		} else {
			e = ring_pop(&s->main);
			x = &s->ents[e];
			if (x->freq > 0) { /* reinsert with one less credit */
				x->freq--;
				ring_push(&s->main, e);
				continue;
			}
		}
		unlink_bucket(s, e);
		s->n--;
		s->evictions++;
		x->hnext = s->freelist;
		s->freelist = e;
		{
			unsigned char *b = x->blob;

			x->blob = NULL;
			return b;
		}
	}
}

void
ua_cache_put(struct ua_cache *c, uint64_t h, const char *key, size_t n, const struct ua_result *r)
{
	struct stripe *s = stripe_of(c, h);
	unsigned char *blob = pack(key, n, r), *victim = NULL;
	uint32_t e, b;
	struct cent *x;

	if (blob == NULL || s->cap == 0) {
		free(blob);
		return;
	}
	pthread_mutex_lock(&s->mu);
	if (find(s, h, key, n) != NIL) { /* another thread was first */
		pthread_mutex_unlock(&s->mu);
		free(blob);
		return;
	}
	if (s->n == s->cap)
		victim = evict_one(s);
	e = s->freelist;
	x = &s->ents[e];
	s->freelist = x->hnext;
	x->hash = h;
	x->keylen = (uint32_t)n;
	x->freq = 0;
	x->blob = blob;
	b = (uint32_t)(h & (s->nbuckets - 1));
	x->hnext = s->buckets[b];
	s->buckets[b] = e;
	if (s->ghost[h & (s->nghost - 1)] == h) {
		s->ghost[h & (s->nghost - 1)] = 0;
		x->in_main = 1;
		ring_push(&s->main, e);
	} else {
		x->in_main = 0;
		ring_push(&s->small, e);
	}
	s->n++;
	pthread_mutex_unlock(&s->mu);
	free(victim);
}

void
ua_cache_stats(struct ua_cache *c, struct ua_stats *st)
{
	st->capacity = c->capacity;
	for (uint32_t i = 0; i < c->nstripes; i++) {
		struct stripe *s = &c->st[i];

		pthread_mutex_lock(&s->mu);
		st->hits += s->hits;
		st->misses += s->misses;
		st->evictions += s->evictions;
		st->entries += s->n;
		pthread_mutex_unlock(&s->mu);
	}
}
