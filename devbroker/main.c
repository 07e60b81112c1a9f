/* devbroker - the dev/test Kafka broker: librdkafka's mock cluster (real Kafka
 * protocol, consumer groups) with the visits topic created up front. SIGUSR1
 * takes every broker down, SIGUSR2 brings them back, SIGTERM/SIGINT stop it. */
#include "config.h"
#include "log.h"

#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct devbroker_conf {
	long long brokers;
	long long partitions;
	char *kafka_topic;
	char *bootstrap_file;
	char *log_level;
};

static const struct cfg_opt devbroker_tab[] = {
	{ "brokers", CFG_INT, "3", 1, 16, NULL, offsetof(struct devbroker_conf, brokers), 0,
	  "number of mock brokers" },
	{ "partitions", CFG_INT, "64", 1, 1024, NULL, offsetof(struct devbroker_conf, partitions), 0,
	  "partitions of the visits topic (the mock keeps at most 100,000 messages or 5 MiB each)" },
	{ "kafka_topic", CFG_STR, "visits", 0, 0, NULL, offsetof(struct devbroker_conf, kafka_topic), 0,
	  "topic to create" },
	{ "bootstrap_file", CFG_STR, "", 0, 0, NULL, offsetof(struct devbroker_conf, bootstrap_file), 0,
	  "write the bootstrap address (host:port,...) to this file once listening" },
	{ "log_level", CFG_ENUM, "info", 0, 0, "debug|info|warn|error", offsetof(struct devbroker_conf, log_level), 0,
	  "log level" },
	CFG_END
};

static const struct cfg_prog devbroker_prog = {
	"devbroker",
	"Dev/test Kafka broker (librdkafka mock cluster). SIGUSR1: brokers down, SIGUSR2: brokers up.",
	"LINKPULSE_DEVBROKER_", devbroker_tab, sizeof(struct devbroker_conf)
};

static int
write_file_atomic(const char *path, const char *text)
{
	char tmp[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if ((f = fopen(tmp, "w")) == NULL)
		return -1;
	fprintf(f, "%s\n", text);
	if (fclose(f) != 0)
		return -1;
	return rename(tmp, path);
}

static void
set_all(rd_kafka_mock_cluster_t *mc, int n, int up)
{
	for (int id = 1; id <= n; id++) {
		rd_kafka_resp_err_t err = up ? rd_kafka_mock_broker_set_up(mc, id)
		                             : rd_kafka_mock_broker_set_down(mc, id);
		if (err)
			log_warnx("broker %d %s: %s", id, up ? "up" : "down", rd_kafka_err2str(err));
	}
	log_info("all %d brokers %s", n, up ? "up" : "down");
}

int
main(int argc, char **argv)
{
	struct devbroker_conf conf;
	enum cfg_action action;
	char errstr[512];
	rd_kafka_conf_t *kc;
	rd_kafka_t *rk;
	rd_kafka_mock_cluster_t *mc;
	rd_kafka_resp_err_t err;
	sigset_t set;
	int sig;

	if (cfg_from_args(&devbroker_prog, &conf, argc, argv, &action, NULL,
	    errstr, sizeof(errstr)) < 0) {
		fprintf(stderr, "devbroker: %s\n", errstr);
		return 2;
	}
	if (action == CFG_EXIT_OK)
		return 0;
	if (log_init("devbroker", conf.log_level, NULL, errstr, sizeof(errstr)) < 0) {
		fprintf(stderr, "devbroker: %s\n", errstr);
		return 2;
	}

	/* Block the control signals before librdkafka starts its threads. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	kc = rd_kafka_conf_new();
	rd_kafka_conf_set(kc, "log_level", "3", NULL, 0);
	if ((rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, errstr, sizeof(errstr))) == NULL) {
		log_fatalx("rd_kafka_new: %s", errstr);
		return 1;
	}
	if ((mc = rd_kafka_mock_cluster_new(rk, (int)conf.brokers)) == NULL) {
		log_fatalx("could not create the mock cluster");
		rd_kafka_destroy(rk);
		return 1;
	}
	err = rd_kafka_mock_topic_create(mc, conf.kafka_topic, (int)conf.partitions,
	    conf.brokers < 3 ? (int)conf.brokers : 3);
	if (err) {
		log_fatalx("create topic %s: %s", conf.kafka_topic, rd_kafka_err2str(err));
		rd_kafka_mock_cluster_destroy(mc);
		rd_kafka_destroy(rk);
		return 1;
	}
	log_info("listening on %s: %lld brokers, topic %s with %lld partitions",
	    rd_kafka_mock_cluster_bootstraps(mc), conf.brokers, conf.kafka_topic,
	    conf.partitions);
	if (*conf.bootstrap_file &&
	    write_file_atomic(conf.bootstrap_file, rd_kafka_mock_cluster_bootstraps(mc)) < 0)
		log_warn("write %s", conf.bootstrap_file);

	for (;;) {
		if (sigwait(&set, &sig) != 0)
			continue;
		if (sig == SIGUSR1)
			set_all(mc, (int)conf.brokers, 0);
		else if (sig == SIGUSR2)
			set_all(mc, (int)conf.brokers, 1);
		else
			break;
	}
	log_info("stopping");
	rd_kafka_mock_cluster_destroy(mc);
	rd_kafka_destroy(rk);
	cfg_free(&devbroker_prog, &conf);
	return 0;
}
