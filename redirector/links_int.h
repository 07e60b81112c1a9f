/* links_int.h - what links.c shares with linkbatch.c (set-based creation):
 * the links handle, parsed request fields, the link column list and the
 * helpers that build errors, JSON and cache entries. Not for other modules. */
#ifndef LP_LINKS_INT_H
#define LP_LINKS_INT_H

#include "links.h"

struct linkbatch;

struct links {
	struct pgpool *pg;
	struct kv *kv;
	struct bloom *bloom;
	struct pool *pool;
	struct linkbatch *batch; /* owned; NULL: every create on the single path */
	char *base_url;          /* owned */
	char base_host[256];
	int default_length;
	enum links_strategy default_strategy;
	struct codes_key seqkey;
	int cache_ttl_s;
	int lookup_timeout_ms;
	struct workq *offload;  /* borrowed: creates the batches cannot take; or NULL */
};

/* Columns every link query returns, in this order (see links_row_json);
 * the url_link row must be aliased l. */
#define LINK_COLS_BASE                                                                 \
	"l.id, l.code, l.short_url, l.long_url, l.long_url_md5, l.strategy, "          \
	"l.redirect_type, to_json(l.valid_since)#>>'{}', to_json(l.expires_at)#>>'{}', " \
	"l.max_visits, array_to_json(l.tags), l.disabled, l.deleted, "
#define LINK_COLS                                                                      \
	LINK_COLS_BASE "to_json(l.create_time)#>>'{}', to_json(l.update_time)#>>'{}', "   \
	"coalesce((SELECT t.visits FROM link_total t WHERE t.url_link_id = l.id), 0), " \
	"l.forward_query"
/* LINK_COLS of a link inserted by the same statement: created and updated at
 * now() (the column defaults; formatted once per statement, not twice per
 * row), and no visit can count yet. */
#define LINK_COLS_NEW                                                                  \
	LINK_COLS_BASE "(SELECT to_json(now())#>>'{}'), (SELECT to_json(now())#>>'{}'), 0, " \
	"l.forward_query"
#define LINK_NCOLS 17

/* The fields a create or patch request may set, checked and in text form
 * for query parameters. Strings are borrowed from the request JSON except
 * tags (owned: free with free()). */
struct fields {
	const char *url;
	const char *alias;
	int strategy;            /* -1 unset */
	int length;              /* 0 unset */
	int has_expires, has_valid, has_max, has_redirect, has_tags, has_disabled, has_url;
	int has_forward;
	const char *expires_at;  /* NULL = clear */
	const char *valid_since;
	char max_visits[24];     /* "" = clear */
	char redirect_type[8];
	char *tags;              /* PostgreSQL array literal, owned */
	int disabled;
	int forward_query;
	int dedupe;
};

/* Fills err (status, machine code, field, message); always returns -1. */
int links_fail(struct links_err *err, int status, const char *code, const char *field,
               const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Logs errstr and fills err with a 503 "database_unavailable"; returns -1. */
int links_db_fail(struct links_err *err, const char *errstr);
/* Link JSON (caller owns) from row i of a LINK_COLS result, starting at column off. */
json_t *links_row_json_at(PGresult *r, int i, int off);
/* Checks req (borrowed) member by member; fills f (f->tags owned by the caller). */
int links_parse_fields(struct links *L, json_t *req, int is_patch, struct fields *f,
                       struct links_err *err);
/* 1 when a create from f may return an existing link: dedupe on, and none of
 * expiry, start time, visit limit or tags asked for (those always make a new
 * link: the existing one would not carry them). Aliases are the caller's. */
int links_fields_dedupe(const struct fields *f);
/* The url_link l that dedupe may return, as SQL (find_existing and the bulk
 * statement): live, no expiry, start time or visit limit, no tags, not an
 * alias. links_dedupable is the same test on a cached link's JSON. */
#define LINKS_DEDUPABLE_SQL \
    "l.deleted = 0 AND NOT l.disabled AND l.expires_at IS NULL AND l.valid_since IS NULL " \
    "AND l.max_visits IS NULL AND l.strategy <> 3 AND l.tags = '{}' AND NOT l.forward_query"
/* The command that writes a link record and its MD5 map entry unless an
 * edit has fenced the code (a Lua script, links.c), in kv_pipeline's argv
 * form: argv points into keys, code, json (the record), ttl (seconds, as
 * text) and md5, which must outlive the call. */
#define LINKS_CACHE_ARGC 10
void links_cache_argv(const char *code, const char *json, const char *ttl, const char *md5,
                      char keys[2][96], const char *argv[LINKS_CACHE_ARGC],
                      size_t lens[LINKS_CACHE_ARGC]);
/* A cached link that dedupe may return for (url, redirect_type). */
int links_dedupable(json_t *link, const char *url, const char *redirect_type);
/* Creates one link from parsed fields on the single (one row at a time) path. */
int links_create_fields(struct links *L, struct fields *f, long long key_id, json_t **out,
                        int *created, struct links_err *err);
/* Strategy and length a create request resolves to. */
enum links_strategy links_strategy_of(const struct links *L, const struct fields *f);
int links_length_of(const struct links *L, const struct fields *f);

#endif
