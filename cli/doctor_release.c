/*
 * doctor_release.c - is the SPANK plugin on this node built for the Slurm
 * release its slurmd runs? Slurm loads a plugin only into the release it
 * was built for; with "optional" in plugstack.conf a mismatch is silent
 * (jobs run, nothing is labelled), with "required" every job fails.
 *
 * The plugin carries the release it was built against as a marker string
 * (spank/stagehand.c, "stagehand-built-for-slurm=MAJ.MIN" from configure's
 * STAGEHAND_SLURM_RELEASE); slurmd says its own with `slurmd -V`. Both are
 * read, neither is loaded or run as the plugin would be.
 *
 * Must never: dlopen the plugin (its symbols belong to slurmstepd).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor.h"

#define MARK "stagehand-built-for-slurm="
#define SLURMD_TIMEOUT_MS 5000

extern char **environ;

/*
 * The "MAJ.MIN" after MARK in the file so, into rel. 1 found, 0 not there
 * (a plugin from before the marker), -1 unreadable (err filled).
 */
static int _plugin_release(const char *so, char *rel, size_t rellen, char *err, size_t errlen)
{
	char buf[65536 + sizeof(MARK) + 16];
	size_t keep = 0, got;
	FILE *fp = fopen(so, "rb");

	if (!fp) {
		snprintf(err, errlen, "cannot read %s: %s", so, strerror(errno));
		return -1;
	}
	/* Read in blocks; keep a tail so a marker across two blocks is found. */
	while ((got = fread(buf + keep, 1, sizeof(buf) - keep - 1, fp)) > 0) {
		size_t n = keep + got;
		char *m = memmem(buf, n, MARK, sizeof(MARK) - 1);

		if (m && (size_t)(m - buf) + sizeof(MARK) - 1 + 8 <= n) {
			size_t i = 0;

			m += sizeof(MARK) - 1;
			while (i + 1 < rellen && i < 8 && (m[i] == '.' || (m[i] >= '0' && m[i] <= '9')))
				rel[i] = m[i], i++;
			rel[i] = '\0';
			fclose(fp);
			return i > 0;
		}
		keep = n < sizeof(MARK) + 16 ? n : sizeof(MARK) + 16;
		memmove(buf, buf + n - keep, keep);
	}
	fclose(fp);
	return 0;
}

/* "MAJ.MIN" of `slurmd -V` ("slurm-wlm 24.11.5", "slurm 25.05.0"), or "" with why. */
static void _slurmd_release(char *rel, size_t rellen, char *why, size_t whylen)
{
	char *argv[] = { "slurmd", "-V", NULL }, *out, *p;
	int timed_out, maj, min;

	rel[0] = '\0';
	out = doctor_capture(argv, environ, SLURMD_TIMEOUT_MS, 4096, &timed_out, why, whylen);
	if (!out)
		return;
	p = strchr(out, ' ');
	if (p && sscanf(p + 1, "%d.%d", &maj, &min) == 2)
		snprintf(rel, rellen, "%02d.%02d", maj, min);
	else
		snprintf(why, whylen, "'slurmd -V' printed no version: %.200s", out);
	free(out);
}

void doctor_check_release(struct doctor *dr, const char *so)
{
	char plugin[16], slurmd[16], err[512] = "";
	int rc = _plugin_release(so, plugin, sizeof(plugin), err, sizeof(err));

	if (rc < 0) {
		doctor_add(dr, "slurm-release", DOC_FAIL, "make the plugin readable by root",
			   "%s", err);
		return;
	}
	if (rc == 0) {
		doctor_add(dr, "slurm-release", DOC_WARN, "install a stagehand-slurm package of this "
			   "version: it records the Slurm release it was built for",
			   "%s does not say which Slurm release it was built for (built before "
			   "stagehand recorded it)", so);
		return;
	}
	_slurmd_release(slurmd, sizeof(slurmd), err, sizeof(err));
	if (!slurmd[0]) {
		doctor_add(dr, "slurm-release", DOC_SKIP, NULL, "plugin built for Slurm %s; this "
			   "node's slurmd release unknown: %s", plugin, err);
		return;
	}
	if (strcmp(plugin, slurmd) != 0) {
		doctor_add(dr, "slurm-release", DOC_FAIL, "install the stagehand-slurm package built "
			   "for this Slurm release, or rebuild stagehand against this node's "
			   "libslurm-dev (./configure && make && make install), then restart slurmd",
			   "%s was built for Slurm %s but slurmd here is %s: slurmd will not load it "
			   "(optional: jobs run unlabelled; required: every job fails)", so, plugin,
			   slurmd);
		return;
	}
	doctor_add(dr, "slurm-release", DOC_OK, NULL, "%s built for Slurm %s, as slurmd here", so,
		   plugin);
}
