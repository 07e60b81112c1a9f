/* builder.h - the loading lanes: lane k takes the messages of the partitions
 * the consumer gives it (consumer_lane), builds them into a batch on a thread
 * of its own (parse, validation, enrichment, COPY rows) and loads each closed
 * batch on a second thread of its own, so a lane goes on building while it
 * loads and never waits for the other lane. */
#ifndef LP_INGEST_BUILDER_H
#define LP_INGEST_BUILDER_H

#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "batch.h"
#include "loader.h"

struct builder;

/* Called on lane's loading thread after each load (rc 0: committed, *res
 * filled; -1: rolled back, nothing of the batch stored, err says why) with
 * the batch still intact; and after a message could not be queued, built or
 * closed (batch and res NULL, rc -1). Must be thread-safe: the lanes call it
 * at once. */
typedef void builder_done_cb(void *ctx, int lane, const struct batch *batch, int rc,
                             const struct loader_result *res, const char *err);

/* Settings of each lane (the strings are read at builder_new only). */
struct builder_conf {
	const char *city_db, *isp_db, *locale, *uap_regexes; /* enrich_new */
	size_t ua_cache_entries;
	size_t geoip_cache_records; /* 0: no GeoIP record cache */
	size_t batch_rows;          /* rows to preallocate per lane buffer */
	struct loader *loader;      /* the caller's; lane k loads with loader_lane_load */
	builder_done_cb *done;
	void *ctx;
};

/* Starts LOADER_LANES lanes (two threads and an enricher each). Returns a
 * builder the caller owns (builder_free; free it before the loader), or NULL
 * with errstr set. */
struct builder *builder_new(const struct builder_conf *bc, char *errstr, size_t errstr_size);
/* Stops the threads (dropping messages still queued and batches not yet
 * loaded: call builder_drain first to keep them) and frees b. */
void builder_free(struct builder *b);

/* Queues m (a message without error; ownership passes to the builder) for
 * lane (0..LOADER_LANES-1): built into the lane's open batch, then destroyed.
 * A partition's messages must all go to one lane until the lanes are drained
 * (builder_drain or builder_reset): the lanes commit on their own, so a
 * partition split between two could have its offsets stored out of order. */
void builder_push(struct builder *b, int lane, rd_kafka_message_t *m);
/* Closes every lane's open batch at this point of its queue: the lane loads
 * it once it is built and the lane's previous batch is loaded (an empty one
 * is dropped). Waits first while a lane has not yet handed over the batch of
 * the previous close, so that each lane holds at most one batch loading, one
 * being built and the messages queued after it. */
void builder_close(struct builder *b);
/* Waits until every lane has built everything queued and loaded every
 * closed batch (messages after the last close stay in the open batch). */
void builder_drain(struct builder *b);
/* 1 once a build or a load failed (done told why): from then on the lanes
 * drop what they are given until builder_reset; 0 otherwise. */
int builder_failed(struct builder *b);
/* After a failure: waits for the lanes, drops every open batch and clears
 * the failure. The caller then re-reads from the stored offsets. */
void builder_reset(struct builder *b);

#endif
