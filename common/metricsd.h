/* metricsd.h - a small libmicrohttpd listener serving GET /metrics (from a
 * metrics registry) and GET /healthz for daemons without an HTTP server of
 * their own, and the /metrics responder for daemons that have one. */
#ifndef LP_METRICSD_H
#define LP_METRICSD_H

#include <microhttpd.h>
#include <stddef.h>

#include "metrics.h"

/* Health check called for each GET /healthz on the listener's thread:
 * returns 1 when healthy, else 0 with a reason in reason (answered 503). */
typedef int (*metricsd_health_fn)(void *arg, char *reason, size_t reason_size);

struct metricsd;

/* Listens on addr:port (numeric IPv4 or IPv6; port 0 picks a free one) with
 * one internal thread. m and health_arg are borrowed and must outlive the
 * listener; health may be NULL (always healthy). NULL with errstr. */
struct metricsd *metricsd_start(const char *addr, int port, struct metrics *m,
                                metricsd_health_fn health, void *health_arg,
                                char *errstr, size_t errstr_size);
/* The port actually bound. */
int metricsd_port(const struct metricsd *d);
/* Stops listening, waits for the thread and frees d (NULL is allowed). */
void metricsd_stop(struct metricsd *d);

/* A 200 response holding m rendered in text format 0.0.4 with its
 * Content-Type, for any MHD server; the caller queues it and then calls
 * MHD_destroy_response. NULL on OOM. */
struct MHD_Response *metricsd_response(struct metrics *m);

#endif
