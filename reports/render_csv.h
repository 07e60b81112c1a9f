/* render_csv.h - writes a report as RFC 4180 CSV (UTF-8, CRLF), long format:
 * code,section,dimension,value,visits,uniques,bot_visits (layout in README). */
#ifndef LP_REPORTS_RENDER_CSV_H
#define LP_REPORTS_RENDER_CSV_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

/* Writes one field, quoted when it holds a comma, quote, CR, LF or edge
 * space (quotes doubled). s may be NULL (empty field). */
void render_csv_field(FILE *f, const char *s);

/* Writes the header and every row of rep (borrowed). 0, or -1 with errstr. */
int render_csv(const json_t *rep, FILE *f, char *errstr, size_t errstr_size);

#endif
