/* test_spool.c - redirector/spool.c: records written and read back in order,
 * and a write that fails part-way (the file size limit standing in for a
 * full disk) loses only the events of that write, counted as dropped, and
 * never the events spooled after it; and with no active file (reopening it
 * after a rotation failed) the events wait in memory until it opens; files
 * the spool did not name are left alone; a failed read is not an end; takes
 * while the active file cannot be opened leave the byte count alone; a failed
 * fdatasync writes its events again to a new file; a refused record is kept
 * apart. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../redirector/spool.h"
#include "unit.h"

#define FSYNC_MS 20

/* fdatasync calls still to fail with EIO: this definition stands in for
 * libc's for spool.c, linked into this program. */
static atomic_int sync_failures;

int
fdatasync(int fd)
{
	if (atomic_load(&sync_failures) > 0 && atomic_fetch_sub(&sync_failures, 1) > 0) {
		errno = EIO;
		return -1;
	}
	return (int)syscall(SYS_fdatasync, fd);
}

struct seen {
	int n;
	char vals[64][32];
};

static int
collect(void *ctx, const char *key, size_t klen, const char *val, size_t vlen)
{
	struct seen *s = ctx;

	(void)key;
	(void)klen;
	if (s->n < 64 && vlen < sizeof(s->vals[0])) {
		memcpy(s->vals[s->n], val, vlen);
		s->vals[s->n][vlen] = '\0';
	}
	s->n++;
	return 0;
}

static void
pause_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Appends events from..to-1; returns the bytes they take on disk (a 12-byte
 * header, the key, the value). */
static off_t
append(struct spool *s, const char *tag, int from, int to)
{
	char key[32], val[64];
	off_t bytes = 0;

	for (int i = from; i < to; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		snprintf(val, sizeof(val), "%s-%02d-%s", tag, i, "padding-padding");
		CHECK(spool_append(s, key, strlen(key), val, strlen(val)) == 0, "append %s %d", tag,
		    i);
		bytes += (off_t)(12 + strlen(key) + strlen(val));
	}
	return bytes;
}

/* Waits up to 5 s for the writer thread: until path holds size bytes, or
 * (size < 0) until the spool has counted dropped events. */
static void
wait_writer(struct spool *s, const char *path, off_t size, uint64_t dropped)
{
	for (int i = 0; i < 5000 / FSYNC_MS; i++) {
		struct spool_stats st;
		struct stat sb;

		spool_stats(s, &st);
		if (size >= 0 ? stat(path, &sb) == 0 && sb.st_size == size : st.dropped >= dropped)
			return;
		pause_ms(FSYNC_MS);
	}
}

/* A spool in a new directory made from dir (a mkdtemp template, filled
 * in); NULL, checked and reported, when it cannot be made. */
static struct spool *
new_spool(char *dir)
{
	struct spool_conf conf = { dir, 1 << 20, FSYNC_MS };
	char err[512];
	struct spool *s;

	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	s = spool_open(&conf, err, sizeof(err));
	CHECK(s != NULL, "spool_open: %s", err);
	return s;
}

/* Reads every spool file back into seen, oldest first, as the replayer
 * does (taking the active file too), and marks each done. */
static void
read_back(struct spool *s, struct seen *seen)
{
	char path[4096];

	for (int files = 0; files < 10 && spool_take(s, path, sizeof(path)) == 1; files++) {
		CHECK(spool_read(path, collect, seen) == 0, "spool_read %s", path);
		spool_done(s, path);
	}
}

/* Removes a test's spool directory: its active file, lock and itself. */
static void
remove_dir(const char *dir)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/spool.active", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/lock", dir);
	unlink(path);
	CHECK(rmdir(dir) == 0, "rmdir %s: a file is left", dir);
}

/* A spool in a new directory with five "a" events written, then no file
 * descriptor to open (the ones open stay) and the active file rotated, so
 * that it cannot be opened again: old gets the limit to restore. NULL when
 * it cannot be set up (checked). */
