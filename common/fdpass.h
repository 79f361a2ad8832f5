/*
 * fdpass.h - a descriptor sent along with a message on a UNIX socket
 * (SCM_RIGHTS): a worker's label records (daemon/engine/xfer.c) and the
 * worker spawner's requests (daemon/core/spawner.c).
 */
#ifndef STAGEHAND_FDPASS_H
#define STAGEHAND_FDPASS_H

#include <sys/socket.h>

/* The control buffer one descriptor needs. */
#define FDPASS_SPACE CMSG_SPACE(sizeof(int))

/* Make fd mh's control data, held in cb (FDPASS_SPACE bytes, the caller's). */
void fdpass_attach(struct msghdr *mh, char *cb, int fd);

#endif /* STAGEHAND_FDPASS_H */
