/* errstr.c - the shared errstr formatter (see errstr.h). */
#include "errstr.h"

#include <stdarg.h>
#include <stdio.h>

void
errstr_set(char *errstr, size_t errstr_size, const char *fmt, ...)
{
	va_list ap;

	if (errstr == NULL || errstr_size == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(errstr, errstr_size, fmt, ap);
	va_end(ap);
}
