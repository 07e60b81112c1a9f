/* ingest - linkpulse's Kafka -> enrich -> PostgreSQL loader. This version
 * carries the configuration table and lifecycle; the consumer comes with
 * the ingest issue. */
#include "config.h"
#include "log.h"

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

struct ingest_conf {
	char *pg_dsn;
	char *kafka_bootstrap;
	char *kafka_topic;
	char *kafka_group;
	char *geoip_city_db;
	char *geoip_isp_db;
	char *geoip_locale;
	char *uap_regexes;
	long long metrics_port;
	long long batch_max_events;
	long long batch_max_ms;
	char *log_level;
	char *log_format;
};

#define OFF(f) offsetof(struct ingest_conf, f)
static const struct cfg_opt ingest_tab[] = {
	{ "pg_dsn", CFG_STR, "dbname=linkpulse", 0, 0, NULL, OFF(pg_dsn), 0, "PostgreSQL connection string (libpq)" },
	{ "kafka_bootstrap", CFG_STR, "127.0.0.1:9092", 0, 0, NULL, OFF(kafka_bootstrap), 0, "Kafka bootstrap.servers" },
	{ "kafka_topic", CFG_STR, "visits", 0, 0, NULL, OFF(kafka_topic), 0, "topic of visit events" },
	{ "kafka_group", CFG_STR, "linkpulse-ingest", 0, 0, NULL, OFF(kafka_group), 0, "consumer group" },
	{ "geoip_city_db", CFG_STR, "var/geoip/GeoLite2-City.mmdb", 0, 0, NULL, OFF(geoip_city_db), 0,
	  "GeoLite2-City (or GeoIP2-City) database" },
	{ "geoip_isp_db", CFG_STR, "", 0, 0, NULL, OFF(geoip_isp_db), 0,
	  "optional GeoLite2-ASN or GeoIP2-ISP database (empty: isp/asn stay NULL)" },
	{ "geoip_locale", CFG_STR, "en", 0, 0, NULL, OFF(geoip_locale), 0, "locale of place names (en, zh-CN, de, ...)" },
	{ "uap_regexes", CFG_STR, "/usr/share/uap-core/regexes.yaml", 0, 0, NULL, OFF(uap_regexes), 0,
	  "uap-core regexes.yaml" },
	{ "metrics_port", CFG_INT, "9101", 1, 65535, NULL, OFF(metrics_port), 0, "port of /metrics and /healthz" },
	{ "batch_max_events", CFG_INT, "5000", 1, 1000000, NULL, OFF(batch_max_events), 1, "close a batch at this many events" },
	{ "batch_max_ms", CFG_INT, "500", 1, 600000, NULL, OFF(batch_max_ms), 1, "close a batch after this long" },
	{ "log_level", CFG_ENUM, "info", 0, 0, "debug|info|warn|error", OFF(log_level), 1, "log level" },
	{ "log_format", CFG_ENUM, "logfmt", 0, 0, "logfmt|json", OFF(log_format), 1, "log line format" },
	CFG_END
};

static const struct cfg_prog ingest_prog = {
	"ingest", "linkpulse ingest: Kafka visit events -> enrichment -> PostgreSQL (COPY), exactly once.",
	"LINKPULSE_", ingest_tab, sizeof(struct ingest_conf)
};

int
main(int argc, char **argv)
{
	struct ingest_conf conf;
	enum cfg_action action;
	char errstr[512];
	sigset_t set;
	int sig;

	if (cfg_from_args(&ingest_prog, &conf, argc, argv, &action, NULL, errstr, sizeof(errstr)) < 0) {
		fprintf(stderr, "ingest: %s\n", errstr);
		return 2;
	}
	if (action == CFG_EXIT_OK)
		return 0;
	if (log_init("ingest", conf.log_level, conf.log_format, errstr, sizeof(errstr)) < 0) {
		fprintf(stderr, "ingest: %s\n", errstr);
		cfg_free(&ingest_prog, &conf);
		return 2;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	log_warnx("the Kafka consumer is not implemented yet: events stay in topic %s", conf.kafka_topic);
	sigwait(&set, &sig);
	log_info("stopped");
	cfg_free(&ingest_prog, &conf);
	return 0;
}