static struct spool *
spool_without_files(char *dir, struct rlimit *old)
{
	char path[4096], active[4096];
	struct rlimit low;
	struct spool *s;

	if ((s = new_spool(dir)) == NULL)
		return NULL;
	snprintf(active, sizeof(active), "%s/spool.active", dir);
	wait_writer(s, active, append(s, "a", 0, 5), 0);
	CHECK(getrlimit(RLIMIT_NOFILE, old) == 0, "getrlimit");
	low = *old;
	low.rlim_cur = 0;
	CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0, "setrlimit");
	CHECK(spool_take(s, path, sizeof(path)) == -1, "the reopen after the rotation fails");
	return s;
}

static void
test_failed_write(void)
{
	char dir[] = "/tmp/test_spool_XXXXXX", path[4096], want[64];
	struct spool_stats st;
	struct rlimit old, low;
	struct spool *s;
	struct seen seen = { 0 };
	struct stat sb;
	int i;
	off_t before;

	if ((s = new_spool(dir)) == NULL)
		return;
	/* before: ten events on disk */
	snprintf(path, sizeof(path), "%s/spool.active", dir);
	before = append(s, "before", 0, 10);
	wait_writer(s, path, before, 0);
	CHECK(stat(path, &sb) == 0 && sb.st_size > 0, "nothing written");
	/* the disk "fills" 20 bytes further on: twenty events fail to go,
	 * after part of one was written */
	signal(SIGXFSZ, SIG_IGN);
	CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0, "getrlimit");
	low = old;
	low.rlim_cur = (rlim_t)sb.st_size + 20;
	CHECK(setrlimit(RLIMIT_FSIZE, &low) == 0, "setrlimit");
	append(s, "lost", 10, 30);
	wait_writer(s, path, -1, 20);
	CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0, "setrlimit back");
	spool_stats(s, &st);
	CHECK(st.dropped == 20, "dropped %llu, want 20", (unsigned long long)st.dropped);
	CHECK(stat(path, &sb) == 0, "stat");
	/* there is room again: five more events */
	wait_writer(s, path, before + append(s, "after", 30, 35), 0);
	read_back(s, &seen);
	spool_stats(s, &st);
	CHECK(st.bytes == 0, "%llu bytes left", (unsigned long long)st.bytes);
	spool_close(s);
	CHECK(seen.n == 15, "read %d events back, want 15 (10 before, 5 after)", seen.n);
	for (i = 0; i < seen.n && i < 15; i++) {
		int k = i < 10 ? i : i + 20;

		snprintf(want, sizeof(want), "%s-%02d-%s", i < 10 ? "before" : "after", k,
		    "padding-padding");
		CHECK_STR(seen.vals[i], want, "event read back");
	}
	remove_dir(dir);
}

/* The active file cannot be opened again after a rotation (out of file
 * descriptors here): the events appended meanwhile are not lost, they are
 * written once the open works. */
static void
test_reopen_fails(void)
{
	char dir[] = "/tmp/test_spool_XXXXXX", active[4096], want[64];
	struct spool_stats st;
	struct rlimit old;
	struct spool *s;
	struct seen seen = { 0 };

	if ((s = spool_without_files(dir, &old)) == NULL)
		return;
	snprintf(active, sizeof(active), "%s/spool.active", dir);
	append(s, "b", 5, 10);
	pause_ms(10 * FSYNC_MS);  /* writer cycles with no file to write to */
	CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0, "setrlimit back");
	spool_stats(s, &st);
	CHECK(st.dropped == 0, "dropped %llu, want 0", (unsigned long long)st.dropped);
	wait_writer(s, active, 5 * (12 + 2 + 20), 0);
	read_back(s, &seen);
	spool_close(s);
	CHECK(seen.n == 10, "read %d events back, want 10", seen.n);
	for (int i = 0; i < seen.n && i < 10; i++) {
		snprintf(want, sizeof(want), "%s-%02d-%s", i < 5 ? "a" : "b", i, "padding-padding");
		CHECK_STR(seen.vals[i], want, "event read back");
	}
	remove_dir(dir);
}

