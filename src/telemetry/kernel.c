/*
 * Small kernel tables node_exporter reads and "Node Exporter Full" draws:
 * /proc/vmstat (its vmstat collector's default fields: page faults, pages
 * paged and swapped in and out, OOM kills) and /proc/sys/fs/file-nr
 * (filefd). Each is optional, as in a container that hides it; a
 * malformed line is skipped rather than failing the scrape, since none of
 * them is what kiln alerts on. (Its entropy series are left out: their
 * "_bits" unit is one promtool's lint refuses.)
 */
#include "telemetry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KERNEL_FILE_MAX (256 * 1024)

/* ROOT/rel whole, or NULL when absent or unreadable. */
static char *read_rel(const char *root, const char *rel)
{
	size_t n = strlen(root), len;
	char *path, *text = NULL;

	while (n > 0 && root[n - 1] == '/')
		n--;
	path = kn_asprintf("%.*s%s", (int)n, root, rel);
	if (kn_read_file(path, KERNEL_FILE_MAX, &text, &len) < 0)
		text = NULL;
	free(path);
	return text;
}

/* node_exporter's vmstat default: ^(oom_kill|pgpg|pswp|pg.*fault). */
static bool vmstat_field_wanted(const char *f)
{
	return !strcmp(f, "oom_kill") || !strncmp(f, "pgpg", 4) ||
	       !strncmp(f, "pswp", 4) ||
	       (!strncmp(f, "pg", 2) && strstr(f, "fault"));
}

static int write_vmstat(const char *root, struct kn_buf *out)
{
	char *text = read_rel(root, "/proc/vmstat"), *line, *save = NULL;
	int rc = 0;

	for (line = text ? strtok_r(text, "\n", &save) : NULL; line && rc == 0;
	     line = strtok_r(NULL, "\n", &save)) {
		char field[64], name[96], help[128];
		unsigned long long v;

		if (sscanf(line, "%63s %llu", field, &v) != 2 ||
		    !vmstat_field_wanted(field))
			continue;
		snprintf(name, sizeof(name), "node_vmstat_%s", field);
		snprintf(help, sizeof(help), "/proc/vmstat information field %s.",
			 field);
		if ((rc = kn_prom_family(out, name, "untyped", help)) == 0)
			rc = kn_prom_sample(out, name, NULL, (double)v);
		if (rc == -EINVAL) /* not a metric name: not node_exporter's */
			rc = 0;
	}
	free(text);
	return rc;
}

int kn_node_kernel(const char *root, struct kn_buf *out, struct kn_error *err)
{
	static const char *const names[] = {"node_filefd_allocated",
					    "node_filefd_maximum"};
	static const char *const helps[] = {
		"File descriptor statistics: allocated.",
		"File descriptor statistics: maximum."};
	char *file_nr = read_rel(root, "/proc/sys/fs/file-nr");
	unsigned long long fd[2];
	int rc = write_vmstat(root, out);

	/* file-nr: allocated, unused (always 0 since Linux 2.6), maximum. */
	if (rc == 0 && file_nr &&
	    sscanf(file_nr, "%llu %*u %llu", &fd[0], &fd[1]) == 2)
		for (int i = 0; i < 2 && rc == 0; i++)
			if ((rc = kn_prom_family(out, names[i], "gauge",
						 helps[i])) == 0)
				rc = kn_prom_sample(out, names[i], NULL,
						    (double)fd[i]);
	free(file_nr);
	if (rc < 0)
		return kn_errorf(err, KN_ETOOBIG, NULL, "scrape too large");
	return 0;
}
