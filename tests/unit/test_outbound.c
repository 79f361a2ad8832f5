/*
 * test_outbound.c - common/outbound.c, the site's outbound address policy:
 * the deny list on by default, IPv4 written inside IPv6 judged as IPv4, the
 * metadata addresses kept shut under a broad allow, OutboundAllow's syntax.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "outbound.h"
#include "tests/tap.h"

/* The verdict for address text a (v4 or v6) under allow; *rule set. */
static int _judge(const char *a, const char *const *allow, const char **rule)
{
	struct sockaddr_in s4;
	struct sockaddr_in6 s6;

	memset(&s4, 0, sizeof(s4));
	memset(&s6, 0, sizeof(s6));
	if (inet_pton(AF_INET, a, &s4.sin_addr) == 1) {
		s4.sin_family = AF_INET;
		return outbound_allowed(allow, (struct sockaddr *)&s4, sizeof(s4), rule);
	}
	if (inet_pton(AF_INET6, a, &s6.sin6_addr) != 1)
		return -1;
	s6.sin6_family = AF_INET6;
	return outbound_allowed(allow, (struct sockaddr *)&s6, sizeof(s6), rule);
}

static const struct {
	const char *addr;
	int allowed;             /* under no OutboundAllow */
	const char *rule;        /* part of the rule named */
} _default[] = {
	{ "127.0.0.1", 0, "loopback" },
	{ "127.255.1.2", 0, "loopback" },
	{ "::1", 0, "loopback" },
	{ "0.0.0.0", 0, "this-host" },
	{ "::", 0, "unspecified" },
	{ "169.254.169.254", 0, "cloud metadata" },
	{ "169.254.170.2", 0, "cloud metadata" },
	{ "fd00:ec2::254", 0, "cloud metadata" },
	{ "100.100.100.200", 0, "cloud metadata" },
	{ "169.254.1.1", 0, "link-local" },
	{ "fe80::1", 0, "link-local" },
	{ "febf:ffff::1", 0, "link-local" },
	{ "10.0.0.1", 0, "private" },
	{ "10.235.0.5", 0, "private" },
	{ "172.16.0.1", 0, "private" },
	{ "172.31.255.255", 0, "private" },
	{ "192.168.1.1", 0, "private" },
	{ "fc00::1", 0, "unique local" },
	{ "fd12:3456::1", 0, "unique local" },
	{ "100.64.0.1", 0, "shared" },
	{ "224.0.0.1", 0, "multicast" },
	{ "255.255.255.255", 0, "reserved" },
	{ "ff02::1", 0, "multicast" },
	/* IPv4 inside IPv6: mapped, compatible, NAT64, 6to4 */
	{ "::ffff:127.0.0.1", 0, "loopback" },
	{ "::ffff:169.254.169.254", 0, "cloud metadata" },
	{ "::ffff:10.1.2.3", 0, "private" },
	{ "::127.0.0.1", 0, "loopback" },
	{ "::0.0.0.2", 0, "this-host" },
	{ "64:ff9b::7f00:1", 0, "loopback" },
	{ "2002:7f00:1::", 0, "loopback" },
	{ "2002:a9fe:a9fe::1", 0, "cloud metadata" },
	/* just outside the ranges: public */
	{ "172.15.255.255", 1, "public" },
	{ "172.32.0.0", 1, "public" },
	{ "11.0.0.1", 1, "public" },
	{ "128.0.0.1", 1, "public" },
	{ "192.169.0.1", 1, "public" },
	{ "93.184.216.34", 1, "public" },
	{ "::ffff:93.184.216.34", 1, "public" },
	{ "2606:2800:220:1::1", 1, "public" },
	{ "fe00::1", 1, "public" },
};

