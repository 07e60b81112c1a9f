/* kv.c - hiredis connection pool: lazy connect with a timeout, a one-second
 * "down" window after a failure, and pipelined batches. */
#include "kv.h"
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct kv {
	char host[256];
	int port;
	int db;
	int enabled;
	int size;
	int nidle;
	struct timeval timeout;
	redisContext **idle;    /* owned */
	pthread_mutex_t mtx;
	_Atomic long long down_until_ms;
	atomic_int was_down;
};

static long long
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct kv *
kv_new(const char *url, int size, int timeout_ms, char *errstr, size_t errstr_size)
{
	struct kv *kv = calloc(1, sizeof(*kv));
	const char *p;
	char *end;

	if (kv == NULL || (kv->idle = calloc((size_t)size, sizeof(*kv->idle))) == NULL) {
		free(kv);
		snprintf(errstr, errstr_size, "out of memory");
		return NULL;
	}
	kv->size = size;
	kv->timeout.tv_sec = timeout_ms / 1000;
	kv->timeout.tv_usec = (timeout_ms % 1000) * 1000;
	pthread_mutex_init(&kv->mtx, NULL);
	if (url == NULL || *url == '\0')
		return kv;
	if (strncmp(url, "redis://", 8) != 0) {
		snprintf(errstr, errstr_size, "redis_url: \"%s\" does not start with redis://", url);
		kv_free(kv);
		return NULL;
	}
	p = url + 8;
	end = strchr(p, ':');
	if (end == NULL || (size_t)(end - p) >= sizeof(kv->host) || end == p) {
		snprintf(errstr, errstr_size, "redis_url: expected redis://host:port[/db], got \"%s\"", url);
		kv_free(kv);
		return NULL;
	}
	memcpy(kv->host, p, (size_t)(end - p));
	kv->port = (int)strtol(end + 1, &end, 10);
	if (*end == '/')
		kv->db = (int)strtol(end + 1, &end, 10);
	if (*end != '\0' || kv->port <= 0 || kv->port > 65535) {
		snprintf(errstr, errstr_size, "redis_url: bad port or db in \"%s\"", url);
		kv_free(kv);
		return NULL;
	}
	kv->enabled = 1;
	return kv;
}

/* Frees the idle connections (kv->mtx held, or kv no longer shared). */
static void
free_idle(struct kv *kv)
{
	while (kv->nidle > 0)
		redisFree(kv->idle[--kv->nidle]);
}

void
kv_free(struct kv *kv)
{
	if (kv == NULL)
		return;
	free_idle(kv);
	pthread_mutex_destroy(&kv->mtx);
	free(kv->idle);
	free(kv);
}

int
kv_enabled(struct kv *kv)
{
	return kv->enabled;
}

int
kv_up(struct kv *kv)
{
	return kv->enabled && atomic_load(&kv->down_until_ms) <= now_ms();
}

static void
mark_down(struct kv *kv, const char *why)
{
	atomic_store(&kv->down_until_ms, now_ms() + 1000);
	if (atomic_exchange(&kv->was_down, 1) == 0)
		log_warnx("redis %s:%d unavailable (%s); falling back", kv->host, kv->port, why);
}

static redisContext *
get_conn(struct kv *kv)
{
	redisContext *c = NULL;

	if (!kv_up(kv))
		return NULL;
	pthread_mutex_lock(&kv->mtx);
	if (kv->nidle > 0)
		c = kv->idle[--kv->nidle];
	pthread_mutex_unlock(&kv->mtx);
	if (c != NULL)
		return c;
	c = redisConnectWithTimeout(kv->host, kv->port, kv->timeout);
	if (c == NULL || c->err) {
		mark_down(kv, c ? c->errstr : "out of memory");
		if (c != NULL)
			redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, kv->timeout);
	if (kv->db != 0) {
		redisReply *r = redisCommand(c, "SELECT %d", kv->db);

		if (r == NULL || r->type == REDIS_REPLY_ERROR) {
			mark_down(kv, "SELECT failed");
			if (r != NULL)
				freeReplyObject(r);
			redisFree(c);
			return NULL;
		}
		freeReplyObject(r);
	}
	if (atomic_exchange(&kv->was_down, 0) == 1)
		log_info("redis %s:%d reachable again", kv->host, kv->port);
	return c;
}

/* An error reply that says the server cannot serve this client any more:
 * a master demoted to a replica without closing its clients (READONLY), a
 * restart loading its data (LOADING), a replica without its master
 * (MASTERDOWN). The connection is dropped like a broken one (the idle ones
 * with it), so the next one is made afresh: to the name's new address. */
static void
drop_if_demoted(redisContext *c, const redisReply *r)
{
	if (r != NULL && r->type == REDIS_REPLY_ERROR && r->str != NULL &&
	    (strncmp(r->str, "READONLY", 8) == 0 || strncmp(r->str, "LOADING", 7) == 0 ||
	    strncmp(r->str, "MASTERDOWN", 10) == 0) && c->err == 0) {
		c->err = REDIS_ERR_OTHER;
		snprintf(c->errstr, sizeof(c->errstr), "%.120s", r->str);
	}
}

static void
put_conn(struct kv *kv, redisContext *c)
{
	if (c->err) {
		mark_down(kv, c->errstr);
		redisFree(c);
		/* The idle ones met the same restart or outage: keeping them made
		 * each later window end on another dead connection, a second of
		 * fallback per pooled connection. (redisFree only closes.) */
		pthread_mutex_lock(&kv->mtx);
		free_idle(kv);
		pthread_mutex_unlock(&kv->mtx);
		return;
	}
	pthread_mutex_lock(&kv->mtx);
	if (kv->nidle < kv->size) {
		kv->idle[kv->nidle++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&kv->mtx);
	if (c != NULL)
		redisFree(c);
}

redisReply *
kv_cmd(struct kv *kv, const char *fmt, ...)
{
	redisContext *c = get_conn(kv);
	redisReply *r;
	va_list ap;

	if (c == NULL)
		return NULL;
	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	drop_if_demoted(c, r);
	put_conn(kv, c);
	if (r != NULL && r->type == REDIS_REPLY_ERROR) {
		log_warnx("redis: %s", r->str);
		freeReplyObject(r);
		return NULL;
	}
	return r;
}

int
kv_pipeline(struct kv *kv, int n, const int *argc, const char *const *const *argv,
            const size_t *const *argvlen, redisReply **replies)
{
	redisContext *c = get_conn(kv);
	int i, ok = 0;

	for (i = 0; i < n; i++)
		replies[i] = NULL;
	if (c == NULL)
		return -1;
	for (i = 0; i < n; i++)
		if (redisAppendCommandArgv(c, argc[i], (const char **)(uintptr_t)argv[i], argvlen[i]) != REDIS_OK)
			break;
	if (i == n) {
		ok = 1;
		for (i = 0; i < n; i++) {
			void *r = NULL;

			if (redisGetReply(c, &r) != REDIS_OK) {
				ok = 0;
				break;
			}
			replies[i] = r;
			drop_if_demoted(c, r);
		}
	}
	put_conn(kv, c);
	if (!ok) {
		for (i = 0; i < n; i++)
			if (replies[i] != NULL) {
				freeReplyObject(replies[i]);
				replies[i] = NULL;
			}
		return -1;
	}
	return 0;
}
