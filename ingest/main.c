/* ingest - placeholder main: parses its configuration table and exits. */
#include "config.h"
#include "log.h"

#include <stddef.h>
#include <stdio.h>

struct ingest_conf {
	char *log_level;
};

static const struct cfg_opt ingest_tab[] = {
	{ "log_level", CFG_ENUM, "info", 0, 0, "debug|info|warn|error", offsetof(struct ingest_conf, log_level), 1, "log level" },
	CFG_END
};

static const struct cfg_prog ingest_prog = { "ingest", "linkpulse ingest", "LINKPULSE_", ingest_tab, sizeof(struct ingest_conf) };

int
main(int argc, char **argv)
{
	struct ingest_conf conf;
	enum cfg_action action;
	char errstr[512];

	if (cfg_from_args(&ingest_prog, &conf, argc, argv, &action, NULL, errstr, sizeof(errstr)) < 0) {
		fprintf(stderr, "ingest: %s\n", errstr);
		return 2;
	}
	if (action == CFG_EXIT_OK)
		return 0;
	cfg_free(&ingest_prog, &conf);
	return 0;
}
