/* redirect.c - the redirect path: code from "/{code}" or "/?{code}", the link
 * record from the cache (loaded from Redis's lp:link:<code> or PostgreSQL),
 * its state evaluated per request (404 unknown or not yet valid; 410 expired,
 * disabled, deleted or over max visits), a prepared redirect response, and
 * the visit event. */
#include "redirect.h"
#include "clientip.h"
#include "codes.h"
#include "errstr.h"
#include "log.h"
#include "rfc3339.h"
#include "workq.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct redirect {
	struct pgpool *pg;
	struct kv *kv;
	struct links *links;
	struct events *events;
	struct clientip *trusted;
	struct lcache *cache;
	struct workq *cold;       /* lookups of codes the cache cannot answer */
	struct MHD_Response *unknown, *not_yet, *gone; /* shared bodies */
};

/* Link JSON (links.c's layout, from Redis or links_get) -> rec. */
static int
rec_from_json(json_t *j, struct lcache_rec *rec, char *errstr, size_t errstr_size)
{
	json_t *vs = json_object_get(j, "valid_since"), *ex = json_object_get(j, "expires_at");
	json_t *mv = json_object_get(j, "max_visits");
	const char *url = json_string_value(json_object_get(j, "long_url"));

	rec->id = (long long)json_integer_value(json_object_get(j, "id"));
	rec->redirect_type = (int)json_integer_value(json_object_get(j, "redirect_type"));
	rec->valid_since_us = INT64_MIN;
	rec->expires_at_us = INT64_MAX;
	rec->max_visits = json_is_integer(mv) ? (long long)json_integer_value(mv) : 0;
	rec->hits = (long long)json_integer_value(json_object_get(j, "hits"));
	rec->disabled = json_is_true(json_object_get(j, "disabled"));
	rec->deleted = json_is_true(json_object_get(j, "deleted"));
	rec->forward_query = json_is_true(json_object_get(j, "forward_query"));
	if (rec->id <= 0 || url == NULL || (rec->redirect_type != 301 && rec->redirect_type != 302 &&
	    rec->redirect_type != 307 && rec->redirect_type != 308) ||
	    (json_is_string(vs) && rfc3339_parse(json_string_value(vs), &rec->valid_since_us) < 0) ||
	    (json_is_string(ex) && rfc3339_parse(json_string_value(ex), &rec->expires_at_us) < 0)) {
		errstr_set(errstr, errstr_size, "malformed link record");
		return -1;
	}
	/* kept as the Location sends it: an international host as punycode */
	if ((rec->long_url = http_location_url(url)) == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return -1;
	}
	return 0;
}

/* Loader behind the in-process cache: Redis, then PostgreSQL. Redis's copy
 * of "hits" is only as fresh as the record, so links with max_visits are
 * always read from PostgreSQL, as are copies without forward_query (written
 * by a redirector older than schema 0020, still running in a rolling
 * upgrade: they would redirect a forwarding link without the query). */
static int
load(void *ctx, const char *code, struct lcache_rec *rec, char *errstr, size_t errstr_size)
{
	struct redirect *r = ctx;
	struct links_err err;
	redisReply *rep = kv_cmd(r->kv, "GET lp:link:%s", code);
	json_t *j = NULL;
	int rc;

	if (rep != NULL && rep->type == REDIS_REPLY_STRING) {
		j = json_loadb(rep->str, rep->len, 0, NULL);
		if (j != NULL && (!json_is_null(json_object_get(j, "max_visits")) ||
		    json_object_get(j, "forward_query") == NULL)) {
			json_decref(j);
			j = NULL;
		}
	}
	if (rep != NULL)
		freeReplyObject(rep);
	if (j == NULL) {
		if (links_get(r->links, code, &j, &err) < 0) {
			if (err.status == 404)
				return 0;
			errstr_set(errstr, errstr_size, "%s", err.msg);
			return -1;
		}
		/* warm Redis so other redirectors' cold lookups stop there */
		if (json_is_null(json_object_get(j, "max_visits")))
			links_cache(r->links, j);
	}
	rc = rec_from_json(j, rec, errstr, errstr_size);
	json_decref(j);
	return rc < 0 ? -1 : 1;
}

