/*
 * xfer_endpoint.h - one side of a transfer: the small operations the engine's
 * driver (xfer_pipeline.c) calls, and nothing else.
 *
 * A request has a source endpoint and a destination endpoint. The driver
 * owns everything a request does between them: the order of the walk, the
 * decision per file (xfer_engine_want), the copy threads and SyncMode=batch,
 * the one data write (xfer_engine_write, through xfer_engine_stream or the
 * big-file path), verification, failure accounting and its messages,
 * progress records, keep=no removal and the verdict. An endpoint knows only
 * how to list, open, read, write, make durable and remove on its side.
 *
 * Directory handles: an endpoint names a directory by an int it chose (the
 * local endpoint: a descriptor opened with O_NOFOLLOW from its parent's, so
 * nothing a user plants redirects a later open). The driver only passes them
 * back; it never opens a path itself.
 *
 * Errors: an operation returns 0, or an errno value (or -1 with errno set
 * where it says so); where one operation takes several steps, *what names
 * the step that failed, and the driver writes the one message per entry
 * (xfer_fail: "WHAT 'REL': strerror"). fetch and put are the exception: a
 * server's answer ("HTTP 403", a checksum it states) has no errno, so they
 * give the text (struct xfer_stream) and the driver records it.
 *
 * Why these operations: the core is what a side of any request needs:
 * stat, list, open_read, open_write, commit and remove, the entries. The
 * request table (open_source, open_dest, close) binds an endpoint's state
 * to one request; every endpoint has one. An endpoint fills the entries for
 * the sides it serves (null and bundle are only destinations) and leaves
 * open_read, open_write and commit to its stream table (fetch, put) when it
 * streams.
 *
 * Everything else is an optional table, NULL when the endpoint does not do
 * that, and the driver tests the table: tree (mkdir and dir_done, because a
 * destination tree has directories whose mode and times can only be set
 * once their entries are in place; readlink and symlink, because a symlink
 * is recreated, never followed; NULL ones: no symlinks held), device (the
 * bytes are on a device this worker writes: abort, because a failed copy
 * must leave no temporary file; readback, because verification sees the
 * stored bytes; batch_commit, because SyncMode=batch makes many files
 * durable with one sync; label, because lifecycle labels live on the
 * source), stream, group and range below.
 *
 * Endpoints that stream: url (http(s), s3, ftp(s), sftp) moves bytes to or
 * from a server, not a descriptor of ours, and libcurl pushes a download
 * through its write callback and pulls an upload through its read
 * callback. Rather than a pipe and a thread per file behind open_read and
 * open_write, it has two operations of its own: fetch, which writes a
 * remote file into the destination's temporary file through the engine's
 * one write (and resumes a partial one, hence XFER_W_RESUME), and put,
 * which sends the source's descriptor. Verification is the server's word
 * (its sha256 or md5, an S3 ETag, a size): the driver records that token,
 * and still reads a fetched file back from the local device. A server
 * keeps no mtime of ours, so resuming to it compares the size only; it
 * holds no symlinks (skipped); and its files go one at a time (one
 * connection to a server; no copy threads). A listed tree's directory
 * handles are the endpoint's indexes, never descriptors: the driver passes
 * no source handle to a local dir_done. Every name a server lists is
 * checked (no '..', no empty component, no control character) before it
 * reaches the walk. A request has fetch on one side or put on the other,
 * never both (a URL to a URL is refused before the driver runs). The driver
 * keeps these paths in their own functions (xfer_pipeline.c, "endpoints
 * that stream").
 *
 * Endpoints that group files (bundle): many small files become members of
 * one tar stream whose durable write and read-back are per bundle, not per
 * file. Such a destination sees the listing while the driver counts it
 * (survey) and then says how the request is stored (plan: grouped, or file
 * by file through another endpoint). A grouping run asks it, for each
 * regular file and symlink, whether an earlier attempt kept it (kept),
 * whether it goes into the open group (group_want), appends it there
 * (group_add) and, when the group is full or the walk ends, has the whole
 * group made durable, read back and recorded at once (group_commit); only
 * then does the driver report its members. A group's members share one
 * outcome, since one read-back verifies them all; a member that cannot be
 * added fails alone at group_add. Files the destination keeps out of groups
 * take the ordinary path (open_write ... readback), and the endpoint notes
 * each once verified (record); its own catalogue is written last (finish).
 *
 * Must never: follow a symbolic link inside a source tree, or run outside a
 * worker that has dropped to the owner's identity.
 */
