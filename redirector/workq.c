/* workq.c - a bounded ring of jobs and the threads that run them (a mutex and
 * one condition variable); used to take link lookups off the HTTP threads. */
#include "workq.h"
#include "errstr.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct job {
	workq_fn fn;
	void *arg;
};

struct workq {
	pthread_mutex_t mtx;
	pthread_cond_t cond;     /* a job queued, or stopping */
	struct job *ring;        /* owned: cap slots */
	size_t cap, head, count;
	pthread_t *thr;          /* owned: nthr started threads */
	int nthr;
	int stopping;
	uint64_t running, done, refused;
};

static void *
worker(void *arg)
{
	struct workq *q = arg;
	struct job j;

	pthread_mutex_lock(&q->mtx);
	for (;;) {
		while (q->count == 0 && !q->stopping)
			pthread_cond_wait(&q->cond, &q->mtx);
		if (q->count == 0)
			break; /* stopping, and nothing left to run */
		j = q->ring[q->head];
		q->head = (q->head + 1) % q->cap;
		q->count--;
		q->running++;
		pthread_mutex_unlock(&q->mtx);
		j.fn(j.arg);
		pthread_mutex_lock(&q->mtx);
		q->running--;
		q->done++;
	}
	pthread_mutex_unlock(&q->mtx);
	return NULL;
}

struct workq *
workq_new(int threads, size_t max_queued, const char *name, char *errstr, size_t errstr_size)
{
	struct workq *q;

	if (threads < 1 || max_queued < 1) {
		errstr_set(errstr, errstr_size, "a work queue needs a thread and a queue slot");
		return NULL;
	}
	if ((q = calloc(1, sizeof(*q))) == NULL ||
	    (q->ring = calloc(max_queued, sizeof(*q->ring))) == NULL ||
	    (q->thr = calloc((size_t)threads, sizeof(*q->thr))) == NULL) {
		if (q != NULL)
			free(q->ring);
		free(q);
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	q->cap = max_queued;
	pthread_mutex_init(&q->mtx, NULL);
	pthread_cond_init(&q->cond, NULL);
	for (; q->nthr < threads; q->nthr++) {
		if (pthread_create(&q->thr[q->nthr], NULL, worker, q) != 0) {
			errstr_set(errstr, errstr_size, "could not start a %s thread", name);
			workq_free(q);
			return NULL;
		}
		pthread_setname_np(q->thr[q->nthr], name);
	}
	return q;
}

int
workq_submit(struct workq *q, workq_fn fn, void *arg)
{
	pthread_mutex_lock(&q->mtx);
	if (q->stopping || q->count == q->cap) {
		q->refused++;
		pthread_mutex_unlock(&q->mtx);
		return -1;
	}
	q->ring[(q->head + q->count) % q->cap] = (struct job){ fn, arg };
	q->count++;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->mtx);
	return 0;
}

void
workq_stats(struct workq *q, struct workq_stats *out)
{
	pthread_mutex_lock(&q->mtx);
	out->queued = q->count;
	out->running = q->running;
	out->done = q->done;
	out->refused = q->refused;
	pthread_mutex_unlock(&q->mtx);
}

void
workq_free(struct workq *q)
{
	if (q == NULL)
		return;
	pthread_mutex_lock(&q->mtx);
	q->stopping = 1;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->mtx);
	for (int i = 0; i < q->nthr; i++)
		pthread_join(q->thr[i], NULL);
	pthread_mutex_destroy(&q->mtx);
	pthread_cond_destroy(&q->cond);
	free(q->thr);
	free(q->ring);
	free(q);
}
