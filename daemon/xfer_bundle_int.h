/*
 * xfer_bundle_int.h - private to the bundle endpoint (xfer_bundle.c: the
 * walk, packing and large files; xfer_bundle_index.c: the journal, the
 * index and resume).
 *
 * Must never: be included outside the bundle endpoint.
 */
#ifndef STAGEHAND_XFER_BUNDLE_INT_H
#define STAGEHAND_XFER_BUNDLE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bundle.h"
#include "checksum.h"
#include "xfer.h"
#include "xfer_engine.h"

#define BUNDLE_CHUNK (4u << 20)
#define INDEX_NAME BUNDLE_INDEX_NAME
#define JOURNAL_NAME BUNDLE_JOURNAL_NAME

enum bundle__etype { E_FILE, E_LINK, E_DIR, E_SPECIAL, E_ERROR };

/* An entry of the source tree, or a record of the journal/index. */
struct bundle__rec {
	char *rel;
	char *target;                /* symlink target */
	enum bundle__etype type;
	int64_t size, mtime_ns;
	uint32_t mode;
	ino_t ino;
	int err;                     /* E_ERROR: errno; E_SPECIAL: 1 FIFO, 2 socket, 3 device,
					-1 reserved name, -2 excluded directory */
	int bundle;                  /* bundle number; 0 = stored plain at DEST/rel */
	int64_t offset;              /* data offset in the bundle */
	char cks[CKSUM_HEX_MAX];
	long seq;                    /* journal line order: later lines win */
	int done;                    /* archived by this attempt or kept from an earlier one */
};

struct bundle__vec {
	struct bundle__rec *v;
	size_t n, cap;
};

struct bundle__bmeta {
	int num;
	int64_t size, members;
	char cks[CKSUM_HEX_MAX];
	int kept;                    /* listed and verified (or written now) */
	int64_t refs;                /* index entries pointing at it */
};

struct bundle__run {
	struct xfer_ctx *ctx;
	char *buf;                   /* BUNDLE_CHUNK bytes: copy and read-back buffer */
	char *fbuf;                  /* BundleFileMax bytes: one small file */
	struct xfer_bundle_params p;
	int sroot, droot, bdir, jfd;
	struct bundle__vec src;      /* the source tree, sorted by relpath */
	struct bundle__vec jr;       /* journal records, sorted by relpath (kept only) */
	struct bundle__bmeta *bm;    /* bundles known (kept + written now) */
	size_t nbm, capbm;
	int next_bundle;
	long seq;
	/* parent-directory caches */
	char *sp_rel, *dp_rel;
	int sp_fd, dp_fd;
	/* the open bundle */
	int bfd;
	int bnum;
	char btmp[64];
	uint64_t boff;
	struct cksum bck;
	size_t blen;                 /* buffered bytes in buf */
	size_t *bmem;                /* indices into src of its members */
	size_t nbmem, capbmem;
	int64_t small;               /* regular files smaller than BundleFileMax */
	struct xfer_tally t;         /* counts and failures */
};

/* ---- xfer_bundle_index.c ---- */
/* A new zeroed record at the end of v (borrowed: valid until the next push); NULL
   when out of memory. */
struct bundle__rec *bundle__push(struct bundle__vec *v);
void bundle__vec_free(struct bundle__vec *v);
/* qsort order: by relpath, then journal line. */
int bundle__cmp_rel(const void *a, const void *b);
/* Lookups return borrowed pointers into the run's arrays (NULL: none, or no memory). */
struct bundle__rec *bundle__find(struct bundle__vec *v, const char *rel);
struct bundle__bmeta *bundle__meta(struct bundle__run *r, int num);
struct bundle__bmeta *bundle__meta_add(struct bundle__run *r, int num);
void bundle__name(char *out, size_t len, int num);
/* Index lines: new strings ending in '\n' (the caller frees them), or NULL. */
char *bundle__rec_line(const struct bundle__rec *e);
char *bundle__bundle_line(const struct bundle__bmeta *b);
/* Every write of the endpoint, through the engine; -1 with errno set. */
int bundle__write(struct bundle__run *r, int fd, const void *p, size_t n);
/* Hash what fd holds (read back from the device); 0 or an errno. */
int bundle__cksum(struct bundle__run *r, int fd, char *cks, int64_t *len);
/* Append text to the journal and make it durable; -1 with errno set. */
int bundle__journal(struct bundle__run *r, const char *text);
/* Resume: what an earlier attempt verified (journal or index), checked on disk. */
void bundle__load_journal(struct bundle__run *r);
void bundle__check_kept(struct bundle__run *r);
/* Remove what the bundle folder holds besides kept bundles and the journal. */
void bundle__sweep(struct bundle__run *r, int only_unreferenced);
/* The final index from the journal (durable, read back); -1 with msg. */
int bundle__write_index(struct bundle__run *r, char *msg, size_t msglen);

#endif /* STAGEHAND_XFER_BUNDLE_INT_H */
