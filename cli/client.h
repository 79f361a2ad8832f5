/*
 * client.h - how the CLI finds and talks to stagehandd, shared by the
 * daemon-client subcommands (submit, status, queue, cancel, retry, job-end,
 * health).
 *
 * Where the daemon is, first match wins:
 *   --server HOST:PORT, --socket PATH       (command line; the later wins)
 *   STAGEHAND_SERVER, then STAGEHAND_SOCKET (environment)
 *   Server=, then SocketPath= in the config file (--config, STAGEHAND_CONF,
 *                                            or SYSCONFDIR/stagehand/stagehand.conf,
 *                                            read by common/conf.c)
 *   /run/stagehand/stagehandd.sock
 *
 * Owns: daemon selection, id syntax (r123 = request, 123 = Slurm job) and
 * the mapping of daemon answers to exit codes (0 ok, 1 the daemon refused or
 * the work failed, 2 usage error or daemon unreachable). Must never: send
 * a uid the daemon would trust, or touch user data itself.
 */
#ifndef STAGEHAND_CLI_CLIENT_H
#define STAGEHAND_CLI_CLIENT_H

#include <stddef.h>

#include "http.h"


/*
 * Open the daemon connection in the order above: server or socket_path
 * when given (NULL = not given), else the environment, else the config
 * file config (NULL = STAGEHAND_CONF, else the default file, which may be
 * absent). Returns a new connection (http_close() it), or NULL with a
 * message printed.
 */
struct http *client_connect(const char *socket_path, const char *server,
			    const char *config);

/*
 * The daemon selection given on the command line (NULL = not given), before
 * the subcommand (client_global_option) or after it (each subcommand's
 * --socket, --server, --config). Borrowed from argv.
 */
extern const char *client_opt_socket, *client_opt_server, *client_opt_config;

/* "stagehand: " + message + newline on stderr. */
void client_errx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Take a daemon-selection option given before the subcommand
 * ("stagehand --socket PATH status"). argv[0] is the option. Returns how
 * many arguments were consumed (1 or 2), 0 if argv[0] is not such an
 * option, -1 on a missing value (message printed).
 */
int client_global_option(int argc, char **argv);

#endif /* STAGEHAND_CLI_CLIENT_H */
