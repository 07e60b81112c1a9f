/* api.c - /api/v1 routing, authentication and JSON request/response shapes;
 * the link logic itself is in links.c. */
#include "api.h"
#include "apikey.h"
#include "log.h"
#include "workq.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static enum MHD_Result
links_error(struct http_req *req, const struct links_err *err)
{
	return http_error(req, (unsigned)err->status, err->code,
	    err->field[0] ? err->field : NULL, "%s", err->msg);
}

static json_t *
err_json(const struct links_err *err)
{
	json_t *e = json_pack("{s:s, s:s}", "code", err->code, "message", err->msg);

	if (err->field[0])
		json_object_set_new(e, "field", json_string(err->field));
	return e;
}

/* Parses the body as JSON; on failure answers 400 and returns NULL. */
static json_t *
body_json(struct http_req *req, enum MHD_Result *res)
{
	json_error_t jerr;
	json_t *v;

	if (req->body == NULL) {
		*res = http_error(req, 400, "invalid_json", NULL, "a JSON body is required");
		return NULL;
	}
	v = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
	if (v == NULL)
		*res = http_error(req, 400, "invalid_json", NULL, "invalid JSON at line %d column %d: %s",
		    jerr.line, jerr.column, jerr.text);
	return v;
}

/* A single create in flight: the connection is suspended while a batch
 * worker runs it, so no HTTP thread waits (with a few threads, a waiting one
 * would hold up every other connection it serves). */
struct create_ctx {
	struct api *a;
	json_t *body;                   /* owned */
	struct links_pending *pending;  /* owned */
	struct http_deferred *deferred;
};

static void
create_ctx_free(struct create_ctx *c)
{
	links_pending_free(c->pending);
	json_decref(c->body);
	free(c);
}

static void
tell_changed(struct api *a, const char *code)
{
	if (a->changed != NULL && code != NULL)
		a->changed(a->changed_ctx, code);
}

static void
tell_created(struct api *a, const json_t *link)
{
	tell_changed(a, json_string_value(json_object_get(link, "code")));
}

/* On the connection's thread once the create finished (req NULL: the
 * client went away). */
static enum MHD_Result
create_resumed(void *arg, struct http_req *req)
{
	struct create_ctx *c = arg;
	struct links_err err;
	json_t *out;
	int created, rc;

	if (req == NULL) {
		create_ctx_free(c);
		return MHD_NO;
	}
	if (c->pending == NULL) {
		create_ctx_free(c);
		return http_error(req, 503, "internal", NULL, "out of memory");
	}
	rc = links_pending_result(c->pending, &out, &created, &err);
	if (rc == 0 && created)
		tell_created(c->a, out);
	create_ctx_free(c);
	return rc < 0 ? links_error(req, &err) : http_json(req, created ? 201 : 200, out);
}

/* On a batch worker's thread (or at once when the create did not queue). */
static void
create_done(void *arg)
{
	struct create_ctx *c = arg;

	http_resume(c->deferred);
}

static enum MHD_Result
create_one(struct api *a, struct http_req *req, long long key)
{
	enum MHD_Result res;
	json_t *body = body_json(req, &res);
	struct create_ctx *c;
	int queued = 0;

	if (body == NULL)
		return res;
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		json_decref(body);
		return http_error(req, 503, "internal", NULL, "out of memory");
	}
	c->a = a;
	c->body = body;
	/* Suspended before the worker can finish it and resume it; not in the
	 * drain's second half (503: run here it could hold the stop up). */
	if ((c->deferred = http_defer(req, create_resumed, c)) == NULL) {
		create_ctx_free(c);
		return http_stopping(req);
	}
	c->pending = links_create_start(a->links, body, key, create_done, c, &queued);
	if (!queued)
		create_done(c);
	return MHD_YES;
}

/* A bulk create runs off the HTTP threads: it waits on Redis and PostgreSQL
 * for tens of ms, which would hold up every connection its thread serves.
 * Each runs on a thread of its own, at most API_BULK_THREADS at once (past
 * that, on the HTTP thread as before). */
#define API_BULK_THREADS 16

static atomic_int bulk_threads;

struct bulk_ctx {
	struct api *a;
	json_t *body;                   /* owned */
	long long key;
	json_t *out;                    /* owned: the answer's body once done */
	struct http_deferred *deferred;
};

