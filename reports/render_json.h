/* render_json.h - writes a report (or index) as UTF-8 JSON. */
#ifndef LP_REPORTS_RENDER_JSON_H
#define LP_REPORTS_RENDER_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

/* Writes doc (borrowed) and a final newline to f, indented by indent
 * spaces (0 = compact, one line). 0, or -1 with errstr. */
int render_json(const json_t *doc, FILE *f, int indent, char *errstr, size_t errstr_size);

/* The same text into *buf (caller owns it; malloc'ed, grown as needed,
 * *cap its size; *buf may start NULL with *cap 0), *len bytes with the
 * final newline, no NUL. Reusing the buffer for many documents saves an
 * allocation per document. 0, or -1 with errstr. */
int render_json_mem(const json_t *doc, int indent, char **buf, size_t *cap, size_t *len,
                    char *errstr, size_t errstr_size);

#endif
