/* Unit tests: plugstack.conf argument parsing (plugargs.c). */
#include "config.h"

#include <stdarg.h>

#include "plugargs.h"
#include "tap.h"

static int parse(struct plugargs *a, char *err, size_t errlen, int n, ...)
{
	char *av[16];
	va_list ap;

	va_start(ap, n);
	for (int i = 0; i < n; i++)
		av[i] = va_arg(ap, char *);
	va_end(ap);
	plugargs_init(a);
	err[0] = '\0';
	return plugargs_parse(a, n, av, err, errlen);
}

int main(void)
{
	struct plugargs a;
	char err[512];

	plugargs_init(&a);
	is_str(a.socket, "", "no socket by default (stagehand.conf decides)");
	ok(a.fail_on_error, "default on_error=fail");
	ok(a.timeout_ms == 2000 && a.end_timeout_ms == 300, "default timeouts");
	is_str(a.spool, "/var/spool/stagehand", "default spool");
	is_str(a.xattr_ns, "user", "default namespace");
	is_str(a.scratch, "/scratch", "default scratch");

	ok(parse(&a, err, sizeof(err), 0) == 0, "no arguments is fine");
	ok(parse(&a, err, sizeof(err), 7, "socket=/tmp/s.sock", "on_error=warn",
		 "timeout_ms=150", "spool=/var/tmp/sp", "xattr_ns=user",
		 "scratch=/data/scratch", "end_timeout_ms=40") == 0,
	   "all documented keys parse");
	is_str(a.socket, "/tmp/s.sock", "socket set");
	ok(!a.fail_on_error, "on_error=warn");
	ok(a.timeout_ms == 150 && a.end_timeout_ms == 40, "timeouts set");
	is_str(a.spool, "/var/tmp/sp", "spool set");
	is_str(a.scratch, "/data/scratch", "scratch set");
	ok(parse(&a, err, sizeof(err), 2, "spool_max=0", "max_script_kb=64") == 0 &&
	   a.spool_max == 0 && a.max_script == 64 * 1024, "spool_max and max_script_kb");

	ok(parse(&a, err, sizeof(err), 1, "sokcet=/x") < 0, "unknown key refused");
	contains(err, "unknown argument 'sokcet'", "message names the key");
	ok(parse(&a, err, sizeof(err), 1, "on_error=maybe") < 0, "bad on_error refused");
	contains(err, "'fail' or 'warn'", "message lists the values");
	ok(parse(&a, err, sizeof(err), 1, "timeout_ms=10s") < 0, "non-number refused");
	ok(parse(&a, err, sizeof(err), 1, "timeout_ms=0") < 0, "zero timeout refused");
	ok(parse(&a, err, sizeof(err), 1, "timeout_ms=-5") < 0, "negative refused");
	ok(parse(&a, err, sizeof(err), 1, "timeout_ms=99999999999999999999") < 0,
	   "overflow refused");
	ok(parse(&a, err, sizeof(err), 1, "socket=relative.sock") < 0,
	   "relative socket refused");
	contains(err, "absolute", "message says absolute");
	ok(parse(&a, err, sizeof(err), 1, "spool=/var/../etc") < 0, "'..' refused");
	ok(parse(&a, err, sizeof(err), 1, "spool=/var/..x") == 0, "'..x' is a name");
	ok(parse(&a, err, sizeof(err), 1, "socket=") < 0, "empty value refused");
	ok(parse(&a, err, sizeof(err), 1, "socket") < 0, "bare word refused");
	contains(err, "key=value", "message says key=value");
	ok(parse(&a, err, sizeof(err), 1, "=x") < 0, "empty key refused");
	ok(parse(&a, err, sizeof(err), 1, "xattr_ns=trusted") == 0, "xattr_ns=trusted accepted");
	is_str(a.xattr_ns, "trusted", "namespace set to trusted");
	ok(parse(&a, err, sizeof(err), 2, "xattr_ns=trusted", "xattr_ns=user") == 0 &&
	   strcmp(a.xattr_ns, "user") == 0, "the last xattr_ns wins");
	ok(parse(&a, err, sizeof(err), 1, "xattr_ns=security") < 0, "security refused");
	contains(err, "xattr_ns=security: must be 'user' or 'trusted'",
		 "message names the value and the choices");
	ok(parse(&a, err, sizeof(err), 1, "xattr_ns=trusted.") < 0, "trailing dot refused");
	ok(parse(&a, err, sizeof(err), 1, "xattr_ns=Trusted") < 0, "case matters");
	ok(parse(&a, err, sizeof(err), 1, "xattr_ns=") < 0, "empty namespace refused");
	ok(parse(&a, err, sizeof(err), 1, "server=10.1.0.5:7780") == 0, "server= accepted");
	is_str(a.server, "10.1.0.5:7780", "server set");
	is_str(a.socket, "", "server= clears an earlier socket=");
	ok(parse(&a, err, sizeof(err), 2, "server=10.1.0.5:7780", "socket=/tmp/x.sock") == 0 &&
	   a.server[0] == '\0' && strcmp(a.socket, "/tmp/x.sock") == 0,
	   "the later of server= and socket= wins");
	ok(parse(&a, err, sizeof(err), 1, "server=[fd00::5]:7780") == 0, "IPv6 in brackets");
	ok(parse(&a, err, sizeof(err), 1, "server=mover1") < 0, "server without port refused");
	contains(err, "HOST:PORT", "message says HOST:PORT");
	ok(parse(&a, err, sizeof(err), 1, "server=mover1:0") < 0, "port 0 refused");
	ok(parse(&a, err, sizeof(err), 1, "server=fd00::5:7780") < 0, "bare IPv6 refused");
	ok(parse(&a, err, sizeof(err), 1, "conf=/etc/stagehand/stagehand.conf") == 0 &&
	   strcmp(a.conf, "/etc/stagehand/stagehand.conf") == 0, "conf= accepted");
	ok(parse(&a, err, sizeof(err), 1, "conf=stagehand.conf") < 0, "relative conf refused");
	char longp[300];
	memset(longp, 'a', sizeof(longp));
	memcpy(longp, "socket=/", 8);
	longp[sizeof(longp) - 1] = '\0';
	ok(parse(&a, err, sizeof(err), 1, longp) < 0, "socket path over sun_path refused");
	return tap_done();
}
