/*
 * xfer_url_int.h - private to the url endpoint (xfer_url.c, xfer_url_get.c,
 * xfer_url_put.c, xfer_url_mpu.c, xfer_url_parse.c).
 *
 * Owns: the endpoint's state for one request and the helpers its files
 * share.
 * Must never: be included outside the url backend.
 */
#ifndef STAGEHAND_XFER_URL_INT_H
#define STAGEHAND_XFER_URL_INT_H

#include <curl/curl.h>
#include <limits.h>
#include <stdint.h>

#include "checksum.h"
#include "xfer.h"
#include "xfer_endpoint.h"
#include "xfer_engine.h"

/* Remote listings (WebDAV, FTP/SFTP) recurse at most this deep: each level is
   a request to a server that may answer with a loop. */
#define MAX_DEPTH 64
#define URL_CHUNK (1u << 20)         /* url__run's buffer (a source: hashing a partial file) */
#define HAVE_SIGV4 (LIBCURL_VERSION_NUM >= 0x074b00)	/* CURLOPT_AWS_SIGV4: 7.75 */

enum url__proto { P_HTTP, P_S3, P_FTP, P_SFTP };

struct url__creds {
	char access[256];
	char secret[256];
	char token[2048];
	int have;
};

struct url__meta {
	int64_t size;                /* -1 unknown */
	int64_t mtime;               /* seconds, -1 unknown */
	char md5[33];                /* hex, "" unknown */
	char sha256[65];             /* hex, "" unknown */
	char etag[128];              /* validator for resume, "" unknown */
	const char *how;             /* what md5/sha256 came from, for messages */
};

/* One remote file of a tree. */
struct url__ent {
	char *rel;
	int64_t size;
};

struct url__run {
	struct xfer_ctx *ctx;
	enum url__proto proto;
	const char *url;             /* the remote side as given */
	char scheme[16];
	char s3_base[XFER_PATH_MAX]; /* s3: endpoint/bucket, no trailing '/' */
	char s3_key[XFER_PATH_MAX];  /* s3: key or prefix as written (no leading '/') */
	char s3_key_dec[XFER_PATH_MAX]; /* the same, percent-decoded (listing prefix) */
	char s3_bucket[256];
	char sigv4[160];
	struct url__creds creds;
	char user[256];              /* local user name (sftp login when the URL has none) */
	char netrc[PATH_MAX];        /* "" = none */
	char sshkey[PATH_MAX], known_hosts[PATH_MAX];
	char *buf;                   /* URL_CHUNK bytes */
	char curl_err[CURL_ERROR_SIZE];
	int denied;                  /* the last call: a connection the outbound policy refused */
	const char *denied_rule;     /* ... the deny list's entry (static text) */
	char denied_addr[64];        /* ... and the address */
	struct url__ent *ents;       /* a listed tree's files (sorted by rel) */
	size_t nents, capents;
	int64_t skipped;             /* names the listing left out (reported as it went) */
};

/* The url endpoint opened for one request (xfer_endpoint.h), as a source or a destination. */
struct xfer_ep {
	struct url__run r;
	CURL *esc;                   /* escapes names into URLs */
	char **dirs;                 /* a directory handle indexes this: its relpath ("", "a/b/") */
	size_t ndirs, capdirs;
	char file_url[XFER_PATH_MAX * 2]; /* a single file: its URL; "" for a tree */
	/* the last file stat asked the server about (fetch uses what it said) */
	int mdir;                    /* its directory handle; -1: none */
	char mname[NAME_MAX + 1];
	struct url__meta m;
};

struct url__hctx {
	struct url__run *r;
	struct url__meta *m;
};

/* ---- xfer_url.c ---- */
int url__stopped(struct url__run *r);
/*
 * A new endpoint for url, the remote side of ctx's request (*epp is set
 * even on failure: close releases it): its scheme, the user's credentials
 * (read as the user) or the site's. XFER_OK, or the request's result with
 * msg.
 */
int url__ep_new(struct xfer_ctx *ctx, const char *url, struct xfer_ep **epp, char *msg,
		size_t msglen);
/*
 * May the site's S3 keys sign for bucket/key (key percent-decoded)? tmpl:
 * S3SitePrefix (NULL: nowhere), user: the owner's name for its %u. 1, or 0
 * with err.
 */
int url__s3_site_key_ok(const char *tmpl, const char *user, const char *bucket,
			const char *key, char *err, size_t errlen);
/* A new directory handle for rel ("" or ending in '/'); -1 when out of memory. */
int url__ep_add_dir(struct xfer_ep *ep, const char *rel);
/* The URL of dir/name (a tree) or of the single file, rel its relpath; 0 or -1. */
int url__ep_url(struct xfer_ep *ep, int dir, const char *name, char *rel, size_t rellen,
		char *url, size_t urllen);
