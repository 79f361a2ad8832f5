/*
 * restore.h - bring files back from an archive copy made by stagehand, with
 * the caller's own identity, verifying each one. 'stagehand restore' (the
 * CLI) and the daemon's stage-in of an archive (daemon/engine/xfer_restore.c) both
 * run it.
 *
 * Two archive layouts:
 *   bundled  ARCHIVE/.stagehand-bundles/index.jsonl lists every entry; small
 *            files live in tar bundles at an offset, large ones at
 *            ARCHIVE/<relpath> (written by the daemon's bundle backend);
 *   plain    the tree itself (the local backend's copy).
 * Each file is checked against the checksum recorded when it was archived:
 * the index's for a bundled archive, the caller's table (known, from the
 * daemon's queue) for a plain one; with neither, the copy is read back and
 * compared with what was read.
 *
 * Owns: reading the archive (the index through common/bundle.c's strict
 * decoder, the bundles' tar headers through common/tar.c) and writing the
 * destination: directories opened with resolve_open (common/resolve.h),
 * files written to a temporary name with O_EXCL|O_NOFOLLOW, fsynced and
 * renamed (common/durable.h), symlinks last, directory modes and times
 * deepest first.
 *
 * Must never: trust the index or the bundles (every line is checked before
 * anything is written; offsets must sit inside their bundle, on a tar header
 * that agrees with the index), follow a link at the destination, write
 * outside the destination directory, or bring back set-id bits. It never
 * exits and never changes identity: the caller runs it as the user.
 */
#ifndef STAGEHAND_RESTORE_H
#define STAGEHAND_RESTORE_H

#include <stddef.h>
#include <stdint.h>

#include "checksum.h"

/* A file's checksum recorded when it was archived (plain archives). */
struct restore_known {
	char *path;                  /* relative to the archive root; owned by the table's maker */
	int64_t size;
	char cks[CKSUM_HEX_MAX];     /* "algo:hex" */
};

struct restore_ent;
struct restore_bundle;

/* What the selection names in the archive (restore_kind). */
enum restore_kind { RESTORE_NONE = 0, RESTORE_FILE, RESTORE_DIR, RESTORE_OTHER };

struct restore {
	/* ---- set by the caller (all borrowed) ---- */
	const char *archive;         /* the archive root's name, for messages */
	const char *dest;            /* the destination's name, for messages */
	int afd;                     /* the archive root, open */
	int dfd;                     /* the destination directory, open (restore_run) */
	int force;                   /* replace files that exist at the destination */
	char **files;                /* selections relative to the archive root (safe names,
					bundle_unsafe_name); none: everything */
	int nfiles;
	const char *rename;          /* NULL: entries land at their own relpath below dfd;
					else files[0] (the one selection) lands at rename
					below dfd, its contents below that ("" = dfd itself) */
	const struct restore_known *known; /* plain archives: the checksums recorded when it
					      was archived, sorted by path; NULL = none */
	size_t nknown;
	/* One message per failed entry (rel: its path in the archive, or NULL). */
	void (*on_error)(void *arg, const char *rel, const char *msg);
	/* A file restored and verified: out = its path below dfd, cks = its checksum. */
	void (*on_file)(void *arg, const char *out, int64_t size, int64_t mtime_ns,
			uint32_t mode, const char *cks);
	/* A symlink restored (may be NULL). */
	void (*on_link)(void *arg, const char *out, const char *target);
	/* An entry left out (not a file, directory or symlink); may be NULL. */
	void (*on_skip)(void *arg, const char *rel, const char *why);
	void *arg;
	/* ---- results ---- */
	long restored_files, restored_links, restored_dirs, errors, skipped;
	long long bytes;
	/* ---- private ---- */
	int bfd;                     /* ARCHIVE/.stagehand-bundles, -1 = a plain archive */
	struct restore_ent *e;
	size_t ne;
	struct restore_bundle *b;
	size_t nb;
	char *buf;
	char *khit;                  /* known[i] met in the archive copy */
};

/*
 * Set r up before the caller's fields: descriptors -1, nothing loaded.
 */
void restore_init(struct restore *r);
/*
 * Open the archive behind r->afd: a bundled one has its whole index read,
 * decoded and checked here, before anything is written. 1 bundled, 0 plain,
 * -1 after on_error (the index is missing, damaged or hostile: nothing may
 * be restored).
 */
int restore_open(struct restore *r);
/* What rel (a safe relative name, "" = the root) is in the opened archive. */
enum restore_kind restore_kind(struct restore *r, const char *rel);
/*
 * Restore the selection into r->dfd. 0 when everything asked for was
 * restored and verified, -1 when some entry failed (r->errors, one
 * on_error each).
 */
int restore_run(struct restore *r);
/* Free what restore_open and restore_run made (not the caller's fields). */
void restore_free(struct restore *r);

#endif /* STAGEHAND_RESTORE_H */
