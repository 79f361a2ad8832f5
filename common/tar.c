/* tar.c - see tar.h. Layout per POSIX.1-2001 pax (ustar header + 'x' records). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tar.h"

#define NS 1000000000LL
#define PAX_MAX (1u << 20)           /* an extended header larger than this is refused */

/* Offsets of the ustar header fields. */
enum {
	H_NAME = 0, H_MODE = 100, H_UID = 108, H_GID = 116, H_SIZE = 124, H_MTIME = 136,
	H_CHKSUM = 148, H_TYPE = 156, H_LINK = 157, H_MAGIC = 257, H_VERSION = 263,
	H_UNAME = 265, H_GNAME = 297, H_DEVMAJOR = 329, H_DEVMINOR = 337, H_PREFIX = 345,
};

static void _err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void _err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	if (vsnprintf(err, errlen, fmt, ap) >= (int)errlen && errlen > 4)
		memcpy(err + errlen - 4, "...", 4);
	va_end(ap);
}

size_t tar_pad(uint64_t size)
{
	return (size_t)((TAR_BLOCK - size % TAR_BLOCK) % TAR_BLOCK);
}

/* width-1 octal digits and a NUL; -1 if v does not fit. */
static int _octal(char *field, size_t width, uint64_t v)
{
	size_t i = width - 1;

	field[i] = '\0';
	while (i > 0) {
		field[--i] = (char)('0' + (v & 7));
		v >>= 3;
	}
	return v ? -1 : 0;
}

static int _fits_octal(size_t width, uint64_t v)
{
	return (width - 1) * 3 >= 64 || v < ((uint64_t)1 << ((width - 1) * 3));
}

/*
 * Where path splits into a ustar prefix (<= 155) and name (<= 100): the
 * prefix length, 0 when the name field alone holds it, -1 when it fits
 * neither way.
 */
static long _ustar_split(const char *path, size_t n)
{
	if (n <= 100)
		return 0;
	for (size_t i = n - 1; i > 0; i--) {
		if (n - i - 1 > 100)
			break;
		if (path[i] == '/' && i <= 155 && n - i - 1 > 0)
			return (long)i;
	}
	return -1;
}

static size_t _digits(size_t v)
{
	size_t d = 1;

	while (v >= 10) {
		v /= 10;
		d++;
	}
	return d;
}

/* Length of the record "LEN key=value\n", LEN counting itself. */
static size_t _pax_len(const char *key, size_t vlen)
{
	size_t base = strlen(key) + vlen + 3, n = base + 1;

	while (_digits(n) + base != n)
		n = _digits(n) + base;
	return n;
}

/* Append one record to out at *off (caller sized out). */
static void _pax_put(char *out, size_t *off, const char *key, const char *val, size_t vlen)
{
	size_t n = _pax_len(key, vlen);
	int k = snprintf(out + *off, n + 1, "%zu %s=", n, key);

	memcpy(out + *off + k, val, vlen);
	out[*off + n - 1] = '\n';
	*off += n;
}

static void _fmt_mtime(char *buf, size_t len, int64_t ns)
{
	uint64_t a = ns < 0 ? (uint64_t)(-(ns + 1)) + 1 : (uint64_t)ns;
	uint64_t sec = a / NS, frac = a % NS;
	int k = snprintf(buf, len, "%s%" PRIu64, ns < 0 ? "-" : "", sec);

	if (frac) {
		char f[16];
		int e = 9;

		snprintf(f, sizeof(f), "%09" PRIu64, frac);
		while (e > 1 && f[e - 1] == '0')
			e--;
		snprintf(buf + k, len - (size_t)k, ".%.*s", e, f);
	}
}

struct _plan {
	size_t plen, llen;
	long split;          /* _ustar_split of the path */
	int pax_path, pax_link, pax_mtime, pax_size, pax_uid, pax_gid;
	char mtime[48];
	char num[3][24];     /* size, uid, gid as decimal */
	size_t records;      /* bytes of pax records, 0 = no pax header */
};

