/* lcache.h - the redirector's in-process link cache: sharded, bounded by
 * entries and bytes (LRU per shard), TTL with stale-while-refresh, negative
 * entries for unknown codes, and single-flight loading of cold codes. */
#ifndef LP_LCACHE_H
#define LP_LCACHE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* What a loader fills in. */
struct lcache_rec {
	long long id;            /* url_link.id */
	int redirect_type;       /* 301, 302, 307, 308 */
	int64_t valid_since_us;  /* INT64_MIN when none */
	int64_t expires_at_us;   /* INT64_MAX when none */
	long long max_visits;    /* 0 when unlimited */
	long long hits;          /* visits counted so far (link_total) */
	int disabled, deleted;
	int forward_query;       /* append the visit's query string */
	char *long_url;          /* malloc'd; the cache takes ownership */
};

struct lcache_entry;

/* A caller waiting for a load under way without a thread (lcache_wait):
 * the caller owns the node and keeps it until fn runs. fn(arg, e) runs once,
 * on the loading thread with no lock held, with the loaded entry (a
 * reference fn's caller must release) or NULL when the load failed. */
struct lcache_waiter {
	void (*fn)(void *arg, struct lcache_entry *e);
	void *arg;
	struct lcache_waiter *next;  /* private */
};

/* A cached entry. Callers read it between lcache_get and lcache_release and
 * never change it, except hits_local. */
struct lcache_entry {
	struct lcache_rec rec;   /* rec.id == 0: negative entry (no such code) */
	_Atomic long long hits_local; /* redirects served that rec.hits does not
	                               * hold yet (carried over by a refresh) */
	void *aux;               /* from conf.make_aux (e.g. a prepared response) */

	/* private */
	struct lcache_entry *next, *lru_prev, *lru_next;
	char *code;
	uint32_t hash;
	int loading;             /* single flight: being loaded, no data yet */
	int refreshing;          /* expired, one thread reloading it */
	int in_table;
	int failed;              /* its load failed (waiters give up) */
	struct lcache_waiter *waiters; /* lcache_wait's, told when the load ends */
	atomic_int refs;
	size_t bytes;
	int64_t expires_ms;      /* monotonic */
};

/* Returns 1 (found, rec filled), 0 (no such code) or -1 (lookup failed,
 * errstr set). Called without locks held, once per cold or expired code. */
typedef int (*lcache_load_fn)(void *ctx, const char *code, struct lcache_rec *rec,
                              char *errstr, size_t errstr_size);

struct lcache_conf {
	long long max_entries;
	long long max_bytes;     /* entry + code + URL (+ aux_bytes) */
	int ttl_ms;              /* found links */
	int negative_ttl_ms;     /* unknown codes */
	lcache_load_fn load;
	void *ctx;
	/* Optional: builds aux for a loaded entry / frees it with the entry. */
	void *(*make_aux)(void *ctx, const char *code, const struct lcache_rec *rec);
	void (*free_aux)(void *aux);
	size_t aux_bytes;        /* counted per entry with aux */
};

struct lcache_stats {
	uint64_t hits, misses, loads, load_errors, stale_served, evictions, waits;
	uint64_t entries, bytes;
};

struct lcache;

struct lcache *lcache_new(const struct lcache_conf *conf, char *errstr, size_t errstr_size);
void lcache_free(struct lcache *c);

/* The entry for code (a reference the caller must release), loading it on
 * a miss; concurrent misses for one code wait for a single load. An expired
 * entry is served while one caller reloads it; if that reload fails the old
 * entry is kept and retried after negative_ttl_ms. Returns NULL when the
 * lookup failed and nothing is cached (errstr set). */
struct lcache_entry *lcache_get(struct lcache *c, const char *code, char *errstr,
                                size_t errstr_size);
void lcache_release(struct lcache *c, struct lcache_entry *e);

/* The entry for code without loading or waiting (a reference the caller
 * must release, counted as a hit): when it is cached and fresh, or expired
 * while another caller reloads it. NULL when lcache_get would load, reload
 * or wait for a load under way (nothing counted): the caller then calls
 * lcache_get where waiting costs nothing, off the HTTP threads. */
struct lcache_entry *lcache_peek(struct lcache *c, const char *code);

/* When code is being loaded (lcache_peek returned NULL for that reason),
 * queues w to be told when that load ends and returns 1; else returns 0
 * (not cached, cached, or expired: lcache_get's work) and w is not used. So
 * a burst for one cold code holds one thread, the loading one, not one per
 * request. */
int lcache_wait(struct lcache *c, const char *code, struct lcache_waiter *w);

/* Drops code from the cache: a request that starts after this returns
 * reloads it, even when a load or refresh begun before is still running
 * (that load's result goes to the requests already waiting for it only). */
void lcache_invalidate(struct lcache *c, const char *code);

void lcache_stats(struct lcache *c, struct lcache_stats *out);

/* The longest bucket chain of any shard (a walk of every bucket: for tests
 * and debugging, not for each scrape). */
size_t lcache_longest_chain(struct lcache *c);

#endif
