/* reports - placeholder main: parses its configuration table and exits. */
#include "config.h"
#include "log.h"

#include <stddef.h>
#include <stdio.h>

struct reports_conf {
	char *log_level;
};

static const struct cfg_opt reports_tab[] = {
	{ "log_level", CFG_ENUM, "info", 0, 0, "debug|info|warn|error", offsetof(struct reports_conf, log_level), 1, "log level" },
	CFG_END
};

static const struct cfg_prog reports_prog = { "reports", "linkpulse reports", "LINKPULSE_", reports_tab, sizeof(struct reports_conf) };

int
main(int argc, char **argv)
{
	struct reports_conf conf;
	enum cfg_action action;
	char errstr[512];

	if (cfg_from_args(&reports_prog, &conf, argc, argv, &action, NULL, errstr, sizeof(errstr)) < 0) {
		fprintf(stderr, "reports: %s\n", errstr);
		return 2;
	}
	if (action == CFG_EXIT_OK)
		return 0;
	cfg_free(&reports_prog, &conf);
	return 0;
}
