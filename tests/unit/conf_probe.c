/*
 * conf_probe.c - stagehandd's reading of single stagehand.conf lines, for
 * conf-keys.lua to hold slurmctld's Lua module to it: for each "Key=Value"
 * line on stdin, one line on stdout: the input, a tab, then "ERR message"
 * (without the "FILE:LINE: error: " prefix) or "OK value" (the field as
 * text: numbers in decimal, lists joined by ',', "nil" for unset).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "conf.h"
#include "conf_int.h"

static void _value(const struct conf *c, const struct conf__key *k)
{
	const void *f = (const char *)c + k->off;

	switch (k->kind) {
	case CK_INT: case CK_ENUM: case CK_DURATION: {
		int v;

		memcpy(&v, f, sizeof(v));
		printf("%d", v);
		break;
	}
	case CK_SIZE: {
		uint64_t v = 0;

		if (k->size == sizeof(uint64_t)) {
			memcpy(&v, f, sizeof(v));
		} else {
			uint32_t u;

			memcpy(&u, f, sizeof(u));
			v = u;
		}
		printf("%llu", (unsigned long long)v);
		break;
	}
	case CK_ROOTS: case CK_NAMES: case CK_SCHEMES: case CK_UIDS: case CK_ARGV: {
		char **l;

		memcpy(&l, f, sizeof(l));
		for (size_t i = 0; l && l[i]; i++)
			printf("%s%s", i ? "," : "", l[i]);
		if (!l)
			printf("nil");
		break;
	}
	default: {
		const char *s;

		memcpy(&s, f, sizeof(s));
		printf("%s", s ? s : "nil");
		break;
	}
	}
}

int main(void)
{
	char line[8192], err[1024];

	while (fgets(line, sizeof(line), stdin)) {
		struct conf *c = conf_create();
		const char *e;

		line[strcspn(line, "\n")] = '\0';
		if (!c)
			return 1;
		printf("%s\t", line);
		if (conf_parse_line(c, line, "F", 1, err, sizeof(err)) < 0) {
			e = strstr(err, ": error: ");
			printf("ERR %s\n", e ? e + 9 : err);
		} else {
			printf("OK ");
			for (size_t i = 0; i < conf__nkeys; i++)
				if (c->key_line[i])
					_value(c, &conf__keys[i]);
			printf("\n");
		}
		conf_destroy(c);
	}
	return 0;
}
