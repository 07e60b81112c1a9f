/* builder.h - builds the lanes of a batch on threads of their own: message
 * k's parse, validation, enrichment and COPY rows run on the thread of its
 * partition's lane (p % LOADER_LANES), in the order the messages came. */
#ifndef LP_INGEST_BUILDER_H
#define LP_INGEST_BUILDER_H

#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "batch.h"
#include "loader.h"

struct builder;

/* Settings of each lane's enricher (enrich_new; the strings are read at
 * builder_new only). */
struct builder_conf {
	const char *city_db, *isp_db, *locale, *uap_regexes;
	size_t ua_cache_entries;
	size_t geoip_cache_records; /* 0: no GeoIP record cache */
};

/* Starts LOADER_LANES threads, each with an enricher of its own. Returns a
 * builder the caller owns (builder_free), or NULL with errstr set. */
struct builder *builder_new(const struct builder_conf *bc, char *errstr, size_t errstr_size);
/* Stops the threads (destroying messages still queued) and frees b. */
void builder_free(struct builder *b);

/* Where lane k's messages go from now on: lanes[k], which the builder may
 * write until the next builder_sync returns. Call with the builder idle
 * (after builder_new or builder_sync). */
void builder_set_targets(struct builder *b, struct batch *const *lanes);
/* Queues m (a message without error, ownership passes to the builder) for
 * its partition's lane: batch_add into that lane's target, then destroyed. */
void builder_push(struct builder *b, rd_kafka_message_t *m);
/* Waits until every queued message is in its batch. Returns 0, or -1 when a
 * batch_add failed since the last sync (errstr says which message and why;
 * the messages after it in that lane were dropped unbuilt). */
int builder_sync(struct builder *b, char *errstr, size_t errstr_size);

#endif
