/*
 * pace_metrics.c - the adaptive scavenger's per-file-system series for
 * /metrics (pace_metrics_render, see pace.h).
 *
 * Labels: device (MAJ:MIN of the file system) and mount (its mount point
 * from the mount table: a site's path, never a user's). Counters are
 * Prometheus counters (monotonic since the controller was made): per
 * minute is increase(x[1m]) or rate(x[5m]) * 60.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "pace.h"

/* A label value: backslash, double quote and newline escaped; other bytes
   outside printable ASCII as '?' (a label value must be UTF-8). */
static void _label(FILE *f, const char *v)
{
	for (; *v; v++) {
		unsigned char c = (unsigned char)*v;

		if (c == '\\' || c == '"')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else
			fputc(c < 0x20 || c > 0x7e ? '?' : c, f);
	}
}

static void _labels(FILE *f, const struct pace_fs_stats *s)
{
	fprintf(f, "{device=\"%u:%u\",mount=\"", s->major, s->minor);
	_label(f, s->mount);
	fputs("\"", f);
}

char *pace_metrics_render(const struct pace_fs_stats *fs, int n)
{
	/* name, type, help; the value per file system in the switch below */
	static const char *const fam[][3] = {
		{ "stagehand_pace_fs_probe", "gauge", "1 for the load probe the scavenger reads for "
		  "this file system (probe label: lustre, gpfs, block, or none: latency only)." },
		{ "stagehand_pace_fs_active", "gauge", "1 while transfers on this file system are "
		  "paced (the other series hold their last values otherwise)." },
		{ "stagehand_pace_fs_held", "gauge", "1 while the scavenger holds its transfers on "
		  "this file system (others use it)." },
		{ "stagehand_pace_fs_rate_bytes_per_second", "gauge", "Rate the scavenger allows its "
		  "transfers on this file system now (0 when held)." },
		{ "stagehand_pace_fs_capacity_bytes_per_second", "gauge", "Estimated bandwidth of "
		  "this file system (highest seen over 0.2 s, fading over minutes)." },
		{ "stagehand_pace_fs_foreign_bytes_per_second", "gauge", "Others' load the probe "
		  "shows (bytes it moved that our transfers did not report), smoothed over 0.5 s." },
		{ "stagehand_pace_fs_foreign_bytes_total", "counter", "Others' bytes the probe "
		  "showed while transfers were paced, counted per 10 s." },
		{ "stagehand_pace_fs_own_bytes_total", "counter", "Bytes the paced transfers "
		  "read and wrote on this file system." },
		{ "stagehand_pace_fs_holds_total", "counter", "Times the scavenger held its "
		  "transfers on this file system because others needed it." },
		{ "stagehand_pace_fs_archive_share", "gauge", "Over the last 5 minutes of paced "
		  "transfers: own bytes / (capacity x time - others' bytes); absent when it cannot "
		  "be told (no probe)." },
	};
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	if (!f)
		return NULL;
	for (size_t k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", fam[k][0], fam[k][2], fam[k][0],
			fam[k][1]);
		for (int i = 0; i < n; i++) {
			const struct pace_fs_stats *s = &fs[i];

			if (k == 9 && s->share < 0)
				continue;
			fputs(fam[k][0], f);
			_labels(f, s);
			switch (k) {
			case 0:
				fputs(",probe=\"", f);
				_label(f, s->probe);
				fputs("\"} 1\n", f);
				break;
			case 1:
				fprintf(f, "} %d\n", s->active);
				break;
			case 2:
				fprintf(f, "} %d\n", s->held);
				break;
			case 3:
				fprintf(f, "} %.0f\n", s->rate);
				break;
			case 4:
				fprintf(f, "} %.0f\n", s->capacity);
				break;
			case 5:
				fprintf(f, "} %.0f\n", s->foreign);
				break;
			case 6:
				fprintf(f, "} %.0f\n", s->foreign_total);
				break;
			case 7:
				fprintf(f, "} %.0f\n", s->own_total);
				break;
			case 8:
				fprintf(f, "} %llu\n", (unsigned long long)s->holds);
				break;
			default:
				fprintf(f, "} %.4f\n", s->share);
				break;
			}
		}
	}
	if (fclose(f) != 0) {
		free(out);
		return NULL;
	}
	return out;
}
