/*
 * main.c - stagehand command dispatch. One program for users (check,
 * status, tags), admins (queue, retry, cancel, policy) and epilog hooks
 * (job-end); each subcommand lives in its own file.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "commands.h"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct command _commands[] = {
	{ "check", cmd_check, "validate #DATA directives in batch scripts (offline)" },
};

static void _usage(FILE *fp)
{
	size_t i;

	fprintf(fp, "usage: stagehand COMMAND [ARGS...]\n\ncommands:\n");
	for (i = 0; i < sizeof(_commands) / sizeof(_commands[0]); i++)
		fprintf(fp, "  %-10s %s\n", _commands[i].name, _commands[i].summary);
	fprintf(fp, "\n'stagehand COMMAND --help' describes one command; see stagehand(1).\n");
}

int main(int argc, char **argv)
{
	size_t i;

	if (argc < 2) {
		_usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		_usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("stagehand %s\n", PACKAGE_VERSION);
		return 0;
	}
	for (i = 0; i < sizeof(_commands) / sizeof(_commands[0]); i++)
		if (!strcmp(argv[1], _commands[i].name))
			return _commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "stagehand: unknown command '%s'\n", argv[1]);
	_usage(stderr);
	return 2;
}
