/* test_rfc3339.c - rfc3339_parse against tests/data/rfc3339_cases.txt (the
 * API's date-times and PostgreSQL's JSON timestamptz text), and every day
 * of 1970-2400 against timegm. Run from the repository root. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../redirector/rfc3339.h"
#include "unit.h"

#define CASES "tests/data/rfc3339_cases.txt"

struct tally {
	int ok, bad;
};

static void
one_case(char **fld, int n, const char *where, void *ctx)
{
	struct tally *t = ctx;
	int64_t us = -42;
	int rc;

	if (n != 2 || unit_unescape(fld[0]) < 0) {
		CHECK(0, "%s: wants a value and an outcome, tab-separated", where);
		return;
	}
	rc = rfc3339_parse(fld[0], &us);
	if (strcmp(fld[1], "-") == 0) {
		CHECK(rc == -1 && us == -42, "%s: \"%s\" accepted as %" PRId64, where, fld[0], us);
		t->bad++;
	} else {
		int64_t want = strtoll(fld[1], NULL, 10);

		CHECK(rc == 0 && us == want, "%s: \"%s\": rc %d, %" PRId64 " (want %" PRId64 ")",
		    where, fld[0], rc, us, want);
		t->ok++;
	}
}

static void
run_cases(void)
{
	struct tally t = { 0, 0 };

	unit_each_case(CASES, 3, one_case, &t);
	CHECK(t.ok >= 10 && t.bad >= 20, "%s: only %d accepted and %d rejected cases", CASES, t.ok,
	    t.bad);
}

/* Every calendar day from 1970 to 2400 parses to timegm's instant, and the
 * day after each month's last is refused. */
static void
every_day(void)
{
	static const int dm[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int wrong = 0, days = 0;

	for (int y = 1970; y <= 2400; y++)
		for (int m = 1; m <= 12; m++) {
			int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
			int last = m == 2 && leap ? 29 : dm[m - 1];
			char s[64];
			int64_t us;

			for (int d = 1; d <= last + 1; d++) {
				struct tm tm = { .tm_year = y - 1900, .tm_mon = m - 1, .tm_mday = d,
				    .tm_hour = 23, .tm_min = 59, .tm_sec = 58 };
				int rc;

				snprintf(s, sizeof(s), "%04d-%02d-%02dT23:59:58.25-01:30", y, m, d);
				rc = rfc3339_parse(s, &us);
				if (d > last) {
					wrong += rc != -1;
					continue;
				}
				days++;
				wrong += rc != 0 ||
				    us != ((int64_t)timegm(&tm) + 5400) * 1000000 + 250000;
			}
		}
	CHECK(wrong == 0 && days > 157000, "%d of %d days parsed wrongly", wrong, days);
}

int
main(void)
{
	run_cases();
	every_day();
	return unit_done("test_rfc3339");
}
