/* test_lcache.c - redirector/lcache.c: an invalidation during a load or a
 * refresh is not undone by that load's result, waiters of a failed load give
 * up at once, a refresh and an invalidation keep the visits the count does not
 * hold yet, and a
 * shard's entries spread over its buckets. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../redirector/lcache.h"
#include "unit.h"

/* A loader that reads "the database" (version) when called, then may block
 * until released, as a slow query would. */
struct db {
	pthread_mutex_t mtx;
	pthread_cond_t cond;
	int version;      /* the row's current version */
	int block;        /* next load blocks after reading */
	int blocked;      /* a load is blocked */
	int fail;         /* loads fail */
	int loads;
	long long hits;   /* the row's counted visits (link_total) */
};

static int
load(void *ctx, const char *code, struct lcache_rec *rec, char *errstr, size_t errstr_size)
{
	struct db *d = ctx;
	char url[64];
	int v;

	pthread_mutex_lock(&d->mtx);
	d->loads++;
	v = d->version;
	if (d->block) {
		d->block = 0;
		d->blocked = 1;
		pthread_cond_broadcast(&d->cond);
		while (d->blocked)
			pthread_cond_wait(&d->cond, &d->mtx);
	}
	pthread_mutex_unlock(&d->mtx);
	if (d->fail) {
		snprintf(errstr, errstr_size, "down");
		return -1;
	}
	if (strncmp(code, "none", 4) == 0)
		return 0; /* no such code */
	snprintf(url, sizeof(url), "https://example.com/%s/v%d", code, v);
	rec->id = 1;
	rec->hits = d->hits;
	rec->redirect_type = 302;
	rec->long_url = strdup(url);
	return 1;
}

static void
wait_blocked(struct db *d)
{
	pthread_mutex_lock(&d->mtx);
	while (!d->blocked)
		pthread_cond_wait(&d->cond, &d->mtx);
	pthread_mutex_unlock(&d->mtx);
}

static void
release(struct db *d)
{
	pthread_mutex_lock(&d->mtx);
	d->blocked = 0;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->mtx);
}

/* A cache over d; max_entries 0: room for every test's codes. */
static struct lcache *
new_cache(struct db *d, int ttl_ms, long long max_entries)
{
	struct lcache_conf conf = { .max_entries = max_entries ? max_entries : 200000,
		.max_bytes = 1LL << 30, .ttl_ms = ttl_ms,
		.negative_ttl_ms = ttl_ms, .load = load, .ctx = d };
	char err[128];
	struct lcache *c = lcache_new(&conf, err, sizeof(err));

	if (c == NULL) {
		fprintf(stderr, "lcache_new: %s\n", err);
		exit(1);
	}
	return c;
}

struct getter {
	struct lcache *c;
	const char *code;
	char url[128];    /* what the get returned, "" for NULL */
	double ms;        /* how long it took */
};

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *
get_main(void *arg)
{
	struct getter *g = arg;
	char err[128];
	double t0 = now_ms();
	struct lcache_entry *e = lcache_get(g->c, g->code, err, sizeof(err));

	g->ms = now_ms() - t0;
	g->url[0] = '\0';
	if (e != NULL) {
		snprintf(g->url, sizeof(g->url), "%s", e->rec.long_url ? e->rec.long_url : "");
		lcache_release(g->c, e);
	}
	return NULL;
}

static void
get_now(struct lcache *c, const char *code, char *url, size_t url_size)
{
	struct getter g = { .c = c, .code = code };

	get_main(&g);
	snprintf(url, url_size, "%s", g.url);
}

static void
init_db(struct db *d)
{
	memset(d, 0, sizeof(*d));
	pthread_mutex_init(&d->mtx, NULL);
	pthread_cond_init(&d->cond, NULL);
	d->version = 1;
}

/* Starts a get of "abc" whose load blocks, lands an edit (version 2 and
 * lcache_invalidate) meanwhile, lets the load finish; then checks that get
 * had the load's version 1 and a get after it version 2, after loads. */
static void
edit_during_load(struct db *d, struct lcache *c, int loads, const char *what, int flood)
{
	struct getter g = { .c = c, .code = "abc" };
	pthread_t t;
	char url[128], code[16];

	d->block = 1;
	pthread_create(&t, NULL, get_main, &g);
	wait_blocked(d);
	/* flood other codes through a tiny cache: the entry being refreshed is
	 * evicted, so the invalidation finds nothing of "abc" to mark */
	for (int i = 0; i < flood; i++) {
		snprintf(code, sizeof(code), "k%d", i);
		get_now(c, code, url, sizeof(url));
	}
	pthread_mutex_lock(&d->mtx);
	d->version = 2;
	pthread_mutex_unlock(&d->mtx);
	lcache_invalidate(c, "abc");
	release(d);
	pthread_join(t, NULL);
	CHECK_STR(g.url, "https://example.com/abc/v1", what);
	get_now(c, "abc", url, sizeof(url));
	CHECK_STR(url, "https://example.com/abc/v2", "a request after the invalidation");
	CHECK(d->loads == loads + flood, "%s: loads %d, want %d", what, d->loads, loads + flood);
}

