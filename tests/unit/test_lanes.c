/* test_lanes.c - lanes_plan against the cases in tests/data/lanes_cases.txt,
 * then on generated partition sets: every lane in range, the lanes' backlogs
 * within one partition's backlog of each other. Run from the repository root. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../ingest/lanes.h"
#include "unit.h"

#define CASES "tests/data/lanes_cases.txt"
#define MAXP 64

/* Parses "a:b,c:d,..." into parts and backlogs; returns the count or -1. */
static int
parse_parts(char *s, int32_t *part, int64_t *backlog)
{
	int n = 0;

	for (char *tok = strtok(s, ","); tok != NULL; tok = strtok(NULL, ",")) {
		char *colon = strchr(tok, ':');

		if (colon == NULL || n == MAXP)
			return -1;
		part[n] = (int32_t)strtol(tok, NULL, 10);
		backlog[n++] = strtoll(colon + 1, NULL, 10);
	}
	return n;
}

static void
run_cases(void)
{
	FILE *f = fopen(CASES, "r");
	char line[4096], where[64];
	int lineno = 0, ncases = 0;

	CHECK(f != NULL, "cannot open %s (run from the repository root)", CASES);
	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *fld[4], got[512];
		int32_t part[MAXP];
		int64_t backlog[MAXP];
		int lane[MAXP], n, nlanes, count[MAXP];
		int64_t total[MAXP];
		size_t off = 0;

		lineno++;
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		snprintf(where, sizeof(where), "%s:%d", CASES, lineno);
		CHECK(unit_split_tabs(line, fld, 4) == 3, "%s: wants 3 fields", where);
		nlanes = atoi(fld[0]);
		n = parse_parts(fld[1], part, backlog);
		CHECK(n > 0 && nlanes > 0, "%s: bad case", where);
		if (n <= 0 || nlanes <= 0)
			continue;
		CHECK(nlanes <= MAXP && lanes_plan(part, backlog, n, nlanes, lane, total, count) == 0,
		    "%s: lanes_plan failed", where);
		got[0] = '\0';
		for (int i = 0; i < n && off < sizeof(got); i++)
			off += (size_t)snprintf(got + off, sizeof(got) - off, "%s%d", i ? "," : "",
			    lane[i]);
		CHECK_STR(got, fld[2], where);
		ncases++;
	}
	fclose(f);
	CHECK(ncases >= 9, "%s: only %d cases", CASES, ncases);
}

static uint64_t rng = 88172645463325252ULL;

static uint64_t
next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Generated sets: heavy-tailed backlogs (a few hot partitions), sometimes
 * none at all. */
static void
test_generated(void)
{
	for (int round = 0; round < 2000; round++) {
		int n = 1 + (int)(next_rand() % MAXP), nlanes = 2 + (int)(next_rand() % 3);
		int zero = next_rand() % 5 == 0, lane[MAXP], count[4] = { 0 }, bad = 0, pc[4];
		int32_t part[MAXP];
		int64_t backlog[MAXP], load[4] = { 0 }, pb[4], biggest = 0, lo, hi;

		for (int i = 0; i < n; i++) {
			uint64_t r = next_rand() % 1000;

			part[i] = (int32_t)(i * 7);
			backlog[i] = zero ? 0 : (int64_t)(r * r * r / 1000);
			lane[i] = -1;
			if (backlog[i] > biggest)
				biggest = backlog[i];
		}
		if (lanes_plan(part, backlog, n, nlanes, lane, pb, pc) < 0) {
			CHECK(0, "round %d: lanes_plan failed", round);
			continue;
		}
		for (int i = 0; i < n; i++) {
			if (lane[i] < 0 || lane[i] >= nlanes) {
				bad++;
				continue;
			}
			load[lane[i]] += backlog[i];
			count[lane[i]]++;
		}
		CHECK(bad == 0, "round %d: %d partitions without a lane in range", round, bad);
		lo = hi = load[0];
		for (int k = 1; k < nlanes; k++) {
			lo = load[k] < lo ? load[k] : lo;
			hi = load[k] > hi ? load[k] : hi;
		}
		CHECK(hi - lo <= biggest, "round %d: lane backlogs %lld..%lld differ by more than "
		    "the biggest partition's %lld", round, (long long)lo, (long long)hi,
		    (long long)biggest);
		if (zero) {
			int clo = count[0], chi = count[0];

			for (int k = 1; k < nlanes; k++) {
				clo = count[k] < clo ? count[k] : clo;
				chi = count[k] > chi ? count[k] : chi;
			}
			CHECK(chi - clo <= 1, "round %d: no backlog, yet %d..%d partitions per lane",
			    round, clo, chi);
		}
	}
}

int
main(void)
{
	int lane[1] = { 7 }, count[2];
	int64_t total[2];

	run_cases();
	test_generated();
	CHECK(lanes_plan(NULL, NULL, 0, 2, lane, total, count) == 0 && lane[0] == 7,
	    "no partitions: no-op");
	return unit_done("test_lanes");
}
