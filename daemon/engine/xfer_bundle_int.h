/*
 * xfer_bundle_int.h - private to the bundle endpoint (xfer_bundle.c: the
 * endpoint's operations and packing; xfer_bundle_index.c: the journal, the
 * index and resume).
 *
 * Must never: be included outside the bundle endpoint.
 */
#ifndef STAGEHAND_XFER_BUNDLE_INT_H
#define STAGEHAND_XFER_BUNDLE_INT_H

#include <pthread.h>
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

enum bundle__etype { E_FILE, E_LINK, E_DIR };

/* An entry archived (or kept) now, or a record of the journal/index. */
struct bundle__rec {
	char *rel;
	char *target;                /* symlink target */
	enum bundle__etype type;
	int64_t size, mtime_ns;
	uint32_t mode;
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

/* A directory of the destination, by the handle the driver holds (an index). */
struct bundle__dir {
	char *rel;                   /* its relpath ("" at the root); NULL once done */
	int fd;                      /* opened (made) only when a plain file goes there */
};

/*
 * The endpoint, opened for one request. The walker packs; plain files are
 * copied on the driver's threads, so what they share (dirs, src, the
 * journal) is taken under mu.
 */
struct xfer_ep {
	struct xfer_ctx *ctx;
	struct xfer_ep *loc;         /* the local endpoint's: plain files and directories */
	struct xfer_bundle_params p;
	int tree, had_bundles, reserved;
	int64_t files, small;        /* survey: regular files, those below p.file_max */
	char *buf;                   /* BUNDLE_CHUNK bytes: copy and read-back buffer */
	char *fbuf;                  /* BundleFileMax bytes: one small file */
	int droot, bdir, jfd;
	pthread_mutex_t mu;
	struct bundle__dir *dirs;
	size_t ndirs, capdirs;
	struct bundle__vec src;      /* archived or kept by this attempt, and directories */
	struct bundle__vec jr;       /* journal records, sorted by relpath (kept only) */
	struct bundle__bmeta *bm;    /* bundles known (kept + written now) */
	size_t nbm, capbm;
	int next_bundle;
	/* the open bundle */
	int bfd;
	int bnum;
	char btmp[64];
	uint64_t boff;
	struct cksum bck;
	size_t blen;                 /* buffered bytes in buf */
	struct bundle__vec mem;      /* its members */
	int spoiled;                 /* a write failed: the errno its members fail with */
};

/* ---- xfer_bundle_index.c ---- */
/* A new zeroed record at the end of v (borrowed: valid until the next push); NULL
   when out of memory. */
struct bundle__rec *bundle__push(struct bundle__vec *v);
void bundle__vec_free(struct bundle__vec *v);
/* Sort by relpath, then journal line. */
void bundle__sort(struct bundle__vec *v);
/* Lookups return borrowed pointers into the run's arrays (NULL: none, or no memory). */
struct bundle__rec *bundle__find(struct bundle__vec *v, const char *rel);
struct bundle__bmeta *bundle__meta(struct xfer_ep *r, int num);
struct bundle__bmeta *bundle__meta_add(struct xfer_ep *r, int num);
/* Index lines: new strings ending in '\n' (the caller frees them), or NULL. */
char *bundle__rec_line(const struct bundle__rec *e);
char *bundle__bundle_line(const struct bundle__bmeta *b);
/* Every write of the endpoint, through the engine; -1 with errno set. */
int bundle__write(struct xfer_ep *r, int fd, const void *p, size_t n);
/* Hash what fd holds (read back from the device); 0 or an errno. */
int bundle__cksum(struct xfer_ep *r, int fd, char *cks, int64_t *len);
/* Append text to the journal and make it durable; -1 with errno set. */
int bundle__journal(struct xfer_ep *r, const char *text);
/* Resume: what an earlier attempt verified (journal or index), checked on disk. */
void bundle__load_journal(struct xfer_ep *r);
void bundle__check_kept(struct xfer_ep *r);
/* Remove what the bundle folder holds besides kept bundles and the journal. */
void bundle__sweep(struct xfer_ep *r, int only_unreferenced);
/* The final index from the journal (durable, read back); -1 with msg. */
int bundle__write_index(struct xfer_ep *r, char *msg, size_t msglen);

#endif /* STAGEHAND_XFER_BUNDLE_INT_H */