/* An edit lands (version 2, invalidate) while a cold load that read
 * version 1 is still running: the next request must see version 2. */
static void
test_invalidate_during_load(void)
{
	struct db d;
	struct lcache *c;

	init_db(&d);
	c = new_cache(&d, 60000, 0);
	edit_during_load(&d, c, 2, "the load begun before the edit", 0);
	lcache_free(c);
}

/* An expired entry of a cache of max_entries (0: roomy), refreshed while
 * an edit lands, after flood other codes (edit_during_load). */
static void
edit_during_refresh(long long max_entries, int flood, const char *what)
{
	struct db d;
	struct lcache *c;
	char url[128];
	struct timespec ts = { 0, 300 * 1000000L };

	init_db(&d);
	c = new_cache(&d, 200, max_entries);
	get_now(c, "abc", url, sizeof(url));
	CHECK_STR(url, "https://example.com/abc/v1", "first load");
	nanosleep(&ts, NULL); /* expired */
	edit_during_load(&d, c, 3, what, flood);
	lcache_free(c);
}

/* The same while an expired entry is being refreshed. */
static void
test_invalidate_during_refresh(void)
{
	edit_during_refresh(0, 0, "the refresh begun before the edit");
}

/* The same when the refreshing entry is evicted before the edit lands (a
 * cache of one entry per shard). */
static void
test_invalidate_after_eviction_during_refresh(void)
{
	edit_during_refresh(64, 2000, "the refresh of an entry evicted before the edit");
}

/* Requests waiting for a load that fails get NULL when it fails, not after
 * the 5 s wait; nothing is cached. */
static void
test_failed_load_wakes_waiters(void)
{
	struct db d;
	struct lcache *c;
	struct getter g1, g2;
	pthread_t t1, t2;
	struct lcache_stats st;

	init_db(&d);
	c = new_cache(&d, 60000, 0);
	d.block = 1;
	d.fail = 1;
	g1 = (struct getter){ .c = c, .code = "xyz" };
	g2 = g1;
	pthread_create(&t1, NULL, get_main, &g1);
	wait_blocked(&d);
	pthread_create(&t2, NULL, get_main, &g2);
	for (double t0 = now_ms();;) { /* until the second request waits for the first's load */
		lcache_stats(c, &st);
		if (st.waits == 1)
			break;
		if (now_ms() - t0 > 10000) {
			CHECK(0, "the second request never waited for the first's load");
			break;
		}
		sched_yield();
	}
	release(&d);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	CHECK_STR(g1.url, "", "the failed load");
	CHECK_STR(g2.url, "", "its waiter");
	CHECK(g2.ms < 2000, "the waiter gave up after %.0f ms", g2.ms);
	lcache_stats(c, &st);
	CHECK(st.entries == 0 && d.loads == 1, "entries %llu loads %d", (unsigned long long)st.entries,
	    d.loads);
	lcache_free(c);
}

/* Redirects served from an entry that the reloaded count does not hold yet
 * stay counted after a refresh (max_visits compares hits + hits_local). */
static void
test_refresh_keeps_uncounted_hits(void)
{
	struct db d;
	struct lcache *c;
	struct lcache_entry *e;
	char err[64];
	struct timespec ts = { 0, 300 * 1000000L };
	long long want[] = { 30, 0 }, db_hits[] = { 20, 500 };

	init_db(&d);
	c = new_cache(&d, 200, 0);
	e = lcache_get(c, "cnt", err, sizeof(err));
	atomic_fetch_add(&e->hits_local, 50); /* served 50, none counted yet */
	lcache_release(c, e);
	for (int i = 0; i < 2; i++) {
		d.hits = db_hits[i]; /* ingest counted some (then more than we served) */
		nanosleep(&ts, NULL);
		e = lcache_get(c, "cnt", err, sizeof(err)); /* the refresh */
		CHECK(e != NULL && e->rec.hits == db_hits[i] && atomic_load(&e->hits_local) == want[i],
		    "after refresh %d: hits %lld, local %lld, want %lld", i, e ? e->rec.hits : -1,
		    e ? (long long)atomic_load(&e->hits_local) : -1, want[i]);
		lcache_release(c, e);
	}
	lcache_free(c);
}

/* So do they after an edit's invalidation (the next load is a cold one):
 * they were lost, and a max_visits link passed its limit by them. */
