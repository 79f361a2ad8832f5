/*
 * pace_probe.h - what the load probes share, and their parsers (for the
 * unit tests): where the system's files are (a root prefix for tests), the
 * mount table, Lustre's stats format and mmpmon's fs_io_s lines.
 *
 * Owns: reading /proc/self/mountinfo and parsing counter text. Every parser
 * takes the text as hostile (a file system's or a command's output, not
 * ours): it refuses what is not exactly the documented format rather than
 * guess, and says what and where in err.
 *
 * Must never: follow a user's path (mount points come from mountinfo and
 * are only read as strings), or run a command other than mmpmon.
 */
#ifndef STAGEHAND_PACE_PROBE_H
#define STAGEHAND_PACE_PROBE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pace.h"

/*
 * The prefix before /proc, /sys and mmpmon's default path: "" normally; the
 * value of STAGEHAND_PACE_ROOT in the daemon's environment (a test hook:
 * the unit tests point it at a tree of counter files). Borrowed.
 */
const char *pace_root(void);

/* One line of mountinfo, unescaped (\040 and the like). */
struct pace_mount {
	unsigned major, minor;       /* st_dev of the file system */
	char root[256];              /* the mount's root within the file system */
	char point[256];             /* mount point */
	char fstype[32];
	char source[256];            /* e.g. "10.0.0.1@o2ib:/scratch", "gpfs0", "/dev/sda1" */
};

/*
 * The mounts of fstype (NULL: any) listed in <root>/proc/self/mountinfo,
 * up to max into out. Returns how many matched (may exceed max), or -1 with
 * err (unreadable, or a line that is not mountinfo's format).
 */
int pace_mounts(const char *fstype, struct pace_mount *out, int max, char *err, size_t errlen);

/*
 * The mount point of dev (the mount of its root, else the first); -1 if none,
 * or if it is a FUSE mount (which a user may have made: its mount point is
 * not shown).
 */
int pace_mount_point(dev_t dev, char *point, size_t len);

/*
 * Lustre: the file system name in a client mount's source ("mgs@tcp:/fs",
 * "a@o2ib:b@o2ib:/fs/sub"): 1-8 of [A-Za-z0-9_-]. 0, or -1 with err.
 */
int pace_lustre_fsname(const char *source, char *fsname, size_t len, char *err, size_t errlen);

/*
 * Lustre: 1 if name is an llite instance of fsname, "<fsname>-" and 16
 * lowercase hex digits (the superblock's address); 0 otherwise.
 */
int pace_lustre_is_instance(const char *name, const char *fsname);

/*
 * Lustre: read_bytes and write_bytes sums of an llite stats file (n bytes
 * of buf, not NUL-terminated): a snapshot_time line, optionally start_time
 * and elapsed_time, then "name count samples [unit] [min max sum [sumsq]]"
 * lines. A counter never used is not listed: 0. 0, or -1 with err
 * (the line and what is wrong with it).
 */
int pace_lustre_parse_stats(const char *buf, size_t n, struct pace_probe_sample *s,
			    char *err, size_t errlen);

/* Spectrum Scale: one fs_io_s line of `mmpmon -p`. */
struct pace_gpfs_row {
	char cluster[256];           /* _cl_ */
	char fs[256];                /* _fs_: the file system's device name */
	uint64_t br, bw;             /* _br_, _bw_: bytes read, written */
	uint64_t t, tu;              /* _t_, _tu_: when (s, us) */
};

/*
 * Parse one line (no newline). 1 with row filled for an fs_io_s line whose
 * _rc_ is 0; 0 for a line to skip (another request's, or _rc_ not 0: no
 * file system mounted); -1 with err for a malformed fs_io_s line.
 */
int pace_gpfs_parse_line(const char *line, struct pace_gpfs_row *row, char *err, size_t errlen);

/* Spectrum Scale: the device name in a gpfs mount's source ("gpfs0" or "/dev/gpfs0"). */
int pace_gpfs_fsname(const char *source, char *fsname, size_t len, char *err, size_t errlen);

#endif /* STAGEHAND_PACE_PROBE_H */