/* One process per spool_dir: a second spool on it is refused while the
 * first is open, and allowed once it is closed. */
static void
test_one_owner(void)
{
	char dir[] = "/tmp/test_spool_XXXXXX", err[512];
	struct spool_conf conf = { dir, 1 << 20, FSYNC_MS };
	struct spool *a, *b;

	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	a = spool_open(&conf, err, sizeof(err));
	CHECK(a != NULL, "spool_open: %s", err);
	b = spool_open(&conf, err, sizeof(err));
	CHECK(b == NULL && strstr(err, "is in use by another process") != NULL,
	    "a second spool on %s: %s", dir, b ? "opened" : err);
	spool_close(b);
	spool_close(a);
	b = spool_open(&conf, err, sizeof(err));
	CHECK(b != NULL, "spool_open after close: %s", err);
	spool_close(b);
	remove_dir(dir);
}

/* Files in the spool directory that the spool did not name (an operator's
 * copy, an editor's backup, a shorter number) are left alone: replay goes
 * on with the spool's own files. A looser name match took "replay-3.spool"
 * for the oldest file, rebuilt a path that did not exist from its number,
 * and offered that on every try, so nothing was replayed again. */
static void
test_stray_names(void)
{
	static const char *const stray[] = { "replay-3.spool", "replay-0000000000000001.spool.bak",
	    "replay-0000000000000002.spool~", "replay-00000000000000x1.spool" };
	char dir[] = "/tmp/test_spool_XXXXXX", path[4096], err[512];
	struct spool_conf conf = { dir, 1 << 20, FSYNC_MS };
	struct seen seen = { 0 };
	struct spool *s;
	size_t i;

	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	for (i = 0; i < sizeof(stray) / sizeof(stray[0]); i++) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s", dir, stray[i]);
		CHECK((f = fopen(path, "w")) != NULL && fputs("x", f) >= 0 && fclose(f) == 0,
		    "write %s", path);
	}
	if ((s = spool_open(&conf, err, sizeof(err))) == NULL) {
		CHECK(0, "spool_open: %s", err);
		return;
	}
	snprintf(path, sizeof(path), "%s/spool.active", dir);
	wait_writer(s, path, append(s, "e", 0, 6), 0);
	read_back(s, &seen);
	CHECK(seen.n == 6, "read %d events back, want 6", seen.n);
	CHECK(spool_take(s, path, sizeof(path)) == 0, "nothing left to take, got %s", path);
	spool_close(s);
	for (i = 0; i < sizeof(stray) / sizeof(stray[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, stray[i]);
		CHECK(unlink(path) == 0, "%s was removed", path);
	}
	remove_dir(dir);
}

/* A read that fails part-way is not the end of the file: -1, so the
 * replayer keeps the file (it took the failure for the end and deleted
 * the file with every record after it). A directory stands in for a
 * file whose read fails (EISDIR). */
static void
test_read_error(void)
{
	char dir[] = "/tmp/test_spool_XXXXXX";
	struct seen seen = { 0 };

	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	CHECK(spool_read(dir, collect, &seen) == -1, "a failed read returned success");
	CHECK(seen.n == 0, "records from nowhere: %d", seen.n);
	CHECK(rmdir(dir) == 0, "rmdir %s", dir);
}

/* Four "c" records spooled and taken, the 4 bytes at off into the second
 * record's header replaced by value, the file read back into seen. */
static void
damaged_read(long off, uint32_t value, struct seen *seen)
{
	char dir[] = "/tmp/test_spool_XXXXXX", path[4096], active[4096];
	struct spool *s;
	FILE *f;
	long first = 12 + 2 + (long)strlen("c-00-padding-padding");

	if ((s = new_spool(dir)) == NULL)
		return;
	snprintf(active, sizeof(active), "%s/spool.active", dir);
	wait_writer(s, active, append(s, "c", 0, 4), 0);
	CHECK(spool_take(s, path, sizeof(path)) == 1, "take");
	CHECK((f = fopen(path, "r+b")) != NULL && fseek(f, first + off, SEEK_SET) == 0 &&
	    fwrite(&value, 4, 1, f) == 1 && fclose(f) == 0, "damage %s", path);
	CHECK(spool_read(path, collect, seen) == 0, "spool_read");
	spool_done(s, path);
	spool_close(s);
	remove_dir(dir);
}

