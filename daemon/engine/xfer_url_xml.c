/* xfer_url_xml.c - see xfer_url_xml.h. */
#include "config.h"

#include <expat.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "xfer_url_xml.h"

/* Element names arrive as "namespace-URI local" (the local name has no blank). */
#define NS_SEP ' '

enum _field { F_NONE, F_NAME, F_SIZE, F_TRUNC, F_TOKEN, F_PARTNO, F_ID, F_ETAG, F_CODE,
	      F_MESSAGE, F_MARKER };

struct _px {
	XML_Parser p;
	enum urlx_kind kind;
	struct urlx_listing *out;
	int depth;
	int entry_depth;             /* depth of the open Contents/response, 0 = none */
	int rtype_depth;             /* DAV: depth of the open resourcetype, 0 = none */
	enum _field field;           /* the element whose text is being collected */
	int field_depth;
	char text[URLX_NAME_MAX];
	size_t tlen;
	int overflow;                /* text longer than the field allows */
	struct urlx_item cur;        /* the entry being read */
	int have_name, name_bad, have_size;
	int oom;
	const char *refused;         /* why the document was stopped */
};

static const char *_local(const char *name)
{
	const char *s = strrchr(name, NS_SEP);

	return s ? s + 1 : name;
}

static size_t _cap(enum _field f)
{
	switch (f) {
	case F_NAME:
		return URLX_NAME_MAX;
	case F_TOKEN:
	case F_ID:
		return URLX_TOKEN_MAX;
	case F_ETAG:
		return URLX_ETAG_MAX;
	case F_CODE:
		return sizeof(((struct urlx_mpu *)0)->code);
	case F_MESSAGE:
		return sizeof(((struct urlx_mpu *)0)->message);
	default:
		return 32;
	}
}