/* The prepared redirect response of an entry (http_redirect_response). */
static void *
make_response(void *ctx, const char *code, const struct lcache_rec *rec)
{
	(void)ctx;
	(void)code;
	return http_redirect_response(rec->long_url);
}

static void
free_response(void *aux)
{
	MHD_destroy_response(aux);
}

static struct MHD_Response *
json_response(const char *body)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body),
	    (void *)(uintptr_t)body, MHD_RESPMEM_PERSISTENT);

	if (resp != NULL) {
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	}
	return resp;
}

struct redirect *
redirect_new(const struct redirect_conf *conf, struct pgpool *pg, struct kv *kv,
             struct links *links, struct events *events, char *errstr, size_t errstr_size)
{
	struct redirect *r = calloc(1, sizeof(*r));
	struct lcache_conf cc;

	if (r == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	r->pg = pg;
	r->kv = kv;
	r->links = links;
	r->events = events;
	memset(&cc, 0, sizeof(cc));
	cc.max_entries = conf->cache_max_entries;
	cc.max_bytes = conf->cache_max_bytes;
	cc.ttl_ms = conf->cache_ttl_ms;
	cc.negative_ttl_ms = conf->cache_negative_ttl_ms;
	cc.load = load;
	cc.ctx = r;
	cc.make_aux = make_response;
	cc.free_aux = free_response;
	cc.aux_bytes = 512;
	if ((r->trusted = clientip_new(conf->trusted_proxies, errstr, errstr_size)) == NULL ||
	    (r->cache = lcache_new(&cc, errstr, errstr_size)) == NULL ||
	    (r->cold = workq_new(conf->cold_lookup_threads, (size_t)conf->cold_lookup_queue,
	    "lp-lookup", errstr, errstr_size)) == NULL) {
		redirect_free(r);
		return NULL;
	}
	r->unknown = json_response("{\"error\":{\"code\":\"not_found\",\"message\":\"no such short link\"}}");
	r->not_yet = json_response("{\"error\":{\"code\":\"not_yet_valid\",\"message\":\"this link is not active yet\"}}");
	r->gone = json_response("{\"error\":{\"code\":\"gone\",\"message\":\"this link is no longer available\"}}");
	if (r->unknown == NULL || r->not_yet == NULL || r->gone == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		redirect_free(r);
		return NULL;
	}
	return r;
}

void
redirect_free(struct redirect *r)
{
	if (r == NULL)
		return;
	workq_free(r->cold); /* before the cache its lookups use */
	if (r->cache != NULL) {
		struct lcache_stats st;

		lcache_stats(r->cache, &st);
		log_info("link cache: hits=%llu misses=%llu loads=%llu load_errors=%llu stale_served=%llu "
		    "waits=%llu evictions=%llu entries=%llu", (unsigned long long)st.hits,
		    (unsigned long long)st.misses, (unsigned long long)st.loads,
		    (unsigned long long)st.load_errors, (unsigned long long)st.stale_served,
		    (unsigned long long)st.waits, (unsigned long long)st.evictions,
		    (unsigned long long)st.entries);
	}
	lcache_free(r->cache);
	clientip_free(r->trusted);
	if (r->unknown)
		MHD_destroy_response(r->unknown);
	if (r->not_yet)
		MHD_destroy_response(r->not_yet);
	if (r->gone)
		MHD_destroy_response(r->gone);
	free(r);
}

void
redirect_invalidate(struct redirect *r, const char *code)
{
	lcache_invalidate(r->cache, code);
}

void
redirect_cache_stats(struct redirect *r, struct lcache_stats *out)
{
	lcache_stats(r->cache, out);
}

void
redirect_cold_stats(struct redirect *r, uint64_t *pending, uint64_t *refused)
{
	struct workq_stats st;

	workq_stats(r->cold, &st);
	*pending = st.queued + st.running;
	*refused = st.refused;
}

static int64_t
wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The answer names what is down without libpq's message (a public path:
 * it names internal hosts, addresses and the database user); that goes to
 * the log, at most every 10 s while it lasts. PostgreSQL's answer is reused
 * for a second, so that a flood of /readyz costs one pool connection a
 * second, not one per request. */
