/* consumer.h - the visits topic consumer (librdkafka high-level consumer in a
 * group, auto commit off): on assignment it seeks to the offsets stored in
 * PostgreSQL, on revocation it lets the caller finish its batch first. */
#ifndef LP_INGEST_CONSUMER_H
#define LP_INGEST_CONSUMER_H

#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "loader.h"

struct consumer;

struct consumer_conf {
	const char *bootstrap;       /* borrowed for the call */
	const char *topic;
	const char *group;
	int session_timeout_ms;
	volatile sig_atomic_t *stop; /* borrowed: set to stop waiting for PostgreSQL */
	/* Called (in the polling thread) before partitions are revoked and
	 * before a re-seek: the caller finishes or drops its current batch. */
	void (*drain)(void *ctx);
	/* Called (in the polling thread; may be NULL) with 1 when reading the
	 * stored offsets failed (the read is retried until it works or stop is
	 * set, nothing loading meanwhile), with 0 when a read worked. */
	void (*offsets_unreadable)(void *ctx, int failing);
	void *ctx;
};

/* Creates the consumer and subscribes to the topic. loader is borrowed (it
 * must outlive the consumer) and used for stored offsets. Returns a consumer
 * the caller owns (consumer_free), or NULL with errstr set. */
struct consumer *consumer_new(const struct consumer_conf *cc, struct loader *loader,
                              char *errstr, size_t errstr_size);

/* Polls one message or event (rebalances run inside). Returns a message the
 * caller destroys with rd_kafka_message_destroy, or NULL on timeout. */
rd_kafka_message_t *consumer_poll(struct consumer *c, int timeout_ms);

/* The next offset the consumer expects on partition (stored offset at
 * assignment, then last message + 1); -1 when the partition is not assigned. */
int64_t consumer_expected(struct consumer *c, int32_t partition);
void consumer_set_expected(struct consumer *c, int32_t partition, int64_t next);
/* The loading lane (0..LOADER_LANES-1) of partition's messages. Set at each
 * assignment and re-seek (when no lane holds a message), by backlog: see
 * lanes.h. Until a plan places it, p % LOADER_LANES (0 for a partition past
 * every one seen so far). */
int consumer_lane(struct consumer *c, int32_t partition);

/* Reads the stored offsets of every assigned partition (or of those a
 * failed assign left waiting) from PostgreSQL, one try, and re-assigns them
 * there, discarding whatever was fetched; the lanes are planned again (the
 * drain hook runs first). Returns 0, or -1 when PostgreSQL could not tell or
 * librdkafka refused to read or set the assignment (logged; the partitions
 * wait for the caller's next recovery, which polls meanwhile). */
int consumer_reseek(struct consumer *c);

/* 1 when partitions wait for a re-seek to assign them (a failed assign in
 * the rebalance callback or in consumer_reseek): the caller recovers. */
int consumer_retry_pending(const struct consumer *c);

/* Low and high watermarks of partition asked from the broker. Returns 0 or -1. */
int consumer_watermarks(struct consumer *c, int32_t partition, int64_t *low, int64_t *high,
                        char *errstr, size_t errstr_size);
/* Publishes high watermark - next for partition into the stats (cached
 * watermarks, no broker round trip). */
void consumer_update_lag(struct consumer *c, int32_t partition, int64_t next);

/* Leaves the group (revocation runs the drain hook) and frees c. */
void consumer_close(struct consumer *c);

#endif
