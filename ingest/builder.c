/* builder.c - one thread per loading lane turns queued Kafka messages into
 * batch rows (batch_add with the lane's own enricher), so that building uses
 * as many cores as loading does; the consuming thread only routes messages. */
#include "builder.h"

#include "enrich.h"
#include "errstr.h"
#include "log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct lane {
	pthread_t thread;
	int started;
	struct enricher *enr;         /* owned; used by this lane's thread only */
	pthread_mutex_t mtx;
	pthread_cond_t work, idle;
	rd_kafka_message_t **queue;   /* owned array of owned messages */
	size_t n, cap;
	int busy;                     /* the thread holds messages taken from queue */
	int quit;
	struct batch *target;         /* the caller's; written by the thread */
	int failed;                   /* a batch_add failed since the last sync */
	char err[512];
};

struct builder {
	struct lane lane[LOADER_LANES];
};

/* Builds one message into the lane's target; 0 or -1 (err set). */
static int
build(struct lane *ln, rd_kafka_message_t *m, char *err, size_t err_size)
{
	char why[448];

	if (batch_add(ln->target, ln->enr, m->partition, m->offset, m->payload, m->len, why,
	    sizeof(why)) >= 0)
		return 0;
	errstr_set(err, err_size, "partition %d offset %lld: %s", (int)m->partition,
	    (long long)m->offset, why);
	return -1;
}

static void *
lane_main(void *arg)
{
	struct lane *ln = arg;
	rd_kafka_message_t **work = NULL;
	size_t nwork = 0, work_cap = 0;

	pthread_mutex_lock(&ln->mtx);
	for (;;) {
		while (!ln->quit && ln->n == 0)
			pthread_cond_wait(&ln->work, &ln->mtx);
		if (ln->quit)
			break;
		/* take the whole queue; the caller keeps pushing into our old array */
		{
			rd_kafka_message_t **t = work;
			size_t tc = work_cap;

			work = ln->queue;
			work_cap = ln->cap;
			nwork = ln->n;
			ln->queue = t;
			ln->cap = tc;
			ln->n = 0;
		}
		ln->busy = 1;
		int failed = ln->failed;
		pthread_mutex_unlock(&ln->mtx);

		char err[512] = "";
		for (size_t i = 0; i < nwork; i++) {
			if (!failed && build(ln, work[i], err, sizeof(err)) < 0)
				failed = 1;
			rd_kafka_message_destroy(work[i]);
		}

		pthread_mutex_lock(&ln->mtx);
		if (failed && !ln->failed) {
			ln->failed = 1;
			memcpy(ln->err, err, sizeof(ln->err));
		}
		ln->busy = 0;
		if (ln->n == 0)
			pthread_cond_broadcast(&ln->idle);
	}
	pthread_mutex_unlock(&ln->mtx);
	free(work);
	return NULL;
}

static void
lane_stop(struct lane *ln, int k)
{
	if (ln->started) {
		pthread_mutex_lock(&ln->mtx);
		ln->quit = 1;
		pthread_cond_broadcast(&ln->work);
		pthread_mutex_unlock(&ln->mtx);
		pthread_join(ln->thread, NULL);
		pthread_mutex_destroy(&ln->mtx);
		pthread_cond_destroy(&ln->work);
		pthread_cond_destroy(&ln->idle);
	}
	for (size_t i = 0; i < ln->n; i++)
		rd_kafka_message_destroy(ln->queue[i]);
	free(ln->queue);
	if (ln->enr != NULL) {
		unsigned long long hits, misses;

		enrich_geo_cache_stats(ln->enr, &hits, &misses);
		if (hits + misses > 0)
			log_info("GeoIP record cache of lane %d: %llu hits, %llu misses (%.1f%%)",
			    k, hits, misses,
			    100.0 * (double)hits / (double)(hits + misses));
	}
	enrich_free(ln->enr);
}

struct builder *
builder_new(const struct builder_conf *bc, char *errstr, size_t errstr_size)
{
	struct builder *b = calloc(1, sizeof(*b));

	if (b == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	for (int k = 0; k < LOADER_LANES; k++) {
		struct lane *ln = &b->lane[k];

		if ((ln->enr = enrich_new(bc->city_db, bc->isp_db, bc->locale, bc->uap_regexes,
		    bc->ua_cache_entries, bc->geoip_cache_records, errstr, errstr_size)) == NULL)
			goto fail;
		pthread_mutex_init(&ln->mtx, NULL);
		pthread_cond_init(&ln->work, NULL);
		pthread_cond_init(&ln->idle, NULL);
		if (pthread_create(&ln->thread, NULL, lane_main, ln) != 0) {
			pthread_mutex_destroy(&ln->mtx);
			pthread_cond_destroy(&ln->work);
			pthread_cond_destroy(&ln->idle);
			errstr_set(errstr, errstr_size, "pthread_create failed");
			goto fail;
		}
		ln->started = 1;
	}
	return b;
fail:
	builder_free(b);
	return NULL;
}

void
builder_free(struct builder *b)
{
	if (b == NULL)
		return;
	for (int k = 0; k < LOADER_LANES; k++)
		lane_stop(&b->lane[k], k);
	free(b);
}

void
builder_set_targets(struct builder *b, struct batch *const *lanes)
{
	for (int k = 0; k < LOADER_LANES; k++) {
		pthread_mutex_lock(&b->lane[k].mtx);
		b->lane[k].target = lanes[k];
		pthread_mutex_unlock(&b->lane[k].mtx);
	}
}

void
builder_push(struct builder *b, rd_kafka_message_t *m)
{
	struct lane *ln = &b->lane[m->partition % LOADER_LANES];

	pthread_mutex_lock(&ln->mtx);
	if (ln->n == ln->cap) {
		size_t cap = ln->cap ? 2 * ln->cap : 1024;
		rd_kafka_message_t **q = realloc(ln->queue, cap * sizeof(*q));

		if (q == NULL) {
			/* no room to queue it: count it as a failed build, so
			 * the caller re-reads it from the stored offsets */
			if (!ln->failed) {
				ln->failed = 1;
				errstr_set(ln->err, sizeof(ln->err), "partition %d offset %lld: out "
				    "of memory", (int)m->partition, (long long)m->offset);
			}
			pthread_mutex_unlock(&ln->mtx);
			rd_kafka_message_destroy(m);
			return;
		}
		ln->queue = q;
		ln->cap = cap;
	}
	ln->queue[ln->n++] = m;
	if (ln->n == 1)
		pthread_cond_signal(&ln->work);
	pthread_mutex_unlock(&ln->mtx);
}

int
builder_sync(struct builder *b, char *errstr, size_t errstr_size)
{
	int rc = 0;

	for (int k = 0; k < LOADER_LANES; k++) {
		struct lane *ln = &b->lane[k];

		pthread_mutex_lock(&ln->mtx);
		while (ln->n > 0 || ln->busy)
			pthread_cond_wait(&ln->idle, &ln->mtx);
		if (ln->failed) {
			if (rc == 0)
				errstr_set(errstr, errstr_size, "%s", ln->err);
			rc = -1;
			ln->failed = 0;
		}
		pthread_mutex_unlock(&ln->mtx);
	}
	return rc;
}
