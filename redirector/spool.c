/* spool.c - records are [magic u32][key len u32][value len u32][key][value]
 * (little-endian host order) in dir/spool.active; replay files are
 * dir/replay-NNNNNNNNNNNNNNNN.spool, replayed oldest first. */
#include "spool.h"
#include "errstr.h"
#include "log.h"
#include "monotime.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SPOOL_MAGIC 0x3153504cu /* "LPS1" */
#define HDR 12
/* Bounds of a record's key (a code) and value (one event's JSON, ~160 KB at
 * most with every field at its schema's limit, escaped): a header past them
 * is corrupt, not a record to allocate for. The value's bound stays under
 * the producer's message.max.bytes (kafka_message_max_bytes, at least
 * 1,000,000 by default), so that a length a flipped bit grew is not taken
 * for a record Kafka then refuses. */
#define SPOOL_MAX_KEY 65536u
#define SPOOL_MAX_VALUE (512u << 10)

struct buf {
	char *p;
	size_t len, cap;
};

struct spool {
	char *dir;
	uint64_t max_bytes;
	int fsync_ms;

	pthread_mutex_t mtx;     /* pending buffer, bytes, stop */
	pthread_cond_t cond;
	struct buf pending;
	int stop;

	pthread_mutex_t io;      /* the active fd, rotation */
	int fd;
	int lock_fd;             /* spool_dir/lock, flock()ed for the spool's life */
	uint64_t active_bytes;   /* bytes written to the active file */
	uint64_t next_seq;

	pthread_t writer;
	int started;
	int stopped;            /* spool_stop ran */

	_Atomic uint64_t bytes;  /* total spooled: files + pending */
	_Atomic uint64_t appended, dropped, files, refused;

	pthread_mutex_t refused_mtx; /* the refused file of the replay under way */
	int refused_fd;          /* -1 when none is open */
	char refused_path[4096];
	uint64_t refused_n;      /* records in it */
	uint64_t refused_kept;   /* of a kept file whose replay file is not done yet */
	_Atomic long long last_err_log;
};

static int
mkdirs(const char *path)
{
	char tmp[4096];

	if (strlen(path) >= sizeof(tmp))
		return -1;
	strcpy(tmp, path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(tmp, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

static void
fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

static long long
mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

/* 1 at most once a second, to one caller (a claim on last_err_log): the
 * spool's errors that repeat with every event are logged that often. */
static int
log_due(struct spool *s)
{
	long long now = mono_s(), last = atomic_load(&s->last_err_log);

	return now > last && atomic_compare_exchange_strong(&s->last_err_log, &last, now);
}

/* Takes n off a counter, stopping at zero: a miscount must not wrap it to
 * ~2^64 (bytes that large refuse every later event as "SPOOL FULL"). */
static void
sub_sat(_Atomic uint64_t *v, uint64_t n)
{
	uint64_t cur = atomic_load(v);

	while (!atomic_compare_exchange_weak(v, &cur, cur > n ? cur - n : 0))
		;
}

/* The sequence number of a replay file's name, exactly
 * "replay-" 16 digits ".spool" (as rotate() names them): 1, or 0 for any
 * other name (an operator's copy, "replay-3.spool~"), which the spool
 * leaves alone. A looser match took such a name for the oldest file and
 * rebuilt a path that did not exist, and replay stopped for good. */
static int
replay_seq(const char *name, unsigned long long *seq)
{
	unsigned long long v = 0;

	if (strlen(name) != 7 + 16 + 6 || strncmp(name, "replay-", 7) != 0 ||
	    strcmp(name + 7 + 16, ".spool") != 0)
		return 0;
	for (int i = 7; i < 7 + 16; i++) {
		if (name[i] < '0' || name[i] > '9')
			return 0;
		v = v * 10 + (unsigned long long)(name[i] - '0');
	}
	*seq = v;
	return 1;
}

/* Opens (creating) a file to append to; sets *created when it made it, so
 * that the caller syncs its directory entry. -1 with errno. */
/* The sequence number of a refused file's name ("refused-" 16 digits
 * ".spool", as spool_refuse_open names them after their replay file): 1,
 * else 0. */
static int
refused_seq(const char *name, unsigned long long *seq)
{
	char as_replay[64];

	if (strlen(name) != 8 + 16 + 6 || strncmp(name, "refused-", 8) != 0)
		return 0;
	snprintf(as_replay, sizeof(as_replay), "replay-%s", name + 8);
	return replay_seq(as_replay, seq);
}

static int
open_append(const char *path, int *created)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);

	*created = 0;
	if (fd >= 0 || errno != ENOENT)
		return fd;
	if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644)) >= 0)
		*created = 1;
	else if (errno == EEXIST)
		fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	return fd;
}

