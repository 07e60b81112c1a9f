/* compactor.c - the periodic link_day_dim_compact() of ingest: its own
 * thread and connection; a failure is logged and retried at the next turn
 * (the function changes no sums, so a failed or cancelled run loses nothing). */
#include "compactor.h"

#include "errstr.h"
#include "log.h"
#include "monotime.h"
#include "pgpool.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct compactor {
	char *dsn;                 /* owned */
	int interval_s;
	PGconn *conn;              /* owned by the thread */
	int quit;                  /* under mtx */
	pthread_t thread;
	pthread_mutex_t mtx;
	pthread_cond_t cond;
};

static double
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000 + ts.tv_nsec / 1e6;
}

/* Waits interval_s (or until quit); 1 when it is time to compact. */
static int
wait_turn(struct compactor *c)
{
	struct timespec until;
	int go;

	monotime_deadline(&until, (long long)c->interval_s * 1000);
	pthread_mutex_lock(&c->mtx);
	while (!c->quit && pthread_cond_timedwait(&c->cond, &c->mtx, &until) != ETIMEDOUT)
		;
	go = !c->quit;
	pthread_mutex_unlock(&c->mtx);
	return go;
}

static int
quitting(struct compactor *c)
{
	int quit;

	pthread_mutex_lock(&c->mtx);
	quit = c->quit;
	pthread_mutex_unlock(&c->mtx);
	return quit;
}

/* One compaction on c->conn (connected first if needed); logs the outcome.
 * The statement is sent and waited for here, looking at quit every 200 ms
 * and cancelling it once quit is set: a stop asked for just before the
 * statement went out (a cancel then finds an idle backend and does nothing)
 * no longer waits for the whole compaction. */
static void
compact_once(struct compactor *c)
{
	double t0 = mono_ms();
	PGresult *r, *last = NULL;
	double cancelled = 0, first = 0; /* mono_ms of the last, first cancel request */

	if (c->conn == NULL || PQstatus(c->conn) != CONNECTION_OK) {
		PQfinish(c->conn);
		/* as the loading lanes connect: a black-holed server fails the
		 * statement (and the cancel request) in ~30 s instead of
		 * holding a stopping ingest past its supervisor's stop timeout */
		c->conn = pgpool_connectdb(c->dsn, "linkpulse-ingest-compactor", "5");
		if (PQstatus(c->conn) == CONNECTION_OK) {
			/* one statement folds every batch row: a statement_timeout
			 * from the role or pg_dsn cancelled it once the backlog
			 * outgrew it, and every later, longer run too, for good */
			r = PQexec(c->conn, "SET statement_timeout = 0");
			if (PQresultStatus(r) != PGRES_COMMAND_OK) {
				PQfinish(c->conn);
				c->conn = NULL;
			}
			PQclear(r);
		}
		if (c->conn == NULL || PQstatus(c->conn) != CONNECTION_OK) {
			log_warnx("link_day_dim compaction: PostgreSQL: %s (retried in %d s)",
			    c->conn ? PQerrorMessage(c->conn) : "cannot connect or set "
			    "statement_timeout", c->interval_s);
			return;
		}
	}
	if (quitting(c))
		return;
	if (!PQsendQuery(c->conn, "SELECT link_day_dim_compact()")) {
		log_warnx("link_day_dim compaction: PostgreSQL: %s (retried in %d s)",
		    PQerrorMessage(c->conn), c->interval_s);
		return;
	}
	while (PQisBusy(c->conn)) {
		struct pollfd pfd = { PQsocket(c->conn), POLLIN, 0 };

		/* again every second: PostgreSQL ignores a cancel that comes
		 * while it is still reading the command */
		if ((cancelled == 0 || mono_ms() - cancelled >= 1000) && quitting(c)) {
			/* off this thread: PQcancel can wait for a server that
			 * does not answer */
			if (pgpool_cancel_async(c->conn) < 0)
				log_warnx("link_day_dim compaction: could not send a cancel request");
			cancelled = mono_ms();
			if (first == 0)
				first = cancelled;
		}
		if (first != 0 && mono_ms() - first >= 5000) {
			/* no answer to the statement nor to 5 s of cancels: the
			 * stop goes on; PQfinish closes the connection */
			log_warnx("link_day_dim compaction: no answer 5 s after its cancel; "
			    "closing the connection");
			PQfinish(c->conn);
			c->conn = NULL;
			return;
		}
		if (poll(&pfd, 1, 200) < 0 && errno != EINTR)
			break;
		if (!PQconsumeInput(c->conn))
			break;
	}
	if (PQisBusy(c->conn)) { /* the socket failed: drop the connection */
		log_warnx("link_day_dim compaction: PostgreSQL: %s (retried in %d s)",
		    PQerrorMessage(c->conn), c->interval_s);
		PQfinish(c->conn);
		c->conn = NULL;
		return;
	}
	while ((r = PQgetResult(c->conn)) != NULL) {
		PQclear(last);
		last = r;
	}
	if (PQresultStatus(last) == PGRES_TUPLES_OK && strcmp(PQgetvalue(last, 0, 0), "0") == 0)
		log_debug("link_day_dim: no batch rows to compact");
	else if (PQresultStatus(last) == PGRES_TUPLES_OK)
		log_info("link_day_dim: %s batch rows compacted in %.0f ms", PQgetvalue(last, 0, 0),
		    mono_ms() - t0);
	else if (cancelled)
		log_info("link_day_dim compaction cancelled: stopping");
	else
		log_warnx("link_day_dim compaction: PostgreSQL: %s (retried in %d s)",
		    last ? PQresultErrorMessage(last) : PQerrorMessage(c->conn), c->interval_s);
	PQclear(last);
}

static void *
run(void *arg)
{
	struct compactor *c = arg;

	while (wait_turn(c))
		compact_once(c);
	return NULL;
}

struct compactor *
compactor_start(const char *dsn, int interval_s, char *errstr, size_t errstr_size)
{
	struct compactor *c = calloc(1, sizeof(*c));

	if (c == NULL || (c->dsn = strdup(dsn)) == NULL) {
		free(c);
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	c->interval_s = interval_s;
	pthread_mutex_init(&c->mtx, NULL);
	if (monotime_cond_init(&c->cond) < 0 || pthread_create(&c->thread, NULL, run, c) != 0) {
		errstr_set(errstr, errstr_size, "pthread_create failed, or no CLOCK_MONOTONIC");
		pthread_mutex_destroy(&c->mtx);
		pthread_cond_destroy(&c->cond);
		free(c->dsn);
		free(c);
		return NULL;
	}
	return c;
}

void
compactor_stop(struct compactor *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&c->mtx);
	c->quit = 1; /* a compaction under way is cancelled within 200 ms */
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mtx);
	pthread_join(c->thread, NULL);
	PQfinish(c->conn);
	pthread_mutex_destroy(&c->mtx);
	pthread_cond_destroy(&c->cond);
	free(c->dsn);
	free(c);
}
