/* monotime.c - condition variables timed on CLOCK_MONOTONIC (see
 * monotime.h). */
#include "monotime.h"

int
monotime_cond_init(pthread_cond_t *cond)
{
	pthread_condattr_t a;
	int rc;

	if ((rc = pthread_condattr_init(&a)) != 0)
		return rc;
	if ((rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC)) == 0)
		rc = pthread_cond_init(cond, &a);
	pthread_condattr_destroy(&a);
	return rc;
}

void
monotime_deadline(struct timespec *ts, long long ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(ms / 1000);
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}
