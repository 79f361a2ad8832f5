/*
 * durable.h - a file made durable under its final name, written once for the
 * daemon's transfers, the CLI's restore and the job-end spool.
 *
 * The pattern: create a temporary name in the destination directory
 * (exclusive, never through a symlink), write it, make it durable (fsync),
 * rename it over the final name, then make the directory durable so the
 * name survives a crash. Verification (reading the file back) is the
 * caller's: it knows what the bytes should hash to.
 *
 * Must never: follow a symbolic link at the temporary name, or leave the
 * temporary file behind when a step fails.
 */
#ifndef STAGEHAND_DURABLE_H
#define STAGEHAND_DURABLE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The temporary name of NAME: ".NAME.stagehand-ID", or ".stagehand-ID-HASH"
 * when that is longer than NAME_MAX. 0, or -1 when it does not fit in out.
 */
int durable_tmpname(char *out, size_t outlen, const char *name, int64_t id);

/*
 * Create dirfd/tmp with O_CREAT|O_EXCL|O_NOFOLLOW and mode 0600, opened with
 * access (O_WRONLY or O_RDWR); a stale file of that name (an interrupted
 * attempt) is replaced. A descriptor the caller owns, or -1 with errno set.
 */
int durable_create(int dirfd, const char *tmp, int access);

#define DURABLE_FSYNC   1u   /* fsync(fd) before the rename */
#define DURABLE_DIRSYNC 2u   /* fsync(dirfd) after the rename */

/*
 * Finish a file written at dirfd/tmp: fsync fd (DURABLE_FSYNC), close it
 * (fd < 0: already closed), rename tmp to name, fsync dirfd (DURABLE_DIRSYNC).
 * 0, or the errno of the first step that failed; then tmp is removed.
 */
int durable_commit(int dirfd, const char *tmp, const char *name, int fd, unsigned flags);

#endif /* STAGEHAND_DURABLE_H */