/* A corrupt record inside a file (a flipped magic number, an absurd length,
 * a length one bit longer that runs past the end) costs only itself: the
 * records after it are read (they were dropped with the file, uncounted);
 * a length shrunk by corruption sends that record as read (ingest keeps it
 * in its rejects) and the next ones still. */
static void
test_corrupt_middle(void)
{
	static const struct {
		long off;           /* into the second record's header */
		uint32_t value;
	} damage[] = { { 0, 0xdeadbeefu }, { 8, 0x7fffffffu },
	    { 8, 20u | 0x10000u } /* one bit of the value's length: past the end */ };
	struct seen seen;
	char want[64];

	for (size_t d = 0; d < sizeof(damage) / sizeof(damage[0]); d++) {
		memset(&seen, 0, sizeof(seen));
		damaged_read(damage[d].off, damage[d].value, &seen);
		CHECK(seen.n == 3, "damage %zu: read %d events back, want 3 (all but the second)", d,
		    seen.n);
		for (int i = 0; i < seen.n && i < 3; i++) {
			snprintf(want, sizeof(want), "c-%02d-padding-padding", i == 0 ? 0 : i + 1);
			CHECK_STR(seen.vals[i], want, "event read back");
		}
	}
	memset(&seen, 0, sizeof(seen));
	damaged_read(8, 10, &seen);  /* the value's length shrunk to 10 */
	CHECK(seen.n == 4, "shrunk length: read %d records, want 4", seen.n);
	if (seen.n == 4) {
		CHECK_STR(seen.vals[0], "c-00-padding-padding", "first");
		CHECK_STR(seen.vals[1], "c-01-paddi", "the shrunk one, as read");
		CHECK_STR(seen.vals[2], "c-02-padding-padding", "third");
		CHECK_STR(seen.vals[3], "c-03-padding-padding", "fourth");
	}
}

/* Events waiting in memory for the active file to open again are counted as
 * dropped when the spool stops and still cannot open it (they were freed
 * uncounted, and the exit line said they were left on disk). */
static void
test_stop_counts_what_waits(void)
{
	char dir[] = "/tmp/test_spool_XXXXXX";
	struct spool_stats st;
	struct rlimit old;
	struct spool *s;

	if ((s = spool_without_files(dir, &old)) == NULL)
		return;
	append(s, "b", 5, 12);
	spool_stop(s);
	CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0, "setrlimit back");
	spool_stats(s, &st);
	CHECK(st.dropped == 7, "dropped %llu, want 7", (unsigned long long)st.dropped);
	CHECK(st.bytes == 5 * (12 + 2 + 20), "%llu bytes counted, want the 5 on disk",
	    (unsigned long long)st.bytes);
	spool_close(s);
	{
		struct spool_conf conf = { dir, 1 << 20, FSYNC_MS };
		struct seen seen = { 0 };
		char err[512];

		s = spool_open(&conf, err, sizeof(err));
		CHECK(s != NULL, "spool_open again: %s", err);
		if (s != NULL) {
			read_back(s, &seen);
			spool_close(s);
		}
		CHECK(seen.n == 5, "read %d events back, want the 5 written", seen.n);
	}
	remove_dir(dir);
}

/* A replay file removed from outside: spool_recount drops its bytes from
 * the count (they counted against spool_max_bytes until a restart). */
static void
test_recount(void)
{
	char dir[] = "/tmp/test_spool_XXXXXX", path[4096], active[4096];
	struct spool_stats st;
	struct spool *s;

	if ((s = new_spool(dir)) == NULL)
		return;
	snprintf(active, sizeof(active), "%s/spool.active", dir);
	wait_writer(s, active, append(s, "v", 0, 3), 0);
	CHECK(spool_take(s, path, sizeof(path)) == 1, "take");
	CHECK(unlink(path) == 0, "unlink %s", path);
	spool_stats(s, &st);
	CHECK(st.bytes > 0 && st.files == 1, "before: %llu bytes, %llu files",
	    (unsigned long long)st.bytes, (unsigned long long)st.files);
	spool_recount(s);
	spool_stats(s, &st);
	CHECK(st.bytes == 0 && st.files == 0, "after: %llu bytes, %llu files",
	    (unsigned long long)st.bytes, (unsigned long long)st.files);
	spool_close(s);
	remove_dir(dir);
}

