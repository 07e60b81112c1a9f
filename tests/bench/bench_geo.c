/* bench_geo.c - geo_lookup throughput on $LP_GEOIP_CITY (else var/geoip/...),
 * beside a baseline in the same run: MMDB_lookup_string plus decoding the
 * whole record with MMDB_get_entry_data_list. Prints ratios. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <maxminddb.h>

#include "geo.h"

#define NADDR 65536
#define SECONDS 1.0

static char addrs[NADDR][48];

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Public-looking addresses: 3 of 4 IPv4, the rest in 2000::/4. */
static void
make_addrs(void)
{
	unsigned long long x = 0x2545f4914f6cdd1dULL;
	int i;

	for (i = 0; i < NADDR; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (i % 4 == 3)
			snprintf(addrs[i], sizeof(addrs[i]), "2%03x:%x:%x::%x",
			    (unsigned)(x & 0xfff), (unsigned)((x >> 12) & 0xffff),
			    (unsigned)((x >> 28) & 0xffff), (unsigned)((x >> 44) & 0xffff));
		else
			snprintf(addrs[i], sizeof(addrs[i]), "%u.%u.%u.%u",
			    (unsigned)(1 + (x & 0xff) % 223), (unsigned)((x >> 8) & 0xff),
			    (unsigned)((x >> 16) & 0xff), (unsigned)((x >> 24) & 0xff));
	}
}

struct run {
	const struct geo_db *geo;
	const MMDB_s *mmdb;
	int offset;
	long long n;
	int errors;
};

static void *
run_geo(void *arg)
{
	struct run *r = arg;
	struct geo_result res;
	double end = now() + SECONDS;
	long long n = 0;

	while (now() < end) {
		int i;

		for (i = 0; i < 1024; i++, n++)
			if (geo_lookup(r->geo, addrs[(r->offset + n) % NADDR], &res) != 0)
				r->errors++;
	}
	r->n = n;
	return NULL;
}

static void *
run_baseline(void *arg)
{
	struct run *r = arg;
	double end = now() + SECONDS;
	long long n = 0;

	while (now() < end) {
		int i;

		for (i = 0; i < 1024; i++, n++) {
			int gai_error, mmdb_error;
			MMDB_lookup_result_s res = MMDB_lookup_string(r->mmdb,
			    addrs[(r->offset + n) % NADDR], &gai_error, &mmdb_error);
			MMDB_entry_data_list_s *list = NULL;

			if (gai_error != 0 || mmdb_error != MMDB_SUCCESS) {
				r->errors++;
				continue;
			}
			if (res.found_entry) {
				if (MMDB_get_entry_data_list(&res.entry, &list) != MMDB_SUCCESS)
					r->errors++;
				MMDB_free_entry_data_list(list);
			}
		}
	}
	r->n = n;
	return NULL;
}

/* Runs fn on nthreads threads; returns lookups per second, -1 on error. */
static double
measure(void *(*fn)(void *), const struct geo_db *geo, const MMDB_s *mmdb, int nthreads)
{
	struct run runs[8];
	pthread_t t[8];
	double start = now(), total = 0;
	int i;

	for (i = 0; i < nthreads; i++) {
		memset(&runs[i], 0, sizeof(runs[i]));
		runs[i].geo = geo;
		runs[i].mmdb = mmdb;
		runs[i].offset = i * (NADDR / nthreads);
		if (pthread_create(&t[i], NULL, fn, &runs[i]) != 0)
			return -1;
	}
	for (i = 0; i < nthreads; i++) {
		pthread_join(t[i], NULL);
		if (runs[i].errors)
			return -1;
		total += (double)runs[i].n;
	}
	return total / (now() - start);
}

int
main(void)
{
	const char *path = getenv("LP_GEOIP_CITY");
	struct geo_db *geo;
	char err[512];
	double g1, b1, g2;
	MMDB_s mmdb;

	if (path == NULL || path[0] == '\0')
		path = "var/geoip/GeoLite2-City.mmdb";
	if ((geo = geo_open(path, NULL, "zh-CN", err, sizeof(err))) == NULL) {
		fprintf(stderr, "bench_geo: %s\n", err);
		return 1;
	}
	if (MMDB_open(path, MMDB_MODE_MMAP, &mmdb) != MMDB_SUCCESS) {
		fprintf(stderr, "bench_geo: %s: cannot open\n", path);
		geo_close(geo);
		return 1;
	}
	make_addrs();
	g1 = measure(run_geo, geo, &mmdb, 1);
	b1 = measure(run_baseline, geo, &mmdb, 1);
	g2 = measure(run_geo, geo, &mmdb, 2);
	MMDB_close(&mmdb);
	geo_close(geo);
	if (g1 <= 0 || b1 <= 0 || g2 <= 0) {
		fprintf(stderr, "bench_geo: lookups failed\n");
		return 1;
	}
	printf("geo_lookups_per_sec %.0f\n", g1);
	printf("baseline_mmdb_full_record_lookups_per_sec %.0f\n", b1);
	printf("geo_vs_baseline_ratio %.2f\n", g1 / b1);
	printf("geo_lookups_per_sec_2_threads %.0f\n", g2);
	return 0;
}
