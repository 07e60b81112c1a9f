/* render_json.c - JSON output through jansson (key order as built). */
#include "render_json.h"

#include "errstr.h"

int
render_json(const json_t *doc, FILE *f, char *errstr, size_t errstr_size)
{
	if (json_dumpf(doc, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0 || fputc('\n', f) == EOF) {
		errstr_set(errstr, errstr_size, "cannot write JSON");
		return -1;
	}
	return 0;
}