/* Opens spool.active. On failure (errno kept) it holds no bytes: whatever
 * the last one held went with it into a replay file (or stays in it, for
 * the next open to find), and a spool_take would otherwise rotate, and take
 * off the spool's total, bytes that are not there once a second. */
static int
open_active(struct spool *s)
{
	char path[4096];
	struct stat st;
	int created;

	snprintf(path, sizeof(path), "%s/spool.active", s->dir);
	if ((s->fd = open_append(path, &created)) < 0) {
		s->active_bytes = 0;
		return -1;
	}
	s->active_bytes = fstat(s->fd, &st) == 0 ? (uint64_t)st.st_size : 0;
	if (created)
		fsync_dir(s->dir); /* fdatasync would not keep its entry */
	return 0;
}

/* Renames the active file to the next replay file and opens a new one.
 * Called with io held. */
static int
rotate(struct spool *s)
{
	char from[4096], to[4096];
	int rc;

	if (s->fd >= 0) {
		if (fdatasync(s->fd) < 0) /* each write was synced already */
			log_warn("spool: fdatasync of %s/spool.active before its rotation", s->dir);
		close(s->fd);
		s->fd = -1;
	}
	snprintf(from, sizeof(from), "%s/spool.active", s->dir);
	snprintf(to, sizeof(to), "%s/replay-%016llu.spool", s->dir,
	    (unsigned long long)s->next_seq++);
	if (rename(from, to) == 0) {
		if (s->active_bytes > 0)
			atomic_fetch_add(&s->files, 1);
	} else if (errno == ENOENT) {
		if (s->active_bytes > 0) { /* removed from outside */
			log_warnx("spool: %s vanished with %llu bytes of visit events", from,
			    (unsigned long long)s->active_bytes);
			sub_sat(&s->bytes, s->active_bytes);
		}
	} else {
		log_warn("spool: rename %s", from);
	}
	rc = open_active(s);
	fsync_dir(s->dir); /* the rename and the new file's entry */
	return rc;
}

/* Records in a pending buffer (whole records only, as spool_append makes
 * them). */
static uint64_t
count_records(const char *p, size_t len)
{
	uint64_t n = 0;

	for (size_t off = 0; off + HDR <= len; n++) {
		uint32_t hdr[3];

		memcpy(hdr, p + off, HDR);
		off += HDR + (size_t)hdr[1] + (size_t)hdr[2];
	}
	return n;
}

/* Writes n bytes at p to fd, going on after short writes and EINTR; *done
 * gets what was written. 0, or -1 with errno. */
