/*
 * xfer_url_xml.h - the directory listings S3 and WebDAV servers send, read
 * with expat.
 *
 * Owns: turning one listing document (S3 ListObjectsV2 result, WebDAV
 * PROPFIND multistatus) into a flat list of names, sizes and kinds. Names
 * are returned as the server wrote them (S3 keys, DAV hrefs); the caller
 * decides what is safe to create locally (url__safe_rel). Also the answers
 * of S3's multipart upload (its upload id, its parts as ListParts lists
 * them, the object's ETag, or an Error's code), read by the same rules; the
 * caller checks each value's form (xfer_url_mpu.c).
 *
 * Why expat rather than libxml2: a listing is read once, front to back,
 * for a handful of elements, so a streaming parser with no tree fits; expat
 * is a small library whose only job is this, never touches the network or
 * the file system, and (2.4+) bounds entity expansion. libxml2 brings a DOM,
 * XPath, HTML, catalogs and network loaders, all of which would have to be
 * kept switched off for input that comes from remote servers.
 *
 * Must never: trust the document. A DOCTYPE (and with it every entity
 * declaration) is refused, element text is bounded, and a document that is
 * not well-formed XML is an error, never a partial listing.
 */
#ifndef STAGEHAND_XFER_URL_XML_H
#define STAGEHAND_XFER_URL_XML_H

#include <stddef.h>
#include <stdint.h>

#define URLX_NAME_MAX 4096	/* a key or href of this many bytes or more is dropped */
#define URLX_TOKEN_MAX 1024	/* S3 continuation token or upload id, with its NUL */
#define URLX_ETAG_MAX 128	/* an object's ETag, with its NUL (longer: refused) */

/* URLX_S3_MPU: any answer of S3's multipart upload (the document says which). */
enum urlx_kind { URLX_S3, URLX_DAV, URLX_S3_MPU };

struct urlx_item {
	char *name;                  /* owned: S3 Key, DAV href, or a part's ETag, as written */
	int64_t size;                /* -1 when the listing gave none */
	int is_dir;                  /* DAV: resourcetype holds collection */
	int64_t part;                /* ListParts: PartNumber; -1 when missing or not a number */
};

/* What an S3 multipart answer held besides its parts (URLX_S3_MPU); "" when absent. */
struct urlx_mpu {
	char root[48];               /* the document element (local name, truncated):
					InitiateMultipartUploadResult, ListPartsResult,
					CompleteMultipartUploadResult (or ...Response, as
					some S3 servers write them), or Error */
	char upload_id[URLX_TOKEN_MAX]; /* UploadId (Initiate, ListParts) */
	char etag[URLX_ETAG_MAX];    /* ETag of the document element (Complete: the object's) */
	char code[64];               /* Error: Code (truncated) */
	char message[256];           /* Error: Message (truncated) */
	int64_t next_marker;         /* ListParts: NextPartNumberMarker, -1 when none */
};

struct urlx_listing {
	struct urlx_item *items;     /* owned, in document order */
	size_t n, cap;
	size_t dropped;              /* entries left out: name too long or missing */
	int truncated;               /* S3: IsTruncated is "true" */
	char token[URLX_TOKEN_MAX];  /* S3: NextContinuationToken, "" when none */
	struct urlx_mpu mpu;         /* URLX_S3_MPU only; items are then its Parts */
};

/*
 * Parse len bytes of one listing. 0, or -1 with what was wrong (and where)
 * in err; out is then empty. Free out with urlx_free either way.
 */
int urlx_parse(enum urlx_kind kind, const char *buf, size_t len, struct urlx_listing *out,
	       char *err, size_t errlen);
void urlx_free(struct urlx_listing *l);

#endif /* STAGEHAND_XFER_URL_XML_H */
