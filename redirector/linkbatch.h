/* linkbatch.h - set-based creation of random-strategy links: many creates (a
 * bulk request, or single requests queued by concurrent clients) become one
 * Redis round trip for pool codes and dedupe lookups, one SQL statement that
 * dedupes, claims the codes and inserts, and one commit. */
#ifndef LP_LINKBATCH_H
#define LP_LINKBATCH_H

#include "links_int.h"

#include <jansson.h>
#include <semaphore.h>
#include <stddef.h>

/* One create. The caller fills f and key_id; linkbatch fills the rest. */
struct linkbatch_item {
	struct fields *f;          /* borrowed, parsed, redirect_type set */
	long long key_id;
	int rc;                    /* 0 created or deduped, -1 failed (err) */
	json_t *out;               /* the link; the caller owns it when rc == 0 */
	int created;               /* 1 new link (201), 0 existing one (200) */
	struct links_err err;
	/* private */
	char md5[33];
	char code[16];
	int dedupe, dup_of, state;
	int src;                   /* where code came from (SRC_* in linkbatch.c) */
	struct linkbatch_item *next;
	void (*done)(void *arg);   /* called by the worker when a queued item is
	                            * finished; the item may be freed by then */
	void *done_arg;
};

struct linkbatch;

/* Starts workers threads that drain the queue of single creates, up to
 * max_batch per statement. Borrows L (must outlive it). */
struct linkbatch *linkbatch_new(struct links *L, int workers, int max_batch, char *errstr,
                                size_t errstr_size);
/* Finishes queued creates, stops the workers, frees. */
void linkbatch_free(struct linkbatch *b);

/* 1 when f can take the set-based path: random strategy at the pool's length. */
int linkbatch_eligible(const struct links *L, const struct fields *f);

/* Queues it (f, key_id, done and done_arg set; the rest zeroed) for a
 * worker, which runs it with others and then calls done(done_arg) from its
 * thread. it and it->f are borrowed until then. */
void linkbatch_enqueue(struct linkbatch *b, struct linkbatch_item *it);

/* Like linkbatch_enqueue (it->f and it->key_id set, done unset), then waits
 * until a worker ran it with others; its rc, out (owned by the caller),
 * created and err are then the result. */
void linkbatch_wait(struct linkbatch *b, struct linkbatch_item *it);

/* Runs n eligible items now in the caller's thread (bulk requests). Their
 * link records are not written to Redis (the first redirect caches each);
 * queued single creates' are. */
void linkbatch_run(struct links *L, struct linkbatch_item **items, size_t n);

#endif
