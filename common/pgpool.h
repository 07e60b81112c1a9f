/* pgpool.h - a small thread-safe pool of libpq connections, opened lazily and
 * replaced when broken, so request threads never share a PGconn. */
#ifndef LP_PGPOOL_H
#define LP_PGPOOL_H

#include <libpq-fe.h>
#include <stddef.h>

struct pgpool;

/* dsn is copied. size = most connections open at once. Never connects here.
 * Returns NULL only when out of memory. Free with pgpool_free. */
struct pgpool *pgpool_new(const char *dsn, int size, char *errstr, size_t errstr_size);
void pgpool_free(struct pgpool *p);

/* Borrows a connected PGconn (waits up to wait_ms for a free slot). Returns
 * NULL with errstr when none is free in time or PostgreSQL is unreachable.
 * The pool keeps ownership: give it back with pgpool_put. */
PGconn *pgpool_get(struct pgpool *p, int wait_ms, char *errstr, size_t errstr_size);

/* Returns c to the pool; a connection in a bad state (or in a transaction)
 * is closed and reopened on a later pgpool_get. */
void pgpool_put(struct pgpool *p, PGconn *c);

/* 1 when a statement that failed with sqlstate may succeed run again in its
 * conflict-tolerant form: a unique violation (23505) or a deadlock (40P01).
 * Used where a plain INSERT runs first and ON CONFLICT only when needed. */
int pgpool_conflict(const char *sqlstate);

/* PQconnectdbParams for dsn with the project's defaults before it (the DSN's
 * own values win): connect_timeout_s, application_name, client_encoding
 * UTF8, TCP keepalives and a 30 s tcp_user_timeout (a server that stops
 * answering without closing the connection fails a statement in ~30 s, not
 * the kernel's ~15 minutes). The caller checks PQstatus and PQfinish()es
 * the result (NULL only out of memory). */
PGconn *pgpool_connectdb(const char *dsn, const char *application_name,
                         const char *connect_timeout_s);

/* 0 when a "SELECT 1" succeeds: a connection waited for up to the pool's connect
 * timeout, the query bounded by TCP keepalives and tcp_user_timeout (~30 s
 * for a server that stops answering without closing the connection). */
int pgpool_ping(struct pgpool *p, char *errstr, size_t errstr_size);

/* Runs one parameterized command (text params). Returns the PGresult on
 * PGRES_COMMAND_OK or PGRES_TUPLES_OK (caller PQclear()s it), else NULL with
 * errstr; *sqlstate (if not NULL) receives the 5-char SQLSTATE or "". */
PGresult *pgpool_exec(PGconn *c, const char *sql, int nparams, const char *const *params,
                      char sqlstate[6], char *errstr, size_t errstr_size);

/* Sends c's cancel request (PQcancel) from a detached thread of its own,
 * at most 8 at once: it connects to the server and waits for it to answer,
 * with no timeout in libpq 15. Returns 0, or -1 when it could not be sent
 * (too many under way, out of memory, no thread). c may be closed at once. */
int pgpool_cancel_async(PGconn *c);

/* As pgpool_exec, but the statement may run timeout_ms at most: past it,
 * it is cancelled (PQcancel, sent from a thread of its own: it can wait
 * for a server that does not answer) and NULL returned with sqlstate 57014 and
 * errstr saying so. A server that answers neither the statement nor its
 * cancel within 5 s more leaves c busy: pgpool_put then closes it; so does
 * any statement whose cancel was sent (it could still hit the next one).
 * Run nothing more on c: give it back. */
PGresult *pgpool_exec_timeout(PGconn *c, const char *sql, int nparams,
                              const char *const *params, int timeout_ms, char sqlstate[6],
                              char *errstr, size_t errstr_size);

/* As pgpool_exec, for a statement run often: executes the prepared
 * statement name (one per distinct sql, the same on every connection),
 * preparing it on c first when c does not have it yet, so parsing and
 * planning are not paid per call. Only outside an explicit transaction (the
 * first failed attempt on a connection would abort it). */
PGresult *pgpool_exec_prepared(PGconn *c, const char *name, const char *sql, int nparams,
                               const char *const *params, char sqlstate[6], char *errstr,
                               size_t errstr_size);

#endif