/* Takes while the active file cannot be opened again (the replayer asks
 * about once a second): the bytes counted stay those on disk and in memory
 * (each take rotated a file that was not there and took its old size off the
 * count, until the cap no longer held anything back). */
static void
test_takes_without_files(void)
{
	char dir[] = "/tmp/test_spool_XXXXXX", path[4096], active[4096];
	struct spool_stats st;
	struct rlimit old;
	struct spool *s;
	struct seen seen = { 0 };

	if ((s = spool_without_files(dir, &old)) == NULL)
		return;
	append(s, "b", 5, 10);
	for (int i = 0; i < 3; i++) {
		CHECK(spool_take(s, path, sizeof(path)) == 0, "take %d while no file opens", i);
		pause_ms(2 * FSYNC_MS);
	}
	spool_stats(s, &st);
	CHECK(st.bytes == 10 * (12 + 2 + 20), "%llu bytes counted, want 10 events' %d",
	    (unsigned long long)st.bytes, 10 * (12 + 2 + 20));
	CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0, "setrlimit back");
	/* the writer's next turn writes the five held in memory (read_back
	 * before it found nothing more to take, under the sanitizers once) */
	snprintf(active, sizeof(active), "%s/spool.active", dir);
	wait_writer(s, active, 5 * (12 + 2 + 20), 0);
	read_back(s, &seen);
	spool_stats(s, &st);
	CHECK(seen.n == 10, "read %d events back, want 10", seen.n);
	CHECK(st.bytes == 0 && st.dropped == 0, "after: %llu bytes, %llu dropped",
	    (unsigned long long)st.bytes, (unsigned long long)st.dropped);
	spool_close(s);
	remove_dir(dir);
}

/* A failed fdatasync (EIO; Linux then marks the pages clean, so the write
 * may never reach the disk): the file is set aside as a replay file and the
 * events written again to a new one; they come back (twice: ingest keeps one
 * by event id), nothing dropped. */
static void
test_sync_fails(void)
{
	char dir[] = "/tmp/test_spool_XXXXXX", active[4096], want[64];
	struct spool_stats st;
	struct spool *s;
	struct seen seen = { 0 };
	off_t a, b;

	if ((s = new_spool(dir)) == NULL)
		return;
	snprintf(active, sizeof(active), "%s/spool.active", dir);
	a = append(s, "a", 0, 3);
	wait_writer(s, active, a, 0);
	atomic_store(&sync_failures, 1);
	b = append(s, "b", 3, 8);
	wait_writer(s, active, b, 0); /* the new file holds the "b" events only */
	CHECK(atomic_load(&sync_failures) == 0, "the sync did not fail");
	spool_stats(s, &st);
	CHECK(st.dropped == 0 && st.files == 1, "%llu dropped, %llu files",
	    (unsigned long long)st.dropped, (unsigned long long)st.files);
	CHECK(st.bytes == (uint64_t)(a + 2 * b), "%llu bytes counted, want %lld",
	    (unsigned long long)st.bytes, (long long)(a + 2 * b));
	read_back(s, &seen);
	spool_stats(s, &st);
	CHECK(st.bytes == 0, "%llu bytes left", (unsigned long long)st.bytes);
	spool_close(s);
	CHECK(seen.n == 13, "read %d events back, want 13 (3 + 5, then the 5 again)", seen.n);
	for (int i = 0; i < seen.n && i < 13; i++) {
		int k = i < 8 ? i : i - 5;

		snprintf(want, sizeof(want), "%s-%02d-%s", k < 3 ? "a" : "b", k, "padding-padding");
		CHECK_STR(seen.vals[i], want, "event read back");
	}
	remove_dir(dir);
}

