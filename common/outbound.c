/* outbound.c - see outbound.h. */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbound.h"

/* A network of the deny list: its text (for the table's readability), its name. */
struct _deny {
	const char *net;
	const char *rule;
};

/*
 * IPv4 first, IPv6 after. Reasons, not only RFC names: the rule is what the
 * daemon's log says was refused.
 */
static const struct _deny _deny_list[] = {
	{ "0.0.0.0/8", "this-host (0.0.0.0/8)" },
	{ "10.0.0.0/8", "private (10.0.0.0/8)" },
	{ "100.64.0.0/10", "shared address space (100.64.0.0/10)" },
	{ "127.0.0.0/8", "loopback (127.0.0.0/8)" },
	{ "169.254.0.0/16", "link-local (169.254.0.0/16)" },
	{ "172.16.0.0/12", "private (172.16.0.0/12)" },
	{ "192.0.0.0/24", "IETF protocol assignments (192.0.0.0/24)" },
	{ "192.168.0.0/16", "private (192.168.0.0/16)" },
	{ "198.18.0.0/15", "benchmarking (198.18.0.0/15)" },
	{ "224.0.0.0/4", "multicast (224.0.0.0/4)" },
	{ "240.0.0.0/4", "reserved (240.0.0.0/4)" },
	{ "::/128", "unspecified (::)" },
	{ "::1/128", "loopback (::1)" },
	{ "fe80::/10", "link-local (fe80::/10)" },
	{ "fec0::/10", "site-local (fec0::/10)" },
	{ "fc00::/7", "unique local (fc00::/7)" },
	{ "ff00::/8", "multicast (ff00::/8)" },
};

/*
 * Where the clouds answer with instance credentials: AWS, GCP, Azure,
 * OpenStack, Oracle (169.254.169.254), AWS ECS task roles (169.254.170.2),
 * AWS over IPv6 (fd00:ec2::254), Alibaba (100.100.100.200). Each is inside
 * a denied range too; kept apart so that a broad allow (169.254.0.0/16,
 * fc00::/7) does not open them by accident.
 */
static const char *const _metadata[] = {
	"169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200",
};

int outbound_parse_net(const char *s, struct outbound_net *n, char *why, size_t whylen)
{
	char addr[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(s, '/');
	size_t al = slash ? (size_t)(slash - s) : strlen(s);
	int max;

	memset(n, 0, sizeof(*n));
	if (al == 0 || al >= sizeof(addr)) {
		snprintf(why, whylen, "'%s' is not an address or network (e.g. 10.1.2.0/24, "
			 "fd12::/64)", s);
		return -1;
	}
	memcpy(addr, s, al);
	addr[al] = '\0';
	if (inet_pton(AF_INET, addr, n->addr) == 1) {
		n->family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, addr, n->addr) == 1) {
		n->family = AF_INET6;
		max = 128;
	} else {
		snprintf(why, whylen, "'%s' is not an IPv4 or IPv6 address", addr);
		return -1;
	}
	n->prefix = max;
	if (slash) {
		char *end;
		long p;

		errno = 0;
		p = strtol(slash + 1, &end, 10);
		if (errno || end == slash + 1 || *end || !isdigit((unsigned char)slash[1]) ||
		    p < 0 || p > max) {
			snprintf(why, whylen, "'%s': the prefix length must be 0 to %d", s, max);
			return -1;
		}
		n->prefix = (int)p;
	}
	/* Host bits set are a typo more often than a wish (10.1.2.3/8). */
	for (int bit = n->prefix; bit < max; bit++)
		if (n->addr[bit / 8] & (0x80u >> (bit % 8))) {
			snprintf(why, whylen, "'%s' has bits set past its /%d: write the network "
				 "address (or /%d for one host)", s, n->prefix, max);
			return -1;
		}
	return 0;
}

static int _in(const struct outbound_net *n, int family, const unsigned char *a)
{
	int full = n->prefix / 8, rest = n->prefix % 8;

	if (n->family != family)
		return 0;
	if (memcmp(n->addr, a, (size_t)full) != 0)
		return 0;
	return rest == 0 || ((n->addr[full] ^ a[full]) & (0xffu << (8 - rest)) & 0xffu) == 0;
}

/*
 * The address to judge: sa's, with an IPv4 address carried inside an IPv6
 * one taken out (the kernel or a relay would deliver it there). 0, or -1
 * for a family that is no IP.
 */
static int _judged(const struct sockaddr *sa, size_t salen, int *family, unsigned char a[16])
{
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	static const unsigned char nat64[12] = { 0, 0x64, 0xff, 0x9b };
	static const unsigned char zero[12];

	if (sa->sa_family == AF_INET && salen >= sizeof(struct sockaddr_in)) {
		*family = AF_INET;
		memcpy(a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family != AF_INET6 || salen < sizeof(struct sockaddr_in6))
		return -1;
	memcpy(a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	*family = AF_INET6;
	if (!memcmp(a, mapped, 12) || !memcmp(a, nat64, 12) ||
	    (!memcmp(a, zero, 12) && (a[12] | a[13] | a[14] || a[15] > 1))) { /* ::a.b.c.d, not ::, ::1 */
		memmove(a, a + 12, 4);
		*family = AF_INET;
	} else if (a[0] == 0x20 && a[1] == 0x02) {		/* 6to4: 2002:AABB:CCDD::/48 */
		memmove(a, a + 2, 4);
		*family = AF_INET;
	}
	return 0;
}

static int _is_metadata(int family, const unsigned char *a)
{
	unsigned char m[16];

	for (size_t i = 0; i < sizeof(_metadata) / sizeof(_metadata[0]); i++)
		if (inet_pton(family, _metadata[i], m) == 1 &&
		    !memcmp(m, a, family == AF_INET ? 4 : 16))
			return 1;
	return 0;
}

int outbound_allowed(const char *const *allow, const struct sockaddr *sa, size_t salen,
		     const char **rule)
{
	unsigned char a[16];
	int family, meta;
	char why[160];

	*rule = "not an IP address";
	if (_judged(sa, salen, &family, a) < 0)
		return 0;
	meta = _is_metadata(family, a);
	for (const char *const *p = allow; p && *p; p++) {
		struct outbound_net n;

		if (outbound_parse_net(*p, &n, why, sizeof(why)) < 0 || !_in(&n, family, a))
			continue;
		if (!meta || n.prefix == (family == AF_INET ? 32 : 128)) {
			*rule = "allowed";
			return 1;
		}
	}
	if (meta) {
		*rule = "cloud metadata";
		return 0;
	}
	for (size_t i = 0; i < sizeof(_deny_list) / sizeof(_deny_list[0]); i++) {
		struct outbound_net n;

		if (outbound_parse_net(_deny_list[i].net, &n, why, sizeof(why)) == 0 &&
		    _in(&n, family, a)) {
			*rule = _deny_list[i].rule;
			return 0;
		}
	}
	*rule = "public";
	return 1;
}

void outbound_addr_text(const struct sockaddr *sa, size_t salen, char *out, size_t outlen)
{
	const void *a = NULL;

	if (sa->sa_family == AF_INET && salen >= sizeof(struct sockaddr_in))
		a = &((const struct sockaddr_in *)sa)->sin_addr;
	else if (sa->sa_family == AF_INET6 && salen >= sizeof(struct sockaddr_in6))
		a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (!a || !inet_ntop(sa->sa_family, a, out, (socklen_t)outlen))
		snprintf(out, outlen, "?");
}
