/* rfc3339.c - one strict parser for the API's date-times and PostgreSQL's
 * JSON timestamptz text: fixed-width fields, real calendar dates. */
#include "rfc3339.h"

/* Reads n digits at s; -1 if any is not a digit. */
static int
digits(const char *s, int n)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

static int
days_in_month(int y, int m)
{
	static const int dm[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

	return m == 2 && leap ? 29 : dm[m - 1];
}

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar. */
static int64_t
days_from_civil(int y, int m, int d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

int
rfc3339_parse(const char *s, int64_t *us)
{
	int y, mo, d, h, mi, sec, oh = 0, om = 0, os = 0, sign = 0;
	int64_t frac = 0, scale = 100000, t;

	/* Field by field, each only after the one before it matched, so that
	 * no read goes past a short string's terminator. */
	if ((y = digits(s, 4)) < 0 || s[4] != '-' || (mo = digits(s + 5, 2)) < 1 || mo > 12 ||
	    s[7] != '-' || (d = digits(s + 8, 2)) < 1 || d > days_in_month(y, mo))
		return -1;
	if ((s[10] != 'T' && s[10] != 't') || (h = digits(s + 11, 2)) < 0 || h > 23 ||
	    s[13] != ':' || (mi = digits(s + 14, 2)) < 0 || mi > 59 || s[16] != ':' ||
	    (sec = digits(s + 17, 2)) < 0 || sec > 59)
		return -1;
	s += 19;
	if (*s == '.') {
		const char *f0 = ++s;

		if (*s < '0' || *s > '9')
			return -1;
		for (; *s >= '0' && *s <= '9'; s++) {
			frac += (*s - '0') * scale;
			scale /= 10;
		}
		/* Nanoseconds at most: PostgreSQL refuses a date-time over its
		 * 128-byte field buffer (22007), which in a batched create
		 * failed every item batched with it. */
		if (s - f0 > 9)
			return -1;
	}
	if (*s == 'Z' || *s == 'z') {
		s++;
	} else if (*s == '+' || *s == '-') {
		sign = *s == '-' ? -1 : 1;
		oh = digits(s + 1, 2);
		if (oh < 0 || oh > 15 || s[3] != ':' || (om = digits(s + 4, 2)) < 0 || om > 59)
			return -1;
		s += 6;
		if (*s == ':') {
			if ((os = digits(s + 1, 2)) < 0 || os > 59)
				return -1;
			s += 3;
		}
	} else {
		return -1;
	}
	if (*s != '\0')
		return -1;
	t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec;
	t -= sign * (oh * 3600 + om * 60 + os);
	*us = t * 1000000 + frac;
	return 0;
}