static int
write_all(int fd, const void *p, size_t n, size_t *done)
{
	*done = 0;
	while (*done < n) {
		ssize_t w = write(fd, (const char *)p + *done, n - *done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		*done += (size_t)w;
	}
	return 0;
}

/* Writes b at the end of the active file. Returns 0, or -1 (errno kept)
 * when a write failed: the file is then cut back to where b began, so that
 * it still ends on a whole record and records appended after it (once there
 * is room again) are replayed; *kept is what of b stays on disk (the torn
 * end of a replay file when the cut failed: spool_read ignores it). */
static int
write_buf(struct spool *s, const struct buf *b, size_t *kept)
{
	uint64_t start = s->active_bytes;
	size_t off = 0;
	int e;

	*kept = 0;
	if (write_all(s->fd, b->p, b->len, &off) == 0) {
		s->active_bytes += off;
		return 0;
	}
	e = errno;
	if (ftruncate(s->fd, (off_t)start) == 0 && lseek(s->fd, (off_t)start, SEEK_SET) >= 0) {
		s->active_bytes = start;
	} else {
		s->active_bytes += off;
		log_warn("spool: cutting %s/spool.active back", s->dir);
		rotate(s);
		*kept = off;
	}
	errno = e;
	return -1;
}

/* After a failed fdatasync of b's write. Linux marks the pages clean after
 * a failed sync, so b may never reach the disk and later syncs of the file
 * say nothing of it: the file is set aside as a replay file (it may well
 * hold b: ingest drops a repeat by its event id) and b is written again to
 * a new one and synced. Counted as dropped (and logged) only when that fails
 * too. Called with io held. */
static void
sync_failed(struct spool *s, const struct buf *b)
{
	uint64_t n = count_records(b->p, b->len);
	size_t kept = 0;

	log_error("spool: fdatasync of %s/spool.active failed (%s): writing its last %llu "
	    "visit events again to a new file", s->dir, strerror(errno), (unsigned long long)n);
	if (rotate(s) == 0 && write_buf(s, b, &kept) == 0 && fdatasync(s->fd) == 0) {
		atomic_fetch_add(&s->bytes, b->len); /* on disk twice now */
		return;
	}
	log_error("spool: %s/spool.active: writing %llu visit events again failed (%s): they "
	    "may be LOST", s->dir, (unsigned long long)n, strerror(errno));
	atomic_fetch_add(&s->bytes, kept);
	atomic_fetch_add(&s->dropped, n);
}

/* Writes the pending buffer to the active file and fsyncs it. A failed
 * write (a full disk) loses the whole buffer, loudly (write_buf cuts the
 * file back to a whole record); a failed sync writes it again (sync_failed). */
static void
write_pending(struct spool *s, struct buf *spare)
{
	struct buf b;

	/* io held from here to the end of the write: the active file cannot
	 * go away under it. With no active file (reopening it after a
	 * rotation failed: EMFILE, EDQUOT, no inodes) the records stay in
	 * memory, counted against spool_max_bytes, until an open works; they
	 * were discarded without a word. */
	pthread_mutex_lock(&s->io);
	if (s->fd < 0 && open_active(s) < 0) {
		pthread_mutex_unlock(&s->io);
		if (log_due(s))
			log_error("spool: cannot open %s/spool.active (%s): %llu bytes of visit "
			    "events wait in memory", s->dir, strerror(errno),
			    (unsigned long long)atomic_load(&s->bytes));
		return;
	}
	pthread_mutex_lock(&s->mtx);
	b = s->pending;
	s->pending = *spare;
	s->pending.len = 0;
	pthread_mutex_unlock(&s->mtx);
	if (b.len > 0) {
		size_t kept;

		if (write_buf(s, &b, &kept) < 0) {
			uint64_t lost = count_records(b.p, b.len);

			log_error("spool: write to %s/spool.active failed (%s): %llu visit "
			    "events (%zu bytes) DROPPED", s->dir, strerror(errno),
			    (unsigned long long)lost, b.len);
			/* the torn end kept counts until its file is done */
			sub_sat(&s->bytes, b.len - kept);
			atomic_fetch_add(&s->dropped, lost);
		} else if (fdatasync(s->fd) < 0) {
			sync_failed(s, &b);
		}
	}
	pthread_mutex_unlock(&s->io);
	b.len = 0;
	*spare = b;
}

static void *
writer_main(void *arg)
{
	struct spool *s = arg;
	struct buf spare = { NULL, 0, 0 };
	int stop;

	for (;;) {
		struct timespec ts;

		pthread_mutex_lock(&s->mtx);
		if (!s->stop) {
			monotime_deadline(&ts, s->fsync_ms);
			pthread_cond_timedwait(&s->cond, &s->mtx, &ts);
		}
		stop = s->stop;
		pthread_mutex_unlock(&s->mtx);
		write_pending(s, &spare);
		if (stop)
			break;
	}
	free(spare.p);
	return NULL;
}

/* The replay files in dir: their bytes and count, and the highest sequence
 * (max_seq NULL: not asked, and names the spool did not make are not
 * logged). -1 when dir cannot be read. */
static int
replay_files(const char *dir, uint64_t *bytes, uint64_t *files, unsigned long long *max_seq)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[4096];
	struct stat st;

	*bytes = *files = 0;
	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		unsigned long long seq;

		if (max_seq != NULL && refused_seq(e->d_name, &seq)) {
			/* its number is not used again: a replay file of it would
			 * write its own refusals over this one's */
			if (seq + 1 > *max_seq)
				*max_seq = seq + 1;
			continue;
		}
		if (!replay_seq(e->d_name, &seq)) {
			if (max_seq != NULL && strncmp(e->d_name, "replay-", 7) == 0)
				log_warnx("spool: %s/%s is not named as the spool names its files; "
				    "left alone, not replayed", dir, e->d_name);
			continue;
		}
		if (max_seq != NULL && seq + 1 > *max_seq)
			*max_seq = seq + 1;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &st) == 0) {
			*bytes += (uint64_t)st.st_size;
			(*files)++;
		}
	}
	closedir(d);
	return 0;
}