enum MHD_Result
redirect_ready(struct redirect *r, struct http_req *req)
{
	static _Atomic int64_t logged_us, pinged_us, ping_started_us;
	static atomic_int pinged_ok;
	char errstr[512];
	int64_t now = wall_us(), last = atomic_load(&logged_us), at = atomic_load(&pinged_us);
	int64_t started = 0;
	int pg_ok, kafka_ok = r->events == NULL || events_connected(r->events);

	if (at != 0 && now >= at && now - at < 1000000) {
		pg_ok = atomic_load(&pinged_ok);
	} else if (at != 0 && !atomic_compare_exchange_strong(&ping_started_us, &started, now)) {
		/* one ping at a time (each holds an HTTP thread and a pool
		 * connection): the others answer from the last one, and a ping
		 * under way for over 2 s says PostgreSQL is not answering;
		 * before the first answer every probe pings (none to reuse) */
		pg_ok = atomic_load(&pinged_ok) && now - started < 2000000;
	} else {
		pg_ok = pgpool_ping(r->pg, errstr, sizeof(errstr)) == 0;
		atomic_store(&pinged_ok, pg_ok);
		atomic_store(&pinged_us, wall_us());
		atomic_store(&ping_started_us, 0);
		if (!pg_ok && (now - last > 10000000 || now < last) &&
		    atomic_compare_exchange_strong(&logged_us, &last, now))
			log_warnx("readyz: PostgreSQL: %s", errstr);
	}
	return http_json(req, pg_ok && kafka_ok ? 200 : 503, json_pack("{s:s, s:s, s:s}",
	    "status", pg_ok && kafka_ok ? "ready" : "unavailable",
	    "postgresql", pg_ok ? "ok" : "unreachable",
	    "kafka", r->events == NULL ? "disabled" : kafka_ok ? "ok" :
	    events_failed(r->events) ? "producer failed (fatal error): restart" :
	    "no broker reachable"));
}

/* Copies the code of "/{code}" or "/?{code}[&rest]" into out and points
 * *query at the query string that follows the code (NULL when none).
 * Returns 0 when there is no code or it is longer than size - 1. */
static int
code_of(struct http_req *req, char *out, size_t size, const char **query)
{
	const char *p = req->path + 1;
	size_t n;

	*query = req->query;
	if (*p == '\0' && req->query != NULL) {
		p = req->query;
		n = strcspn(p, "&");
		*query = p[n] == '&' && p[n + 1] != '\0' ? p + n + 1 : NULL;
		if (memchr(p, '%', n) != NULL) {
			/* raw here (the path form is decoded by libmicrohttpd):
			 * "/?%68uTtLP" is "/?huTtLP", as "/%68uTtLP" is "/huTtLP" */
			char tmp[3 * CODES_ALIAS_MAX + 1];
			size_t m;

			if (n == 0 || n >= sizeof(tmp))
				return 0;
			memcpy(tmp, p, n);
			tmp[n] = '\0';
			m = MHD_http_unescape(tmp);
			if (m == 0 || m >= size || strlen(tmp) != m) /* a %00 */
				return 0;
			memcpy(out, tmp, m + 1);
			return 1;
		}
	} else {
		n = strlen(p);
		if (*query != NULL && **query == '\0')
			*query = NULL;
	}
	if (n == 0 || n >= size)
		return 0;
	memcpy(out, p, n);
	out[n] = '\0';
	return 1;
}

/* The target with the visit's query string appended (a link with
 * forward_query): after the target's own query with '&' ('?' when it has
 * none), before its fragment; a '#' in the query goes as %23, as it would
 * start a fragment. Returns a malloc'd string (the caller frees), or NULL
 * when out of memory or when the Location would pass HTTP_LOCATION_MAX:
 * the caller then sends the target alone. */
static char *
forward_url(const char *target, const char *query)
{
	size_t frag = strcspn(target, "#"), tl = strlen(target), ql = strlen(query), hashes = 0;
	const char *qm = memchr(target, '?', frag);
	char *out, *w;

	for (const char *p = query; (p = strchr(p, '#')) != NULL; p++)
		hashes++;
	if ((out = malloc(tl + ql + 2 * hashes + 2)) == NULL)
		return NULL;
	memcpy(out, target, frag);
	w = out + frag;
	if (qm == NULL)
		*w++ = '?';
	else if (target[frag - 1] != '?' && target[frag - 1] != '&')
		*w++ = '&';
	for (const char *p = query; *p != '\0'; p++) {
		if (*p == '#') {
			memcpy(w, "%23", 3);
			w += 3;
		} else {
			*w++ = *p;
		}
	}
	memcpy(w, target + frag, tl - frag + 1);
	if (http_location_length(out) > HTTP_LOCATION_MAX) {
		free(out);
		return NULL;
	}
	return out;
}