static void
test_invalidate_keeps_uncounted_hits(void)
{
	struct db d;
	struct lcache *c;
	struct lcache_entry *e;
	char err[64];

	init_db(&d);
	c = new_cache(&d, 60000, 0);
	e = lcache_get(c, "inv", err, sizeof(err));
	atomic_fetch_add(&e->hits_local, 50);
	lcache_release(c, e);
	d.hits = 20;
	lcache_invalidate(c, "inv");
	e = lcache_get(c, "inv", err, sizeof(err));
	CHECK(e != NULL && e->rec.hits == 20 && atomic_load(&e->hits_local) == 30,
	    "after invalidation: hits %lld, local %lld, want 20 and 30", e ? e->rec.hits : -1,
	    e ? (long long)atomic_load(&e->hits_local) : -1);
	atomic_fetch_add(&e->hits_local, 5);
	lcache_release(c, e);
	lcache_invalidate(c, "inv"); /* kept once: a later load does not add it again */
	d.hits = 60;
	e = lcache_get(c, "inv", err, sizeof(err));
	CHECK(e != NULL && atomic_load(&e->hits_local) == 0, "local %lld, want 0 (55 served, "
	    "40 more counted)", e ? (long long)atomic_load(&e->hits_local) : -1);
	lcache_release(c, e);
	lcache_invalidate(c, "inv");
	e = lcache_get(c, "inv", err, sizeof(err));
	CHECK(e != NULL && atomic_load(&e->hits_local) == 0, "local %lld after a load with "
	    "nothing kept", e ? (long long)atomic_load(&e->hits_local) : -1);
	lcache_release(c, e);
	lcache_free(c);
}

/* 100,000 codes in a cache sized for them: chains stay short (every entry
 * of a shard shares the hash bits that chose the shard). */
static void
test_chains_are_short(void)
{
	struct db d;
	struct lcache *c;
	char code[16], url[128];
	size_t longest;

	init_db(&d);
	c = new_cache(&d, 60000, 0);
	for (int i = 0; i < 100000; i++) {
		snprintf(code, sizeof(code), "c%07d", i);
		get_now(c, code, url, sizeof(url));
	}
	longest = lcache_longest_chain(c);
	CHECK(longest <= 12, "longest chain %zu for 100000 entries, want <= 12", longest);
	lcache_free(c);
}

/* A flood of unknown codes, ten times the cache's size, leaves the links in
 * use cached: an unknown code's entry goes to the LRU's end (it evicted the
 * least recently used links, and each was then loaded again). */
static void
test_unknown_codes_do_not_evict_links(void)
{
	struct db d;
	struct lcache *c;
	char code[16], url[128];
	int loads;

	init_db(&d);
	c = new_cache(&d, 60000, 64 * 8);
	for (int i = 0; i < 32; i++) {
		snprintf(code, sizeof(code), "real%02d", i);
		get_now(c, code, url, sizeof(url));
	}
	for (int i = 0; i < 5120; i++) {
		snprintf(code, sizeof(code), "none%05d", i);
		get_now(c, code, url, sizeof(url));
		CHECK(url[0] == '\0', "unknown code %s got \"%s\"", code, url);
	}
	loads = d.loads;
	for (int i = 0; i < 32; i++) {
		snprintf(code, sizeof(code), "real%02d", i);
		get_now(c, code, url, sizeof(url));
	}
	CHECK(d.loads == loads, "%d of 32 links loaded again after a flood of unknown codes",
	    d.loads - loads);
	lcache_free(c);
}

/* lcache_peek never loads nor waits: NULL for a code not cached, one being
 * loaded and one expired that nobody reloads yet; the entry when fresh, and
 * the stale one while another caller reloads it. */
