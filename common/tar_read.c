/*
 * tar_read.c - reading tar archives through libarchive (see tar.h).
 *
 * Only the tar format handlers are enabled (ustar, pax, GNU, with their
 * long-name and extended headers) and no decompression filter, so a
 * bundle can never be read as something else.
 *
 * Names: libarchive converts pax names (UTF-8) to the locale's character
 * set, and in the C locale of a daemon any non-ASCII name would fail.
 * Every call into libarchive therefore runs under a thread-local C.UTF-8
 * locale (uselocale), so UTF-8 names come back as they are; names stored
 * as raw bytes (ustar, GNU, pax hdrcharset=BINARY) are never converted,
 * and a pax name that is not UTF-8 is kept as its raw bytes (below).
 * The process's own locale is not touched.
 */
#include "config.h"

#include <archive.h>
#include <archive_entry.h>
#include <inttypes.h>
#include <stdint.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tar.h"

#define NS 1000000000LL
#define BLOCK_BYTES 10240

/* Switch this thread to C.UTF-8; returns what to switch back to (0: nothing). */
static locale_t _utf8_begin(void)
{
	static locale_t utf8;

	if (!utf8)	/* a race only creates a second identical locale object */
		utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
	return utf8 ? uselocale(utf8) : (locale_t)0;
}

static void _utf8_end(locale_t old)
{
	if (old)
		uselocale(old);
}

static void _entry_clear(struct tar_entry *e)
{
	free(e->path);
	free(e->linkname);
	memset(e, 0, sizeof(*e));
}

/* A reader that accepts tar and nothing else. NULL when memory is exhausted. */
static struct archive *_new(char *err, size_t errlen)
{
	struct archive *a = archive_read_new();

	if (!a || archive_read_support_format_tar(a) != ARCHIVE_OK) {
		snprintf(err, errlen, "cannot set up the tar reader: %s",
			 a ? archive_error_string(a) : "out of memory");
		if (a)
			archive_read_free(a);
		return NULL;
	}
	return a;
}

static int _opened(struct tar_reader *r, int rc, char *err, size_t errlen)
{
	if (rc != ARCHIVE_OK) {
		snprintf(err, errlen, "cannot open the archive: %s", archive_error_string(r->a));
		archive_read_free(r->a);
		r->a = NULL;
		return -1;
	}
	return 0;
}

static int _init_fd(struct tar_reader *r, int fd, char *err, size_t errlen)
{
	struct stat st;

	memset(r, 0, sizeof(*r));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "not a regular file");
		return -1;
	}
	r->limit = (uint64_t)st.st_size;
	if (!(r->a = _new(err, errlen)))
		return -1;
	return _opened(r, archive_read_open_fd(r->a, fd, BLOCK_BYTES), err, errlen);
}

static int _init_mem(struct tar_reader *r, const void *buf, size_t len, char *err,
		     size_t errlen)
{
	memset(r, 0, sizeof(*r));
	r->limit = len;
	if (!(r->a = _new(err, errlen)))
		return -1;
	/* libarchive never writes through the buffer it is given. */
	return _opened(r, archive_read_open_memory(r->a, (void *)(uintptr_t)buf, len), err, errlen);
}

static char _type(struct archive_entry *ae)
{
	if (archive_entry_hardlink(ae))
		return '1';
	switch (archive_entry_filetype(ae)) {
	case AE_IFREG: return '0';
	case AE_IFLNK: return '2';
	case AE_IFCHR: return '3';
	case AE_IFBLK: return '4';
	case AE_IFDIR: return '5';
	case AE_IFIFO: return '6';
	default: return '?';
	}
}

/* mtime in ns, saturated: a header may hold any number of seconds. */
static int64_t _mtime_ns(struct archive_entry *ae)
{
	int64_t sec = (int64_t)archive_entry_mtime(ae);
	long nsec = archive_entry_mtime_nsec(ae);

	if (sec > INT64_MAX / NS - 1)
		return INT64_MAX;
	if (sec < INT64_MIN / NS + 1)
		return INT64_MIN;
	return sec * NS + (nsec >= 0 && nsec < NS ? nsec : 0);
}