/* The status a link answers with now; counts the visit when it redirects. */
static int
link_status(struct lcache_entry *e, int64_t now_us)
{
	const struct lcache_rec *l = &e->rec;

	if (l->id == 0)
		return 404;
	if (l->deleted || l->disabled)
		return 410;
	if (now_us < l->valid_since_us)
		return 404;
	if (now_us >= l->expires_at_us)
		return 410;
	if (l->max_visits > 0 &&
	    l->hits + atomic_fetch_add_explicit(&e->hits_local, 1, memory_order_relaxed) >=
	    l->max_visits)
		return 410;
	return l->redirect_type;
}

/* Answers with what e (referenced; NULL: not a code) says, publishes the
 * visit event, and releases e. */
static enum MHD_Result
answer(struct redirect *r, struct http_req *req, const char *code, const char *query,
       struct lcache_entry *e, int64_t now)
{
	char ip[CLIENTIP_MAX], xff[2048];
	char *fwd = NULL;         /* the target with the query (forward_query) */
	struct MHD_Response *resp;
	struct events_visit v;
	enum MHD_Result ret;
	int status = e != NULL ? link_status(e, now) : 404;

	if (status == 404)
		resp = e != NULL && e->rec.id != 0 ? r->not_yet : r->unknown;
	else if (status == 410)
		resp = r->gone;
	else if (e->rec.forward_query && query != NULL &&
	    (fwd = forward_url(e->rec.long_url, query)) != NULL)
		resp = NULL;
	else
		resp = e->aux;
	req->status = status;
	if (resp != NULL && http_draining(req)) /* fresh answers: they close the connection */
		ret = resp == r->unknown ? http_error(req, 404, "not_found", NULL, "no such short link") :
		    resp == r->not_yet ? http_error(req, 404, "not_yet_valid", NULL,
		    "this link is not active yet") :
		    resp == r->gone ? http_error(req, 410, "gone", NULL,
		    "this link is no longer available") :
		    http_redirect(req, (unsigned)status, e->rec.long_url);
	else if (resp != NULL)
		ret = MHD_queue_response(req->conn, (unsigned)status, resp);
	else
		ret = http_redirect(req, (unsigned)status, fwd != NULL ? fwd : e->rec.long_url);
	free(fwd);
	if (r->events != NULL) {
		static const char *const names[] = { MHD_HTTP_HEADER_USER_AGENT,
		    MHD_HTTP_HEADER_REFERER, MHD_HTTP_HEADER_ACCEPT_LANGUAGE, MHD_HTTP_HEADER_HOST };
		const char *vals[4];

		http_headers(req, names, vals, 4);
		v.code = code;
		v.link_id = e != NULL ? e->rec.id : 0;
		v.status = status;
		/* X-Forwarded-For is only read (all of its headers) from a
		 * trusted proxy. */
		v.ip = clientip_resolve(r->trusted, req->peer,
		    clientip_peer_trusted(r->trusted, req->peer) ?
		    http_header_join(req, "X-Forwarded-For", xff, sizeof(xff)) : NULL, ip);
		v.user_agent = vals[0];
		v.referer = vals[1];
		v.accept_language = vals[2];
		v.host = vals[3];
		v.query = query;
		v.ts_us = now;
		events_publish(r->events, &v);
	}
	lcache_release(r->cache, e);
	return ret;
}

static enum MHD_Result
lookup_failed(struct http_req *req, const char *code, const char *errstr)
{
	log_warnx("redirect %s: %s", code, errstr);
	return http_error(req, 503, "unavailable", NULL, "try again");
}