/* The collected text without surrounding blanks (sizes, flags, tokens). */
static char *_trimmed(struct _px *x)
{
	char *s = x->text, *e = x->text + x->tlen;

	while (s < e && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n'))
		s++;
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
		e--;
	*e = '\0';
	return s;
}

static void _field_start(struct _px *x, enum _field f)
{
	if (x->field != F_NONE)
		return;
	x->field = f;
	x->field_depth = x->depth;
	x->tlen = 0;
	x->overflow = 0;
}

static void XMLCALL _start(void *ud, const XML_Char *name, const XML_Char **atts)
{
	struct _px *x = ud;
	const char *l = _local(name);
	int in = x->entry_depth != 0, child;

	x->depth++;
	child = in && x->depth == x->entry_depth + 1;
	if (x->kind == URLX_S3) {
		if (!in && strcmp(l, "Contents") == 0)
			x->entry_depth = x->depth;
		else if (child && strcmp(l, "Key") == 0)
			_field_start(x, F_NAME);
		else if (child && strcmp(l, "Size") == 0)
			_field_start(x, F_SIZE);
		else if (!in && strcmp(l, "IsTruncated") == 0)
			_field_start(x, F_TRUNC);
		else if (!in && strcmp(l, "NextContinuationToken") == 0)
			_field_start(x, F_TOKEN);
	} else if (x->kind == URLX_S3_MPU) {
		int top = !in && x->depth == 2;

		if (x->depth == 1)
			snprintf(x->out->mpu.root, sizeof(x->out->mpu.root), "%s", l);
		else if (top && strcmp(l, "Part") == 0)
			x->entry_depth = x->depth;
		else if (child && strcmp(l, "PartNumber") == 0)
			_field_start(x, F_PARTNO);
		else if (child && strcmp(l, "ETag") == 0)
			_field_start(x, F_NAME);
		else if (child && strcmp(l, "Size") == 0)
			_field_start(x, F_SIZE);
		else if (top && strcmp(l, "UploadId") == 0)
			_field_start(x, F_ID);
		else if (top && strcmp(l, "ETag") == 0)
			_field_start(x, F_ETAG);
		else if (top && strcmp(l, "Code") == 0)
			_field_start(x, F_CODE);
		else if (top && strcmp(l, "Message") == 0)
			_field_start(x, F_MESSAGE);
		else if (top && strcmp(l, "IsTruncated") == 0)
			_field_start(x, F_TRUNC);
		else if (top && strcmp(l, "NextPartNumberMarker") == 0)
			_field_start(x, F_MARKER);
	} else {
		if (!in && strcmp(l, "response") == 0)
			x->entry_depth = x->depth;
		else if (child && strcmp(l, "href") == 0)
			_field_start(x, F_NAME);
		else if (in && strcmp(l, "getcontentlength") == 0)
			_field_start(x, F_SIZE);
		else if (in && !x->rtype_depth && strcmp(l, "resourcetype") == 0)
			x->rtype_depth = x->depth;
		else if (x->rtype_depth && x->depth == x->rtype_depth + 1 &&
			 strcmp(l, "collection") == 0)
			x->cur.is_dir = 1;
	}
	if (x->entry_depth == x->depth) {
		memset(&x->cur, 0, sizeof(x->cur));
		x->cur.size = -1;
		x->cur.part = -1;
		x->have_name = x->name_bad = x->have_size = 0;
	}
}

/* A size: decimal digits only, below INT64_MAX; else unknown (-1). */
static int64_t _size(const char *s)
{
	int64_t v = 0;

	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > (INT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (*s - '0');
	}
	return v;
}

static void _field_end(struct _px *x)
{
	char *t;

	x->text[x->tlen] = '\0';
	switch (x->field) {
	case F_NAME:
		if (x->have_name)
			break;	/* the first one counts */
		x->have_name = 1;
		if (x->overflow || x->tlen == 0) {
			x->name_bad = 1;
		} else if (!(x->cur.name = strdup(x->text))) {
			x->oom = 1;
			XML_StopParser(x->p, XML_FALSE);
		}
		break;
	case F_SIZE:
		t = _trimmed(x);
		if (!x->have_size && *t) {
			x->have_size = 1;
			x->cur.size = x->overflow ? -1 : _size(t);
		}
		break;
	case F_TRUNC:
		x->out->truncated = !x->overflow && strcmp(_trimmed(x), "true") == 0;
		break;
	case F_TOKEN:
		if (x->overflow) {
			x->refused = "continuation token too long";
			XML_StopParser(x->p, XML_FALSE);
			break;
		}
		t = _trimmed(x);
		memcpy(x->out->token, t, strlen(t) + 1);
		break;
	case F_PARTNO:
		t = _trimmed(x);
		x->cur.part = x->overflow ? -1 : _size(t);
		break;
	case F_MARKER:
		t = _trimmed(x);
		x->out->mpu.next_marker = x->overflow ? -1 : _size(t);
		break;
	case F_ID:
	case F_ETAG:
		if (x->overflow) {
			x->refused = x->field == F_ID ? "upload id too long" : "ETag too long";
			XML_StopParser(x->p, XML_FALSE);
			break;
		}
		t = _trimmed(x);
		if (x->field == F_ID)
			memcpy(x->out->mpu.upload_id, t, strlen(t) + 1);
		else
			memcpy(x->out->mpu.etag, t, strlen(t) + 1);
		break;
	case F_CODE:
	case F_MESSAGE:
		/* Words for a message: kept as far as they fit. */
		t = _trimmed(x);
		if (x->field == F_CODE)
			snprintf(x->out->mpu.code, sizeof(x->out->mpu.code), "%s", t);
		else
			snprintf(x->out->mpu.message, sizeof(x->out->mpu.message), "%s", t);
		break;
	case F_NONE:
		break;
	}
	x->field = F_NONE;
}

static int _push(struct _px *x)
{
	struct urlx_listing *o = x->out;

	if (grow_array((void **)&o->items, &o->cap, o->n + 1, sizeof(*o->items), 256) < 0)
		return -1;
	o->items[o->n++] = x->cur;
	memset(&x->cur, 0, sizeof(x->cur));
	return 0;
}

static void XMLCALL _end(void *ud, const XML_Char *name)
{
	struct _px *x = ud;

	if (x->field != F_NONE && x->depth == x->field_depth)
		_field_end(x);
	if (x->rtype_depth == x->depth)
		x->rtype_depth = 0;
	if (x->entry_depth == x->depth) {
		x->entry_depth = 0;
		if (!x->cur.name || x->name_bad) {
			x->out->dropped++;
			free(x->cur.name);
			x->cur.name = NULL;
		} else if (_push(x) < 0) {
			free(x->cur.name);
			x->cur.name = NULL;
			x->oom = 1;
			XML_StopParser(x->p, XML_FALSE);
		}
	}
	x->depth--;
}

static void XMLCALL _chars(void *ud, const XML_Char *s, int len)
{
	struct _px *x = ud;
	size_t cap;

	if (x->field == F_NONE || len <= 0)
		return;
	cap = _cap(x->field);
	if (x->tlen + (size_t)len >= cap) {
		x->overflow = 1;
		return;
	}
	memcpy(x->text + x->tlen, s, (size_t)len);
	x->tlen += (size_t)len;
}

static void XMLCALL _doctype(void *ud, const XML_Char *name, const XML_Char *sysid,
			     const XML_Char *pubid, int has_internal_subset)
{
	struct _px *x = ud;

	x->refused = "a DOCTYPE is not accepted in a listing";
	XML_StopParser(x->p, XML_FALSE);
}

int urlx_parse(enum urlx_kind kind, const char *buf, size_t len, struct urlx_listing *out,
	       char *err, size_t errlen)
{
	struct _px x;
	enum XML_Status st;

	memset(out, 0, sizeof(*out));
	out->mpu.next_marker = -1;
	memset(&x, 0, sizeof(x));
	if (len > INT_MAX) {
		snprintf(err, errlen, "listing of %zu bytes is too large", len);
		return -1;
	}
	x.kind = kind;
	x.out = out;
	x.p = XML_ParserCreateNS(NULL, NS_SEP);
	if (!x.p) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	XML_SetUserData(x.p, &x);
	XML_SetElementHandler(x.p, _start, _end);
	XML_SetCharacterDataHandler(x.p, _chars);
	XML_SetStartDoctypeDeclHandler(x.p, _doctype);
	st = XML_Parse(x.p, buf, (int)len, XML_TRUE);
	if (st != XML_STATUS_OK || x.oom) {
#ifdef HAVE_XML_GETCURRENTLINENUMBER64
		unsigned long line = (unsigned long)XML_GetCurrentLineNumber64(x.p);
		unsigned long col = (unsigned long)XML_GetCurrentColumnNumber64(x.p);
#else
		unsigned long line = (unsigned long)XML_GetCurrentLineNumber(x.p);
		unsigned long col = (unsigned long)XML_GetCurrentColumnNumber(x.p);
#endif

		if (x.oom)
			snprintf(err, errlen, "out of memory reading the listing");
		else
			snprintf(err, errlen, "the listing is not well-formed XML (line %lu, column "
				 "%lu: %s)", line, col, x.refused ? x.refused :
				 XML_ErrorString(XML_GetErrorCode(x.p)));
		free(x.cur.name);
		urlx_free(out);
		XML_ParserFree(x.p);
		return -1;
	}
	free(x.cur.name);
	XML_ParserFree(x.p);
	return 0;
}

void urlx_free(struct urlx_listing *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->items[i].name);
	free(l->items);
	l->items = NULL;
	l->n = l->cap = 0;
}