#ifndef STAGEHAND_XFER_ENDPOINT_H
#define STAGEHAND_XFER_ENDPOINT_H

#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>

#include "checksum.h"
#include "xfer.h"
#include "xfer_engine.h"

struct xfer_ep;                      /* an endpoint opened for one request (its own) */
struct xfer_endpoint;

/* The root of a request on one side, as opened. */
struct xfer_root {
	int dir;                     /* a tree: the root's handle; a file: its directory's */
	char name[NAME_MAX + 1];     /* a file: its name in dir; a tree: "" */
	struct stat st;              /* the source: what it is (a tree or a regular file) */
	int64_t skipped;             /* the source: entries its listing left out and reported
					already (a server's unsafe names), counted skipped */
};

/* A file being written: a temporary name until commit puts it in place. */
struct xfer_wfile {
	int dir;                     /* the destination directory's handle */
	const char *name;            /* the final name in dir (borrowed) */
	char tmp[NAME_MAX + 1];      /* the temporary name */
	int fd;                      /* the data goes here (xfer_engine_write); -1: nowhere */
	int vfd;                     /* XFER_W_VERIFY: the same file opened for reading */
	int64_t total;               /* bytes written (set by the driver) */
};

#define XFER_W_VERIFY 1u             /* open_write: also open wf->vfd (the big-file path
					reads back while it writes) */
#define XFER_W_RESUME 2u             /* open_write: keep what an earlier attempt left under
					the temporary name (fd read-write at offset 0) */
#define XFER_C_DEFER 1u              /* commit: metadata and close only; batch_commit makes
					it durable and puts it in place later */
#define XFER_C_DIRSYNC 2u            /* commit: the directory made durable too (no dir_done
					follows: a file finished from its byte ranges) */

/* What fetch or put (an endpoint that streams) did with one file. */
struct xfer_stream {
	int64_t bytes;               /* the file's bytes (fetch: with a resumed prefix) */
	char cks[CKSUM_HEX_MAX];     /* fetch: their checksum (ctx->algo), for the read-back */
	char token[CKSUM_HEX_MAX];   /* what the server's word was checked by ("sha256:HEX",
					"md5:HEX", "size:N"): the record's checksum */
	char why[XFER_TEXT_MAX];     /* a failure: what went wrong, in the server's words */
	int final;                   /* a failure a retry cannot help */
	int keep;                    /* fetch failed: the temporary file holds a prefix the
					next attempt resumes from (closed, not aborted) */
};

/*
 * What binds an endpoint's state to one request (the root descriptors, a
 * server's session, the file a label goes on). Every endpoint has one,
 * since every side of every request is opened and closed; it is a table of
 * its own so that the core is the entries alone. The state differs from
 * one endpoint to the next (a descriptor, a server's listing, a bundle's
 * index over a local endpoint), so the engine cannot open it for them.
 */
struct xfer_ep_request {
	/*
	 * Open the request's side (ctx->source for the source; ctx->dest for
	 * the destination, which gets the source's root so it knows whether a
	 * tree or a file comes, and under which name). XFER_OK, or the
	 * request's result with msg. NULL: the endpoint is never that side.
	 */
	int (*open_source)(struct xfer_ctx *ctx, struct xfer_ep **ep, struct xfer_root *root,
			   char *msg, size_t msglen);
	int (*open_dest)(struct xfer_ctx *ctx, const struct xfer_root *src, struct xfer_ep **ep,
			 struct xfer_root *root, char *msg, size_t msglen);
	/* Release what open_* took (a tree's root handle stays the caller's to end). */
	void (*close)(struct xfer_ep *ep, struct xfer_root *root);
};

/* ---- optional tables: NULL, the endpoint does not do that ---- */

/*
 * A tree's entries that are not regular files. Every endpoint here takes
 * trees, so every one fills mkdir and dir_done; readlink (a source) and
 * symlink (a destination) are NULL where the endpoint holds no symlinks.
 */
