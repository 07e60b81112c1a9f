/* test_event.c - event_parse against tests/data/event_cases.txt: each line a
 * message value and either the fields it yields or the reject reason's start,
 * for both encodings (v2 array, v1 object). Run from the repository root. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "../../common/errstr.h"
#include "../../ingest/event.h"
#include "unit.h"

#define CASES "tests/data/event_cases.txt"

/* What a parsed event reads as, "-" for a NULL string (written into out). */
static void
describe(const struct event *ev, char *out, size_t size)
{
	char link[32];

	if (ev->has_link_id)
		snprintf(link, sizeof(link), "%lld", ev->link_id);
	else
		snprintf(link, sizeof(link), "-");
	snprintf(out, size, "ok %lld %lld %.*s %s %d %s %s %s %s %s %s", ev->id, ev->ts,
	    (int)ev->code_len, ev->code, link, ev->status, ev->ip,
	    ev->user_agent ? ev->user_agent : "-", ev->referer ? ev->referer : "-",
	    ev->accept_language ? ev->accept_language : "-", ev->host ? ev->host : "-",
	    ev->query ? ev->query : "-");
}

int
main(void)
{
	FILE *f = fopen(CASES, "r");
	char line[8192], where[64];
	int lineno = 0, ok = 0, rejected = 0;

	CHECK(f != NULL, "cannot open %s (run from the repository root)", CASES);
	if (f == NULL)
		goto done;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *fld[3], reason[256], got[1024];
		struct event ev;
		json_t *root;
		long len;
		int rc;

		lineno++;
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		snprintf(where, sizeof(where), "%s:%d", CASES, lineno);
		if (unit_split_tabs(line, fld, 3) != 2 || (len = unit_unescape(fld[0])) < 0) {
			CHECK(0, "%s: wants a value and an outcome, tab-separated", where);
			continue;
		}
		reason[0] = '\0';
		rc = event_parse(fld[0], (size_t)len, &root, &ev, reason, sizeof(reason));
		if (strncmp(fld[1], "ok ", 3) == 0) {
			CHECK(rc == 0 && root != NULL, "%s: rejected: %s", where, reason);
			if (rc == 0) {
				describe(&ev, got, sizeof(got));
				CHECK_STR(got, fld[1], where);
				ok++;
			}
		} else {
			CHECK(rc == -1 && root == NULL, "%s: accepted, expected %s", where, fld[1]);
			if (unit_unescape(fld[1]) < 0)
				CHECK(0, "%s: bad escape in the outcome", where);
			CHECK(strncmp(reason, fld[1], strlen(fld[1])) == 0,
			    "%s: reason \"%s\" does not start with \"%s\"", where, reason, fld[1]);
			/* visit_reject.reason is text: it must be valid UTF-8 */
			CHECK(errstr_utf8_valid(reason), "%s: reason is not valid UTF-8: %s", where,
			    reason);
			rejected++;
		}
		json_decref(root);
	}
	fclose(f);
	CHECK(ok >= 6 && rejected >= 20, "%s: only %d accepted and %d rejected cases", CASES,
	    ok, rejected);
done:
	return unit_done("test_event");
}
