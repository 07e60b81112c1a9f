/* pgpool.c - lazily connected libpq connection pool guarded by a mutex and a
 * condition variable; broken connections are closed and reopened. */
#include "pgpool.h"

#include "errstr.h"
#include "log.h"
#include "monotime.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct pgpool {
	char *dsn;
	int size;       /* max connections */
	int out;        /* borrowed now */
	int nidle;
	PGconn **idle;  /* owned */
	pthread_mutex_t mtx;
	pthread_cond_t cond;
};

struct pgpool *
pgpool_new(const char *dsn, int size, char *errstr, size_t errstr_size)
{
	struct pgpool *p = calloc(1, sizeof(*p));

	if (p == NULL || (p->dsn = strdup(dsn)) == NULL ||
	    (p->idle = calloc((size_t)size, sizeof(PGconn *))) == NULL) {
		if (p != NULL)
			free(p->dsn);
		free(p);
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	p->size = size;
	pthread_mutex_init(&p->mtx, NULL);
	if (monotime_cond_init(&p->cond) < 0) {
		pthread_cond_destroy(&p->cond);
		pthread_mutex_destroy(&p->mtx);
		free(p->idle);
		free(p->dsn);
		free(p);
		errstr_set(errstr, errstr_size, "pgpool: no CLOCK_MONOTONIC condition variable");
		return NULL;
	}
	return p;
}

void
pgpool_free(struct pgpool *p)
{
	if (p == NULL)
		return;
	for (int i = 0; i < p->nidle; i++)
		PQfinish(p->idle[i]);
	pthread_mutex_destroy(&p->mtx);
	pthread_cond_destroy(&p->cond);
	free(p->idle);
	free(p->dsn);
	free(p);
}

PGconn *
pgpool_connectdb(const char *dsn, const char *application_name, const char *connect_timeout_s)
{
	/* libpq takes the keywords in order: the DSN (expanded from dbname)
	 * comes last so its own values win over these defaults. TCP
	 * keepalives and a user timeout: a server or route that stops
	 * answering without closing the connection (a partition, a frozen VM)
	 * fails the statement in ~30 s instead of the kernel's ~15 minutes. */
	const char *keys[] = { "connect_timeout", "application_name", "client_encoding",
		"keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
		"tcp_user_timeout", "dbname", NULL };
	const char *vals[] = { connect_timeout_s, application_name, "UTF8", "1", "10", "5", "3",
		"30000", dsn, NULL };

	return PQconnectdbParams(keys, vals, 1);
}

static PGconn *
pg_connect(const char *dsn, char *errstr, size_t errstr_size)
{
	PGconn *c = pgpool_connectdb(dsn, "linkpulse", "3");
	const char *msg;
	size_t n;

	if (c != NULL && PQstatus(c) == CONNECTION_OK)
		return c;
	msg = c ? PQerrorMessage(c) : "out of memory";
	errstr_set(errstr, errstr_size, "PostgreSQL: %s", msg);
	n = strlen(errstr);
	while (n > 0 && (errstr[n - 1] == '\n' || errstr[n - 1] == ' '))
		errstr[--n] = '\0';
	PQfinish(c);
	return NULL;
}

/* 1 when the idle c can be handed out. A connection the server has closed
 * since it was put back (PostgreSQL restarted, idle_session_timeout, a
 * terminated backend) still says CONNECTION_OK until libpq next reads, and
 * the statement run on it would fail. An idle connection has nothing to
 * read; a readable socket means the server's FATAL message and EOF (or, at
 * worst, an asynchronous notice: closing it then only costs a reconnect). */
static int
idle_usable(PGconn *c)
{
	struct pollfd pfd;

	if (PQstatus(c) != CONNECTION_OK || (pfd.fd = PQsocket(c)) < 0)
		return 0;
	pfd.events = POLLIN;
	pfd.revents = 0;
	return poll(&pfd, 1, 0) == 0;
}

PGconn *
pgpool_get(struct pgpool *p, int wait_ms, char *errstr, size_t errstr_size)
{
	struct timespec until;
	PGconn *c = NULL;

	monotime_deadline(&until, wait_ms);
	pthread_mutex_lock(&p->mtx);
	while (p->nidle == 0 && p->out >= p->size) {
		if (pthread_cond_timedwait(&p->cond, &p->mtx, &until) == ETIMEDOUT) {
			pthread_mutex_unlock(&p->mtx);
			errstr_set(errstr, errstr_size,
			    "PostgreSQL: no free connection within %d ms", wait_ms);
			return NULL;
		}
	}
	if (p->nidle > 0)
		c = p->idle[--p->nidle];
	p->out++;
	pthread_mutex_unlock(&p->mtx);

	if (c != NULL && !idle_usable(c)) {
		PQfinish(c);
		c = NULL;
	}
	if (c == NULL && (c = pg_connect(p->dsn, errstr, errstr_size)) == NULL) {
		pthread_mutex_lock(&p->mtx);
		p->out--;
		pthread_cond_signal(&p->cond);
		pthread_mutex_unlock(&p->mtx);
	}
	return c;
}

void
pgpool_put(struct pgpool *p, PGconn *c)
{
	if (c != NULL && (PQstatus(c) != CONNECTION_OK ||
	    PQtransactionStatus(c) != PQTRANS_IDLE)) {
		PQfinish(c);
		c = NULL;
	}
	pthread_mutex_lock(&p->mtx);
	p->out--;
	if (c != NULL)
		p->idle[p->nidle++] = c;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->mtx);
}