static int _plan(const struct tar_member *m, struct _plan *p)
{
	int64_t sec;

	memset(p, 0, sizeof(*p));
	p->plen = m->path ? strlen(m->path) : 0;
	p->llen = m->linkname ? strlen(m->linkname) : 0;
	if (!p->plen || p->plen > TAR_NAME_MAX || p->llen > TAR_NAME_MAX)
		return -1;
	p->split = _ustar_split(m->path, p->plen);
	p->pax_path = p->split < 0;
	p->pax_link = p->llen > 100;
	sec = m->mtime_ns >= 0 ? m->mtime_ns / NS : -1;
	p->pax_mtime = m->mtime_ns < 0 || m->mtime_ns % NS != 0 || !_fits_octal(12, (uint64_t)sec);
	p->pax_size = !_fits_octal(12, m->size);
	p->pax_uid = !_fits_octal(8, m->uid);
	p->pax_gid = !_fits_octal(8, m->gid);
	if (p->pax_path)
		p->records += _pax_len("path", p->plen);
	if (p->pax_link)
		p->records += _pax_len("linkpath", p->llen);
	if (p->pax_mtime) {
		_fmt_mtime(p->mtime, sizeof(p->mtime), m->mtime_ns);
		p->records += _pax_len("mtime", strlen(p->mtime));
	}
	snprintf(p->num[0], sizeof(p->num[0]), "%" PRIu64, m->size);
	snprintf(p->num[1], sizeof(p->num[1]), "%" PRIu32, m->uid);
	snprintf(p->num[2], sizeof(p->num[2]), "%" PRIu32, m->gid);
	if (p->pax_size)
		p->records += _pax_len("size", strlen(p->num[0]));
	if (p->pax_uid)
		p->records += _pax_len("uid", strlen(p->num[1]));
	if (p->pax_gid)
		p->records += _pax_len("gid", strlen(p->num[2]));
	return 0;
}

size_t tar_header_size(const struct tar_member *m)
{
	struct _plan p;

	if (_plan(m, &p) < 0)
		return 0;
	return TAR_BLOCK + (p.records ? TAR_BLOCK + p.records + tar_pad(p.records) : 0);
}

static void _checksum(unsigned char *blk)
{
	unsigned sum = 0;

	memset(blk + H_CHKSUM, ' ', 8);
	for (int i = 0; i < TAR_BLOCK; i++)
		sum += blk[i];
	snprintf((char *)blk + H_CHKSUM, 8, "%06o", sum & 0777777);
	blk[H_CHKSUM + 7] = ' ';
}

/* One ustar header block; name/prefix/link as given (already made to fit). */
static void _ustar(unsigned char *blk, const char *name, size_t nlen, const char *prefix,
		   size_t pfxlen, const char *link, size_t llen, char type, uint32_t mode,
		   uint32_t uid, uint32_t gid, uint64_t size, uint64_t mtime)
{
	memset(blk, 0, TAR_BLOCK);
	memcpy(blk + H_NAME, name, nlen > 100 ? 100 : nlen);
	_octal((char *)blk + H_MODE, 8, mode & 07777);
	if (_octal((char *)blk + H_UID, 8, uid) < 0)
		_octal((char *)blk + H_UID, 8, 0);
	if (_octal((char *)blk + H_GID, 8, gid) < 0)
		_octal((char *)blk + H_GID, 8, 0);
	if (_octal((char *)blk + H_SIZE, 12, size) < 0)
		_octal((char *)blk + H_SIZE, 12, 0);
	if (_octal((char *)blk + H_MTIME, 12, mtime) < 0)
		_octal((char *)blk + H_MTIME, 12, 0);
	blk[H_TYPE] = (unsigned char)type;
	if (link)
		memcpy(blk + H_LINK, link, llen > 100 ? 100 : llen);
	memcpy(blk + H_MAGIC, "ustar", 6);
	memcpy(blk + H_VERSION, "00", 2);
	_octal((char *)blk + H_DEVMAJOR, 8, 0);
	_octal((char *)blk + H_DEVMINOR, 8, 0);
	if (pfxlen)
		memcpy(blk + H_PREFIX, prefix, pfxlen);
	_checksum(blk);
}

