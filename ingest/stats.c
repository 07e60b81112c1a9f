/* stats.c - the ingest counters behind one mutex (updated once per batch, so
 * the lock costs nothing measurable). */
#include "stats.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t stats_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct ingest_stats stats;

void
stats_get(struct ingest_stats *out)
{
	pthread_mutex_lock(&stats_mtx);
	memcpy(out, &stats, sizeof(*out));
	pthread_mutex_unlock(&stats_mtx);
}

void
stats_add_batch(uint64_t messages, uint64_t rows, uint64_t duplicates, uint64_t rejects)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	pthread_mutex_lock(&stats_mtx);
	stats.messages += messages;
	stats.rows_loaded += rows;
	stats.duplicates += duplicates;
	stats.rejects += rejects;
	stats.batches++;
	stats.last_commit_unix_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
