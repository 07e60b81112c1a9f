/* stats.c - the ingest counters behind one mutex (updated once per batch, so
 * the lock costs nothing measurable; messages read are an atomic), and their
 * Prometheus families, refreshed from one snapshot at each scrape. */
#include "stats.h"
#include "errstr.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t stats_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct ingest_stats stats;
static _Atomic uint64_t stats_consumed;

/* Prometheus side: series set up by stats_metrics. */
enum { M_CONSUMED, M_ROWS, M_REJECTS, M_BATCHES, M_FAILURES, M_DUPLICATES, M_LOST,
       M_COMMIT_AGE, M_LAG_TOTAL, M_NSERIES };
static struct metrics_series *stats_series[M_NSERIES];
static struct metrics_family *stats_lag_family;
static struct metrics_series *_Atomic stats_batch_hist;

static int64_t
wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Caller holds stats_mtx. */
static void
started(void)
{
	if (stats.start_unix_ms == 0)
		stats.start_unix_ms = wall_ms();
}

void
stats_get(struct ingest_stats *out)
{
	pthread_mutex_lock(&stats_mtx);
	started();
	memcpy(out, &stats, sizeof(*out));
	pthread_mutex_unlock(&stats_mtx);
	out->consumed = atomic_load_explicit(&stats_consumed, memory_order_relaxed);
}

void
stats_add_consumed(uint64_t n)
{
	atomic_fetch_add_explicit(&stats_consumed, n, memory_order_relaxed);
}

void
stats_add_batch(uint64_t messages, uint64_t rows, uint64_t duplicates, uint64_t rejects)
{
	int64_t now = wall_ms();

	pthread_mutex_lock(&stats_mtx);
	started();
	stats.messages += messages;
	stats.rows_loaded += rows;
	stats.duplicates += duplicates;
	stats.rejects += rejects;
	stats.batches++;
	stats.last_commit_unix_ms = now;
	pthread_mutex_unlock(&stats_mtx);
}

void
stats_add_failure(void)
{
	pthread_mutex_lock(&stats_mtx);
	stats.batch_failures++;
	pthread_mutex_unlock(&stats_mtx);
}

void
stats_add_lost(void)
{
	pthread_mutex_lock(&stats_mtx);
	stats.lost_ranges++;
	pthread_mutex_unlock(&stats_mtx);
}

void
stats_set_lag(int32_t partition, int64_t lag)
{
	if (partition < 0 || partition >= STATS_MAX_PARTITIONS)
		return;
	pthread_mutex_lock(&stats_mtx);
	if (partition >= stats.nparts) {
		for (int32_t i = stats.nparts; i < partition; i++)
			stats.lag[i] = -1;
		stats.nparts = partition + 1;
	}
	stats.lag_total += (lag > 0 ? lag : 0) -
	    (stats.lag[partition] > 0 ? stats.lag[partition] : 0);
	stats.lag[partition] = lag;
	pthread_mutex_unlock(&stats_mtx);
}

void
stats_observe_batch(double seconds)
{
	struct metrics_series *h = atomic_load_explicit(&stats_batch_hist, memory_order_acquire);

	if (h != NULL)
		metrics_observe(h, seconds);
}

/* Collect hook: one snapshot into the series. A partition's lag series
 * appears once its lag is known, and reads NaN while it is unknown again.
 * Hooks run one at a time, so lag_seen needs no lock. */