/* Highest replay sequence in dir, total bytes and count of replay files. */
static void
scan(struct spool *s)
{
	uint64_t bytes, files;
	unsigned long long next = s->next_seq;

	if (replay_files(s->dir, &bytes, &files, &next) < 0)
		return;
	s->next_seq = next;
	atomic_fetch_add(&s->bytes, bytes);
	atomic_fetch_add(&s->files, files);
}

struct spool *
spool_open(const struct spool_conf *conf, char *errstr, size_t errstr_size)
{
	struct spool *s = calloc(1, sizeof(*s));

	if (s == NULL || (s->dir = strdup(conf->dir)) == NULL) {
		free(s);
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	s->max_bytes = conf->max_bytes;
	s->fsync_ms = conf->fsync_ms > 0 ? conf->fsync_ms : 1;
	s->fd = -1;
	s->lock_fd = -1;
	s->refused_fd = -1;
	pthread_mutex_init(&s->mtx, NULL);
	pthread_mutex_init(&s->io, NULL);
	pthread_mutex_init(&s->refused_mtx, NULL);
	if (monotime_cond_init(&s->cond) < 0) {
		errstr_set(errstr, errstr_size, "spool: cannot set up a condition variable on CLOCK_MONOTONIC");
		goto fail;
	}
	if (mkdirs(s->dir) < 0) {
		errstr_set(errstr, errstr_size, "spool_dir %s: %s", s->dir, strerror(errno));
		goto fail;
	}
	/* one process per spool_dir: a second one renamed the first's live
	 * file, replayed and deleted it under it, and its rotations could
	 * take the first's replay file names */
	{
		char lock[4096];

		snprintf(lock, sizeof(lock), "%s/lock", s->dir);
		if ((s->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
			errstr_set(errstr, errstr_size, "spool_dir %s: %s", lock, strerror(errno));
			goto fail;
		}
		if (flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0) {
			errstr_set(errstr, errstr_size, "spool_dir %s is in use by another process "
			    "(each redirector needs a spool_dir of its own): %s", s->dir,
			    strerror(errno));
			goto fail;
		}
	}
	scan(s);
	if (open_active(s) < 0) {
		errstr_set(errstr, errstr_size, "spool_dir %s/spool.active: %s", s->dir,
		    strerror(errno));
		goto fail;
	}
	if (s->active_bytes > 0) {
		log_info("spool: %llu bytes left by an earlier run will be replayed",
		    (unsigned long long)s->active_bytes);
		atomic_fetch_add(&s->bytes, s->active_bytes);
		if (rotate(s) < 0) {
			errstr_set(errstr, errstr_size, "spool_dir %s: %s", s->dir, strerror(errno));
			goto fail;
		}
	}
	if (atomic_load(&s->files) > 0)
		log_info("spool: %llu file(s), %llu bytes to replay",
		    (unsigned long long)atomic_load(&s->files),
		    (unsigned long long)atomic_load(&s->bytes));
	if (pthread_create(&s->writer, NULL, writer_main, s) != 0) {
		errstr_set(errstr, errstr_size, "spool: cannot start the writer thread");
		goto fail;
	}
	s->started = 1;
	return s;
fail:
	spool_close(s);
	return NULL;
}

void
spool_stop(struct spool *s)
{
	if (s == NULL || s->stopped)
		return;
	s->stopped = 1;
	if (s->started) {
		pthread_mutex_lock(&s->mtx);
		s->stop = 1;
		pthread_cond_signal(&s->cond);
		pthread_mutex_unlock(&s->mtx);
		pthread_join(s->writer, NULL);
	}
	/* Records that waited in memory for spool.active to open again (its
	 * writer's last try failed too): one more try, then they are counted
	 * and logged as dropped (they were freed below without a word, and the
	 * exit line said they were left on disk). */
	if (s->pending.len > 0) {
		struct buf spare = { NULL, 0, 0 };

		write_pending(s, &spare);
		free(spare.p);
	}
	if (s->pending.len > 0) {
		uint64_t lost = count_records(s->pending.p, s->pending.len);

		log_error("spool: cannot open %s/spool.active: %llu visit events (%zu bytes) held "
		    "in memory are DROPPED at exit", s->dir, (unsigned long long)lost,
		    s->pending.len);
		atomic_fetch_add(&s->dropped, lost);
		sub_sat(&s->bytes, s->pending.len);
		s->pending.len = 0;
	}
	if (s->fd >= 0) {
		fdatasync(s->fd);
		close(s->fd);
	}
	s->fd = -1;
	if (s->lock_fd >= 0)
		close(s->lock_fd);  /* the lock goes with it */
	s->lock_fd = -1;
	if (atomic_load(&s->bytes) > 0)
		log_info("spool: %llu bytes left in %s for the next start",
		    (unsigned long long)atomic_load(&s->bytes), s->dir);
}

void
spool_close(struct spool *s)
{
	if (s == NULL)
		return;
	spool_stop(s);
	if (s->refused_fd >= 0) /* a replay cut short: the replay file stays */
		close(s->refused_fd);
	free(s->pending.p);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->io);
	pthread_mutex_destroy(&s->mtx);
	pthread_mutex_destroy(&s->refused_mtx);
	free(s->dir);
	free(s);
}

int
spool_append(struct spool *s, const void *key, size_t klen, const void *val, size_t vlen)
{
	size_t need = HDR + klen + vlen;
	uint32_t hdr[3] = { SPOOL_MAGIC, (uint32_t)klen, (uint32_t)vlen };
	uint64_t total;

	if (klen > SPOOL_MAX_KEY || vlen > SPOOL_MAX_VALUE) { /* spool_read would skip it */
		atomic_fetch_add(&s->dropped, 1);
		log_error("spool: a record of %zu + %zu bytes is past the spool's bounds: visit "
		    "event DROPPED", klen, vlen);
		return -1;
	}
	/* counted under mtx, as spool_recount counts: its store could lose
	 * or double an add made between its count and its store */
	pthread_mutex_lock(&s->mtx);
	total = atomic_fetch_add(&s->bytes, need) + need;
	if (total > s->max_bytes) {
		atomic_fetch_sub(&s->bytes, need);
		pthread_mutex_unlock(&s->mtx);
		if (atomic_fetch_add(&s->dropped, 1) == 0 || log_due(s))
			log_error("SPOOL FULL: %s holds %llu bytes (spool_max_bytes %llu); visit events "
			    "are being DROPPED (%llu so far)", s->dir,
			    (unsigned long long)atomic_load(&s->bytes),
			    (unsigned long long)s->max_bytes,
			    (unsigned long long)atomic_load(&s->dropped));
		return -1;
	}
	if (s->pending.len + need > s->pending.cap) {
		size_t ncap = s->pending.cap ? s->pending.cap * 2 : 65536;
		char *np;

		while (ncap < s->pending.len + need)
			ncap *= 2;
		if ((np = realloc(s->pending.p, ncap)) == NULL) {
			atomic_fetch_sub(&s->bytes, need);
			pthread_mutex_unlock(&s->mtx);
			atomic_fetch_add(&s->dropped, 1);
			log_error("spool: out of memory, visit event dropped");
			return -1;
		}
		s->pending.p = np;
		s->pending.cap = ncap;
	}
	memcpy(s->pending.p + s->pending.len, hdr, HDR);
	memcpy(s->pending.p + s->pending.len + HDR, key, klen);
	memcpy(s->pending.p + s->pending.len + HDR + klen, val, vlen);
	s->pending.len += need;
	pthread_mutex_unlock(&s->mtx);
	atomic_fetch_add(&s->appended, 1);
	return 0;
}

/* Oldest replay file name into path; 1 found, 0 none. */
static int
oldest(struct spool *s, char *path, size_t path_size)
{
	DIR *d = opendir(s->dir);
	struct dirent *e;
	unsigned long long best = 0;
	int found = 0;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		unsigned long long seq;

		if (replay_seq(e->d_name, &seq) && (!found || seq < best)) {
			best = seq;
			found = 1;
		}
	}
	closedir(d);
	if (found)
		snprintf(path, path_size, "%s/replay-%016llu.spool", s->dir, best);
	return found;
}

