/*
 * outbound.h - the site's outbound address policy: which addresses the
 * daemon's transfers may connect to (stagehand.conf OutboundAllow).
 *
 * A URL in a #DATA line is the user's, but the connection is the daemon's,
 * made from the service host: without a policy a user could make it reach
 * the host's loopback services, the cloud metadata endpoint or any private
 * address (and learn from its errors which ports are open). So a deny list
 * is always on (loopback, link-local, private and shared ranges, multicast,
 * the metadata addresses, IPv4 written inside IPv6), and the site names in
 * OutboundAllow the networks it does want reached (its own S3, an internal
 * web server). The check is made on the address a connection is about to
 * use, after DNS (xfer_url.c calls it from libcurl's open-socket callback),
 * so a name that resolves to another address on the next lookup gains
 * nothing; every redirect's connection goes through it too.
 *
 * Owns: the deny list, the CIDR syntax of OutboundAllow, the verdict.
 * Must never: resolve names, allocate, or log (the caller says what was
 * refused and where).
 */
#ifndef STAGEHAND_OUTBOUND_H
#define STAGEHAND_OUTBOUND_H

#include <stddef.h>
#include <sys/socket.h>

/* One network: family AF_INET or AF_INET6, the address's bytes, the prefix length. */
struct outbound_net {
	int family;
	unsigned char addr[16];
	int prefix;
};

/*
 * Parse "ADDR" or "ADDR/PREFIX" (IPv4 or IPv6; a bare address is one
 * host). Returns 0, or -1 with why (e.g. "bits set past the /8").
 */
int outbound_parse_net(const char *s, struct outbound_net *n, char *why, size_t whylen);

/*
 * May a connection go to sa? allow: OutboundAllow's entries (NULL-terminated,
 * each valid for outbound_parse_net; NULL = none). An address in an allowed
 * network is allowed, but a cloud metadata address only when an entry names
 * it alone (/32 or /128); otherwise an address the deny list names is
 * refused; the rest is allowed. IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible
 * (::a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002::/16) forms are judged as
 * the IPv4 address they carry. Returns 1 (allowed) or 0 (refused, *rule
 * names the deny list's entry: "loopback", "cloud metadata"..., static
 * text); a family other than IPv4/IPv6 is refused ("not an IP address").
 */
int outbound_allowed(const char *const *allow, const struct sockaddr *sa, size_t salen,
		     const char **rule);

/* The address of sa as text (inet_ntop), "?" when it is no IP address. */
void outbound_addr_text(const struct sockaddr *sa, size_t salen, char *out, size_t outlen);

#endif /* STAGEHAND_OUTBOUND_H */
