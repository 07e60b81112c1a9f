/* render_json.c - JSON output through jansson (key order as built), dumped
 * to memory first so a file gets one write instead of thousands. */
#include "render_json.h"

#include "errstr.h"

#include <stdlib.h>
#include <string.h>

int
render_json_mem(const json_t *doc, int indent, char **buf, size_t *cap, size_t *len,
                char *errstr, size_t errstr_size)
{
	size_t flags = indent > 0 ? JSON_INDENT(indent) : JSON_COMPACT;
	size_t n = json_dumpb(doc, *buf, *cap, flags);

	if (n == 0) {
		errstr_set(errstr, errstr_size, "cannot encode JSON");
		return -1;
	}
	if (n + 1 > *cap) {  /* too small: grow once, dump again */
		size_t ncap = (n + 1) * 2;
		char *nb = realloc(*buf, ncap);

		if (nb == NULL) {
			errstr_set(errstr, errstr_size, "out of memory");
			return -1;
		}
		*buf = nb;
		*cap = ncap;
		if (json_dumpb(doc, *buf, *cap, flags) != n) {
			errstr_set(errstr, errstr_size, "cannot encode JSON");
			return -1;
		}
	}
	(*buf)[n] = '\n';
	*len = n + 1;
	return 0;
}

int
render_json(const json_t *doc, FILE *f, int indent, char *errstr, size_t errstr_size)
{
	char *buf = NULL;
	size_t cap = 0, n;
	int rc = render_json_mem(doc, indent, &buf, &cap, &n, errstr, errstr_size);

	if (rc == 0 && fwrite(buf, 1, n, f) != n) {
		errstr_set(errstr, errstr_size, "cannot write JSON");
		rc = -1;
	}
	free(buf);
	return rc;
}
