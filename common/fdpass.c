/*
 * fdpass.c - see fdpass.h.
 */
#include "config.h"

#include <string.h>

#include "fdpass.h"

void fdpass_attach(struct msghdr *mh, char *cb, int fd)
{
	struct cmsghdr *cm;

	memset(cb, 0, FDPASS_SPACE);
	mh->msg_control = cb;
	mh->msg_controllen = FDPASS_SPACE;
	cm = CMSG_FIRSTHDR(mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
}