/* Records Kafka refuses for good while a replay file is replayed are kept
 * in refused-<its number>.spool: synced and counted once that replay file is
 * done, written again (not added to) when it is replayed again, never
 * offered for replay, and their number is not used again after a restart. */
static void
test_refuse(void)
{
	char dir[] = "/tmp/test_spool_XXXXXX", path[4096], refused[4096], active[4096];
	struct spool_conf conf = { dir, 1 << 20, FSYNC_MS };
	struct spool_stats st;
	struct spool *s;
	struct seen seen = { 0 };
	uint64_t n = 0;
	char err[512];

	if ((s = new_spool(dir)) == NULL)
		return;
	snprintf(active, sizeof(active), "%s/spool.active", dir);
	snprintf(refused, sizeof(refused), "%s/refused-0000000000000000.spool", dir);
	wait_writer(s, active, append(s, "r", 0, 3), 0);
	CHECK(spool_take(s, path, sizeof(path)) == 1, "take");
	/* a first replay that does not finish: nothing kept */
	CHECK(spool_refuse_open(s, path) == 0, "refuse_open");
	CHECK(spool_refuse(s, "k1", 2, "too-large-1", 11) == 0, "refuse 1");
	CHECK(spool_refuse_close(s, 0, &n) == 0 && n == 1, "close, not kept: %llu",
	    (unsigned long long)n);
	CHECK(access(refused, F_OK) < 0, "%s left by a replay that did not finish", refused);
	/* the replay again, to its end */
	CHECK(spool_refuse_open(s, path) == 0, "refuse_open again");
	CHECK(spool_refuse(s, "k1", 2, "too-large-1", 11) == 0, "refuse 1 again");
	CHECK(spool_refuse(s, "k2", 2, "too-large-2", 11) == 0, "refuse 2");
	CHECK(spool_refuse_close(s, 1, &n) == 0 && n == 2, "close, kept: %llu",
	    (unsigned long long)n);
	spool_stats(s, &st);
	CHECK(st.refused == 0, "%llu refused counted before the replay file is done",
	    (unsigned long long)st.refused);
	CHECK(spool_done(s, path) == 0, "done");
	spool_stats(s, &st);
	CHECK(st.refused == 2 && st.bytes == 0 && st.files == 0,
	    "%llu refused, %llu bytes, %llu files", (unsigned long long)st.refused,
	    (unsigned long long)st.bytes, (unsigned long long)st.files);
	CHECK(spool_take(s, path, sizeof(path)) == 0, "a refused file offered for replay");
	CHECK(spool_refuse(s, "k3", 2, "late", 4) == -1, "a refusal after the close kept");
	spool_close(s);
	CHECK(spool_read(refused, collect, &seen) == 0, "spool_read %s", refused);
	CHECK(seen.n == 2, "read %d refused records, want 2", seen.n);
	if (seen.n == 2) {
		CHECK_STR(seen.vals[0], "too-large-1", "first refused");
		CHECK_STR(seen.vals[1], "too-large-2", "second refused");
	}
	/* a restart: the next replay file is not numbered 0 again */
	s = spool_open(&conf, err, sizeof(err));
	CHECK(s != NULL, "spool_open again: %s", err);
	if (s != NULL) {
		wait_writer(s, active, append(s, "n", 0, 1), 0);
		CHECK(spool_take(s, path, sizeof(path)) == 1, "take after the restart");
		CHECK(strstr(path, "/replay-0000000000000001.spool") != NULL, "took %s", path);
		spool_done(s, path);
		spool_close(s);
	}
	unlink(refused);
	remove_dir(dir);
}

int
main(void)
{
	test_failed_write();
	test_reopen_fails();
	test_one_owner();
	test_stray_names();
	test_read_error();
	test_corrupt_middle();
	test_stop_counts_what_waits();
	test_recount();
	test_takes_without_files();
	test_sync_fails();
	test_refuse();
	return unit_done("test_spool");
}