static void
collect(void *arg)
{
	static unsigned char lag_seen[STATS_MAX_PARTITIONS];
	struct ingest_stats *st = malloc(sizeof(*st));
	int64_t since;

	(void)arg;
	if (st == NULL)
		return;
	stats_get(st);
	metrics_counter_set(stats_series[M_CONSUMED], st->consumed);
	metrics_counter_set(stats_series[M_ROWS], st->rows_loaded);
	metrics_counter_set(stats_series[M_REJECTS], st->rejects);
	metrics_counter_set(stats_series[M_BATCHES], st->batches);
	metrics_counter_set(stats_series[M_FAILURES], st->batch_failures);
	metrics_counter_set(stats_series[M_DUPLICATES], st->duplicates);
	metrics_counter_set(stats_series[M_LOST], st->lost_ranges);
	since = st->last_commit_unix_ms ? st->last_commit_unix_ms : st->start_unix_ms;
	metrics_set(stats_series[M_COMMIT_AGE], (double)(wall_ms() - since) / 1000.0);
	metrics_set(stats_series[M_LAG_TOTAL], (double)st->lag_total);
	for (int32_t p = 0; p < st->nparts; p++) {
		struct metrics_series *s;
		char name[16];

		if (st->lag[p] < 0 && !lag_seen[p])
			continue;
		lag_seen[p] = 1;
		snprintf(name, sizeof(name), "%d", (int)p);
		if ((s = metrics_series(stats_lag_family, name, NULL)) != NULL)
			metrics_set(s, st->lag[p] < 0 ? NAN : (double)st->lag[p]);
	}
	free(st);
}

int
stats_metrics(struct metrics *m, char *errstr, size_t errstr_size)
{
	static const struct {
		int type;
		const char *name, *help;
	} defs[M_NSERIES] = {
		[M_CONSUMED] = { METRICS_COUNTER, "linkpulse_ingest_events_consumed_total",
		    "Messages read from Kafka." },
		[M_ROWS] = { METRICS_COUNTER, "linkpulse_ingest_rows_loaded_total",
		    "visit_record rows committed." },
		[M_REJECTS] = { METRICS_COUNTER, "linkpulse_ingest_rejects_total",
		    "Malformed events kept in visit_reject." },
		[M_BATCHES] = { METRICS_COUNTER, "linkpulse_ingest_batches_total",
		    "Lane batches committed (each loading lane commits its share of a batch in a transaction of its own)." },
		[M_FAILURES] = { METRICS_COUNTER, "linkpulse_ingest_batch_failures_total",
		    "Lane batches rolled back or messages that could not be built (retried from the stored offsets)." },
		[M_DUPLICATES] = { METRICS_COUNTER, "linkpulse_ingest_duplicates_total",
		    "Valid events already stored (replays)." },
		[M_LOST] = { METRICS_COUNTER, "linkpulse_ingest_lost_ranges_total",
		    "Offset ranges the broker no longer had (rows of ingest_lost)." },
		[M_COMMIT_AGE] = { METRICS_GAUGE, "linkpulse_ingest_last_commit_age_seconds",
		    "Seconds since the last committed batch (since start before the first)." },
		[M_LAG_TOTAL] = { METRICS_GAUGE, "linkpulse_ingest_consumer_lag_overall",
		    "Sum of the partitions' lag." },
	};
	struct metrics_family *f;

	for (int i = 0; i < M_NSERIES; i++) {
		f = defs[i].type == METRICS_COUNTER ?
		    metrics_counter(m, defs[i].name, defs[i].help, NULL, errstr, errstr_size) :
		    metrics_gauge(m, defs[i].name, defs[i].help, NULL, errstr, errstr_size);
		if (f == NULL)
			return -1;
		if ((stats_series[i] = metrics_series(f, NULL, NULL)) == NULL) {
			errstr_set(errstr, errstr_size, "out of memory");
			return -1;
		}
	}
	if ((stats_lag_family = metrics_gauge(m, "linkpulse_ingest_consumer_lag",
	    "High watermark minus the next offset to load, per partition, after the last "
	    "commit (NaN while unknown).", "partition", errstr, errstr_size)) == NULL ||
	    (f = metrics_histogram(m, "linkpulse_ingest_batch_duration_seconds",
	    "Time to load one lane batch: COPY, rollups and commit.", NULL, metrics_latency_buckets,
	    metrics_latency_nbuckets, errstr, errstr_size)) == NULL)
		return -1;
	if (metrics_on_collect(m, collect, NULL) < 0) {
		errstr_set(errstr, errstr_size, "too many collect hooks");
		return -1;
	}
	atomic_store_explicit(&stats_batch_hist, metrics_series(f, NULL, NULL),
	    memory_order_release);
	return 0;
}
