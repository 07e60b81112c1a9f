/* redirect.h - GET/HEAD /{code} and /?{code}: finds the link (in-process
 * cache -> Redis -> PostgreSQL), answers with its redirect, 404 or 410, and
 * publishes one visit event per request. */
#ifndef LP_REDIRECT_H
#define LP_REDIRECT_H

#include "events.h"
#include "http.h"
#include "kv.h"
#include "lcache.h"
#include "links.h"
#include "pgpool.h"

#include <stdint.h>

struct redirect_conf {
	const char *trusted_proxies;  /* CIDR list for X-Forwarded-For; "" = none */
	long long cache_max_entries;
	long long cache_max_bytes;
	int cache_ttl_ms;
	int cache_negative_ttl_ms;
	int cold_lookup_threads;      /* threads that look up codes not cached */
	long long cold_lookup_queue;  /* most lookups waiting for one; more: 503 */
};

struct redirect;

/* Borrows pg, kv, links and events (events may be NULL: no events). */
struct redirect *redirect_new(const struct redirect_conf *conf, struct pgpool *pg, struct kv *kv,
                              struct links *links, struct events *events,
                              char *errstr, size_t errstr_size);
void redirect_free(struct redirect *r);

/* Answers a request that is not for the API or the health endpoints. A
 * code the in-process cache cannot answer at once (not cached, being loaded,
 * or expired with nobody reloading it) is looked up on a cold-lookup thread
 * while the connection is suspended, so an HTTP thread never waits on Redis
 * or PostgreSQL; with cold_lookup_queue lookups already waiting, the request
 * gets 503 "overloaded" at once. */
enum MHD_Result redirect_handle(struct redirect *r, struct http_req *req);

/* GET /readyz: 200 when PostgreSQL answers and the producer reaches a Kafka
 * broker, else 503 with a JSON body naming what is down. */
enum MHD_Result redirect_ready(struct redirect *r, struct http_req *req);

/* Forgets code in the in-process cache (after an edit through this process). */
void redirect_invalidate(struct redirect *r, const char *code);

/* Cache counters (hits, misses, loads, ...). */
void redirect_cache_stats(struct redirect *r, struct lcache_stats *out);

/* Cold lookups now waiting or running, and those refused so far (the
 * queue full). */
void redirect_cold_stats(struct redirect *r, uint64_t *pending, uint64_t *refused);

#endif
