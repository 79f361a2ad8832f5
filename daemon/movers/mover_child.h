/*
 * mover_child.h - a child process of the daemon that has become a
 * request's owner and writes what it finds into a pipe: the listing of a
 * source tree (mover_plan.c) and the read-back of what movers recorded
 * (mover_verify.c).
 *
 * Owns: the child's setup (only the pipe stays open, the owner's identity,
 * killed with the daemon), reading its whole output while watching a
 * cancel flag, reaping it, and its records (a fixed head, a uint16 length,
 * that many bytes of text). Must never: leave a descriptor of the daemon's
 * open in the child, or kill a pid it has not reaped yet from another
 * thread than the one that reaps it.
 */
#ifndef STAGEHAND_MOVER_CHILD_H
#define STAGEHAND_MOVER_CHILD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "queue.h"

/* The child's exit statuses; a caller's own ones take other values (mover_plan.c: 2). */
enum { MOVER_CHILD_OK = 0, MOVER_CHILD_BECOME = 3, MOVER_CHILD_OPEN = 4, MOVER_CHILD_SETUP = 5,
       MOVER_CHILD_ORPHAN = 6 };

/* The child's own part, as the owner, writing to wfd (3); it ends with _exit. */
typedef void (*mover_child_fn)(const struct queue_request *r, int wfd, const void *arg);

/*
 * Fork a child that becomes r's owner (with the groups worker_groups finds,
 * asked here before the fork), is named name for ps and top, is killed when
 * the daemon dies, keeps only the pipe's write end (as 3) and runs
 * body(r, 3, arg). 0 with *pid and the pipe's read end *fd, or -1 with err.
 */
int mover_child_start(const struct queue_request *r, const char *name, mover_child_fn body,
		      const void *arg, pid_t *pid, int *fd, char *err, size_t errlen);

/*
 * The child's whole output into *buf (malloc'd, the caller frees it even on
 * failure) and *len, then close fd and reap the child (*status, waitpid's).
 * Waits in slices of 0.2 s so that *cancel (may be NULL) is seen: the child
 * is then killed here, by the thread that reaps it, so the signal can never
 * reach a reused pid. 0; 1 read to its end, but the child was killed on
 * *cancel; -1 reading failed (errno).
 */
int mover_child_finish(int fd, pid_t pid, const _Atomic int *cancel, char **buf, size_t *len,
		       int *status);

/* In the child: one record, hlen bytes of head, len as a uint16, len bytes of text. */
void mover_child_put(FILE *out, const void *head, size_t hlen, const char *text, uint16_t len);

/*
 * The record at *off of buf (len bytes): its head into head (hlen bytes),
 * its text into text (NUL-terminated; cap bytes with the NUL) and *off past
 * it. 1, or 0 at the end: no record left, one cut short, or one whose text
 * does not fit cap.
 */
int mover_child_next(const char *buf, size_t len, size_t *off, void *head, size_t hlen,
		     char *text, size_t cap);

#endif /* STAGEHAND_MOVER_CHILD_H */
