/* redirect.h - GET/HEAD /{code} and /?{code}: finds the link and answers with
 * its redirect, 404 or 410. */
#ifndef LP_REDIRECT_H
#define LP_REDIRECT_H

#include "http.h"
#include "kv.h"
#include "pgpool.h"

struct redirect_conf {
	const char *base_url;
};

struct redirect;

/* Borrows pg and kv. */
struct redirect *redirect_new(const struct redirect_conf *conf, struct pgpool *pg, struct kv *kv,
                              char *errstr, size_t errstr_size);
void redirect_free(struct redirect *r);

/* Answers a request that is not for the API or the health endpoints. */
enum MHD_Result redirect_handle(struct redirect *r, struct http_req *req);

/* GET /readyz: 200 when PostgreSQL answers, else 503. */
enum MHD_Result redirect_ready(struct redirect *r, struct http_req *req);

#endif
