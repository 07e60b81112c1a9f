/* builder.c - the loading lanes: per lane, one thread builds queued Kafka
 * messages into the open batch (batch_add with the lane's own enricher) and
 * one loads closed batches (loader_lane_load), each lane at its own pace;
 * the consuming thread only routes messages and marks where batches close. */
#include "builder.h"

#include "enrich.h"
#include "errstr.h"
#include "log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct builder;

struct lane {
	struct builder *owner;
	int k;
	pthread_t build_thread, load_thread;
	int build_started, load_started;
	struct enricher *enr;         /* owned; used by the build thread only */
	pthread_mutex_t mtx;
	pthread_cond_t work;          /* build thread: an item queued, or quit */
	pthread_cond_t loadable;      /* load thread: a job, or quit */
	pthread_cond_t changed;       /* a close handled, a load done, the queue built */
	rd_kafka_message_t **queue;   /* owned array of owned messages; NULL marks a close */
	size_t n, cap;
	int closes;                   /* close marks queued or being handled */
	int busy;                     /* the build thread holds items taken from queue */
	int quit;
	struct batch buf[2];          /* owned: buf[cur] is open (build thread's) */
	int cur;
	struct batch *job;            /* with the load thread; NULL: it is idle */
};

struct builder {
	struct lane lane[LOADER_LANES];
	struct loader *loader;
	builder_done_cb *done;
	void *ctx;
	atomic_int failed;            /* a build or load failed: drop until builder_reset */
};

/* A message of lane k could not be queued, built or closed: the lanes drop
 * what they hold, and done tells why. */
static void
fail(struct builder *b, int k, const char *err)
{
	atomic_store(&b->failed, 1);
	b->done(b->ctx, k, NULL, -1, NULL, err);
}

/* Builds one message into the lane's open batch; 0 or -1 (err set). */
static int
build(struct lane *ln, rd_kafka_message_t *m, char *err, size_t err_size)
{
	char why[448];

	if (batch_add(&ln->buf[ln->cur], ln->enr, m->partition, m->offset, m->payload, m->len,
	    why, sizeof(why)) >= 0)
		return 0;
	errstr_set(err, err_size, "lane %d: partition %d offset %lld: %s", ln->k,
	    (int)m->partition, (long long)m->offset, why);
	return -1;
}

/* A close mark (build thread): hands the open batch to the load thread once
 * that is idle, or drops it after a failure; the other buffer, emptied by the
 * load thread, becomes the open one. */
static void
close_open(struct lane *ln)
{
	struct batch *open;

	pthread_mutex_lock(&ln->mtx);
	while (ln->job != NULL && !ln->quit)
		pthread_cond_wait(&ln->changed, &ln->mtx);
	open = &ln->buf[ln->cur];
	if (ln->quit || atomic_load(&ln->owner->failed) || open->ntouched == 0) {
		batch_reset(open);
	} else {
		ln->job = open;
		ln->cur = !ln->cur;
		pthread_cond_signal(&ln->loadable);
	}
	ln->closes--;
	pthread_cond_broadcast(&ln->changed);
	pthread_mutex_unlock(&ln->mtx);
}

static void *
build_main(void *arg)
{
	struct lane *ln = arg;
	struct builder *b = ln->owner;
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
		pthread_mutex_unlock(&ln->mtx);

		for (size_t i = 0; i < nwork; i++) {
			char err[512];

			if (work[i] == NULL) {
				close_open(ln);
				continue;
			}
			if (!atomic_load(&b->failed) && build(ln, work[i], err, sizeof(err)) < 0)
				fail(b, ln->k, err);
			rd_kafka_message_destroy(work[i]);
		}

		pthread_mutex_lock(&ln->mtx);
		ln->busy = 0;
		pthread_cond_broadcast(&ln->changed);
	}
	pthread_mutex_unlock(&ln->mtx);
	free(work);
	return NULL;
}

