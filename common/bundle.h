/*
 * bundle.h - the bundled-archive format: the index lines (writer and the
 * one strict decoder) and the names of the files in DEST/.stagehand-bundles.
 * The daemon's bundle backend writes it; the daemon (resume) and
 * 'stagehand restore' read it, both through this module.
 *
 * Owns: the format of index.jsonl and its journal (docs/admin-guide.md,
 * "Small-file bundling and restore"):
 *   {"stagehand_index":1,"checksum":"xxh128","source":…,"dest":…,…}   first
 *   {"bundle":"bundle-000001.tar","size":N,"checksum":"xxh128:…","members":K}
 *   {"path":…,"type":"file","bundle":…,"offset":O,"size":S,"mode":M,
 *    "mtime_ns":T,"checksum":"xxh128:…"}      offset = the member's first data byte
 *   {"path":…,"type":"file","size":…,…}        no "bundle": stored at DEST/path
 *   {"path":…,"type":"symlink","target":…,"bundle":…,"offset":…,…}
 *   {"path":…,"type":"dir","mode":M,"mtime_ns":T}
 * A name that is not valid UTF-8 is written as "path_hex" ("target_hex").
 *
 * Names: a path or target is at most BUNDLE_PATH_MAX - 1 bytes (it must fit
 * a PATH_MAX-sized buffer with its NUL); the writer refuses longer ones and
 * the decoder rejects them, in plain and in hex form alike.
 *
 * Must never: trust a line. The decoder treats every byte as hostile (the
 * archive may have been edited by anyone with write access to it): every
 * field is type- and range-checked, paths must stay below their root, and
 * a line that fails any check is rejected whole.
 */
#ifndef STAGEHAND_BUNDLE_H
#define STAGEHAND_BUNDLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "checksum.h"

#define BUNDLE_DIR ".stagehand-bundles"
#define BUNDLE_INDEX_NAME "index.jsonl"
#define BUNDLE_JOURNAL_NAME "index.jsonl.part"
#define BUNDLE_PATH_MAX 4096	/* names are at most BUNDLE_PATH_MAX - 1 bytes */
#define BUNDLE_NAME_SIZE 32	/* room for "bundle-NNNNNN.tar" */
#define BUNDLE_NUM_MAX 999999

enum bundle_line_type { BUNDLE_L_HEADER = 1, BUNDLE_L_BUNDLE, BUNDLE_L_ENTRY };
enum bundle_kind { BUNDLE_K_FILE = 0, BUNDLE_K_LINK, BUNDLE_K_DIR };

/* One decoded index line (or the input of a writer). */
struct bundle_line {
	enum bundle_line_type type;
	/* BUNDLE_L_HEADER */
	enum cksum_algo algo;
	/* BUNDLE_L_BUNDLE: num, size, members, cks */
	int num;                     /* bundle number (1..BUNDLE_NUM_MAX); entry: 0 = plain */
	int64_t size;                /* bundle bytes, or a file's bytes */
	int64_t members;
	char cks[CKSUM_HEX_MAX];     /* "algo:hex" of the bundle or of the file */
	/* BUNDLE_L_ENTRY */
	char *path;                  /* owned; safe relative name */
	char *target;                /* owned; symlinks only */
	enum bundle_kind kind;
	int64_t offset;              /* in bundle num: first data byte (after its header) */
	int64_t mtime_ns;
	uint32_t mode;               /* permission bits (07777) */
};

/* The header's fields for bundle_header_line (borrowed strings). */
struct bundle_header {
	enum cksum_algo algo;
	const char *source, *dest;
	int64_t request, job, created;
	uid_t uid;
};

/* "bundle-NNNNNN.tar" for num into out (BUNDLE_NAME_SIZE bytes). */
void bundle_name(char out[BUNDLE_NAME_SIZE], int num);
/* The number of a bundle name, or 0 when s is not exactly bundle-NNNNNN.tar. */
int bundle_name_parse(const char *s);
/*
 * Why p is not a safe relative name (no absolute name, no empty, '.' or '..'
 * component, no component over NAME_MAX, at most BUNDLE_PATH_MAX - 1
 * bytes); NULL when it is. Static string.
 */
const char *bundle_unsafe_name(const char *p);

/* Writers: a new line ending in '\n' (caller frees), or NULL (memory, or a name too long). */
char *bundle_header_line(const struct bundle_header *h);
char *bundle_bundle_line(int num, int64_t size, const char *cks, int64_t members);
char *bundle_entry_line(const struct bundle_line *e);

/*
 * The strict decoder: one line (without its '\n', NUL-terminated, len
 * bytes) into out. 0, or -1 with why in err (out then holds nothing to
 * free). On success the caller owns out->path and out->target
 * (bundle_line_clear).
 */
int bundle_line_decode(const char *line, size_t len, struct bundle_line *out, char *err,
		       size_t errlen);
void bundle_line_clear(struct bundle_line *l);

/* A whole index, decoded and cross-checked. */
struct bundle_index {
	enum cksum_algo algo;
	struct bundle_line *bundles; /* BUNDLE_L_BUNDLE lines, in file order */
	size_t nbundles;
	struct bundle_line *ents;    /* BUNDLE_L_ENTRY lines, sorted by path */
	long *ent_lines;             /* the line number of each entry */
	size_t nents;
};

/*
 * Decode the index text (len bytes, no NUL inside) into out: the header
 * first, every bundle listed once and before the entries that name it,
 * members inside their bundle, no path twice. 0, or -1 with *badline (0
 * when no single line is to blame) and why in err; out is then empty.
 * Free with bundle_index_free.
 */
int bundle_index_decode(const char *text, size_t len, struct bundle_index *out, long *badline,
			char *err, size_t errlen);
/* The position of bundle num in idx->bundles, or -1. */
int bundle_index_find(const struct bundle_index *idx, int num);
void bundle_index_free(struct bundle_index *idx);

#endif /* STAGEHAND_BUNDLE_H */
