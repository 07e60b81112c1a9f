/* test_workq.c - redirector/workq.c: the bound on waiting jobs against
 * tests/data/workq_cases.txt (threads held so that nothing drains), every
 * accepted job run exactly once, in order on one thread, and workq_free
 * running the jobs still queued. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../redirector/workq.h"
#include "unit.h"

#define CASES "tests/data/workq_cases.txt"
#define MAXJOBS 1000

/* Jobs wait on a gate until it opens, then record their order. */
struct gate {
	pthread_mutex_t mtx;
	pthread_cond_t cond;
	int open;
	int started;            /* jobs that began (held at the gate) */
	int ran[MAXJOBS];       /* times each job ran */
	int order[MAXJOBS];     /* job numbers in the order they ran */
	int n;
};

struct job {
	struct gate *g;
	int id;
};

static void
job_main(void *arg)
{
	struct job *j = arg;
	struct gate *g = j->g;

	pthread_mutex_lock(&g->mtx);
	g->started++;
	pthread_cond_broadcast(&g->cond);
	while (!g->open)
		pthread_cond_wait(&g->cond, &g->mtx);
	g->ran[j->id]++;
	g->order[g->n++] = j->id;
	pthread_mutex_unlock(&g->mtx);
}

static void
gate_init(struct gate *g)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->mtx, NULL);
	pthread_cond_init(&g->cond, NULL);
}

static void
gate_wait_started(struct gate *g, int n)
{
	pthread_mutex_lock(&g->mtx);
	while (g->started < n)
		pthread_cond_wait(&g->cond, &g->mtx);
	pthread_mutex_unlock(&g->mtx);
}

static void
gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->mtx);
	g->open = 1;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->mtx);
}

/* Submits jobs one at a time; each of the first as many as there are
 * threads is waited for until a thread holds it, so that the jobs after them
 * can only wait in the queue. */
static void
run_case(int line, int threads, int bound, int submitted, int want_acc, int want_ref)
{
	static struct gate g;
	static struct job jobs[MAXJOBS];
	struct workq_stats st;
	char err[128];
	struct workq *q = workq_new(threads, (size_t)bound, "test-workq", err, sizeof(err));
	int acc = 0, ref = 0, ids[MAXJOBS];

	if (q == NULL) {
		CHECK(0, "line %d: workq_new: %s", line, err);
		return;
	}
	gate_init(&g);
	for (int i = 0; i < submitted; i++) {
		jobs[i] = (struct job){ &g, i };
		if (workq_submit(q, job_main, &jobs[i]) != 0) {
			ref++;
			continue;
		}
		ids[acc++] = i;
		if (acc <= threads)
			gate_wait_started(&g, acc);
	}
	CHECK(acc == want_acc && ref == want_ref, "line %d: accepted %d refused %d, want %d and %d",
	    line, acc, ref, want_acc, want_ref);
	workq_stats(q, &st);
	CHECK(st.refused == (uint64_t)ref && st.running == (uint64_t)(acc < threads ? acc : threads) &&
	    st.queued == (uint64_t)(acc > threads ? acc - threads : 0),
	    "line %d: stats queued %llu running %llu refused %llu", line,
	    (unsigned long long)st.queued, (unsigned long long)st.running,
	    (unsigned long long)st.refused);
	gate_open(&g);
	workq_free(q); /* runs what is still queued */
	for (int i = 0; i < acc; i++)
		CHECK(g.ran[ids[i]] == 1, "line %d: job %d ran %d times", line, ids[i], g.ran[ids[i]]);
	CHECK(g.n == acc, "line %d: %d jobs ran, %d accepted", line, g.n, acc);
	if (threads == 1)
		for (int i = 0; i < g.n; i++)
			CHECK(g.order[i] == ids[i], "line %d: one thread ran job %d %dth, want %d",
			    line, g.order[i], i, ids[i]);
}

static void
test_cases(void)
{
	FILE *f = fopen(CASES, "r");
	char buf[256];
	int line = 0, n = 0;

	if (f == NULL) {
		CHECK(0, "cannot open %s", CASES);
		return;
	}
	while (fgets(buf, sizeof(buf), f) != NULL) {
		int t, b, s, a, r;

		line++;
		if (buf[0] == '#' || buf[0] == '\n')
			continue;
		if (sscanf(buf, "%d %d %d %d %d", &t, &b, &s, &a, &r) != 5 || s > MAXJOBS) {
			CHECK(0, "%s:%d: malformed case", CASES, line);
			continue;
		}
		run_case(line, t, b, s, a, r);
		n++;
	}
	fclose(f);
	CHECK(n >= 10, "only %d cases read from %s", n, CASES);
}

static void
test_params(void)
{
	char err[128];

	err[0] = '\0';
	CHECK(workq_new(0, 1, "w", err, sizeof(err)) == NULL && err[0] != '\0', "0 threads accepted");
	CHECK(workq_new(1, 0, "w", err, sizeof(err)) == NULL, "a queue of 0 accepted");
	workq_free(NULL);
}

/* Many submitters and threads: every accepted job runs once. */
static atomic_int counted;

static void
count_main(void *arg)
{
	(void)arg;
	atomic_fetch_add(&counted, 1);
}

struct submitter {
	struct workq *q;
	int accepted;
};

static void *
submit_main(void *arg)
{
	struct submitter *s = arg;

	for (int i = 0; i < 100000; i++)
		if (workq_submit(s->q, count_main, NULL) == 0)
			s->accepted++;
	return NULL;
}

static void
test_concurrent(void)
{
	struct submitter s[4];
	pthread_t t[4];
	char err[128];
	struct workq *q = workq_new(3, 64, "test-workq", err, sizeof(err));
	int acc = 0;

	CHECK(q != NULL, "workq_new: %s", err);
	if (q == NULL)
		return;
	for (int i = 0; i < 4; i++) {
		s[i] = (struct submitter){ q, 0 };
		pthread_create(&t[i], NULL, submit_main, &s[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		acc += s[i].accepted;
	}
	workq_free(q);
	CHECK(acc > 0 && atomic_load(&counted) == acc, "%d jobs ran, %d accepted",
	    atomic_load(&counted), acc);
}

int
main(void)
{
	test_params();
	test_cases();
	test_concurrent();
	printf("test_workq: %d passed, %d failed\n", unit_passed, unit_failed);
	return unit_failed ? 1 : 0;
}
