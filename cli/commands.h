/*
 * commands.h - the stagehand CLI's subcommands. Each takes the arguments
 * after its name (argv[0] is the subcommand name) and returns the process
 * exit status: 0 success, 1 the thing checked/asked for failed, 2 usage or
 * environment error.
 */
#ifndef STAGEHAND_CLI_COMMANDS_H
#define STAGEHAND_CLI_COMMANDS_H

int cmd_check(int argc, char **argv);

/* Admins: the site's setup checked from this node (doctor.c). */
int cmd_doctor(int argc, char **argv);

/* Offline: files back from an archive copy (restore.c). */
int cmd_restore(int argc, char **argv);

/* Labels (tags.c, scan.c, policy.c). */
int cmd_tags(int argc, char **argv);
int cmd_scan(int argc, char **argv);
int cmd_policy(int argc, char **argv);

/* Daemon clients (client.c). */
int cmd_submit(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_queue(int argc, char **argv);
int cmd_cancel(int argc, char **argv);
int cmd_retry(int argc, char **argv);
int cmd_job_end(int argc, char **argv);
int cmd_health(int argc, char **argv);
int cmd_audit(int argc, char **argv);   /* audit.c */
int cmd_drain(int argc, char **argv);   /* drain.c: admins, before maintenance */
int cmd_resume(int argc, char **argv);

/* Burst-buffer hooks' client (bb.c). */
int cmd_bb(int argc, char **argv);

#endif