size_t tar_header_encode(const struct tar_member *m, char *out, size_t outlen,
			 char *err, size_t errlen)
{
	struct _plan p;
	unsigned char *blk = (unsigned char *)out;
	size_t need, off = 0;
	uint64_t sec = m->mtime_ns > 0 ? (uint64_t)(m->mtime_ns / NS) : 0;

	if (_plan(m, &p) < 0) {
		_err(err, errlen, "member name '%.64s' is empty or longer than %d bytes",
		     m->path ? m->path : "", TAR_NAME_MAX);
		return 0;
	}
	need = tar_header_size(m);
	if (outlen < need) {
		_err(err, errlen, "header buffer too small (%zu < %zu bytes)", outlen, need);
		return 0;
	}
	if (p.records) {
		/* The 'x' header names itself after the member, as other writers do. */
		const char *base = strrchr(m->path, '/');
		char xname[101];
		int k = snprintf(xname, sizeof(xname), "PaxHeaders/%s", base ? base + 1 : m->path);
		size_t xlen = k < 0 ? 0 : (size_t)k >= sizeof(xname) ? 100 : (size_t)k;
		char *rec = out + TAR_BLOCK;

		_ustar(blk, xname, xlen, NULL, 0, NULL, 0, 'x', 0644, p.pax_uid ? 0 : m->uid,
		       p.pax_gid ? 0 : m->gid, p.records, _fits_octal(12, sec) ? sec : 0);
		if (p.pax_path)
			_pax_put(rec, &off, "path", m->path, p.plen);
		if (p.pax_link)
			_pax_put(rec, &off, "linkpath", m->linkname, p.llen);
		if (p.pax_mtime)
			_pax_put(rec, &off, "mtime", p.mtime, strlen(p.mtime));
		if (p.pax_size)
			_pax_put(rec, &off, "size", p.num[0], strlen(p.num[0]));
		if (p.pax_uid)
			_pax_put(rec, &off, "uid", p.num[1], strlen(p.num[1]));
		if (p.pax_gid)
			_pax_put(rec, &off, "gid", p.num[2], strlen(p.num[2]));
		memset(rec + off, 0, tar_pad(off));
		blk = (unsigned char *)rec + off + tar_pad(off);
	}
	if (p.split > 0)
		_ustar(blk, m->path + p.split + 1, p.plen - (size_t)p.split - 1, m->path,
		       (size_t)p.split, m->linkname, p.llen, (char)m->type, m->mode, m->uid, m->gid,
		       p.pax_size ? 0 : m->size, _fits_octal(12, sec) ? sec : 0);
	else
		_ustar(blk, m->path, p.plen, NULL, 0, m->linkname, p.llen, (char)m->type, m->mode,
		       m->uid, m->gid, p.pax_size ? 0 : m->size, _fits_octal(12, sec) ? sec : 0);
	return need;
}

/* ---- reading ---- */

/* An octal (or GNU base-256) numeric field. -1 when malformed. */
static int _num(const unsigned char *f, size_t width, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;

	if (f[0] & 0x80) {
		if (f[0] != 0x80)
			return -1;	/* negative base-256 values are not used here */
		for (i = 1; i < width; i++) {
			if (v >> 55)
				return -1;
			v = v << 8 | f[i];
		}
		*out = v;
		return 0;
	}
	while (i < width && f[i] == ' ')
		i++;
	for (; i < width && f[i] >= '0' && f[i] <= '7'; i++) {
		if (v >> 60)
			return -1;
		v = v << 3 | (uint64_t)(f[i] - '0');
	}
	for (; i < width; i++)
		if (f[i] != ' ' && f[i] != '\0')
			return -1;
	*out = v;
	return 0;
}

int tar_header_check(const unsigned char blk[TAR_BLOCK], char *type, uint64_t *size,
		     char *name, size_t namelen, char *err, size_t errlen)
{
	unsigned sum = 0;
	uint64_t want, v;

	for (int i = 0; i < TAR_BLOCK; i++)
		sum += (i >= H_CHKSUM && i < H_CHKSUM + 8) ? ' ' : blk[i];
	if (_num(blk + H_CHKSUM, 8, &want) < 0 || want != sum) {
		_err(err, errlen, "header checksum mismatch (not a tar header, or damaged)");
		return -1;
	}
	if (memcmp(blk + H_MAGIC, "ustar", 5) != 0) {
		_err(err, errlen, "not a ustar header (magic missing)");
		return -1;
	}
	if (_num(blk + H_SIZE, 12, size) < 0 || _num(blk + H_MODE, 8, &v) < 0 ||
	    _num(blk + H_UID, 8, &v) < 0 || _num(blk + H_GID, 8, &v) < 0 ||
	    _num(blk + H_MTIME, 12, &v) < 0) {
		_err(err, errlen, "malformed numeric field in header");
		return -1;
	}
	*type = blk[H_TYPE] ? (char)blk[H_TYPE] : TAR_REG;
	if (name) {
		size_t pl = strnlen((const char *)blk + H_PREFIX, 155);
		size_t nl = strnlen((const char *)blk + H_NAME, 100);
		int k = pl ? snprintf(name, namelen, "%.*s/%.*s", (int)pl, blk + H_PREFIX, (int)nl,
				      blk + H_NAME)
			   : snprintf(name, namelen, "%.*s", (int)nl, blk + H_NAME);

		if (k < 0 || (size_t)k >= namelen) {
			_err(err, errlen, "name buffer too small");
			return -1;
		}
	}
	return 0;
}

