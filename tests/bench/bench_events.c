/* bench_events.c - the visit event path alone: events_publish from two
 * threads into a running broker, no HTTP. Prints the CPU per event of the
 * publishing call and of the whole process (the encoder and librdkafka's
 * threads included) once every event is delivered, and the encoding of one
 * such event alone (events_encode: what jansson's json_dumpb costs, whatever
 * the code around it).
 * Usage: bench_events BOOTSTRAP TOPIC [N]. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "../../redirector/events.h"

#define THREADS 2

/* The visit every publisher sends, but for its code, link id and time. */
static const struct events_visit visit = {
	.ip = "203.0.113.57",
	.user_agent = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) "
	    "AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1",
	.referer = "https://www.example.org/newsletter/2026-11",
	.accept_language = "fr-FR,fr;q=0.9,en;q=0.8",
	.host = "s.example.com",
	.query = NULL,
	.status = 302,
};

static struct events *ev;
static long per_thread;
static double publish_cpu[THREADS];

static double
clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double
process_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	    (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void *
publisher(void *arg)
{
	int t = (int)(long)arg;
	static const char *const codes[] = { "aB3dE9", "x7Yq2Z", "Qw8rT1", "mN4bV6" };
	char code[16];
	struct events_visit v = visit;
	double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);

	for (long i = 0; i < per_thread; i++) {
		snprintf(code, sizeof(code), "%s", codes[i & 3]);
		v.code = code;
		v.link_id = 1000 + (i & 3);
		v.ts_us = (int64_t)(clock_s(CLOCK_REALTIME) * 1e6);
		events_publish(ev, &v);
	}
	publish_cpu[t] = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	return NULL;
}

/* CPU microseconds of one encoding of the visit (as events_publish makes
 * it) on this thread; *bytes its size, or -1 when it cannot be made. */
static double
encode_cost(size_t *bytes)
{
	struct events_visit v = visit;
	const char *out;
	size_t n = 0;
	long reps = 200000;
	double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);

	v.code = "aB3dE9";
	v.link_id = 1000;
	v.ts_us = 1764126000123456LL;
	for (long i = 0; i < reps && (n = events_encode(ev, &v, (uint64_t)i + 1, &out)) > 0; i++)
		;
	*bytes = n;
	return n > 0 ? (clock_s(CLOCK_THREAD_CPUTIME_ID) - c0) * 1e6 / (double)reps : -1;
}

int
main(int argc, char **argv)
{
	struct events_conf conf;
	struct events_stats st;
	char errstr[512], spool[] = "/tmp/lp-bench-events-XXXXXX";
	pthread_t th[THREADS];
	long n = argc > 3 ? atol(argv[3]) : 1000000;
	double w0, c0, wall, cpu, pub = 0, dump;
	size_t dump_bytes = 0;

	if (argc < 3 || n < THREADS) {
		fprintf(stderr, "usage: bench_events BOOTSTRAP TOPIC [N]\n");
		return 2;
	}
	if (mkdtemp(spool) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	memset(&conf, 0, sizeof(conf));
	conf.bootstrap = argv[1];
	conf.topic = argv[2];
	conf.spool_dir = spool;
	conf.linger_ms = getenv("LINGER_MS") ? atoi(getenv("LINGER_MS")) : 200;
	conf.queue_max_messages = 1000000;
	conf.message_timeout_ms = 30000;
	conf.shutdown_flush_ms = 30000;
	conf.spool_max_bytes = 1ULL << 30;
	conf.spool_fsync_ms = 50;
	if ((ev = events_new(&conf, errstr, sizeof(errstr))) == NULL) {
		fprintf(stderr, "events_new: %s\n", errstr);
		return 1;
	}
	for (int i = 0; i < 100 && !events_connected(ev); i++)
		usleep(50000);
	per_thread = n / THREADS;
	w0 = clock_s(CLOCK_MONOTONIC);
	c0 = process_cpu();
	for (long t = 0; t < THREADS; t++)
		pthread_create(&th[t], NULL, publisher, (void *)t);
	for (int t = 0; t < THREADS; t++) {
		pthread_join(th[t], NULL);
		pub += publish_cpu[t];
	}
	do {
		usleep(1000);
		events_stats(ev, &st);
	} while (st.delivered + st.failed < (uint64_t)(per_thread * THREADS));
	wall = clock_s(CLOCK_MONOTONIC) - w0;
	cpu = process_cpu() - c0;
	n = per_thread * THREADS;
	printf("events %ld delivered %llu failed %llu spooled %llu in %.2f s\n", n,
	    (unsigned long long)st.delivered, (unsigned long long)st.failed,
	    (unsigned long long)st.spooled, wall);
	printf("events_publish_cpu_us %.3f  (the calls, on the publishing threads: the copy, and "
	    "every 64th call the encoding of the thread's 64)\n", pub * 1e6 / n);
	printf("events_process_cpu_us %.3f  (every thread, until all delivered)\n", cpu * 1e6 / n);
	dump = encode_cost(&dump_bytes);
	events_close(ev);
	rmdir(spool);
	if (dump < 0) {
		fprintf(stderr, "bench_events: the event cannot be encoded\n");
		return 1;
	}
	printf("events_json_dump_us %.3f  (events_encode of one such event alone, %zu bytes, one "
	    "thread: jansson's json_dumpb validates and escapes the text a character at a time)\n",
	    dump, dump_bytes);
	return 0;
}
