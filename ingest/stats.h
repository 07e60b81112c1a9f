/* stats.h - per-process ingest counters: updated by the ingest threads, read
 * as one consistent snapshot for the progress log and for Prometheus
 * (stats_metrics registers them in a metrics registry). */
#ifndef LP_INGEST_STATS_H
#define LP_INGEST_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"

#define STATS_MAX_PARTITIONS 1024

struct ingest_stats {
	uint64_t consumed;        /* Kafka messages read (taken into a batch) */
	uint64_t messages;        /* messages of committed batches */
	uint64_t rows_loaded;     /* visit_record rows inserted */
	uint64_t duplicates;      /* valid events already stored (replays) */
	uint64_t rejects;         /* messages stored in visit_reject */
	uint64_t batches;         /* batches committed */
	uint64_t batch_failures;  /* batches rolled back (retried later) */
	uint64_t lost_ranges;     /* ingest_lost rows written */
	int64_t last_commit_unix_ms; /* wall clock of the last commit, 0 never */
	int64_t start_unix_ms;    /* wall clock of the first stats call */
	int64_t lag_total;        /* sum of per-partition lag after the last commit */
	int32_t nparts;           /* entries of lag[] in use */
	int64_t lag[STATS_MAX_PARTITIONS]; /* high watermark - next offset; -1 unknown */
};

/* Copies the current counters into *out (caller-owned). Thread-safe. */
void stats_get(struct ingest_stats *out);

/* Counts n messages read from Kafka (lock-free). */
void stats_add_consumed(uint64_t n);
/* Adds one committed batch. Thread-safe. */
void stats_add_batch(uint64_t messages, uint64_t rows, uint64_t duplicates, uint64_t rejects);
void stats_add_failure(void);
void stats_add_lost(void);
/* Sets the lag of partition (ignored beyond STATS_MAX_PARTITIONS). */
void stats_set_lag(int32_t partition, int64_t lag);

/* Registers the linkpulse_ingest_* families in m (borrowed; it must outlive
 * every later stats call) with a collect hook that copies the counters at
 * each scrape. Returns 0, or -1 with errstr. */
int stats_metrics(struct metrics *m, char *errstr, size_t errstr_size);
/* Records how long one batch took to load and commit (no-op before
 * stats_metrics). */
void stats_observe_batch(double seconds);

#endif