struct xfer_ep_tree {
	/* Make (or open) the directory name in dir; *sub gets its handle. 0 or an errno. */
	int (*mkdir)(struct xfer_ep *ep, int dir, const char *name, int *sub);
	/*
	 * A directory's entries are all in place: give it the source's mode and
	 * times (and sdir's labels-free xattrs, sdir >= 0), make it durable and
	 * release the handle.
	 */
	void (*dir_done)(struct xfer_ep *ep, int dir, int sdir, const struct stat *st);
	/* A symlink's target, never followed. 0 or an errno. */
	int (*readlink)(struct xfer_ep *ep, int dir, const char *name, char *out, size_t outlen);
	/*
	 * Recreate a symlink as dir/name with target and the source's times,
	 * durable, then read it back: 0 once it holds target, or an errno with
	 * *what.
	 */
	int (*symlink)(struct xfer_ep *ep, int dir, const char *name, const char *target,
		       const struct stat *st, const char **what);
};

/*
 * An endpoint whose bytes lie on a device this worker writes and reads
 * itself (local; bundle through local's). NULL: a server holds them (url),
 * or nothing does (null).
 */
struct xfer_ep_device {
	/* Give up a temporary file (open_write's, not committed). */
	void (*abort)(struct xfer_ep *ep, struct xfer_wfile *wf);
	/*
	 * Read dir/name back from the device and hash it (algorithm
	 * ctx->algo) into cks: verification sees the stored bytes, not a
	 * cache. EIO when it does not hold expect bytes.
	 */
	int (*readback)(struct xfer_ep *ep, const struct xfer_buf *tb, int dir, const char *name,
			int64_t expect, char *cks);
	/*
	 * SyncMode=batch: n files, closed by commit(XFER_C_DEFER), made durable
	 * at once and put in place, since one fsync per small file is what a
	 * batch exists to avoid. They may be of several directories (wf[i]->dir),
	 * those of one directory next to each other: the local endpoint does one
	 * syncfs a file system, every rename, then one fsync a directory (the
	 * first fsync commits the journal's transaction, which holds the other
	 * directories' renames too). err[i] gets each file's errno (0: in place)
	 * and what[i] its step. NULL: no batches.
	 */
	void (*batch_commit)(struct xfer_ep *ep, struct xfer_wfile *const *wf, size_t n,
			     int *err, const char **what);
	/*
	 * The lifecycle labels on the source (xattrs of a POSIX tree): policy
	 * and, once archived, where to. NULL: the endpoint holds none.
	 */
	void (*label)(struct xfer_ep *ep, const struct xfer_root *root, const char *policy,
		      const char *location);
};

/* An endpoint that streams (url): see "Endpoints that stream" above. */
struct xfer_ep_stream {
	/*
	 * A source whose files come from a server (used instead of
	 * open_read). The driver asks stat for dir/name first (what the file
	 * is now: the listing has only names and sizes) and opens the
	 * destination's temporary file with XFER_W_RESUME; fetch writes the
	 * file's bytes to fd through xfer_engine_write, resuming after what
	 * an earlier attempt left there when the server still describes the
	 * file as it did then, and checks them against what the server says
	 * (its sha256 or md5, else the size). 0 with out->bytes, cks and
	 * token; or -1 with out->why, final and keep. Stopped: -1, keep set,
	 * not recorded.
	 */
	int (*fetch)(struct xfer_ep *ep, int dir, const char *name, int fd, struct xfer_stream *out);
	/*
	 * A destination that sends each file to a server (used instead of
	 * open_write, commit and readback). Send cur->st_size bytes from
	 * sfd (the source as opened, at offset 0) as dir/name, each read
	 * charged through xfer_engine_write(ctx, -1, ...), then verify it by
	 * what the server says. 0 with out->bytes and out->token, or -1 with
	 * out->why (the server's answer: it has no errno) and out->final (a
	 * retry cannot help); the driver records it. Stopped: -1, not
	 * recorded.
	 */
	int (*put)(struct xfer_ep *ep, int dir, const char *name, int sfd, const struct stat *cur,
		   struct xfer_stream *out);
	/*
	 * In the worker before it drops root (xfer_prepare), with the
	 * request's fields and conf in ctx: what the endpoint reads as root
	 * (url: the site's S3CredentialsFile). Never fails the request: the
	 * run reports problems. NULL: nothing to read.
	 */
	void (*prepare)(struct xfer_ctx *ctx);
};

