/* test_config_reload.c - cfg_reload (SIGHUP) applied in turn to one running
 * configuration, cases from tests/data/config_reload_cases.txt: reloadable
 * settings change, restart-only ones keep their value, and a bad file, value,
 * key or environment leaves everything as it was with a logged file:line reason. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "unit.h"

#define CASES "tests/data/config_reload_cases.txt"
#define BASE "tests/data/config_reload_base.conf"

struct tconf {
	char *listen_addr;
	long long port;
	long long batch;
	char *level;
	int verbose;
	char *tag;
};

#define OFF(f) offsetof(struct tconf, f)
static const struct cfg_opt tab[] = {
	{ "listen_addr", CFG_STR, "0.0.0.0", 0, 0, NULL, OFF(listen_addr), 0, "address" },
	{ "port", CFG_INT, "80", 1, 65535, NULL, OFF(port), 0, "port" },
	{ "batch", CFG_INT, "100", 1, 100000, NULL, OFF(batch), 1, "batch size" },
	{ "level", CFG_ENUM, "info", 0, 0, "debug|info|warn|error", OFF(level), 1, "log level" },
	{ "verbose", CFG_BOOL, "false", 0, 0, NULL, OFF(verbose), 1, "verbose" },
	{ "tag", CFG_STR, "", 0, 0, NULL, OFF(tag), 1, "a tag" },
	CFG_END
};
static const struct cfg_prog prog = { "test", "cfg_reload test", "LPTEST_", tab, sizeof(struct tconf) };

static void
state_of(const struct tconf *c, char *out, size_t size)
{
	snprintf(out, size, "listen_addr=%s;port=%lld;batch=%lld;level=%s;verbose=%d;tag=%s",
	    c->listen_addr, c->port, c->batch, c->level, c->verbose, c->tag);
}

static char *
trim(char *s)
{
	char *e;

	while (*s == ' ')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\n'))
		*--e = '\0';
	return s;
}

/* Splits s on " | " into at most n fields; returns the count. */
static int
split(char *s, char **f, int n)
{
	int k = 0;

	while (k < n) {
		char *bar = strstr(s, " | ");

		f[k++] = trim(s);
		if (bar == NULL)
			break;
		*bar = '\0';
		s = bar + 3;
	}
	return k;
}

/* Runs cfg_reload with stderr going to a temporary file whose text is
 * returned in log (so the logged reason can be checked). */
static int
reload_logged(struct tconf *c, const char *file, int argc, char **argv, char *errstr,
              size_t errstr_size, char *log, size_t log_size)
{
	FILE *tmp = tmpfile();
	int saved = dup(2), rc;
	size_t n;

	fflush(stderr);
	dup2(fileno(tmp), 2);
	rc = cfg_reload(&prog, c, file, argc, argv, errstr, errstr_size);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(tmp);
	n = fread(log, 1, log_size - 1, tmp);
	log[n] = '\0';
	fclose(tmp);
	fputs(log, stderr);
	return rc;
}

int
main(void)
{
	FILE *f = fopen(CASES, "r");
	struct tconf conf;
	char line[1024], errstr[512], got[512], logtext[4096], want_log[600];
	char *fld[5], *argv[16], *env_name = NULL;
	int lineno = 0, cases = 0;

	CHECK(f != NULL, "cannot open %s", CASES);
	if (f == NULL)
		return unit_done("test_config_reload");
	log_init("test_config_reload", "info", "logfmt", errstr, sizeof(errstr));
	CHECK(cfg_load(&prog, &conf, BASE, errstr, sizeof(errstr)) == 0, "base: %s", errstr);
	state_of(&conf, got, sizeof(got));
	CHECK_STR(got, "listen_addr=127.0.0.1;port=8080;batch=500;level=info;verbose=0;tag=blue",
	    "state after loading " BASE);

	while (fgets(line, sizeof(line), f) != NULL) {
		int argc = 0, rc;
		char *tok, *eq;

		lineno++;
		if (line[0] == '#' || line[0] == '\n')
			continue;
		if (split(line, fld, 5) != 5) {
			CHECK(0, "%s:%d: expected 5 fields", CASES, lineno);
			continue;
		}
		cases++;
		if (strcmp(fld[1], "-") != 0 && (eq = strchr(fld[1], '=')) != NULL) {
			*eq = '\0';
			env_name = fld[1];
			setenv(env_name, eq + 1, 1);
		}
		argv[argc++] = "test";
		if (strcmp(fld[2], "-") != 0)
			for (tok = strtok(fld[2], " "); tok && argc < 15; tok = strtok(NULL, " "))
				argv[argc++] = tok;
		argv[argc] = NULL;
		errstr[0] = '\0';
		rc = reload_logged(&conf, fld[0], argc, argv, errstr, sizeof(errstr), logtext,
		    sizeof(logtext));
		if (strncmp(fld[3], "ok ", 3) == 0) {
			CHECK(rc == atoi(fld[3] + 3), "%s:%d: expected %s, got %d (%s)", CASES, lineno,
			    fld[3], rc, errstr);
			CHECK(strstr(logtext, "config: reloaded from") != NULL,
			    "%s:%d: success is logged", CASES, lineno);
		} else {
			CHECK(rc == -1, "%s:%d: expected an error, got %d", CASES, lineno, rc);
			CHECK_STR(errstr, fld[3] + 6, "errstr");
			/* The log line carries the reason; logfmt escapes double quotes,
			 * so compare up to the first one. */
			snprintf(want_log, sizeof(want_log), "%.*s", (int)strcspn(fld[3] + 6, "\""),
			    fld[3] + 6);
			CHECK(strstr(logtext, "config: reload failed, keeping the running configuration") != NULL &&
			    strstr(logtext, want_log) != NULL,
			    "%s:%d: failure and \"%s\" are logged: %s", CASES, lineno, want_log, logtext);
		}
		state_of(&conf, got, sizeof(got));
		CHECK_STR(got, fld[4], "state after the reload");
		if (strstr(fld[0], "good") != NULL && rc >= 0)
			CHECK(strstr(logtext, "port changed; it takes effect only after a restart") != NULL,
			    "%s:%d: a restart-only change is logged", CASES, lineno);
		if (env_name != NULL) {
			unsetenv(env_name);
			env_name = NULL;
		}
	}
	fclose(f);
	CHECK(cases >= 10, "read %d cases from %s", cases, CASES);
	cfg_free(&prog, &conf);
	return unit_done("test_config_reload");
}