int main(void)
{
	const char *rule = NULL;
	struct outbound_net n;
	char why[256], text[64];

	for (size_t i = 0; i < sizeof(_default) / sizeof(_default[0]); i++) {
		int v = _judge(_default[i].addr, NULL, &rule);

		ok(v == _default[i].allowed, "%s %s by default", _default[i].addr,
		   _default[i].allowed ? "allowed" : "refused");
		contains(rule, _default[i].rule, "%s: rule '%s'", _default[i].addr, rule);
	}

	/* OutboundAllow opens what it names, and only that. */
	{
		const char *const allow[] = { "127.0.0.1/32", "10.235.0.0/24", "fd12::/16", NULL };

		ok(_judge("127.0.0.1", allow, &rule) == 1, "127.0.0.1 allowed by 127.0.0.1/32");
		ok(_judge("::ffff:127.0.0.1", allow, &rule) == 1, "its mapped form too");
		ok(_judge("127.0.0.2", allow, &rule) == 0, "127.0.0.2 still refused");
		ok(_judge("::1", allow, &rule) == 0, "::1 still refused");
		ok(_judge("10.235.0.77", allow, &rule) == 1, "10.235.0.77 allowed by the /24");
		ok(_judge("10.235.1.1", allow, &rule) == 0, "10.235.1.1 still refused");
		ok(_judge("fd12:1::5", allow, &rule) == 1, "fd12:1::5 allowed by fd12::/16");
		ok(_judge("fd13::5", allow, &rule) == 0, "fd13::5 still refused");
	}
	/* A broad allow does not open a metadata address; naming it alone does. */
	{
		const char *const broad[] = { "169.254.0.0/16", "fc00::/7", "0.0.0.0/0", NULL };
		const char *const exact[] = { "169.254.169.254/32", "fd00:ec2::254", NULL };

		ok(_judge("169.254.169.254", broad, &rule) == 0 && strcmp(rule, "cloud metadata") == 0,
		   "169.254.169.254 refused under 169.254.0.0/16 and 0.0.0.0/0");
		ok(_judge("fd00:ec2::254", broad, &rule) == 0, "fd00:ec2::254 refused under fc00::/7");
		ok(_judge("::ffff:169.254.169.254", broad, &rule) == 0, "... and in mapped form");
		ok(_judge("169.254.1.1", broad, &rule) == 1, "the rest of 169.254/16 allowed");
		ok(_judge("127.0.0.1", broad, &rule) == 1, "0.0.0.0/0 opens loopback (the site's choice)");
		ok(_judge("169.254.169.254", exact, &rule) == 1, "169.254.169.254/32 opens it");
		ok(_judge("fd00:ec2::254", exact, &rule) == 1, "fd00:ec2::254 alone opens it");
	}
	/* Not an IP address at all */
	{
		struct sockaddr sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_family = AF_UNIX;
		ok(outbound_allowed(NULL, &sa, sizeof(sa), &rule) == 0, "AF_UNIX refused (%s)", rule);
	}
	/* The syntax of OutboundAllow */
	ok(outbound_parse_net("10.1.2.0/24", &n, why, sizeof(why)) == 0 && n.prefix == 24 &&
	   n.family == AF_INET, "10.1.2.0/24 parsed");
	ok(outbound_parse_net("10.1.2.3", &n, why, sizeof(why)) == 0 && n.prefix == 32,
	   "a bare address is one host");
	ok(outbound_parse_net("fd12::/64", &n, why, sizeof(why)) == 0 && n.prefix == 64 &&
	   n.family == AF_INET6, "fd12::/64 parsed");
	ok(outbound_parse_net("10.1.2.3/8", &n, why, sizeof(why)) < 0, "host bits set refused");
	contains(why, "bits set past its /8", "... saying so");
	ok(outbound_parse_net("10.1.2.0/33", &n, why, sizeof(why)) < 0, "/33 refused");
	ok(outbound_parse_net("10.1.2.0/", &n, why, sizeof(why)) < 0, "empty prefix refused");
	ok(outbound_parse_net("10.1.2.0/+8", &n, why, sizeof(why)) < 0, "+8 refused");
	ok(outbound_parse_net("example.org", &n, why, sizeof(why)) < 0, "a name refused");
	contains(why, "not an IPv4 or IPv6 address", "... saying so");
	ok(outbound_parse_net("", &n, why, sizeof(why)) < 0, "empty refused");
	{
		struct sockaddr_in6 s6;

		memset(&s6, 0, sizeof(s6));
		s6.sin6_family = AF_INET6;
		inet_pton(AF_INET6, "fd00:ec2::254", &s6.sin6_addr);
		outbound_addr_text((struct sockaddr *)&s6, sizeof(s6), text, sizeof(text));
		is_str(text, "fd00:ec2::254", "address text for the log");
	}
	return tap_done();
}
