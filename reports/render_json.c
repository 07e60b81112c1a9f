/* render_json.c - JSON output through jansson (key order as built), dumped
 * to memory first so the file gets one write instead of thousands. */
#include "render_json.h"

#include "errstr.h"

#include <stdlib.h>
#include <string.h>

int
render_json(const json_t *doc, FILE *f, int indent, char *errstr, size_t errstr_size)
{
	size_t flags = indent > 0 ? JSON_INDENT(indent) : JSON_COMPACT;
	char *s = json_dumps(doc, flags);
	size_t n;
	int rc = 0;

	if (s == NULL) {
		errstr_set(errstr, errstr_size, "cannot encode JSON");
		return -1;
	}
	n = strlen(s);
	if (fwrite(s, 1, n, f) != n || fputc('\n', f) == EOF) {
		errstr_set(errstr, errstr_size, "cannot write JSON");
		rc = -1;
	}
	free(s);
	return rc;
}