/* Creates the links and builds the answer's body. */
static void
bulk_work(struct bulk_ctx *c)
{
	json_t *items = json_object_get(c->body, "links"), *results;
	size_t i, n = json_array_size(items);
	struct links_result *res_v = calloc(n, sizeof(*res_v));

	if (res_v == NULL)
		return; /* c->out NULL: 503 */
	links_create_bulk(c->a->links, items, c->key, res_v);
	results = json_array();
	for (i = 0; i < n; i++) {
		if (res_v[i].rc < 0) {
			json_t *e = err_json(&res_v[i].err);

			json_object_set_new(e, "index", json_integer((json_int_t)i));
			json_array_append_new(results, json_pack("{s:i, s:o}", "status",
			    res_v[i].err.status, "error", e));
		} else {
			if (res_v[i].created)
				tell_created(c->a, res_v[i].link);
			json_array_append_new(results, json_pack("{s:i, s:o}", "status",
			    res_v[i].created ? 201 : 200, "link", res_v[i].link));
		}
	}
	free(res_v);
	c->out = json_pack("{s:o}", "results", results);
}

/* Answers (req NULL: the client went away) and frees c. */
static enum MHD_Result
bulk_resumed(void *arg, struct http_req *req)
{
	struct bulk_ctx *c = arg;
	json_t *out = c->out;
	enum MHD_Result r = MHD_NO;

	json_decref(c->body);
	free(c);
	if (req == NULL)
		json_decref(out);
	else if (out == NULL)
		r = http_error(req, 503, "internal", NULL, "out of memory");
	else
		r = http_json(req, 200, out);
	return r;
}

static void *
bulk_thread(void *arg)
{
	struct bulk_ctx *c = arg;

	bulk_work(c);
	atomic_fetch_sub(&bulk_threads, 1);
	http_resume(c->deferred); /* c may be gone after this */
	return NULL;
}

/* On an API thread (bulk_threads all busy). */
static void
bulk_job(void *arg)
{
	struct bulk_ctx *c = arg;

	bulk_work(c);
	http_resume(c->deferred); /* c may be gone after this */
}

static enum MHD_Result
create_bulk(struct api *a, struct http_req *req, long long key)
{
	enum MHD_Result res;
	json_t *body = body_json(req, &res), *items;
	struct bulk_ctx *c;
	pthread_t t;

	if (body == NULL)
		return res;
	items = json_object_get(body, "links");
	if (!json_is_object(body) || json_object_size(body) != 1 || !json_is_array(items)) {
		json_decref(body);
		return http_error(req, 400, "invalid_field", "links",
		    "the body must be {\"links\": [ ... ]} with nothing else");
	}
	if (json_array_size(items) == 0 || json_array_size(items) > API_MAX_BATCH) {
		size_t n = json_array_size(items);

		json_decref(body);
		return http_error(req, n ? 413 : 400, "invalid_field", "links",
		    "links must hold 1 to %d items, not %zu", API_MAX_BATCH, n);
	}
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		json_decref(body);
		return http_error(req, 503, "internal", NULL, "out of memory");
	}
	c->a = a;
	c->body = body;
	c->key = key;
	if ((c->deferred = http_defer(req, bulk_resumed, c)) == NULL) {
		json_decref(c->body); /* the server stopping */
		free(c);
		return http_stopping(req);
	}
	if (atomic_fetch_add(&bulk_threads, 1) < API_BULK_THREADS) {
		if (pthread_create(&t, NULL, bulk_thread, c) == 0)
			pthread_detach(t);
		else  /* no thread: work here, answer once resumed */
			bulk_thread(c);
		return MHD_YES;
	}
	atomic_fetch_sub(&bulk_threads, 1);
	/* all those threads busy: on an API thread, else here */
	if (a->offload == NULL || workq_submit(a->offload, bulk_job, c) < 0) {
		bulk_work(c);
		http_resume(c->deferred);
	}
	return MHD_YES;
}

static enum MHD_Result
resolve(struct api *a, struct http_req *req)
{
	enum MHD_Result res;
	struct links_err err;
	json_t *body = body_json(req, &res), *codes, *out;

	if (body == NULL)
		return res;
	codes = json_object_get(body, "codes");
	if (!json_is_object(body) || json_object_size(body) != 1 || !json_is_array(codes)) {
		json_decref(body);
		return http_error(req, 400, "invalid_field", "codes",
		    "the body must be {\"codes\": [ ... ]} with nothing else");
	}
	if (json_array_size(codes) > API_MAX_BATCH) {
		size_t n = json_array_size(codes);

		json_decref(body);
		return http_error(req, 413, "invalid_field", "codes",
		    "codes must hold at most %d items, not %zu", API_MAX_BATCH, n);
	}
	if (links_resolve(a->links, codes, &out, &err) < 0) {
		json_decref(body);
		return links_error(req, &err);
	}
	json_decref(body);
	return http_json(req, 200, json_pack("{s:o}", "urls", out));
}

static enum MHD_Result
list(struct api *a, struct http_req *req)
{
	const char *tag = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "tag");
	const char *lim = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "limit");
	const char *cur = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "cursor");
	struct links_err err;
	long long limit = 50;
	char *end;
	json_t *out;

	if (lim != NULL) {
		limit = strtoll(lim, &end, 10);
		if (*lim == '\0' || *end != '\0' || limit < 1 || limit > 1000)
			return http_error(req, 400, "invalid_field", "limit",
			    "limit must be an integer from 1 to 1000");
	}
	if (links_list(a->links, tag, limit, cur, &out, &err) < 0)
		return links_error(req, &err);
	return http_json(req, 200, out);
}