/*
 * Byte ranges (xfer_range.c): one big file of a tree copied by several
 * movers into one temporary file, each a range, and put in place by the
 * request's final pass. The range driver reads and writes through the core
 * (stat, open_read, commit, remove) and device->abort; these are the steps
 * only ranges take. NULL: the endpoint takes no ranges (its files are
 * copied whole).
 */
struct xfer_ep_range {
	/*
	 * The directory holding rel (a relpath below root->dir), opened
	 * component by component, never through a symlink; make (a
	 * destination): missing ones made, mode 0700. *dir gets a handle
	 * that release ends. 0 or an errno.
	 */
	int (*parent)(struct xfer_ep *ep, const struct xfer_root *root, const char *rel, int make,
		      int *dir);
	void (*release)(struct xfer_ep *ep, int dir);
	/*
	 * The temporary file every mover of wf->dir/wf->name writes into
	 * (wf->tmp set, wf->fd read-write, wf->vfd -1). size >= 0: created
	 * with size bytes by the first mover, opened by the others (it must
	 * be the owner's own regular file; one of another size, left by an
	 * earlier attempt, is set to size). size < 0: only an existing one,
	 * as it is (the final pass). 0, or an errno with *what.
	 */
	int (*open_shared)(struct xfer_ep *ep, struct xfer_wfile *wf, int64_t size,
			   const char **what);
	/*
	 * Bytes off..off+len of wf->fd are durable, and out of the cache so
	 * that the driver's read-back sees the device. 0 or an errno.
	 */
	int (*sync)(struct xfer_ep *ep, struct xfer_wfile *wf, int64_t off, int64_t len);
};

/* A destination that groups files (bundle): see "Endpoints that group files" above. */
struct xfer_ep_group {
	/*
	 * Every entry of the source's listing, while the driver counts it
	 * (before plan); rel has no '/' at the top of the tree.
	 */
	void (*survey)(struct xfer_ep *ep, const char *rel, const struct stat *st);
	/*
	 * How this request is stored: *use gets this endpoint (it groups) or
	 * another that stores it file by file (the driver then closes ep and
	 * opens that one). XFER_OK, or the request's result with msg.
	 */
	int (*plan)(struct xfer_ep *ep, const struct xfer_endpoint **use, char *msg,
		    size_t msglen);
	/*
	 * Resume, for each regular file and symlink (target: its target, else
	 * NULL) of a grouping run: 1 when the endpoint's own record says an
	 * earlier attempt stored and verified it as it is now (cks gets its
	 * checksum), else 0.
	 */
	int (*kept)(struct xfer_ep *ep, int dir, const char *name, const char *rel,
		    const struct stat *st, const char *target, char *cks);
	/*
	 * XFER_G_FILE: stored file by file (never for a symlink); XFER_G_ADD:
	 * into the open group; XFER_G_FULL: into a group, once the open one is
	 * committed.
	 */
	int (*group_want)(struct xfer_ep *ep, const char *rel, const struct stat *st,
			  const char *target);
	/*
	 * Append rel to the open group: the data of sfd (a regular file: all
	 * of it, as walked in st) or the symlink target. cks gets the member's
	 * checksum. 0, or an errno with *what (EAGAIN: the source changed).
	 */
	int (*group_add)(struct xfer_ep *ep, const char *rel, int sfd, const struct stat *st,
			 const char *target, char *cks, const char **what);
	/*
	 * Make the open group durable, read it back, verify and record it:
	 * 0 for every member added since the last commit, or one errno with
	 * *what for all of them (EINTR: stopped, the group given up).
	 */
	int (*group_commit)(struct xfer_ep *ep, const char **what);
	/* A file stored file by file was verified (cks): note it. 0 or an errno. */
	int (*record)(struct xfer_ep *ep, const char *rel, const struct stat *st, const char *cks);
	/* Every entry is in place: the endpoint's own catalogue. XFER_OK, or a result with msg. */
	int (*finish)(struct xfer_ep *ep, char *msg, size_t msglen);
};

