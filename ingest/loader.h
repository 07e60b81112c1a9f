/* loader.h - loads batches into PostgreSQL, one transaction per lane batch:
 * month partitions, COPY of the new rows into visit_record (after a probe
 * for ids already stored only once a batch met one), the rollups of those
 * rows, rejects and the partitions' next offsets. Each lane has a connection
 * of its own; builder.c runs the lanes' loads on their own threads. */
#ifndef LP_INGEST_LOADER_H
#define LP_INGEST_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "batch.h"

struct loader;

/* A load is split by partition: lane k takes the partitions the consumer
 * gives it (consumer_lane), each lane on its own connection and in its own
 * transaction. */
#define LOADER_LANES 2

/* Outcome of one committed batch. */
struct loader_result {
	uint64_t inserted;   /* new visit_record rows */
	uint64_t duplicates; /* rows already stored (same id and visit_time) */
	uint64_t rejects;    /* visit_reject rows written (or already there) */
	double seconds;      /* the load, from its BEGIN (or first try) to its COMMIT */
};

/* dsn, group and topic are copied; connects lazily. statement_timeout_ms:
 * PostgreSQL's statement_timeout on every lane's connection (0: none).
 * Returns a loader the caller owns (loader_free), or NULL with errstr. */
struct loader *loader_new(const char *dsn, const char *group, const char *topic,
                          int statement_timeout_ms, char *errstr, size_t errstr_size);
/* Closes the connections and frees l (no load may be running). */
void loader_free(struct loader *l);

/* Loads b, holding only messages of lane k's partitions, on lane k's
 * connection in one transaction: its rows, rollups, rejects and its
 * partitions' next offsets. Returns 0 (committed; *res filled) or -1
 * (rolled back, nothing of b stored; errstr says why). One call per lane at
 * a time; lanes run at once. b stays the caller's. */
int loader_lane_load(struct loader *l, int k, const struct batch *b, struct loader_result *res,
                     char *errstr, size_t errstr_size);

/* The calls below connect every lane (loader_connect) and then use lane 0's
 * connection: call them with no load running. */

/* (Re)connects every lane's connection where needed and checks them. Returns
 * 0 or -1. */
int loader_connect(struct loader *l, char *errstr, size_t errstr_size);
/* Reads ingest_offset for the n partitions: offsets[i] = stored next offset,
 * or -1 when there is no row; the statement runs 10 s at most (it is called
 * in librdkafka's rebalance callback). Returns 0 or -1. */
int loader_read_offsets(struct loader *l, const int32_t *partitions, int n, int64_t *offsets,
                        char *errstr, size_t errstr_size);
/* Records [from, to) of partition as lost (to -1: unknown) with reason, and
 * moves the stored next offset to resume_at (when >= 0), in one transaction,
 * while the stored offset is still from (or absent with from 0). Returns 0,
 * 1 when it is not (another member moved it: nothing recorded, errstr says
 * so) or -1. */
int loader_record_lost(struct loader *l, int32_t partition, int64_t from, int64_t to,
                       int64_t resume_at, const char *reason, char *errstr, size_t errstr_size);
/* 1 when link_hour has the hll visitors column (else link_hour_visitor is
 * used); valid after a successful connect. */
int loader_uses_hll(struct loader *l);

#endif
