/* monotime.c - condition variables timed on CLOCK_MONOTONIC (see
 * monotime.h). */
#include "monotime.h"

int
monotime_cond_init(pthread_cond_t *cond)
{
	pthread_condattr_t a;
	int ok;

	if (pthread_condattr_init(&a) != 0) {
		pthread_cond_init(cond, NULL);
		return -1;
	}
	ok = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) == 0 &&
	    pthread_cond_init(cond, &a) == 0;
	pthread_condattr_destroy(&a);
	if (!ok)
		pthread_cond_init(cond, NULL);
	return ok ? 0 : -1;
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

static long long
clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long long
monotime_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

long long
monotime_wall_ms(void)
{
	return clock_ms(CLOCK_REALTIME);
}
