/* test_batch.c - ingest/batch.c's batch_format_ts (the rollup rows' COPY
 * timestamps, computed without gmtime_r) against tests/data/batch_ts_cases.txt,
 * written by Python's datetime: the text and the month of each timestamp. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../ingest/batch.h"
#include "unit.h"

#define CASES "tests/data/batch_ts_cases.txt"

int
main(void)
{
	FILE *f = fopen(CASES, "r");
	char line[256];
	int cases = 0;

	if (f == NULL) {
		perror(CASES);
		return 1;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		char *us_s, *text, *month_s, *save = NULL, got[40];
		int32_t month = -1;

		if (line[0] == '#' || line[0] == '\n')
			continue;
		line[strcspn(line, "\n")] = '\0';
		us_s = strtok_r(line, "\t", &save);
		text = strtok_r(NULL, "\t", &save);
		month_s = strtok_r(NULL, "\t", &save);
		if (us_s == NULL || text == NULL || month_s == NULL) {
			CHECK(0, "%s: malformed line", CASES);
			continue;
		}
		batch_format_ts(strtoll(us_s, NULL, 10), got, sizeof(got), &month);
		CHECK_STR(got, text, us_s);
		CHECK(month == atoi(month_s), "%s: month %d, expected %s", us_s, (int)month, month_s);
		/* a short buffer gets a terminated prefix */
		batch_format_ts(strtoll(us_s, NULL, 10), got, 11, NULL);
		CHECK(strncmp(got, text, 10) == 0 && got[10] == '\0', "%s: truncated to \"%s\"", us_s,
		    got);
		cases++;
	}
	fclose(f);
	CHECK(cases >= 400, "only %d cases read", cases);
	return unit_done("test_batch");
}
