/*
 * main.c - stagehand command dispatch. One program for users (check,
 * status, tags), admins (queue, retry, cancel, drain, resume, policy) and
 * epilog hooks (job-end); each subcommand lives in its own file.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "client.h"
#include "commands.h"
#include "labels.h"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct command _commands[] = {
	{ "check", cmd_check, "validate #DATA directives in batch scripts (offline)" },
	{ "submit", cmd_submit, "queue a stage-in, archive or stage-out transfer" },
	{ "status", cmd_status, "show your requests, a job's (JOB) or one request (rN)" },
	{ "queue", cmd_queue, "list every user's requests (admins)" },
	{ "cancel", cmd_cancel, "cancel a request (rN) or a job's unfinished requests" },
	{ "retry", cmd_retry, "re-queue a failed request (rN) or a job's failed requests" },
	{ "drain", cmd_drain, "stop new transfers before maintenance; running ones finish (admins)" },
	{ "resume", cmd_resume, "let transfers start again after a drain (admins)" },
	{ "job-end", cmd_job_end, "tell the daemon a job ended (epilog hooks; root)" },
	{ "health", cmd_health, "ask whether stagehandd is up" },
	{ "audit", cmd_audit, "bytes and files moved per job, user or file (your own; admins all)" },
	{ "bb", cmd_bb, "burst-buffer mode: Slurm's hooks hand a job to stagehandd (root)" },
	{ "restore", cmd_restore, "bring files back from an archive copy (offline, as you)" },
	{ "tags", cmd_tags, "show a tree's labels; --verify checks them with stagehandd" },
	{ "scan", cmd_scan, "report a scratch tree by label: to archive, purgeable, unlabelled" },
	{ "policy", cmd_policy, "print rules for the site's policy engine (policy export)" },
	{ "doctor", cmd_doctor, "check this node's setup: Slurm, plugin, daemon, MUNGE, scratch" },
};

static void _usage(FILE *fp)
{
	size_t i;

	fprintf(fp, "usage: stagehand [--socket PATH | --server HOST:PORT] [--config FILE] COMMAND [ARGS...]\n\ncommands:\n");
	for (i = 0; i < sizeof(_commands) / sizeof(_commands[0]); i++)
		fprintf(fp, "  %-10s %s\n", _commands[i].name, _commands[i].summary);
	fprintf(fp, "\n'stagehand COMMAND --help' describes one command; see stagehand(1).\n");
}

int main(int argc, char **argv)
{
	size_t i;
	int n;

	/* Daemon selection may come before the command as well as after it. */
	while (argc > 1 && (n = client_global_option(argc - 1, argv + 1)) != 0) {
		if (n < 0)
			return 2;
		argv[n] = argv[0];
		argv += n;
		argc -= n;
	}

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
