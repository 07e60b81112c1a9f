/* errstr.c - the shared errstr formatter (see errstr.h), and the UTF-8
 * clean-up that keeps truncated messages storable. */
#include "errstr.h"

#include <stdarg.h>
#include <stdio.h>

/* Length of the well-formed UTF-8 sequence at s, or 0 if none starts there
 * (the table of RFC 3629, section 4). */
static size_t
utf8_len(const unsigned char *s)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xBF;
	size_t n;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		n = 2;
	else if (c >= 0xE0 && c <= 0xEF)
		n = 3;
	else if (c >= 0xF0 && c <= 0xF4)
		n = 4;
	else
		return 0;
	if (c == 0xE0)
		lo = 0xA0;
	else if (c == 0xED)
		hi = 0x9F;
	else if (c == 0xF0)
		lo = 0x90;
	else if (c == 0xF4)
		hi = 0x8F;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return n;
}

int
errstr_utf8_valid(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n;

	for (; *p != '\0'; p += n)
		if ((n = utf8_len(p)) == 0)
			return 0;
	return 1;
}

size_t
errstr_utf8_clean(char *s)
{
	unsigned char *p = (unsigned char *)s;
	size_t bad = 0, n;

	while (*p != '\0') {
		if ((n = utf8_len(p)) == 0) {
			*p++ = '?';
			bad++;
		} else {
			p += n;
		}
	}
	return bad;
}

void
errstr_vset(char *errstr, size_t errstr_size, const char *fmt, va_list ap)
{
	if (errstr == NULL || errstr_size == 0)
		return;
	vsnprintf(errstr, errstr_size, fmt, ap);
	errstr_utf8_clean(errstr);
}

void
errstr_set(char *errstr, size_t errstr_size, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	errstr_vset(errstr, errstr_size, fmt, ap);
	va_end(ap);
}