struct xfer_endpoint {
	const char *name;            /* options.backend's name for it (xfer_endpoints_for) */
	const char *const *schemes;  /* the URL schemes it serves, NULL-terminated; NULL: paths */
	/*
	 * Nothing is stored (null): no resume, no read-back, and a source is
	 * never removed because of it.
	 */
	int discards;

	/* A side bound to one request: open_source or open_dest, then close. Never NULL. */
	const struct xfer_ep_request *request;

	/* ---- core: entries (NULL only on a side the endpoint never is, or streams) ---- */
	/*
	 * What is at dir/name now (a source: a single file, or a file about to
	 * be fetched; a destination: is an earlier copy still there?). 0 or an
	 * errno.
	 */
	int (*stat)(struct xfer_ep *ep, int dir, const char *name, struct stat *st);
	/*
	 * The tree below root->dir, through the engine's walk callbacks (w):
	 * every entry with its lstat, depth first. A POSIX tree is
	 * xfer_walk_tree; an endpoint whose server lists (S3, WebDAV) calls the
	 * callbacks from its listing.
	 */
	void (*list)(struct xfer_ep *ep, struct xfer_walk *w, struct xfer_walk_dir *root);
	/*
	 * A regular file of the listing, for reading (pread); cur gets what was
	 * opened. -1 with errno (EAGAIN: it is not the file that was listed).
	 */
	int (*open_read)(struct xfer_ep *ep, int dir, const char *name, const struct stat *st,
			 struct stat *cur);
	/* A temporary file for dir/name (wf->dir, wf->name set). 0 or an errno, *what. */
	int (*open_write)(struct xfer_ep *ep, struct xfer_wfile *wf, unsigned flags,
			  const char **what);
	/*
	 * The data is in: the source's mode, times and xattrs (from sfd, the
	 * source as opened), then durable under the final name. 0 or an errno;
	 * on failure the temporary file is gone.
	 */
	int (*commit)(struct xfer_ep *ep, struct xfer_wfile *wf, int sfd, const struct stat *cur,
		      unsigned flags);
	/* keep=no: a verified source file goes (through its directory, never by path). */
	int (*remove)(struct xfer_ep *ep, int dir, const char *name);

	/* ---- optional tables ---- */
	const struct xfer_ep_tree *tree;     /* directories, symlinks (every endpoint here) */
	const struct xfer_ep_device *device; /* read-back, batches, labels: local, bundle */
	const struct xfer_ep_stream *stream; /* fetch and put: url */
	const struct xfer_ep_group *group;   /* files grouped into one stream: bundle */
	const struct xfer_ep_range *range;   /* one file copied in byte ranges: local */
};

enum { XFER_G_FILE = 0, XFER_G_ADD, XFER_G_FULL };

/* The endpoints of POSIX trees (xfer_local.c): local, and null (reads, stores nothing). */
extern const struct xfer_endpoint xfer_ep_local;
extern const struct xfer_endpoint xfer_ep_null;
/*
 * Where the local endpoint writes (as the owner), shared with the stage-in
 * of an archive (xfer_restore.c): a tree's destination directory, made when
 * missing (a descriptor, or -1 with msg); a single file's (dest names the
 * copy, or an existing directory that gets base): root->dir and root->name
 * set, 0, or -1 with msg.
 */
int xfer_local_open_dest_tree(const char *dest, char *msg, size_t msglen);
int xfer_local_open_dest_file(const char *dest, const char *base, struct xfer_root *root,
			      char *msg, size_t msglen);
/* The url endpoint (xfer_url*.c): http(s), s3, ftp(s) and sftp, either side. */
extern const struct xfer_endpoint xfer_ep_url;
/* Archive trees of many small files as tar bundles and an index (xfer_bundle.c). */
extern const struct xfer_endpoint xfer_ep_bundle;

/*
 * The engine's driver (xfer_pipeline.c): do the request in ctx from src to
 * dst; emits every record and returns enum xfer_result.
 */
int xfer_pipeline_run(struct xfer_ctx *ctx, const struct xfer_endpoint *src,
		      const struct xfer_endpoint *dst);

#endif /* STAGEHAND_XFER_ENDPOINT_H */
