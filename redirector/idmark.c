/* idmark.c - spool_dir/eventid.mark: one decimal number, ms since the Unix
 * epoch, written atomically (temporary file, fsync, rename, fsync of the
 * directory). */
#include "idmark.h"

#include "errstr.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MARK_NAME "eventid.mark"

int64_t
idmark_load(const char *dir, char *errstr, size_t errstr_size)
{
	char path[4096], text[32], *end;
	FILE *f;
	size_t n;
	long long v;

	snprintf(path, sizeof(path), "%s/" MARK_NAME, dir);
	if ((f = fopen(path, "r")) == NULL) {
		if (errno == ENOENT)
			return 0;
		errstr_set(errstr, errstr_size, "%s: %s", path, strerror(errno));
		return -1;
	}
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	errno = 0;
	v = strtoll(text, &end, 10);
	if (errno || end == text || (*end != '\n' && *end != '\0') || v < 0) {
		errstr_set(errstr, errstr_size, "%s: not a number of milliseconds", path);
		return -1;
	}
	return (int64_t)v;
}

int
idmark_store(const char *dir, int64_t ms, char *errstr, size_t errstr_size)
{
	char path[4096], tmp[4200], text[32];
	int fd, len, ok;

	snprintf(path, sizeof(path), "%s/" MARK_NAME, dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	len = snprintf(text, sizeof(text), "%" PRId64 "\n", ms);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
		errstr_set(errstr, errstr_size, "%s: %s", tmp, strerror(errno));
		return -1;
	}
	ok = write(fd, text, (size_t)len) == len && fsync(fd) == 0;
	if (close(fd) < 0 || !ok || rename(tmp, path) < 0) {
		errstr_set(errstr, errstr_size, "%s: %s", ok ? path : tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		fsync(fd);
		close(fd);
	}
	return 0;
}
