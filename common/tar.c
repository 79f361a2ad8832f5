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

#include "log.h"
#include "tar.h"

#define NS 1000000000LL

/* Offsets of the ustar header fields. */
enum {
	H_NAME = 0, H_MODE = 100, H_UID = 108, H_GID = 116, H_SIZE = 124, H_MTIME = 136,
	H_CHKSUM = 148, H_TYPE = 156, H_LINK = 157, H_MAGIC = 257, H_VERSION = 263,
	H_UNAME = 265, H_GNAME = 297, H_DEVMAJOR = 329, H_DEVMINOR = 337, H_PREFIX = 345,
};

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

/* What one ustar header block says; name/prefix/link as given (already made to fit). */
struct _ustar_fields {
	const char *name;
	size_t nlen;
	const char *prefix;	/* NULL: none */
	size_t pfxlen;
	const char *link;	/* NULL: none */
	size_t llen;
	char type;
	uint32_t mode, uid, gid;
	uint64_t size, mtime;
};

static void _ustar(unsigned char *blk, const struct _ustar_fields *h)
{
	const char *name = h->name, *prefix = h->prefix, *link = h->link;
	size_t nlen = h->nlen, pfxlen = h->pfxlen, llen = h->llen;
	uint32_t mode = h->mode, uid = h->uid, gid = h->gid;
	uint64_t size = h->size, mtime = h->mtime;
	char type = h->type;

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
		log_errf(err, errlen, "member name '%.64s' is empty or longer than %d bytes",
		     m->path ? m->path : "", TAR_NAME_MAX);
		return 0;
	}
	need = tar_header_size(m);
	if (outlen < need) {
		log_errf(err, errlen, "header buffer too small (%zu < %zu bytes)", outlen, need);
		return 0;
	}
	if (p.records) {
		/* The 'x' header names itself after the member, as other writers do. */
		const char *base = strrchr(m->path, '/');
		char xname[101];
		int k = snprintf(xname, sizeof(xname), "PaxHeaders/%s", base ? base + 1 : m->path);
		size_t xlen = k < 0 ? 0 : (size_t)k >= sizeof(xname) ? 100 : (size_t)k;
		char *rec = out + TAR_BLOCK;
		struct _ustar_fields x = {
			.name = xname, .nlen = xlen, .type = 'x', .mode = 0644,
			.uid = p.pax_uid ? 0 : m->uid, .gid = p.pax_gid ? 0 : m->gid,
			.size = p.records, .mtime = _fits_octal(12, sec) ? sec : 0,
		};

		_ustar(blk, &x);
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
	struct _ustar_fields h = {
		.name = m->path, .nlen = p.plen, .link = m->linkname, .llen = p.llen,
		.type = (char)m->type, .mode = m->mode, .uid = m->uid, .gid = m->gid,
		.size = p.pax_size ? 0 : m->size, .mtime = _fits_octal(12, sec) ? sec : 0,
	};

	if (p.split > 0) {
		/* The name split at a slash: its head in the prefix field. */
		h.name = m->path + p.split + 1;
		h.nlen = p.plen - (size_t)p.split - 1;
		h.prefix = m->path;
		h.pfxlen = (size_t)p.split;
	}
	_ustar(blk, &h);
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
		log_errf(err, errlen, "header checksum mismatch (not a tar header, or damaged)");
		return -1;
	}
	if (memcmp(blk + H_MAGIC, "ustar", 5) != 0) {
		log_errf(err, errlen, "not a ustar header (magic missing)");
		return -1;
	}
	if (_num(blk + H_SIZE, 12, size) < 0 || _num(blk + H_MODE, 8, &v) < 0 ||
	    _num(blk + H_UID, 8, &v) < 0 || _num(blk + H_GID, 8, &v) < 0 ||
	    _num(blk + H_MTIME, 12, &v) < 0) {
		log_errf(err, errlen, "malformed numeric field in header");
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
			log_errf(err, errlen, "name buffer too small");
			return -1;
		}
	}
	return 0;
}
