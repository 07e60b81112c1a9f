/* api.h - the /api/v1 JSON API: bearer-key authentication and the links
 * endpoints (create, bulk, resolve, get, patch, delete, list). */
#ifndef LP_API_H
#define LP_API_H

#include "http.h"
#include "links.h"
#include "pgpool.h"

#define API_MAX_BATCH 1000

struct api {
	struct links *links;   /* borrowed */
	struct pgpool *pg;     /* borrowed, for key checks */
	/* Told each code a create made (201), and each code an edit or a
	 * deletion was asked for, from the thread that answers it: the
	 * redirect cache may hold the code (or remember it as unknown). NULL:
	 * nobody. */
	void (*changed)(void *ctx, const char *code);
	void *changed_ctx;
	/* Borrowed, or NULL (all on the HTTP threads): every call but the
	 * creates (which suspend by themselves) runs on its threads, key check
	 * included (http_offload). */
	struct workq *offload;
};

/* Handles a request whose path starts with "/api/v1"; sub is the rest
 * (points into req->path). */
enum MHD_Result api_handle(struct api *a, struct http_req *req, const char *sub);

#endif