static void
test_peek_never_waits(void)
{
	struct timespec ts = { 0, 60 * 1000000 };
	struct lcache_stats st;
	struct getter g;
	struct lcache_entry *e;
	struct db d;
	struct lcache *c;
	pthread_t t;
	char url[128];
	int loads;

	init_db(&d);
	c = new_cache(&d, 50, 0);
	CHECK(lcache_peek(c, "pk") == NULL && d.loads == 0, "a code not cached: peek loaded it");
	d.block = 1;
	memset(&g, 0, sizeof(g));
	g.c = c;
	g.code = "pk";
	pthread_create(&t, NULL, get_main, &g);
	wait_blocked(&d);
	CHECK(lcache_peek(c, "pk") == NULL, "a code being loaded: peek returned an entry");
	release(&d);
	pthread_join(t, NULL);
	e = lcache_peek(c, "pk");
	CHECK(e != NULL && strcmp(e->rec.long_url, "https://example.com/pk/v1") == 0,
	    "a fresh entry: peek gave %s", e ? e->rec.long_url : "NULL");
	lcache_release(c, e);
	nanosleep(&ts, NULL); /* past the 50 ms TTL */
	loads = d.loads;
	CHECK(lcache_peek(c, "pk") == NULL && d.loads == loads,
	    "an expired entry nobody reloads: peek returned it or reloaded it");
	d.version = 2;
	d.block = 1;
	memset(&g, 0, sizeof(g));
	g.c = c;
	g.code = "pk";
	pthread_create(&t, NULL, get_main, &g); /* the refresh, held in the loader */
	wait_blocked(&d);
	e = lcache_peek(c, "pk");
	CHECK(e != NULL && strcmp(e->rec.long_url, "https://example.com/pk/v1") == 0,
	    "an expired entry being reloaded: peek gave %s, want the stale v1",
	    e ? e->rec.long_url : "NULL");
	lcache_release(c, e);
	release(&d);
	pthread_join(t, NULL);
	CHECK(strcmp(g.url, "https://example.com/pk/v2") == 0, "the refreshing get gave %s", g.url);
	get_now(c, "pk", url, sizeof(url));
	CHECK(strcmp(url, "https://example.com/pk/v2") == 0, "after the refresh: %s", url);
	lcache_stats(c, &st);
	CHECK(st.hits == 3 && st.stale_served == 1, "hits %llu stale %llu, want 3 and 1 (peeks "
	    "that return an entry count as hits, NULL ones count nothing)",
	    (unsigned long long)st.hits, (unsigned long long)st.stale_served);
	lcache_free(c);
}

/* lcache_wait: nothing to wait for when the code is not being loaded;
 * during a load, every waiter is told once it ends, with the entry (one
 * reference each) or NULL when it failed. */
struct waited {
	struct lcache_waiter w;
	struct lcache_entry *e;
	int calls;
};

static void
waited_fn(void *arg, struct lcache_entry *e)
{
	struct waited *x = arg;

	x->e = e;
	x->calls++;
}

static void
test_wait_for_a_load(void)
{
	struct waited x[3];
	struct getter g;
	struct db d;
	struct lcache *c;
	pthread_t t;
	char url[128];

	init_db(&d);
	c = new_cache(&d, 60000, 0);
	memset(x, 0, sizeof(x));
	for (int i = 0; i < 3; i++) {
		x[i].w.fn = waited_fn;
		x[i].w.arg = &x[i];
	}
	CHECK(lcache_wait(c, "wt", &x[0].w) == 0, "waiting for a code nobody loads");
	for (int round = 0; round < 2; round++) {
		const char *code = round == 0 ? "wt" : "wf";

		d.fail = round == 1;
		d.block = 1;
		memset(&g, 0, sizeof(g));
		g.c = c;
		g.code = code;
		pthread_create(&t, NULL, get_main, &g);
		wait_blocked(&d);
		for (int i = 0; i < 3; i++) {
			x[i].calls = 0;
			x[i].e = NULL;
			CHECK(lcache_wait(c, code, &x[i].w) == 1, "%s: waiter %d not queued", code, i);
		}
		CHECK(x[0].calls + x[1].calls + x[2].calls == 0, "%s: told before the load ended", code);
		release(&d);
		pthread_join(t, NULL);
		for (int i = 0; i < 3; i++) {
			CHECK(x[i].calls == 1, "%s: waiter %d told %d times", code, i, x[i].calls);
			if (round == 0)
				CHECK(x[i].e != NULL && strcmp(x[i].e->rec.long_url,
				    "https://example.com/wt/v1") == 0, "waiter %d got %s", i,
				    x[i].e ? x[i].e->rec.long_url : "NULL");
			else
				CHECK(x[i].e == NULL, "a failed load gave waiter %d an entry", i);
			lcache_release(c, x[i].e);
		}
	}
	d.fail = 0;
	CHECK(lcache_wait(c, "wt", &x[0].w) == 0, "waiting for a cached code");
	get_now(c, "wt", url, sizeof(url));
	CHECK(strcmp(url, "https://example.com/wt/v1") == 0, "after the waiters released: %s", url);
	lcache_free(c); /* ASan: every reference released */
}

int
main(void)
{
	test_invalidate_during_load();
	test_invalidate_during_refresh();
	test_invalidate_after_eviction_during_refresh();
	test_failed_load_wakes_waiters();
	test_refresh_keeps_uncounted_hits();
	test_invalidate_keeps_uncounted_hits();
	test_chains_are_short();
	test_unknown_codes_do_not_evict_links();
	test_peek_never_waits();
	test_wait_for_a_load();
	printf("test_lcache: %d passed, %d failed\n", unit_passed, unit_failed);
	return unit_failed ? 1 : 0;
}