static void *
load_main(void *arg)
{
	struct lane *ln = arg;
	struct builder *b = ln->owner;

	pthread_mutex_lock(&ln->mtx);
	for (;;) {
		while (!ln->quit && ln->job == NULL)
			pthread_cond_wait(&ln->loadable, &ln->mtx);
		if (ln->quit)
			break;
		struct batch *job = ln->job;
		pthread_mutex_unlock(&ln->mtx);

		struct loader_result res;
		char err[512] = "";
		int rc = loader_lane_load(b->loader, ln->k, job, &res, err, sizeof(err));

		if (rc < 0)
			atomic_store(&b->failed, 1);
		b->done(b->ctx, ln->k, job, rc, &res, err);
		batch_reset(job);
		pthread_mutex_lock(&ln->mtx);
		ln->job = NULL;
		pthread_cond_broadcast(&ln->changed);
	}
	pthread_mutex_unlock(&ln->mtx);
	return NULL;
}

static void
lane_stop(struct lane *ln)
{
	if (ln->build_started || ln->load_started) {
		pthread_mutex_lock(&ln->mtx);
		ln->quit = 1;
		pthread_cond_broadcast(&ln->work);
		pthread_cond_broadcast(&ln->loadable);
		pthread_cond_broadcast(&ln->changed);
		pthread_mutex_unlock(&ln->mtx);
		if (ln->build_started)
			pthread_join(ln->build_thread, NULL);
		if (ln->load_started)
			pthread_join(ln->load_thread, NULL);
	}
	for (size_t i = 0; i < ln->n; i++)
		if (ln->queue[i] != NULL)
			rd_kafka_message_destroy(ln->queue[i]);
	free(ln->queue);
	for (int i = 0; i < 2; i++)
		batch_free(&ln->buf[i]);
	if (ln->enr != NULL) {
		unsigned long long hits, misses;
		struct ua_stats us;

		enrich_geo_cache_stats(ln->enr, &hits, &misses);
		if (hits + misses > 0)
			log_info("GeoIP record cache of lane %d: %llu hits, %llu misses (%.1f%%)",
			    ln->k, hits, misses,
			    100.0 * (double)hits / (double)(hits + misses));
		enrich_ua_stats(ln->enr, &us);
		if (us.hits + us.misses > 0)
			log_info("user agent cache of lane %d: %llu hits, %llu misses (%.1f%%)",
			    ln->k, (unsigned long long)us.hits, (unsigned long long)us.misses,
			    100.0 * (double)us.hits / (double)(us.hits + us.misses));
		if (us.limited > 0)
			log_warnx("lane %d: %llu user agents hit PCRE2's match limit in some regex "
			    "(parsed as if it did not match, and cached so)", ln->k,
			    (unsigned long long)us.limited);
	}
	enrich_free(ln->enr);
	pthread_mutex_destroy(&ln->mtx);
	pthread_cond_destroy(&ln->work);
	pthread_cond_destroy(&ln->loadable);
	pthread_cond_destroy(&ln->changed);
}

