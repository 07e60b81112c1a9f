/* rfc3339.h - one strict parser for the API's date-times and PostgreSQL's
 * JSON timestamptz text: fixed-width fields, real calendar dates. */
#ifndef LP_RFC3339_H
#define LP_RFC3339_H

#include <stdint.h>

/* Earliest and latest instants a link's valid_since / expires_at may hold
 * (µs since the epoch): 1970-01-01T00:00:00Z and 9999-12-30T00:00:00Z, so
 * that PostgreSQL renders every stored value with a four-digit year. */
#define RFC3339_MIN_US INT64_C(0)
#define RFC3339_MAX_US INT64_C(253402128000000000)

/* Parses "YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm|-hh:mm)" ('T' and 'Z' in
 * either case; the offset may also carry ":ss", as PostgreSQL writes
 * historical offsets) into µs since the epoch, fractions past 6 digits
 * truncated, past 9 refused. Rejects dates that do not exist (2030-02-30), hour 24, minute
 * or second 60 and more, offsets past ±15:59 (PostgreSQL's limit), and
 * anything after the offset. Returns 0, or -1 with *us untouched. */
int rfc3339_parse(const char *s, int64_t *us);

#endif
