/* workq.h - a fixed set of threads running queued jobs in arrival order,
 * behind a bounded queue: a job beyond the bound is refused at once, so a
 * burst never piles up more than the bound of waiting work. */
#ifndef LP_WORKQ_H
#define LP_WORKQ_H

#include <stddef.h>
#include <stdint.h>

struct workq;

typedef void (*workq_fn)(void *arg);

struct workq_stats {
	uint64_t queued;   /* jobs waiting for a thread now */
	uint64_t running;  /* jobs a thread runs now */
	uint64_t done;     /* jobs run to their end so far */
	uint64_t refused;  /* submits refused (queue full or stopping) so far */
};

/* Starts threads (1..) that take jobs from a queue of at most max_queued
 * (1..) waiting jobs; name (borrowed, at most 15 bytes) names the threads.
 * Returns NULL with errstr. Free with workq_free. */
struct workq *workq_new(int threads, size_t max_queued, const char *name, char *errstr,
                        size_t errstr_size);

/* Queues fn(arg) for a thread. Returns 0, or -1 when the queue is full or
 * workq_free began: fn is then not called and arg stays the caller's. */
int workq_submit(struct workq *q, workq_fn fn, void *arg);

void workq_stats(struct workq *q, struct workq_stats *out);

/* Refuses new jobs, lets the threads run every job already queued, joins
 * them and frees. NULL is a no-op. */
void workq_free(struct workq *q);

#endif