int
spool_take(struct spool *s, char *path, size_t path_size)
{
	int rc;

	if (oldest(s, path, path_size))
		return 1;
	pthread_mutex_lock(&s->io);
	if (s->active_bytes == 0) {
		pthread_mutex_unlock(&s->io);
		return 0;
	}
	rc = rotate(s);
	pthread_mutex_unlock(&s->io);
	if (rc < 0) {
		log_warn("spool: reopen %s/spool.active", s->dir);
		return -1;
	}
	return oldest(s, path, path_size);
}

/* After a corrupt header at offset at: moves f to the next place holding the
 * magic number after it (1) or to the end (0); -1 on a read error. */
static int
resync(FILE *f, long at)
{
	uint32_t magic = SPOOL_MAGIC, want, win = 0;
	unsigned char m[4];
	int c, have = 0;

	/* the magic's bytes as they lie in the file, read into win in order */
	memcpy(m, &magic, 4);
	want = (uint32_t)m[0] << 24 | (uint32_t)m[1] << 16 | (uint32_t)m[2] << 8 | m[3];
	if (fseek(f, at + 1, SEEK_SET) < 0)
		return -1;
	while ((c = getc(f)) != EOF) {
		win = win << 8 | (uint32_t)c;
		if (++have >= 4 && win == want)
			return fseek(f, -4, SEEK_CUR) < 0 ? -1 : 1;
	}
	return ferror(f) ? -1 : 0;
}

