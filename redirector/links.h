/* links.h - short links: validation, creation with the three code strategies
 * (random pool, hash, sequence) or a custom alias, dedupe, lookup, update,
 * soft delete, listing and batch resolve. PostgreSQL is the truth; Redis
 * caches link records and the MD5 -> code map. */
#ifndef LP_LINKS_H
#define LP_LINKS_H

#include "bloom.h"
#include "codes.h"
#include "kv.h"
#include "pgpool.h"

#include <jansson.h>
#include <stddef.h>

enum links_strategy { LINKS_RANDOM = 0, LINKS_SEQUENCE = 1, LINKS_HASH = 2, LINKS_ALIAS = 3 };

struct pool;

/* The built-in sequence_secret: public (it is in the sources), so
 * links_new refuses it unless base_url's host is a loopback one (and so the
 * examples' "change-me..." placeholder, and any key under 16 bytes). */
#define LINKS_DEV_SEQUENCE_SECRET "linkpulse-dev-sequence-secret"

struct links_conf {
	const char *base_url;     /* e.g. "https://s.example" (no trailing slash) */
	int default_length;       /* 1..8 */
	enum links_strategy default_strategy;
	const char *seq_secret;   /* key of the sequence permutation */
	int cache_ttl_s;          /* Redis link-record TTL */
	int batch_workers;        /* threads running queued creates as batches, >= 1 */
	int lookup_timeout_ms;    /* links_get/list/resolve/patch/delete's statement, at most (then 503) */
};

/* A failure to report to the API client. */
struct links_err {
	int status;               /* HTTP status: 400, 404, 409, 503, ... */
	const char *code;         /* machine-readable, e.g. "invalid_url" */
	char field[72];           /* offending field, "" when none */
	char msg[512];
};

struct links;

/* Borrows pg, kv, bloom and pool (all must outlive it); copies conf's strings. */
struct links *links_new(const struct links_conf *conf, struct pgpool *pg, struct kv *kv,
                        struct bloom *bloom, struct pool *pool, char *errstr, size_t errstr_size);
void links_free(struct links *L);

/* q (borrowed, or NULL): where links_create_start runs a create that the
 * batch workers do not take (an alias, the hash or sequence strategy, a
 * length other than the default) when it has a done callback, instead of on
 * the caller's thread (an HTTP thread). */
struct workq;
void links_set_offload(struct links *L, struct workq *q);

/* A create that may wait for a batch worker without holding a thread. */
struct links_pending;

/* Creates a link from a JSON request object (borrowed until
 * links_pending_free). Returns NULL when out of memory, else a pending
 * create (caller frees with links_pending_free once its result is taken) and
 * sets *queued: 1 when a batch worker (or a thread of links_set_offload's
 * queue) runs it and then calls done(arg) from its thread, 0 when its result
 * is ready now (done is not called). With done NULL it never queues: a
 * batched create is waited for here. */
struct links_pending *links_create_start(struct links *L, json_t *req, long long key_id,
                                         void (*done)(void *arg), void *arg, int *queued);
/* The result of a finished create: 0 with *out the link JSON (caller owns;
 * taken once) and *created 1 for a new link, 0 for an existing one returned
 * by dedupe; or -1 with *err filled. */
int links_pending_result(struct links_pending *p, json_t **out, int *created,
                         struct links_err *err);
void links_pending_free(struct links_pending *p);

/* One item's outcome in a bulk create. */
struct links_result {
	int rc;                   /* 0: link set; -1: err set */
	json_t *link;             /* caller owns when rc == 0 */
	int created;              /* 1 new (201), 0 existing one by dedupe (200) */
	struct links_err err;
};

/* Creates every link of items (a JSON array, borrowed); res has one slot
 * per item, filled in input order. Random-strategy items go through one
 * set-based round (see linkbatch.h); the others one at a time. */
void links_create_bulk(struct links *L, json_t *items, long long key_id,
                       struct links_result *res);

/* Link JSON for code (deleted links included, with "deleted": true); a
 * statement past lookup_timeout_ms is cancelled: 503 database_unavailable. */
int links_get(struct links *L, const char *code, json_t **out, struct links_err *err);

/* Applies a PATCH object; returns the updated link JSON. */
int links_patch(struct links *L, const char *code, json_t *req, long long key_id, json_t **out,
                struct links_err *err);

/* Soft delete: deleted = 1; the code is never handed out again. */
int links_delete(struct links *L, const char *code, long long key_id, struct links_err *err);

/* Keyset-paginated listing, newest first: {"links": [...], "next_cursor": ...}. */
int links_list(struct links *L, const char *tag, long long limit, const char *cursor,
               json_t **out, struct links_err *err);

/* codes: JSON array of strings (borrowed). Returns an array of long URLs
 * (null for unknown or deleted codes) in input order. */
int links_resolve(struct links *L, json_t *codes, json_t **out, struct links_err *err);

/* Validates a target URL: http/https, parses with a host, <= 4096 bytes, no
 * control characters, not this service's own host. 0 or -1 with err. */
int links_check_url(struct links *L, const char *url, const char *field, struct links_err *err);

/* Writes a link record (borrowed JSON as links_get returns it) to the Redis
 * cache (lp:link:<code> with the configured TTL, lp:md5code), unless an edit
 * of the code fenced it in the last minute (links.c). Best effort. */
void links_cache(struct links *L, json_t *link);

/* After a change committed: fences code again for a minute and drops its
 * cached Redis record and MD5 map entry (md5 may be NULL). Best effort. */
void links_invalidate(struct links *L, const char *code, const char *md5);

#endif
