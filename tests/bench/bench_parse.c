/* bench_parse.c - what parsing costs ingest per event: jansson's json_loadb
 * alone and ingest's event_parse (json_loadb + validation) over a file of
 * visit events, one JSON document per line, on one thread.
 * Usage: bench_parse FILE [PASSES]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../ingest/event.h"

struct line {
	const char *p;
	size_t n;
};

static double
cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The whole file (caller frees) and its length; NULL on error. */
static char *
slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long sz;

	if (f == NULL)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (sz = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)sz + 1)) != NULL) {
		if (fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
			free(buf);
			buf = NULL;
		} else {
			buf[sz] = '\0';
			*len = (size_t)sz;
		}
	}
	fclose(f);
	return buf;
}

int
main(int argc, char **argv)
{
	struct line *lines = NULL;
	size_t len = 0, n = 0, cap = 0, bytes = 0, bad = 0;
	int passes = argc > 2 ? atoi(argv[2]) : 3;
	double t0, t_load, t_parse;
	char *buf, *p, *end;

	if (argc < 2 || passes < 1) {
		fprintf(stderr, "usage: bench_parse FILE [PASSES]\n");
		return 2;
	}
	if ((buf = slurp(argv[1], &len)) == NULL) {
		perror(argv[1]);
		return 1;
	}
	for (p = buf, end = buf + len; p < end; p++) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t l = (nl ? nl : end) - p;

		if (l > 0) {
			if (n == cap) {
				struct line *nlines;

				cap = cap ? cap * 2 : 4096;
				if ((nlines = realloc(lines, cap * sizeof(*lines))) == NULL) {
					perror("realloc");
					return 1;
				}
				lines = nlines;
			}
			lines[n].p = p;
			lines[n++].n = l;
			bytes += l;
		}
		p += l;
	}
	if (n == 0) {
		fprintf(stderr, "%s: no events\n", argv[1]);
		return 1;
	}

	t0 = cpu_s();
	for (int k = 0; k < passes; k++)
		for (size_t i = 0; i < n; i++) {
			json_decref(json_loadb(lines[i].p, lines[i].n, 0, NULL));
		}
	t_load = cpu_s() - t0;

	t0 = cpu_s();
	for (int k = 0; k < passes; k++)
		for (size_t i = 0; i < n; i++) {
			char reason[256];
			struct event ev;
			json_t *root;

			if (event_parse(lines[i].p, lines[i].n, &root, &ev, reason, sizeof(reason)) < 0 &&
			    k == 0)
				bad++;
			json_decref(root);
		}
	t_parse = cpu_s() - t0;

	printf("bench_parse_us_per_event %.2f json_loadb %.2f event_parse  (%zu events of "
	    "%.0f bytes on average, %d passes, one thread; %zu malformed)\n",
	    t_load * 1e6 / ((double)n * passes), t_parse * 1e6 / ((double)n * passes), n,
	    (double)bytes / (double)n, passes, bad);
	free(lines);
	free(buf);
	return 0;
}