int tar_reader_init(struct tar_reader *r, int fd, char *err, size_t errlen)
{
	struct stat st;

	memset(r, 0, sizeof(*r));
	r->fd = fd;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		_err(err, errlen, "not a regular file");
		return -1;
	}
	r->limit = (uint64_t)st.st_size;
	return 0;
}

static void _entry_clear(struct tar_entry *e)
{
	free(e->path);
	free(e->linkname);
	memset(e, 0, sizeof(*e));
}

void tar_reader_free(struct tar_reader *r)
{
	_entry_clear(&r->cur);
}

static int _read_at(int fd, void *buf, size_t n, uint64_t off)
{
	size_t got = 0;

	while (got < n) {
		ssize_t k = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	return 0;
}

struct _pending {
	char *path, *link;
	int has_size, has_mtime, has_uid, has_gid;
	uint64_t size, uid, gid;
	int64_t mtime_ns;
};

static void _pending_clear(struct _pending *p)
{
	free(p->path);
	free(p->link);
	memset(p, 0, sizeof(*p));
}

static int _parse_u64(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;

	if (!n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9' || v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return 0;
}

static int _parse_mtime(const char *s, size_t n, int64_t *out)
{
	int neg = n && s[0] == '-';
	const char *dot;
	uint64_t sec, frac = 0;
	size_t il;

	if (neg) {
		s++;
		n--;
	}
	dot = memchr(s, '.', n);
	il = dot ? (size_t)(dot - s) : n;
	if (_parse_u64(s, il, &sec) < 0 || sec > (uint64_t)INT64_MAX / NS - 1)
		return -1;
	if (dot) {
		size_t fl = n - il - 1;
		uint64_t scale = 100000000;

		for (size_t i = 0; i < fl; i++) {
			if (dot[1 + i] < '0' || dot[1 + i] > '9')
				return -1;
			frac += (uint64_t)(dot[1 + i] - '0') * scale;
			scale /= 10;
		}
	}
	*out = (int64_t)(sec * NS + frac);
	if (neg)
		*out = -*out;
	return 0;
}

static char *_dup_name(const char *s, size_t n)
{
	char *d;

	if (n > TAR_NAME_MAX || memchr(s, '\0', n))
		return NULL;
	d = malloc(n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

static int _pax_parse(const char *buf, size_t len, struct _pending *p, char *err, size_t errlen)
{
	size_t off = 0;

	while (off < len) {
		uint64_t rl;
		size_t dl = 0;
		const char *rec = buf + off, *eq, *val;
		size_t klen, vlen;

		while (off + dl < len && rec[dl] >= '0' && rec[dl] <= '9')
			dl++;
		if (!dl || off + dl >= len || rec[dl] != ' ' || _parse_u64(rec, dl, &rl) < 0 ||
		    rl > len - off || rl < dl + 3 || rec[rl - 1] != '\n') {
			if (rec[0] == '\0')
				break;	/* zero padding after the last record */
			_err(err, errlen, "malformed pax record");
			return -1;
		}
		eq = memchr(rec + dl + 1, '=', (size_t)rl - dl - 1);
		if (!eq) {
			_err(err, errlen, "pax record without '='");
			return -1;
		}
		klen = (size_t)(eq - (rec + dl + 1));
		val = eq + 1;
		vlen = (size_t)(rec + rl - 1 - val);
#define KEY(k) (klen == sizeof(k) - 1 && memcmp(rec + dl + 1, k, klen) == 0)
		if (KEY("path") || KEY("linkpath")) {
			char *s = _dup_name(val, vlen);

			if (!s) {
				_err(err, errlen, "pax %s is too long or holds a NUL byte",
				     KEY("path") ? "path" : "linkpath");
				return -1;
			}
			if (KEY("path")) {
				free(p->path);
				p->path = s;
			} else {
				free(p->link);
				p->link = s;
			}
		} else if (KEY("size")) {
			if (_parse_u64(val, vlen, &p->size) < 0)
				goto bad;
			p->has_size = 1;
		} else if (KEY("uid")) {
			if (_parse_u64(val, vlen, &p->uid) < 0)
				goto bad;
			p->has_uid = 1;
		} else if (KEY("gid")) {
			if (_parse_u64(val, vlen, &p->gid) < 0)
				goto bad;
			p->has_gid = 1;
		} else if (KEY("mtime")) {
			if (_parse_mtime(val, vlen, &p->mtime_ns) < 0)
				goto bad;
			p->has_mtime = 1;
		}
#undef KEY
		off += (size_t)rl;
	}
	return 0;
bad:
	_err(err, errlen, "malformed number in pax record");
	return -1;
}

int tar_reader_next(struct tar_reader *r, struct tar_entry **e, char *err, size_t errlen)
{
	struct _pending pend = { 0 };
	unsigned char blk[TAR_BLOCK];
	char ename[TAR_BLOCK];
	char *ext = NULL;

	_entry_clear(&r->cur);
	for (;;) {
		uint64_t size, dstart, v;
		char type;
		static const unsigned char zero[TAR_BLOCK];

		if (r->pos >= r->limit) {
			if (pend.path || pend.link || pend.has_size) {
				_err(err, errlen, "archive ends after an extended header at offset %" PRIu64,
				     r->pos);
				goto fail;
			}
			return 0;	/* no end-of-archive blocks: tolerated */
		}
		if (r->limit - r->pos < TAR_BLOCK || _read_at(r->fd, blk, TAR_BLOCK, r->pos) < 0) {
			_err(err, errlen, "truncated header at offset %" PRIu64, r->pos);
			goto fail;
		}
		if (memcmp(blk, zero, TAR_BLOCK) == 0) {
			_pending_clear(&pend);
			return 0;
		}
		if (tar_header_check(blk, &type, &size, ename, sizeof(ename), err, errlen) < 0) {
			char why[200];

			snprintf(why, sizeof(why), "%s", err);
			_err(err, errlen, "offset %" PRIu64 ": %s", r->pos, why);
			goto fail;
		}
		dstart = r->pos + TAR_BLOCK;
		if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
			if (size > PAX_MAX || size > r->limit - dstart) {
				_err(err, errlen, "offset %" PRIu64 ": extended header of %" PRIu64
				     " bytes is too large or runs past the end", r->pos, size);
				goto fail;
			}
			if (type != 'g') {
				ext = malloc(size + 1);
				if (!ext || _read_at(r->fd, ext, size, dstart) < 0) {
					_err(err, errlen, "offset %" PRIu64 ": cannot read extended header",
					     r->pos);
					goto fail;
				}
				ext[size] = '\0';
				if (type == 'x' && _pax_parse(ext, size, &pend, err, errlen) < 0)
					goto fail;
				if (type == 'L' || type == 'K') {
					char *s = _dup_name(ext, strnlen(ext, size));

					if (!s) {
						_err(err, errlen, "offset %" PRIu64 ": long name too long",
						     r->pos);
						goto fail;
					}
					if (type == 'L') {
						free(pend.path);
						pend.path = s;
					} else {
						free(pend.link);
						pend.link = s;
					}
				}
				free(ext);
				ext = NULL;
			}
			r->pos = dstart + size + tar_pad(size);
			continue;
		}
		if (pend.has_size)
			size = pend.size;
		if (type == TAR_SYMLINK || type == TAR_DIR || type == '1')
			size = 0;	/* links and directories carry no data */
		if (size > r->limit - dstart) {
			_err(err, errlen, "offset %" PRIu64 ": member of %" PRIu64 " bytes runs past "
			     "the end of the archive (%" PRIu64 " bytes)", r->pos, size, r->limit);
			goto fail;
		}
		r->cur.type = type;
		r->cur.size = size;
		r->cur.data_offset = dstart;
		r->cur.path = pend.path ? pend.path : strdup(ename);
		pend.path = NULL;
		if (pend.link) {
			r->cur.linkname = pend.link;
			pend.link = NULL;
		} else {
			r->cur.linkname = strndup((const char *)blk + H_LINK, 100);
		}
		_num(blk + H_MODE, 8, &v);
		r->cur.mode = (uint32_t)(v & 07777);
		_num(blk + H_UID, 8, &v);
		r->cur.uid = (uint32_t)(pend.has_uid ? pend.uid : v);
		_num(blk + H_GID, 8, &v);
		r->cur.gid = (uint32_t)(pend.has_gid ? pend.gid : v);
		_num(blk + H_MTIME, 12, &v);
		r->cur.mtime_ns = pend.has_mtime ? pend.mtime_ns :
				  v > (uint64_t)INT64_MAX / NS ? INT64_MAX : (int64_t)v * NS;
		_pending_clear(&pend);
		if (!r->cur.path || !r->cur.linkname || !r->cur.path[0]) {
			_err(err, errlen, "offset %" PRIu64 ": %s", r->pos,
			     r->cur.path && r->cur.linkname ? "member with an empty name" : "out of memory");
			_entry_clear(&r->cur);
			return -1;
		}
		r->pos = dstart + size + tar_pad(size);
		*e = &r->cur;
		return 1;
	}
fail:
	free(ext);
	_pending_clear(&pend);
	return -1;
}