struct builder *
builder_new(const struct builder_conf *bc, char *errstr, size_t errstr_size)
{
	struct builder *b = calloc(1, sizeof(*b));

	if (b == NULL) {
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	b->loader = bc->loader;
	b->done = bc->done;
	b->ctx = bc->ctx;
	atomic_init(&b->failed, 0);
	for (int k = 0; k < LOADER_LANES; k++) {
		struct lane *ln = &b->lane[k];

		ln->owner = b;
		ln->k = k;
		pthread_mutex_init(&ln->mtx, NULL);
		pthread_cond_init(&ln->work, NULL);
		pthread_cond_init(&ln->loadable, NULL);
		pthread_cond_init(&ln->changed, NULL);
		for (int i = 0; i < 2; i++) {
			batch_init(&ln->buf[i]);
			if (batch_prealloc(&ln->buf[i], bc->batch_rows) < 0)
				log_warnx("batch buffers: out of memory (they grow as batches fill)");
		}
	}
	for (int k = 0; k < LOADER_LANES; k++) {
		struct lane *ln = &b->lane[k];

		if ((ln->enr = enrich_new(bc->city_db, bc->isp_db, bc->locale, bc->uap_regexes,
		    bc->ua_cache_entries, bc->geoip_cache_records, errstr, errstr_size)) == NULL)
			goto fail;
		if (pthread_create(&ln->build_thread, NULL, build_main, ln) != 0)
			goto fail_thread;
		ln->build_started = 1;
		if (pthread_create(&ln->load_thread, NULL, load_main, ln) != 0)
			goto fail_thread;
		ln->load_started = 1;
	}
	return b;
fail_thread:
	errstr_set(errstr, errstr_size, "pthread_create failed");
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
		lane_stop(&b->lane[k]);
	free(b);
}

/* Appends m (NULL: a close mark) to ln's queue; 0, or -1 when there is no
 * room. Called with ln->mtx held. */
static int
enqueue(struct lane *ln, rd_kafka_message_t *m)
{
	if (ln->n == ln->cap) {
		size_t cap = ln->cap ? 2 * ln->cap : 1024;
		rd_kafka_message_t **q = realloc(ln->queue, cap * sizeof(*q));

		if (q == NULL)
			return -1;
		ln->queue = q;
		ln->cap = cap;
	}
	ln->queue[ln->n++] = m;
	if (ln->n == 1)
		pthread_cond_signal(&ln->work);
	return 0;
}

void
builder_push(struct builder *b, int lane, rd_kafka_message_t *m)
{
	struct lane *ln = &b->lane[lane];
	int rc;

	pthread_mutex_lock(&ln->mtx);
	rc = enqueue(ln, m);
	pthread_mutex_unlock(&ln->mtx);
	if (rc < 0) {
		/* no room to queue it: a failed build, so that the caller
		 * re-reads it from the stored offsets */
		char err[512];

		errstr_set(err, sizeof(err), "lane %d: partition %d offset %lld: out of memory",
		    ln->k, (int)m->partition, (long long)m->offset);
		fail(b, ln->k, err);
		rd_kafka_message_destroy(m);
	}
}

void
builder_close(struct builder *b)
{
	for (int k = 0; k < LOADER_LANES; k++) {
		struct lane *ln = &b->lane[k];
		int rc;

		pthread_mutex_lock(&ln->mtx);
		while (ln->closes > 0 && !ln->quit)
			pthread_cond_wait(&ln->changed, &ln->mtx);
		if ((rc = enqueue(ln, NULL)) == 0)
			ln->closes++;
		pthread_mutex_unlock(&ln->mtx);
		/* the open batch cannot be closed: drop it and re-read */
		if (rc < 0 && !atomic_load(&b->failed))
			fail(b, k, "closing a batch: out of memory");
	}
}

void
builder_drain(struct builder *b)
{
	for (int k = 0; k < LOADER_LANES; k++) {
		struct lane *ln = &b->lane[k];

		pthread_mutex_lock(&ln->mtx);
		while ((ln->n > 0 || ln->busy || ln->closes > 0 || ln->job != NULL) && !ln->quit)
			pthread_cond_wait(&ln->changed, &ln->mtx);
		pthread_mutex_unlock(&ln->mtx);
	}
}

int
builder_failed(struct builder *b)
{
	return atomic_load(&b->failed);
}

void
builder_reset(struct builder *b)
{
	builder_drain(b);
	for (int k = 0; k < LOADER_LANES; k++) {
		struct lane *ln = &b->lane[k];

		pthread_mutex_lock(&ln->mtx);
		batch_reset(&ln->buf[ln->cur]);
		pthread_mutex_unlock(&ln->mtx);
	}
	atomic_store(&b->failed, 0);
}