/* A failure of fetch or put in the server's words (out->why, truncated like any record); -1. */
int url__why(struct xfer_stream *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Either side's close, stat (xfer_endpoint.h). */
void url__ep_close(struct xfer_ep *ep, struct xfer_root *root);
int url__ep_stat(struct xfer_ep *ep, int dir, const char *name, struct stat *st);
/* The request URL for rel (already escaped) under the remote root; 0 or -1 (too long). */
int url__url_for(struct url__run *r, const char *root_rel, char *out, size_t outlen);
/* The URL of relpath rel (escaped here) below the remote root; 0 or -1 (too long). */
int url__remote_url(struct url__run *r, CURL *esc, const char *rel, char *out, size_t outlen);
/* Ask the server about one file: size, mtime, checksums, validator; 0 or -1 with err. */
int url__stat_remote(struct url__run *r, const char *url, struct url__meta *m, int *final,
		     char *err, size_t errlen);
/* A relative name from a server or a tree is safe to create locally. */
int url__safe_rel(const char *rel);
int url__add_ent(struct url__run *r, const char *rel, int64_t size);
int url__escape_path(CURL *c, const char *rel, char *out, size_t outlen);
/* A new handle with the options every request shares; *hdrs freed by url__easy_done. */
CURL *url__easy(struct url__run *r, const char *url, struct curl_slist **hdrs);
void url__easy_done(CURL *c, struct curl_slist *hdrs);
/* Message for a failed call; returns 1 when a retry cannot help. */
int url__describe(struct url__run *r, CURL *c, CURLcode rc, char *out, size_t outlen);

/*
 * xfer_url.c: the stream table's prepare (xfer_prepare): reads the site's
 * S3CredentialsFile, which only root may read. Never fails the request:
 * the run reports problems.
 */
void url__prepare(struct xfer_ctx *ctx);

/* ---- xfer_url_get.c: the source (stage_in) ---- */
int url__open_source(struct xfer_ctx *ctx, struct xfer_ep **epp, struct xfer_root *root,
		     char *msg, size_t msglen);
void url__list(struct xfer_ep *ep, struct xfer_walk *w, struct xfer_walk_dir *root);
int url__fetch(struct xfer_ep *ep, int dir, const char *name, int fd, struct xfer_stream *out);

/* ---- xfer_url_put.c: the destination (stage_out, archive) ---- */
int url__open_dest(struct xfer_ctx *ctx, const struct xfer_root *src, struct xfer_ep **epp,
		   struct xfer_root *root, char *msg, size_t msglen);
int url__mkdir(struct xfer_ep *ep, int dir, const char *name, int *sub);
void url__dir_done(struct xfer_ep *ep, int dir, int sdir, const struct stat *st);
int url__put(struct xfer_ep *ep, int dir, const char *name, int sfd, const struct stat *cur,
	     struct xfer_stream *out);

/* ---- xfer_url_mpu.c: S3 multipart upload (a file larger than S3PartSize) ---- */
#define URL_MPU_PARTS_MAX 10000               /* S3: parts of one upload */
#define URL_MPU_PART_MIN (5LL << 20)          /* S3: every part but the last */
#define URL_MPU_PART_MAX (5LL << 30)
#define URL_MPU_OBJECT_MAX (5LL << 40)        /* S3: one object */
#define URL_MPU_PART_DEFAULT (64LL << 20)     /* S3PartSize's default */

struct url__mpu_plan {
	int64_t part_size;           /* every part's but the last, which holds the rest */
	int nparts;
	int raised;                  /* the part size asked for would need more than
					URL_MPU_PARTS_MAX parts: the smallest whole MiB
					that needs no more */
};
/* How size bytes are cut into parts of want bytes (5M..5G). 0, or -1 with err (too big). */
int url__mpu_plan(int64_t size, int64_t want, struct url__mpu_plan *p, char *err, size_t errlen);
/*
 * The ETag S3 gives an object made of n parts whose md5s (hex) are md5s:
 * the md5 of their 16-byte digests, "-n" ("HEX-n", unquoted). 0, or -1 (a
 * malformed md5, n out of 1..10000, out too small).
 */
int url__mpu_etag(const char (*md5s)[33], int n, char *out, size_t outlen);
/* An ETag of the form a server may send ("quoted", short, no blank, '<' or '&'). */
int url__mpu_etag_ok(const char *etag);
/* 1: this file goes to S3 in parts (larger than S3PartSize). */
int url__mpu_wanted(const struct url__run *r, int64_t size);
/* url__put's work for such a file, to url (relpath rel). Same contract. */
int url__mpu_put(struct url__run *r, const char *url, const char *rel, int sfd,
		 const struct stat *cur, struct xfer_stream *out);

/* ---- xfer_url_parse.c ---- */
/* CURLOPT_HEADERFUNCTION filling a struct url__hctx's meta. */
size_t url__header(char *b, size_t sz, size_t nm, void *p);
size_t url__discard(char *b, size_t sz, size_t nm, void *p);
/* The path of an absolute URL ("/a/b"), or u itself when it has no scheme. */
const char *url__url_path(const char *u);
/* Fill r->ents with the files of the remote tree; 0 or -1 with err (*final). */
int url__list_s3(struct url__run *r, int *final, char *err, size_t errlen);
int url__list_dav(struct url__run *r, const char *dirurl, const char *prefix, int depth,
	      int *final, char *err, size_t errlen);
int url__list_ls(struct url__run *r, const char *dirurl, const char *prefix, int depth,
	     int *final, char *err, size_t errlen);

#endif /* STAGEHAND_XFER_URL_INT_H */
