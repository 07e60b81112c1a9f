/* metricsd.c - /metrics and /healthz over libmicrohttpd (one internal polling
 * thread, few connections, short timeouts); JSON health bodies via jansson. */
#include "metricsd.h"
#include "errstr.h"
#include "log.h"

#include <jansson.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct metricsd {
	struct MHD_Daemon *mhd;
	struct metrics *m;
	metricsd_health_fn health;
	void *health_arg;
	int port;
	_Atomic int running;   /* set once MHD_start_daemon returned */
	char lasterr[256];     /* libmicrohttpd's message while starting, for errstr */
};

struct MHD_Response *
metricsd_response(struct metrics *m)
{
	struct MHD_Response *r;
	size_t len;
	char *text = metrics_render(m, &len);

	if (text == NULL)
		return NULL;
	r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
	if (r == NULL) {
		free(text);
		return NULL;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, METRICS_CONTENT_TYPE);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	return r;
}

static enum MHD_Result
queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r)
{
	enum MHD_Result ret;

	if (r == NULL)
		return MHD_NO; /* out of memory: libmicrohttpd closes the connection */
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* Answers with a JSON body (stolen). */
static enum MHD_Result
queue_json(struct MHD_Connection *c, unsigned status, json_t *body, const char *allow)
{
	struct MHD_Response *r;
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;

	json_decref(body);
	if (text == NULL)
		return MHD_NO;
	r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (r == NULL) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	if (allow != NULL)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
	return queue(c, status, r);
}

static enum MHD_Result
handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
       const char *version, const char *upload_data, size_t *upload_data_size,
       void **con_cls)
{
	struct metricsd *d = cls;
	char reason[256] = "";

	(void)version;
	(void)upload_data;
	/* Any request body is ignored: answer on the first call. */
	*upload_data_size = 0;
	*con_cls = NULL;
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return queue_json(c, MHD_HTTP_METHOD_NOT_ALLOWED, json_pack("{s:{s:s,s:s}}", "error",
		    "code", "method_not_allowed", "message", "only GET and HEAD"), "GET, HEAD");
	if (strcmp(url, "/metrics") == 0)
		return queue(c, MHD_HTTP_OK, metricsd_response(d->m));
	if (strcmp(url, "/healthz") == 0) {
		if (d->health == NULL || d->health(d->health_arg, reason, sizeof(reason)))
			return queue_json(c, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"), NULL);
		return queue_json(c, MHD_HTTP_SERVICE_UNAVAILABLE, json_pack("{s:s,s:s}", "status",
		    "unhealthy", "reason", reason), NULL);
	}
	return queue_json(c, MHD_HTTP_NOT_FOUND, json_pack("{s:{s:s,s:s}}", "error", "code",
	    "not_found", "message", "try /metrics or /healthz"), NULL);
}

static void
mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct metricsd *d = cls;
	char line[sizeof(d->lasterr)];
	size_t n;

	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n > 0 && line[n - 1] == '\n')
		line[--n] = '\0';
	if (!atomic_load(&d->running)) /* metricsd_start reports it */
		memcpy(d->lasterr, line, n + 1);
	else
		log_warnx("metrics listener: %s", line);
}

struct metricsd *
metricsd_start(const char *addr, int port, struct metrics *m, metricsd_health_fn health,
               void *health_arg, char *errstr, size_t errstr_size)
{
	struct addrinfo hints, *ai = NULL;
	const union MHD_DaemonInfo *info;
	struct metricsd *d;
	char portstr[16];
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
	int rc;

	if (port < 0 || port > 65535) {
		errstr_set(errstr, errstr_size, "metrics listener: port %d out of range", port);
		return NULL;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(portstr, sizeof(portstr), "%d", port);
	if ((rc = getaddrinfo(addr, portstr, &hints, &ai)) != 0) {
		errstr_set(errstr, errstr_size, "metrics listener: address \"%s\": %s",
		    addr ? addr : "(null)", gai_strerror(rc));
		return NULL;
	}
	if ((d = calloc(1, sizeof(*d))) == NULL) {
		freeaddrinfo(ai);
		errstr_set(errstr, errstr_size, "out of memory");
		return NULL;
	}
	d->m = m;
	d->health = health;
	d->health_arg = health_arg;
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	d->mhd = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handle, d,
	    MHD_OPTION_EXTERNAL_LOGGER, mhd_log, d,
	    MHD_OPTION_SOCK_ADDR, ai->ai_addr,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
	    /* a few per client address: clients trickling a request's bytes
	     * cannot take every slot and blind Prometheus and /healthz */
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)8,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
	    MHD_OPTION_END);
	freeaddrinfo(ai);
	if (d->mhd == NULL) {
		errstr_set(errstr, errstr_size, "metrics listener: cannot listen on %s:%d%s%s", addr,
		    port, d->lasterr[0] ? ": " : "", d->lasterr);
		free(d);
		return NULL;
	}
	atomic_store(&d->running, 1);
	info = MHD_get_daemon_info(d->mhd, MHD_DAEMON_INFO_BIND_PORT);
	d->port = info != NULL ? info->port : port;
	return d;
}

int
metricsd_port(const struct metricsd *d)
{
	return d->port;
}

void
metricsd_stop(struct metricsd *d)
{
	if (d == NULL)
		return;
	MHD_stop_daemon(d->mhd);
	free(d);
}
