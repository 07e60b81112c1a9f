/* test_metricsd.c - starts the metrics listener on a free port and fetches
 * /metrics, /healthz and wrong paths and methods with libcurl: status codes,
 * Content-Type, bodies, counters moving between scrapes, and one client
 * address holding 64 half-sent requests leaving /healthz to others. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "metricsd.h"
#include "unit.h"

/* The local address fetch connects from (CURLOPT_INTERFACE), NULL: any. */
static const char *fetch_from;

struct fetch {
	long status;
	char type[128];
	char *body;
	size_t len;
};

static size_t
on_body(char *p, size_t size, size_t n, void *arg)
{
	struct fetch *f = arg;
	char *b = realloc(f->body, f->len + size * n + 1);

	if (b == NULL)
		return 0;
	memcpy(b + f->len, p, size * n);
	f->len += size * n;
	b[f->len] = '\0';
	f->body = b;
	return size * n;
}

/* Fetches http://127.0.0.1:port/path with method; 0 or -1 on a transport error. */
static int
fetch(int port, const char *method, const char *path, struct fetch *f)
{
	CURL *c = curl_easy_init();
	char url[256];
	char *ct = NULL;
	CURLcode rc;

	memset(f, 0, sizeof(*f));
	if (c == NULL)
		return -1;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (strcmp(method, "HEAD") == 0)
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (fetch_from != NULL)
		curl_easy_setopt(c, CURLOPT_INTERFACE, fetch_from);
	rc = curl_easy_perform(c);
	if (rc == CURLE_OK) {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &f->status);
		if (curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct != NULL)
			snprintf(f->type, sizeof(f->type), "%s", ct);
	} else {
		fprintf(stderr, "fetch %s: %s\n", url, curl_easy_strerror(rc));
	}
	curl_easy_cleanup(c);
	if (f->body == NULL)
		f->body = strdup("");
	return rc == CURLE_OK ? 0 : -1;
}

struct health {
	int ok;
};

static int
check_health(void *arg, char *reason, size_t reason_size)
{
	struct health *h = arg;

	if (!h->ok)
		snprintf(reason, reason_size, "PostgreSQL unreachable");
	return h->ok;
}

/* Returns the "error.code" or "status" member of a JSON body, or "". */
static void
json_member(const char *body, const char *outer, const char *inner, char *out, size_t size)
{
	json_error_t err;
	json_t *j = json_loads(body, 0, &err), *v = j ? json_object_get(j, outer) : NULL;

	if (v != NULL && inner != NULL)
		v = json_object_get(v, inner);
	snprintf(out, size, "%s", json_is_string(v) ? json_string_value(v) : "");
	json_decref(j);
}

struct scraper {
	int port, ok;
};

static void *
scrape_loop(void *arg)
{
	struct scraper *s = arg;
	struct fetch f;

	for (int i = 0; i < 50; i++) {
		if (fetch(s->port, "GET", "/metrics", &f) == 0 && f.status == 200 &&
		    strstr(f.body, "# TYPE t_requests_total counter\n") != NULL)
			s->ok++;
		free(f.body);
	}
	return NULL;
}

