/* record.c - see record.h. */
#include "config.h"

#include <string.h>

#include "record.h"

/* Lua's %a and %s in the C locale, which is what slurmctld's Lua uses. */
static bool _alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool _space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static size_t _rtrim(const char *s, size_t n)
{
	while (n > 0 && _space(s[n - 1]))
		n--;
	return n;
}

/* The last occurrence of needle in [s, s + n), or NULL. */
static const char *_last(const char *s, size_t n, const char *needle)
{
	size_t k = strlen(needle);
	const char *found = NULL;

	for (const char *p = s; (size_t)(p - s) + k <= n; p++) {
		p = memchr(p, needle[0], n - (size_t)(p - s));
		if (!p || (size_t)(p - s) + k > n)
			break;
		if (!memcmp(p, needle, k))
			found = p;
	}
	return found;
}

/* The first occurrence of needle in [s, s + n), or NULL. */
static const char *_first(const char *s, size_t n, const char *needle)
{
	size_t k = strlen(needle);

	for (const char *p = s; (size_t)(p - s) + k <= n; p++) {
		p = memchr(p, needle[0], n - (size_t)(p - s));
		if (!p || (size_t)(p - s) + k > n)
			return NULL;
		if (!memcmp(p, needle, k))
			return p;
	}
	return NULL;
}

void record_split(const char *ac, struct record *r)
{
	const char *plan, *h, *st;
	size_t head;

	memset(r, 0, sizeof(*r));
	if (!ac)
		ac = "";
	r->site = ac;
	plan = strstr(ac, RECORD_PLAN_PREFIX);
	/* Only what comes before the plan can hold a marker: the rest is the user's. */
	head = plan ? (size_t)(plan - ac) : strlen(ac);
	r->plan = plan ? plan + strlen(RECORD_PLAN_PREFIX) : NULL;
	r->rest = ac + head;
	/*
	 * The hold marker is the last thing before the plan: letters, then
	 * blanks. Only its last occurrence can be (an earlier one is followed
	 * by the ':' of a later one).
	 */
	h = _last(ac, head, RECORD_HOLD_MARK);
	if (h) {
		const char *w = h + strlen(RECORD_HOLD_MARK), *e = w;

		while ((size_t)(e - ac) < head && _alpha(*e))
			e++;
		if (_rtrim(ac, head) == (size_t)(e - ac)) {
			r->hold = w;
			r->hold_len = (size_t)(e - w);
			r->rest = h;
			head = (size_t)(h - ac);
		}
	}
	st = _first(ac, head, RECORD_STATUS_MARK);
	if (st) {
		r->status = st + strlen(RECORD_STATUS_MARK);
		r->status_len = _rtrim(r->status, (size_t)(ac + head - r->status));
		head = (size_t)(st - ac);
	}
	r->site_len = _rtrim(ac, head);
}

enum record_state record_state(const char *ac)
{
	struct record r;

	record_split(ac, &r);
	if (!r.plan)
		return RECORD_NONE_AT_ALL;
	if (!r.hold)
		return RECORD_NO_HOLD;
	if (r.hold_len == 7 && !memcmp(r.hold, "pending", 7))
		return RECORD_PENDING;
	if (r.hold_len == 8 && !memcmp(r.hold, "released", 8))
		return RECORD_RELEASED;
	return RECORD_OTHER_HOLD;
}

bool record_hold_pending(const char *ac)
{
	return record_state(ac) == RECORD_PENDING;
}

const char *record_plan(const char *ac)
{
	const char *p = ac ? strstr(ac, RECORD_PLAN_PREFIX) : NULL;

	return p ? p + strlen(RECORD_PLAN_PREFIX) : NULL;
}
