/* events.h - visit events to Kafka without losing any: an idempotent
 * librdkafka producer (acks=all, lz4, linger) fed from request threads
 * without ever blocking; what Kafka can't take goes to the disk spool and a
 * background thread replays it once the broker is reachable again. */
#ifndef LP_EVENTS_H
#define LP_EVENTS_H

#include <stddef.h>
#include <stdint.h>

struct events_conf {
	const char *bootstrap;       /* bootstrap.servers */
	const char *topic;
	const char *spool_dir;
	int linger_ms;               /* linger.ms (batching) */
	int queue_max_messages;      /* queue.buffering.max.messages; beyond: spool */
	int message_timeout_ms;      /* message.timeout.ms; undelivered by then: spool */
	int message_max_bytes;       /* message.max.bytes (0: librdkafka's 1,000,000) */
	int shutdown_flush_ms;       /* bounded wait for delivery at shutdown */
	uint64_t spool_max_bytes;
	int spool_fsync_ms;
	int worker_id;               /* event id worker bits, 0..1023 */
};

/* One visit. Strings are borrowed for the call; NULL means absent (JSON
 * null). link_id 0 means an orphan (null). */
struct events_visit {
	const char *code;
	long long link_id;
	int status;
	const char *ip;
	const char *user_agent;
	const char *referer;
	const char *accept_language;
	const char *host;
	const char *query;
	int64_t ts_us;               /* wall clock, µs since the Unix epoch */
};

/* All counters are totals since start. */
struct events_stats {
	uint64_t events;        /* visit events made */
	uint64_t produced;      /* handed to librdkafka's queue (first attempt) */
	uint64_t delivered;     /* acknowledged by the broker (replays included;
	                         * live events: produced less failed and still
	                         * queued, as librdkafka reports only failures of
	                         * those: exact once the queue is empty) */
	uint64_t failed;        /* delivery failures and refusals by the queue */
	uint64_t spooled;       /* written to the spool */
	uint64_t replayed;      /* spooled events delivered by the replayer */
	uint64_t spool_dropped; /* lost: the spool full, a failed write, a record
	                         * past its bounds, held in memory at exit */
	uint64_t spool_refused; /* spooled, refused by Kafka for good, kept in
	                         * refused-N.spool (spool_refuse) */
	uint64_t spool_bytes;   /* bytes in the spool now */
	uint64_t queued;        /* messages in librdkafka's queues now (live and
	                         * replay producers) */
	uint64_t pending;       /* visits copied, not yet encoded and produced */
	int connected;          /* 1 while a broker answers */
	int replay_stopped;     /* 1 after the replay producer's fatal error:
	                         * the spool is not replayed until a restart */
};

struct events;

/* Creates the producer and spool and starts the delivery and replay threads.
 * Copies conf's strings. NULL with errstr. */
struct events *events_new(const struct events_conf *conf, char *errstr, size_t errstr_size);

/* Flushes the producer (at most shutdown_flush_ms, or what events_deadline
 * left of it), moves anything still undelivered to the spool, fsyncs it and
 * frees everything. */
void events_close(struct events *ev);

/* The flush at events_close ends by monotonic time deadline_ms (ms, as
 * CLOCK_MONOTONIC) at the latest: shutdown_flush_ms counted from SIGTERM,
 * not from the end of the requests and creates that ran before it. */
void events_deadline(struct events *ev, long long deadline_ms);

/* Publishes one visit (key = code) and returns its event id. Never waits
 * on anything: the visit's fields are copied into the calling thread's list,
 * and every 64th call the thread makes the JSON of its list and produces it
 * (key = code); the encoder thread does that for a thread whose list has
 * waited 5 ms (it went quiet) or that exited. When librdkafka's queue is
 * full the event goes straight to the spool. Thread-safe. */
uint64_t events_publish(struct events *ev, const struct events_visit *v);

/* The JSON of visit v with event id id, made as events_publish makes it (the
 * calling thread's event array, schema version 2, updated in place, then
 * json_dumpb): returns its length and points *out at it (the thread's buffer, owned by ev, valid
 * until the thread's next encoding), or 0 and NULL when it cannot be made.
 * For benchmarks. */
size_t events_encode(struct events *ev, const struct events_visit *v, uint64_t id,
                     const char **out);

/* 1 while the producer reaches a broker (checked every second) and the live
 * producer has had no fatal error. */
int events_connected(struct events *ev);

/* 1 after a fatal librdkafka error of the live producer (idempotence lost,
 * ...): it lasts until restart, so /readyz says so. (The replay producer's
 * fatal error stops replay and is logged at error level.) */
int events_failed(struct events *ev);

void events_stats(struct events *ev, struct events_stats *out);

#endif