/* A name of at most TAR_NAME_MAX bytes, copied; NULL when missing or too long. */
static char *_name(const char *s)
{
	return s && strlen(s) <= TAR_NAME_MAX ? strdup(s) : NULL;
}

static int _next(struct tar_reader *r, struct tar_entry **e, char *err, size_t errlen)
{
	struct archive_entry *ae;
	uint64_t at;
	const char *link;
	int rc;

	_entry_clear(&r->cur);
	if (!r->a) {
		snprintf(err, errlen, "the reader failed earlier");
		return -1;
	}
	at = (uint64_t)archive_filter_bytes(r->a, 0);
	rc = archive_read_next_header(r->a, &ae);
	if (rc == ARCHIVE_EOF)
		return 0;
	/*
	 * Any warning is an error (a malformed extended header is hostile, not
	 * noise) but one: a pax name that is not UTF-8 (GNU tar writes raw
	 * bytes there without hdrcharset=BINARY), which libarchive keeps as the
	 * raw bytes, the name as it was on disk.
	 */
	if (rc == ARCHIVE_WARN && archive_error_string(r->a) &&
	    strstr(archive_error_string(r->a), "can't be converted from UTF-8"))
		rc = ARCHIVE_OK;
	if (rc != ARCHIVE_OK) {
		snprintf(err, errlen, "offset %" PRIu64 ": %s", at,
			 archive_error_string(r->a) ? archive_error_string(r->a) : "damaged archive");
		return -1;
	}
	at = (uint64_t)archive_read_header_position(r->a);
	r->cur.type = _type(ae);
	r->cur.size = archive_entry_size_is_set(ae) && archive_entry_size(ae) > 0 ?
		      (uint64_t)archive_entry_size(ae) : 0;
	r->cur.mode = (uint32_t)(archive_entry_perm(ae) & 07777);
	r->cur.uid = (uint32_t)archive_entry_uid(ae);
	r->cur.gid = (uint32_t)archive_entry_gid(ae);
	r->cur.mtime_ns = _mtime_ns(ae);
	/* Consumed so far: every header of this member, so its data starts here. */
	r->cur.data_offset = (uint64_t)archive_filter_bytes(r->a, 0);
	link = archive_entry_hardlink(ae) ? archive_entry_hardlink(ae) :
	       archive_entry_symlink(ae) ? archive_entry_symlink(ae) : "";
	r->cur.path = _name(archive_entry_pathname(ae));
	r->cur.linkname = _name(link);
	if (!r->cur.path || !r->cur.path[0] || !r->cur.linkname) {
		snprintf(err, errlen, "offset %" PRIu64 ": member name or link target missing, "
			 "empty or longer than %d bytes", at, TAR_NAME_MAX);
		_entry_clear(&r->cur);
		return -1;
	}
	if (r->cur.data_offset > r->limit || r->cur.size > r->limit - r->cur.data_offset) {
		snprintf(err, errlen, "offset %" PRIu64 ": member of %" PRIu64 " bytes runs past "
			 "the end of the archive (%" PRIu64 " bytes)", at, r->cur.size, r->limit);
		_entry_clear(&r->cur);
		return -1;
	}
	*e = &r->cur;
	return 1;
}

int tar_reader_init(struct tar_reader *r, int fd, char *err, size_t errlen)
{
	locale_t old = _utf8_begin();
	int rc = _init_fd(r, fd, err, errlen);

	_utf8_end(old);
	return rc;
}

int tar_reader_init_mem(struct tar_reader *r, const void *buf, size_t len, char *err,
			size_t errlen)
{
	locale_t old = _utf8_begin();
	int rc = _init_mem(r, buf, len, err, errlen);

	_utf8_end(old);
	return rc;
}

int tar_reader_next(struct tar_reader *r, struct tar_entry **e, char *err, size_t errlen)
{
	locale_t old = _utf8_begin();
	int rc = _next(r, e, err, errlen);

	_utf8_end(old);
	return rc;
}

void tar_reader_free(struct tar_reader *r)
{
	_entry_clear(&r->cur);
	if (r->a)
		archive_read_free(r->a);
	r->a = NULL;
}