/* r when it succeeded; else NULL with errstr and sqlstate, r cleared. */
static PGresult *
result_or_error(PGconn *c, PGresult *r, char sqlstate[6], char *errstr, size_t errstr_size)
{
	ExecStatusType st = PQresultStatus(r);
	const char *s;
	size_t n;

	if (sqlstate != NULL)
		sqlstate[0] = '\0';
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return r;
	if (sqlstate != NULL && (s = PQresultErrorField(r, PG_DIAG_SQLSTATE)) != NULL)
		snprintf(sqlstate, 6, "%s", s);
	errstr_set(errstr, errstr_size, "PostgreSQL: %s",
	    r ? PQresultErrorMessage(r) : PQerrorMessage(c));
	n = strlen(errstr);
	while (n > 0 && (errstr[n - 1] == '\n' || errstr[n - 1] == ' '))
		errstr[--n] = '\0';
	PQclear(r);
	return NULL;
}

PGresult *
pgpool_exec(PGconn *c, const char *sql, int nparams, const char *const *params,
            char sqlstate[6], char *errstr, size_t errstr_size)
{
	return result_or_error(c, PQexecParams(c, sql, nparams, NULL, params, NULL, NULL, 0),
	    sqlstate, errstr, errstr_size);
}

/* Cancel requests on threads of their own, at most CANCELS_MAX at once:
 * PQcancel connects to the server and waits for it to close, with no
 * timeout of its own (libpq 15), so a server that stops answering (a
 * partition, a stopped postmaster) held the caller's thread for as long as
 * the kernel's connect took, or for good. The caller waits 5 s for the
 * statement's end either way, then leaves the connection to be closed. */
#define CANCELS_MAX 8

static atomic_int cancels_running;

static void *
cancel_main(void *arg)
{
	PGcancel *cn = arg;
	char buf[256];

	if (!PQcancel(cn, buf, sizeof(buf)))
		log_warnx("PostgreSQL: cancel request: %s", buf);
	PQfreeCancel(cn);
	atomic_fetch_sub(&cancels_running, 1);
	return NULL;
}

int
pgpool_cancel_async(PGconn *c)
{
	PGcancel *cn;
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	if (atomic_fetch_add(&cancels_running, 1) >= CANCELS_MAX) {
		atomic_fetch_sub(&cancels_running, 1);
		return -1;
	}
	if ((cn = PQgetCancel(c)) == NULL) {
		atomic_fetch_sub(&cancels_running, 1);
		return -1;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	rc = pthread_create(&t, &attr, cancel_main, cn);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		PQfreeCancel(cn);
		atomic_fetch_sub(&cancels_running, 1);
		return -1;
	}
	return 0;
}

