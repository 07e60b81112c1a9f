/* redirector - placeholder main: parses its configuration table and exits. */
#include "config.h"
#include "log.h"

#include <stddef.h>
#include <stdio.h>

struct redirector_conf {
	char *log_level;
};

static const struct cfg_opt redirector_tab[] = {
	{ "log_level", CFG_ENUM, "info", 0, 0, "debug|info|warn|error", offsetof(struct redirector_conf, log_level), 1, "log level" },
	CFG_END
};

static const struct cfg_prog redirector_prog = { "redirector", "linkpulse redirector", "LINKPULSE_", redirector_tab, sizeof(struct redirector_conf) };

int
main(int argc, char **argv)
{
	struct redirector_conf conf;
	enum cfg_action action;
	char errstr[512];

	if (cfg_from_args(&redirector_prog, &conf, argc, argv, &action, NULL, errstr, sizeof(errstr)) < 0) {
		fprintf(stderr, "redirector: %s\n", errstr);
		return 2;
	}
	if (action == CFG_EXIT_OK)
		return 0;
	cfg_free(&redirector_prog, &conf);
	return 0;
}
