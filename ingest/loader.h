/* loader.h - loads batches into PostgreSQL, one transaction per lane: month
 * partitions, COPY of the new rows into visit_record (after a probe for ids
 * already stored only once a batch met one), the rollups of those rows,
 * rejects and the partitions' next offsets. A worker thread runs one load at
 * a time so the caller can build the next batch meanwhile. */
#ifndef LP_INGEST_LOADER_H
#define LP_INGEST_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"

struct loader;

/* A load is split by partition: lane k takes partitions p % LOADER_LANES ==
 * k, each on its own connection and in its own transaction. */
#define LOADER_LANES 2

/* Outcome of one committed batch. */
struct loader_result {
	uint64_t inserted;   /* new visit_record rows */
	uint64_t duplicates; /* rows already stored (same id and visit_time) */
	uint64_t rejects;    /* visit_reject rows written (or already there) */
};

/* dsn, group and topic are copied. Starts the worker thread; connects lazily.
 * Returns a loader the caller owns (loader_free), or NULL with errstr. */
struct loader *loader_new(const char *dsn, const char *group, const char *topic,
                          char *errstr, size_t errstr_size);
/* Waits for a running load, stops the worker, closes the connection. */
void loader_free(struct loader *l);

/* Asynchronous load: hands lanes[0..LOADER_LANES-1] to the worker, lanes[k]
 * holding only messages of lane k's partitions (each lane stores its batch's
 * rows and offsets in one transaction). The batches stay the caller's, who must not touch them until
 * loader_wait returns. Only when idle. */
void loader_submit(struct loader *l, struct batch *const *lanes);
/* 1 when a submitted load has finished (loader_wait would not block) or none
 * is running; 0 while it runs. */
int loader_done(struct loader *l);
/* Waits for the submitted load. Returns 0 (committed; *res filled), -1 (rolled
 * back; errstr says why; nothing of the batch is stored), or 1 when nothing
 * was submitted. */
int loader_wait(struct loader *l, struct loader_result *res, char *errstr, size_t errstr_size);

/* The calls below run in the caller's thread and need the loader idle. */

/* Loads lanes synchronously (as loader_submit + loader_wait). */
int loader_load(struct loader *l, struct batch *const *lanes, struct loader_result *res,
                char *errstr, size_t errstr_size);
/* (Re)connects when needed and checks the connection. Returns 0 or -1. */
int loader_connect(struct loader *l, char *errstr, size_t errstr_size);
/* Reads ingest_offset for the n partitions: offsets[i] = stored next offset,
 * or -1 when there is no row. Returns 0 or -1. */
int loader_read_offsets(struct loader *l, const int32_t *partitions, int n, int64_t *offsets,
                        char *errstr, size_t errstr_size);
/* Records [from, to) of partition as lost (to -1: unknown) with reason, and
 * moves the stored next offset to resume_at (when >= 0), in one transaction. */
int loader_record_lost(struct loader *l, int32_t partition, int64_t from, int64_t to,
                       int64_t resume_at, const char *reason, char *errstr, size_t errstr_size);
/* 1 when link_hour has the hll visitors column (else link_hour_visitor is
 * used); valid after a successful connect. */
int loader_uses_hll(struct loader *l);

#endif
