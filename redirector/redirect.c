/* redirect.c - the redirect path: code from "/{code}" or "/?{code}", link
 * state checked in one query (404 unknown or not yet valid; 410 expired,
 * disabled, deleted or over max visits), then the link's redirect. */
#include "redirect.h"
#include "codes.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct redirect {
	struct pgpool *pg;
	struct kv *kv;
};

struct redirect *
redirect_new(const struct redirect_conf *conf, struct pgpool *pg, struct kv *kv,
             char *errstr, size_t errstr_size)
{
	struct redirect *r = calloc(1, sizeof(*r));

	(void)conf;
	if (r == NULL) {
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	r->pg = pg;
	r->kv = kv;
	return r;
}

void
redirect_free(struct redirect *r)
{
	free(r);
}

enum MHD_Result
redirect_ready(struct redirect *r, struct http_req *req)
{
	char errstr[512];

	if (pgpool_ping(r->pg, errstr, sizeof(errstr)) < 0)
		return http_json(req, 503, json_pack("{s:s, s:s}", "status", "unavailable",
		    "postgresql", errstr));
	return http_json(req, 200, json_pack("{s:s, s:s}", "status", "ready", "postgresql", "ok"));
}

/* Copies the code of "/{code}" or "/?{code}" into out; 0 when there is none. */
static int
code_of(struct http_req *req, char *out, size_t size)
{
	const char *p = req->path + 1;
	size_t n;

	if (*p == '\0' && req->query != NULL) {
		p = req->query;
		n = strcspn(p, "&=");
	} else {
		n = strlen(p);
	}
	if (n == 0 || n >= size)
		return 0;
	memcpy(out, p, n);
	out[n] = '\0';
	return 1;
}

enum MHD_Result
redirect_handle(struct redirect *r, struct http_req *req)
{
	char code[CODES_ALIAS_MAX + 1], errstr[512];
	const char *params[1] = { code };
	PGconn *c;
	PGresult *res;
	enum MHD_Result ret;
	int status;

	if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0)
		return http_error(req, 405, "method_not_allowed", NULL, "only GET and HEAD redirect");
	if (strcmp(req->path, "/") == 0 && req->query == NULL)
		return http_json(req, 200, json_pack("{s:s, s:s}", "service", "linkpulse",
		    "api", "/api/v1"));
	if (!code_of(req, code, sizeof(code)) || !codes_valid_alias(code))
		return http_error(req, 404, "not_found", NULL, "no such short link");
	if ((c = pgpool_get(r->pg, 2000, errstr, sizeof(errstr))) == NULL) {
		log_warnx("redirect: %s", errstr);
		return http_error(req, 503, "unavailable", NULL, "try again");
	}
	res = pgpool_exec(c, "SELECT l.long_url, CASE "
	    "WHEN l.deleted <> 0 OR l.disabled THEN 410 "
	    "WHEN l.valid_since IS NOT NULL AND l.valid_since > now() THEN 404 "
	    "WHEN l.expires_at IS NOT NULL AND l.expires_at <= now() THEN 410 "
	    "WHEN l.max_visits IS NOT NULL AND coalesce((SELECT visits FROM link_total t "
	    "WHERE t.url_link_id = l.id), 0) >= l.max_visits THEN 410 "
	    "ELSE l.redirect_type END FROM url_link l WHERE l.code = $1",
	    1, params, NULL, errstr, sizeof(errstr));
	pgpool_put(r->pg, c);
	if (res == NULL) {
		log_warnx("redirect: %s", errstr);
		return http_error(req, 503, "unavailable", NULL, "try again");
	}
	if (PQntuples(res) == 0) {
		PQclear(res);
		return http_error(req, 404, "not_found", NULL, "no such short link");
	}
	status = atoi(PQgetvalue(res, 0, 1));
	if (status == 404 || status == 410)
		ret = http_error(req, (unsigned)status, status == 404 ? "not_yet_valid" : "gone", NULL,
		    status == 404 ? "this link is not active yet" : "this link is no longer available");
	else
		ret = http_redirect(req, (unsigned)status, PQgetvalue(res, 0, 0));
	PQclear(res);
	return ret;
}