int
main(void)
{
	struct metrics *m = metrics_new();
	struct metrics_family *req;
	struct metrics_series *s302;
	struct health h = { 1 };
	struct metricsd *d, *d2;
	struct scraper sc[3];
	pthread_t t[3];
	struct fetch f;
	char errstr[256], val[64], *want;
	int port, total = 0, held[64];

	curl_global_init(CURL_GLOBAL_DEFAULT);
	req = metrics_counter(m, "t_requests_total", "Requests.", "status", errstr, sizeof(errstr));
	s302 = metrics_series(req, "302", NULL);
	metrics_add(s302, 5);

	d = metricsd_start("127.0.0.1", 0, m, check_health, &h, errstr, sizeof(errstr));
	CHECK(d != NULL, "metricsd_start: %s", errstr);
	if (d == NULL)
		return unit_done("test_metricsd");
	port = metricsd_port(d);
	CHECK(port > 0, "bound port %d", port);

	CHECK(fetch(port, "GET", "/metrics", &f) == 0 && f.status == 200, "GET /metrics: %ld", f.status);
	CHECK_STR(f.type, METRICS_CONTENT_TYPE, "/metrics Content-Type");
	want = metrics_render(m, NULL);
	CHECK_STR(f.body, want, "/metrics body is the registry's rendering");
	CHECK(strstr(f.body, "t_requests_total{status=\"302\"} 5\n") != NULL, "302 count 5 in:\n%s", f.body);
	free(want);
	free(f.body);

	/* Counters move between scrapes. */
	metrics_inc(s302);
	metrics_inc(metrics_series(req, "404", NULL));
	fetch(port, "GET", "/metrics", &f);
	CHECK(strstr(f.body, "t_requests_total{status=\"302\"} 6\n") != NULL, "302 count 6 in:\n%s", f.body);
	CHECK(strstr(f.body, "t_requests_total{status=\"404\"} 1\n") != NULL, "404 count 1 in:\n%s", f.body);
	free(f.body);

	fetch(port, "HEAD", "/metrics", &f);
	CHECK(f.status == 200 && f.len == 0, "HEAD /metrics: %ld, %zu bytes", f.status, f.len);
	free(f.body);

	fetch(port, "GET", "/healthz", &f);
	json_member(f.body, "status", NULL, val, sizeof(val));
	CHECK(f.status == 200, "healthy /healthz: %ld", f.status);
	CHECK_STR(val, "ok", "healthy /healthz status");
	CHECK_STR(f.type, "application/json", "/healthz Content-Type");
	free(f.body);

	h.ok = 0;
	fetch(port, "GET", "/healthz", &f);
	CHECK(f.status == 503, "unhealthy /healthz: %ld", f.status);
	json_member(f.body, "reason", NULL, val, sizeof(val));
	CHECK_STR(val, "PostgreSQL unreachable", "unhealthy /healthz reason");
	free(f.body);
	h.ok = 1;

	fetch(port, "GET", "/nope", &f);
	json_member(f.body, "error", "code", val, sizeof(val));
	CHECK(f.status == 404, "GET /nope: %ld", f.status);
	CHECK_STR(val, "not_found", "404 error code");
	free(f.body);

	fetch(port, "POST", "/metrics", &f);
	json_member(f.body, "error", "code", val, sizeof(val));
	CHECK(f.status == 405, "POST /metrics: %ld", f.status);
	CHECK_STR(val, "method_not_allowed", "405 error code");
	free(f.body);

	/* A second listener on the same port is refused. */
	d2 = metricsd_start("127.0.0.1", port, m, NULL, NULL, errstr, sizeof(errstr));
	CHECK(d2 == NULL, "second listener on port %d refused", port);
	CHECK(strstr(errstr, "Address already in use") != NULL, "error says why: %s", errstr);
	metricsd_stop(d2);
	CHECK(metricsd_start("not-an-address", 0, m, NULL, NULL, errstr, sizeof(errstr)) == NULL,
	    "a host name is refused (numeric addresses only)");
	CHECK(strstr(errstr, "not-an-address") != NULL, "error names the address: %s", errstr);

	/* Concurrent scrapes while counters move. */
	for (int i = 0; i < 3; i++) {
		sc[i].port = port;
		sc[i].ok = 0;
		pthread_create(&t[i], NULL, scrape_loop, &sc[i]);
	}
	for (int i = 0; i < 100000; i++)
		metrics_inc(s302);
	for (int i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		total += sc[i].ok;
	}
	CHECK(total == 150, "concurrent scrapes answered: %d of 150", total);
	fetch(port, "GET", "/metrics", &f);
	CHECK(strstr(f.body, "t_requests_total{status=\"302\"} 100006\n") != NULL,
	    "302 count 100006 in:\n%s", f.body);
	free(f.body);

	/* 64 connections from 127.0.0.1, each a request's first line and no
	 * more (the listener's whole limit): 127.0.0.2 still gets /healthz. */
	for (int i = 0; i < 64; i++) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

		held[i] = socket(AF_INET, SOCK_STREAM, 0);
		inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
		if (connect(held[i], (struct sockaddr *)&sa, sizeof(sa)) == 0)
			(void)!write(held[i], "GET /metrics HTTP/1.1\r\n", 23);
	}
	fetch_from = "127.0.0.2";
	CHECK(fetch(port, "GET", "/healthz", &f) == 0 && f.status == 200,
	    "/healthz from another address while 64 half requests are held: %ld", f.status);
	free(f.body);
	fetch_from = NULL;
	for (int i = 0; i < 64; i++)
		close(held[i]);

	metricsd_stop(d);
	CHECK(fetch(port, "GET", "/metrics", &f) < 0, "nothing listens after stop");
	free(f.body);
	metrics_free(m);
	curl_global_cleanup();
	return unit_done("test_metricsd");
}
