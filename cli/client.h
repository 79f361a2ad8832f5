/*
 * client.h - how the CLI finds and talks to stagehandd, shared by the
 * daemon-client subcommands (submit, status, queue, cancel, retry, job-end,
 * health).
 *
 * Where the daemon is, first match wins:
 *   --server HOST:PORT, --socket PATH       (command line)
 *   STAGEHAND_SERVER, STAGEHAND_SOCKET      (environment)
 *   SocketPath= in the config file          (--config, STAGEHAND_CONF, or
 *                                            SYSCONFDIR/stagehand/stagehand.conf)
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

#define CLIENT_DEFAULT_SOCKET "/run/stagehand/stagehandd.sock"

/*
 * Open the daemon connection in the order above: socket_path or server when
 * given (NULL = not given), else STAGEHAND_SOCKET, else STAGEHAND_SERVER,
 * else conf_socket(), which returns 1 with the config file's SocketPath in
 * out, 0 when the file sets none (or the default file is absent), -1 on an
 * error it has printed; else CLIENT_DEFAULT_SOCKET. Returns a new connection
 * (http_close() it), or NULL with a message printed.
 */
struct http *client_connect(const char *socket_path, const char *server,
			    int (*conf_socket)(char *out, size_t outlen));

/*
 * Take a daemon-selection option given before the subcommand
 * ("stagehand --socket PATH status"). argv[0] is the option. Returns how
 * many arguments were consumed (1 or 2), 0 if argv[0] is not such an
 * option, -1 on a missing value (message printed).
 */
int client_global_option(int argc, char **argv);

#endif /* STAGEHAND_CLI_CLIENT_H */