/* A corrupt record at offset at (its header, or a length that does not lead
 * to the next header or the end): skips to the next header, loudly (the
 * records after it were dropped with the file until the forty-third
 * session). 1 to go on from there, 0 when none follows (at_end: a record cut
 * short by the end is a torn end, a crash mid-write, not corruption), -1 on a
 * read error. */
static int
skip_corrupt(FILE *f, const char *path, long at, int at_end)
{
	int found;

	clearerr(f);
	if ((found = resync(f, at)) < 0)
		return -1;
	if (found == 1)
		log_error("spool: %s: corrupt record at offset %ld: the next record header is "
		    "%ld bytes on; visit events in between LOST", path, at, ftell(f) - at);
	else if (at_end)
		log_warnx("spool: %s: torn record at the end (offset %ld); ignored", path, at);
	else
		log_error("spool: %s: corrupt record at offset %ld and no record after it: the "
		    "visit events in the rest of the file LOST", path, at);
	return found;
}

int
spool_read(const char *path, spool_record_fn fn, void *ctx)
{
	FILE *f = fopen(path, "rb");
	char *rec = NULL;
	size_t cap = 0;
	int rc = 0;

	if (f == NULL) {
		log_warn("spool: open %s", path);
		return -1;
	}
	for (;;) {
		uint32_t hdr[3], next;
		long at = ftell(f);
		size_t n = fread(hdr, 1, HDR, f), need, m;
		int lost_next;

		if (n < HDR && ferror(f))
			break;
		if (n == 0)
			break;
		if (n < HDR) {
			log_warnx("spool: %s: torn record at the end (offset %ld); ignored", path, at);
			break;
		}
		if (hdr[0] != SPOOL_MAGIC || hdr[1] > SPOOL_MAX_KEY || hdr[2] > SPOOL_MAX_VALUE) {
			if (skip_corrupt(f, path, at, 0) <= 0)
				break;
			continue;
		}
		need = (size_t)hdr[1] + hdr[2];
		if (need > cap) {
			char *nr = realloc(rec, need);

			if (nr == NULL) {
				rc = -1;
				break;
			}
			rec = nr;
			cap = need;
		}
		if (fread(rec, 1, need, f) != need) {
			if (ferror(f))
				break;
			/* the end, or a length grown by corruption past it */
			if (skip_corrupt(f, path, at, 1) <= 0)
				break;
			continue;
		}
		/* a length shrunk or grown by corruption (within the bounds)
		 * ends elsewhere than at the next header or the end */
		m = fread(&next, 1, sizeof(next), f);
		if (m < sizeof(next) && ferror(f))
			break;
		/* this record's length or the next header is corrupt, which
		 * cannot be told apart: the record is sent as read (a bad one
		 * ends in ingest's rejects, with its bytes), and the next header
		 * is looked for from just after this one's start, so that
		 * records a grown length swallowed are found again */
		lost_next = m == sizeof(next) && next != SPOOL_MAGIC;
		if (!lost_next && m > 0 && fseek(f, -(long)m, SEEK_CUR) < 0) {
			rc = -1;
			break;
		}
		if ((rc = fn(ctx, rec, hdr[1], rec + hdr[1], hdr[2])) != 0)
			break;
		if (lost_next && skip_corrupt(f, path, at, 0) <= 0)
			break;
	}
	if (ferror(f)) {
		/* not the end of the file: it must stay, to be read again */
		log_warnx("spool: reading %s failed; the file stays", path);
		rc = -1;
	}
	free(rec);
	fclose(f);
	return rc;
}