/* A lookup taken off the HTTP thread. */
struct cold {
	struct redirect *r;
	struct http_deferred *deferred;
	struct lcache_entry *e;  /* the result (referenced), NULL when it failed */
	int refused;             /* not queued: the queue was full */
	int64_t now;             /* the request's arrival (wall clock, µs) */
	struct lcache_waiter waiter; /* waiting for another request's load */
	char errstr[256];
	char code[CODES_ALIAS_MAX + 1];
};

/* On the thread whose load of c->code ended (e referenced, or NULL). */
static void
cold_loaded(void *arg, struct lcache_entry *e)
{
	struct cold *c = arg;

	c->e = e;
	if (e == NULL)
		errstr_set(c->errstr, sizeof(c->errstr), "the lookup of \"%s\" failed", c->code);
	http_resume(c->deferred);
}

/* On a cold-lookup thread: may wait on Redis, PostgreSQL or another
 * request's load of the same code. c may be freed once http_resume ran. */
static void
cold_main(void *arg)
{
	struct cold *c = arg;

	c->e = lcache_get(c->r->cache, c->code, c->errstr, sizeof(c->errstr));
	http_resume(c->deferred);
}

/* On the connection's thread once the lookup is done (req NULL: the client
 * went away). */
static enum MHD_Result
cold_resumed(void *arg, struct http_req *req)
{
	struct cold *c = arg;
	char code[CODES_ALIAS_MAX + 1];
	const char *query;
	enum MHD_Result ret;

	if (req == NULL) {
		lcache_release(c->r->cache, c->e);
		free(c);
		return MHD_NO;
	}
	if (c->refused)
		ret = http_error(req, 503, "overloaded", NULL,
		    "too many lookups of uncached links are waiting; try again");
	else if (c->e == NULL)
		ret = lookup_failed(req, c->code, c->errstr);
	else {
		/* the query again (the request as before it was deferred: the
		 * code is found as it was) */
		(void)code_of(req, code, sizeof(code), &query);
		ret = answer(c->r, req, c->code, query, c->e, c->now);
	}
	free(c);
	return ret;
}

/* Looks code up on a cold-lookup thread, or waits for another request's
 * load of it. Returns 0 with the request deferred (answered by
 * cold_resumed), or -1 when out of memory or the server stopping (no
 * deferral any more: the caller answers 503 rather than wait here). */
static int
defer_lookup(struct redirect *r, struct http_req *req, const char *code, int64_t now)
{
	struct cold *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return -1;
	c->r = r;
	c->now = now;
	snprintf(c->code, sizeof(c->code), "%s", code);
	/* Suspended before a thread can finish the lookup and resume it. */
	if ((c->deferred = http_defer(req, cold_resumed, c)) == NULL) {
		free(c); /* the server stopping */
		return -1;
	}
	/* A code another request is loading: told when that load ends,
	 * without a thread of its own. */
	c->waiter.fn = cold_loaded;
	c->waiter.arg = c;
	if (lcache_wait(r->cache, code, &c->waiter))
		return 0;
	if (workq_submit(r->cold, cold_main, c) < 0) {
		c->refused = 1;
		http_resume(c->deferred);
	}
	return 0;
}

enum MHD_Result
redirect_handle(struct redirect *r, struct http_req *req)
{
	char code[CODES_ALIAS_MAX + 1];
	const char *query;
	struct lcache_entry *e = NULL;
	int64_t now = wall_us();

	if (!http_is_get(req))
		return http_not_allowed(req, "GET, HEAD");
	if (strcmp(req->path, "/") == 0 && req->query == NULL)
		return http_json(req, 200, json_pack("{s:s, s:s}", "service", "linkpulse",
		    "api", "/api/v1"));
	if (!code_of(req, code, sizeof(code), &query))
		return http_error(req, 404, "not_found", NULL, "no such short link");
	/* What browsers and crawlers fetch by themselves (a browser showing a
	 * 404 asks for its icon): never a code ('.' is in none), and not a
	 * visit, so no orphan event. */
	if (strcmp(code, "favicon.ico") == 0 || strcmp(code, "robots.txt") == 0)
		return http_error(req, 404, "not_found", NULL, "no such short link");
	if (codes_valid_alias(code) && (e = lcache_peek(r->cache, code)) == NULL)
		return defer_lookup(r, req, code, now) == 0 ? MHD_YES : http_stopping(req);
	return answer(r, req, code, query, e, now);
}