static enum MHD_Result
one(struct api *a, struct http_req *req, const char *code, long long key)
{
	struct links_err err;
	enum MHD_Result res;
	json_t *out, *body;

	if (http_is_get(req)) {
		if (links_get(a->links, code, &out, &err) < 0)
			return links_error(req, &err);
		return http_json(req, 200, out);
	}
	if (strcmp(req->method, "DELETE") == 0) {
		int rc = links_delete(a->links, code, key, &err);

		tell_changed(a, code); /* whatever the outcome, as the edit may have committed */
		if (rc < 0)
			return links_error(req, &err);
		return http_json(req, 200, json_pack("{s:s, s:b}", "code", code, "deleted", 1));
	}
	if (strcmp(req->method, "PATCH") == 0) {
		int rc;

		if ((body = body_json(req, &res)) == NULL)
			return res;
		rc = links_patch(a->links, code, body, key, &out, &err);
		json_decref(body);
		tell_changed(a, code);
		if (rc < 0)
			return links_error(req, &err);
		return http_json(req, 200, out);
	}
	return http_not_allowed(req, "GET, HEAD, PATCH, DELETE");
}

static enum MHD_Result
serve(struct api *a, struct http_req *req, const char *sub)
{
	const char *auth = http_header(req, MHD_HTTP_HEADER_AUTHORIZATION);
	char errstr[512];
	long long key;

	if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0)
		return http_error(req, 401, "unauthorized", NULL,
		    "an \"Authorization: Bearer <key>\" header is required");
	/* A request with a body had its key checked when its headers came
	 * (http_conf.keep_body): that verdict stands, with no second query;
	 * only a revocation the cache has seen since then is heeded. */
	if (req->body_verdict == HTTP_KEEP_STOPPING)
		return http_stopping(req);
	if (req->body_verdict == HTTP_KEEP_OVERLOADED)
		return http_error(req, 503, "overloaded", NULL,
		    "too many requests are waiting for the database; try again");
	if (req->body_verdict != HTTP_KEEP_NOT_ASKED)
		key = req->body_verdict > 0 && apikey_check_cached(auth + 7) == 0 ? 0 :
		    req->body_verdict;
	else if ((key = apikey_check(a->pg, auth + 7, errstr, sizeof(errstr))) < 0)
		log_warnx("api key check: %s", errstr);
	if (key < 0 && req->body_verdict != HTTP_KEEP_NOT_ASKED)
		/* PostgreSQL busy or down when the headers came: the body was
		 * dropped, the request is not a bad one */
		return http_error(req, 503, "database_unavailable", NULL,
		    "could not check the API key when the request arrived: try again");
	if (key < 0)
		return http_error(req, 503, "database_unavailable", NULL,
		    "could not check the API key: try again");
	if (key == 0)
		return http_error(req, 401, "unauthorized", NULL, "unknown or revoked API key");

	if (strcmp(sub, "/links") == 0) {
		if (strcmp(req->method, "POST") == 0)
			return create_one(a, req, key);
		if (http_is_get(req))
			return list(a, req);
		return http_not_allowed(req, "GET, HEAD, POST");
	}
	if (strcmp(sub, "/links/bulk") == 0 || strcmp(sub, "/links/resolve") == 0) {
		if (strcmp(req->method, "POST") != 0)
			return http_not_allowed(req, "POST");
		return sub[7] == 'b' ? create_bulk(a, req, key) : resolve(a, req);
	}
	if (strncmp(sub, "/links/", 7) == 0 && sub[7] != '\0' && strchr(sub + 7, '/') == NULL)
		return one(a, req, sub + 7, key);
	return http_error(req, 404, "not_found", NULL, "no API endpoint %s /api/v1%s",
	    req->method, sub);
}

/* On an offload thread (http_offload): the path is "/api/v1" + sub. */
static enum MHD_Result
serve_offloaded(void *ctx, struct http_req *req)
{
	return serve(ctx, req, req->path + 7);
}

enum MHD_Result
api_handle(struct api *a, struct http_req *req, const char *sub)
{
	const char *auth = http_header(req, MHD_HTTP_HEADER_AUTHORIZATION);

	/* What is refused without PostgreSQL is refused here, before it could
	 * take a place in the offload queue. */
	if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0 || !apikey_shaped(auth + 7))
		return serve(a, req, sub);
	if (a->offload != NULL && (strcmp(req->method, "POST") != 0 ||
	    (strcmp(sub, "/links") != 0 && strcmp(sub, "/links/bulk") != 0)))
		return http_offload(req, a->offload, serve_offloaded, a);
	return serve(a, req, sub);
}