int
spool_done(struct spool *s, const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return errno == ENOENT ? 0 : -1;
	if (unlink(path) < 0) {
		log_warn("spool: unlink %s", path);
		return -1;
	}
	sub_sat(&s->bytes, (uint64_t)st.st_size);
	sub_sat(&s->files, 1);
	fsync_dir(s->dir);
	pthread_mutex_lock(&s->refused_mtx);
	atomic_fetch_add(&s->refused, s->refused_kept);
	s->refused_kept = 0;
	pthread_mutex_unlock(&s->refused_mtx);
	return 0;
}

int
spool_refuse_open(struct spool *s, const char *replay_path)
{
	const char *base = strrchr(replay_path, '/');
	unsigned long long seq;
	int rc = 0;

	base = base ? base + 1 : replay_path;
	pthread_mutex_lock(&s->refused_mtx);
	if (s->refused_fd >= 0)
		close(s->refused_fd);
	s->refused_n = 0;
	s->refused_kept = 0;
	if (!replay_seq(base, &seq)) {
		s->refused_fd = -1;
		pthread_mutex_unlock(&s->refused_mtx);
		errno = EINVAL;
		return -1;
	}
	snprintf(s->refused_path, sizeof(s->refused_path), "%s/refused-%016llu.spool", s->dir,
	    seq);
	/* truncated: a retry of the same replay file writes its refusals again */
	s->refused_fd = open(s->refused_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (s->refused_fd < 0) {
		log_warn("spool: open %s", s->refused_path);
		rc = -1;
	}
	pthread_mutex_unlock(&s->refused_mtx);
	return rc;
}

int
spool_refuse(struct spool *s, const void *key, size_t klen, const void *val, size_t vlen)
{
	uint32_t hdr[3] = { SPOOL_MAGIC, (uint32_t)klen, (uint32_t)vlen };
	size_t done;
	int rc = -1;

	pthread_mutex_lock(&s->refused_mtx);
	if (s->refused_fd < 0)
		goto out;
	if (write_all(s->refused_fd, hdr, HDR, &done) < 0 ||
	    write_all(s->refused_fd, key, klen, &done) < 0 ||
	    write_all(s->refused_fd, val, vlen, &done) < 0) {
		/* the file ends torn (spool_read ignores that end) and fails
		 * its close: the replay file stays, to be replayed again */
		log_warn("spool: write to %s", s->refused_path);
		close(s->refused_fd);
		s->refused_fd = -2;
		goto out;
	}
	s->refused_n++;
	rc = 0;
out:
	pthread_mutex_unlock(&s->refused_mtx);
	return rc;
}

int
spool_refuse_close(struct spool *s, int keep, uint64_t *n)
{
	int rc = 0, fd;

	pthread_mutex_lock(&s->refused_mtx);
	fd = s->refused_fd;
	if (n != NULL)
		*n = s->refused_n;
	if (fd == -2) { /* a write failed */
		rc = -1;
		keep = 0;
	} else if (fd >= 0 && keep && s->refused_n > 0) {
		if (fdatasync(fd) < 0) {
			log_warn("spool: fdatasync %s", s->refused_path);
			rc = -1;
			keep = 0;
		}
	}
	if (fd >= 0)
		close(fd);
	if (fd != -1 && (!keep || s->refused_n == 0))
		unlink(s->refused_path);
	else if (fd >= 0)
		fsync_dir(s->dir);
	/* counted once its replay file is done (spool_done): a replay file
	 * that stays is replayed again, its refusals written again */
	s->refused_kept = fd >= 0 && keep && rc == 0 ? s->refused_n : 0;
	s->refused_fd = -1;
	s->refused_n = 0;
	pthread_mutex_unlock(&s->refused_mtx);
	return rc;
}

void
spool_recount(struct spool *s)
{
	uint64_t bytes, files;

	pthread_mutex_lock(&s->io);
	if (replay_files(s->dir, &bytes, &files, NULL) == 0) {
		pthread_mutex_lock(&s->mtx);
		atomic_store(&s->bytes, bytes + s->active_bytes + s->pending.len);
		atomic_store(&s->files, files);
		pthread_mutex_unlock(&s->mtx);
	}
	pthread_mutex_unlock(&s->io);
}

void
spool_stats(struct spool *s, struct spool_stats *out)
{
	out->appended = atomic_load(&s->appended);
	out->dropped = atomic_load(&s->dropped);
	out->refused = atomic_load(&s->refused);
	out->bytes = atomic_load(&s->bytes);
	out->files = atomic_load(&s->files);
}