PGresult *
pgpool_exec_timeout(PGconn *c, const char *sql, int nparams, const char *const *params,
                    int timeout_ms, char sqlstate[6], char *errstr, size_t errstr_size)
{
	long long deadline = monotime_ms() + timeout_ms, cancelled_at = 0;
	PGresult *r, *last = NULL;

	if (!PQsendQueryParams(c, sql, nparams, NULL, params, NULL, NULL, 0))
		return result_or_error(c, NULL, sqlstate, errstr, errstr_size);
	while (PQisBusy(c)) {
		struct pollfd pfd = { PQsocket(c), POLLIN, 0 };
		long long now = monotime_ms(), wait = (cancelled_at ? cancelled_at + 5000 : deadline) - now;

		if (wait <= 0 && cancelled_at != 0)
			break; /* not even the cancel answered: pgpool_put closes c */
		if (wait <= 0) {
			/* a request on a new connection, off this thread; the
			 * statement then ends with 57014 query_canceled (or in
			 * time after all) */
			if (pgpool_cancel_async(c) < 0)
				log_warnx("PostgreSQL: could not cancel a statement past %d ms "
				    "(%d cancel requests still under way)", timeout_ms,
				    atomic_load(&cancels_running));
			cancelled_at = now;
			continue;
		}
		if (poll(&pfd, 1, (int)wait) < 0 && errno != EINTR)
			break;
		if (!PQconsumeInput(c))
			break;
	}
	if (PQisBusy(c)) {
		if (sqlstate != NULL)
			snprintf(sqlstate, 6, "57014");
		errstr_set(errstr, errstr_size, "PostgreSQL: no answer %d ms after the statement "
		    "was sent, nor to its cancel", timeout_ms);
		return NULL;
	}
	while ((r = PQgetResult(c)) != NULL) {
		PQclear(last);
		last = r;
	}
	if (cancelled_at != 0 && (PQresultStatus(last) == PGRES_TUPLES_OK ||
	    PQresultStatus(last) == PGRES_COMMAND_OK || (PQresultErrorField(last,
	    PG_DIAG_SQLSTATE) != NULL && strcmp(PQresultErrorField(last, PG_DIAG_SQLSTATE),
	    "57014") != 0))) {
		/* Done, or failed on its own (e.g. 23505, reported as such),
		 * before the cancel landed, which may still reach the backend's
		 * next statement: c is left busy with one of ours, unread, so
		 * that pgpool_put closes it (never waiting on it). */
		(void)PQsendQuery(c, "SELECT 1");
	} else if (cancelled_at != 0) {
		/* 57014, from our cancel or from the server's own timeout or an
		 * administrator's: ours, on its thread, may still be under way
		 * and could hit the next statement, so c goes too */
		(void)PQsendQuery(c, "SELECT 1");
		PQclear(last);
		if (sqlstate != NULL)
			snprintf(sqlstate, 6, "57014");
		errstr_set(errstr, errstr_size, "PostgreSQL: the statement took over %d ms "
		    "(cancelled)", timeout_ms);
		return NULL;
	}
	return result_or_error(c, last, sqlstate, errstr, errstr_size);
}

PGresult *
pgpool_exec_prepared(PGconn *c, const char *name, const char *sql, int nparams,
                     const char *const *params, char sqlstate[6], char *errstr,
                     size_t errstr_size)
{
	PGresult *r = PQexecPrepared(c, name, nparams, params, NULL, NULL, 0);
	const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);

	/* 26000 invalid_sql_statement_name: not prepared on this connection */
	if (PQresultStatus(r) == PGRES_FATAL_ERROR && s != NULL && strcmp(s, "26000") == 0) {
		PQclear(r);
		r = PQprepare(c, name, sql, nparams, NULL);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			return result_or_error(c, r, sqlstate, errstr, errstr_size);
		PQclear(r);
		r = PQexecPrepared(c, name, nparams, params, NULL, NULL, 0);
	}
	return result_or_error(c, r, sqlstate, errstr, errstr_size);
}

int
pgpool_conflict(const char *sqlstate)
{
	return strcmp(sqlstate, "23505") == 0 || strcmp(sqlstate, "40P01") == 0;
}

int
pgpool_ping(struct pgpool *p, char *errstr, size_t errstr_size)
{
	PGconn *c = pgpool_get(p, 1000, errstr, errstr_size);
	PGresult *r;

	if (c == NULL)
		return -1;
	r = pgpool_exec(c, "SELECT 1", 0, NULL, NULL, errstr, errstr_size);
	pgpool_put(p, c);
	if (r == NULL)
		return -1;
	PQclear(r);
	return 0;
}
