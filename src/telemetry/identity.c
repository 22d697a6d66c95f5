/*
 * The identity series dashboards key on, named, typed and labelled as
 * node_exporter writes them: node_uname_info (its uname collector),
 * node_os_info and node_os_version (its os collector, from os-release)
 * and node_time_seconds (its time collector). "Node Exporter Full" picks
 * its hosts from node_uname_info and shows uptime as node_time_seconds
 * minus node_boot_time_seconds; without these its pages stay empty.
 *
 * On the real machine (root "/") uname(2) answers, as it does for
 * node_exporter. Under another root (a fixture tree) the same fields are
 * read from ROOT/proc/sys/kernel, where Linux publishes them too.
 */
#include "telemetry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

/* os-release is a handful of short lines. */
#define OS_RELEASE_MAX (64 * 1024)
#define FIELD_MAX 256

struct uname_fields {
	char sysname[FIELD_MAX], release[FIELD_MAX], version[FIELD_MAX],
		machine[FIELD_MAX], nodename[FIELD_MAX], domainname[FIELD_MAX];
};

static bool is_real_root(const char *root)
{
	return strspn(root, "/") == strlen(root);
}

/* ROOT/rel's first line into buf; "" when absent. */
static void first_line(const char *root, const char *rel, char *buf,
		       size_t len)
{
	size_t n = strlen(root), got;
	char *path, *text = NULL;

	while (n > 0 && root[n - 1] == '/')
		n--;
	path = kn_asprintf("%.*s%s", (int)n, root, rel);
	buf[0] = '\0';
	if (kn_read_file(path, FIELD_MAX * 4, &text, &got) == 0) {
		text[strcspn(text, "\n")] = '\0';
		kn_strlcpy(buf, text, len);
	}
	KN_FREE_ALL(text, path);
}

static void uname_read(const char *root, struct uname_fields *u)
{
	struct utsname un;

	memset(u, 0, sizeof(*u));
	if (is_real_root(root) && uname(&un) == 0) {
		kn_strlcpy(u->sysname, un.sysname, FIELD_MAX);
		kn_strlcpy(u->release, un.release, FIELD_MAX);
		kn_strlcpy(u->version, un.version, FIELD_MAX);
		kn_strlcpy(u->machine, un.machine, FIELD_MAX);
		kn_strlcpy(u->nodename, un.nodename, FIELD_MAX);
		kn_strlcpy(u->domainname, un.domainname, FIELD_MAX);
		return;
	}
	first_line(root, "/proc/sys/kernel/ostype", u->sysname, FIELD_MAX);
	first_line(root, "/proc/sys/kernel/osrelease", u->release, FIELD_MAX);
	first_line(root, "/proc/sys/kernel/version", u->version, FIELD_MAX);
	first_line(root, "/proc/sys/kernel/arch", u->machine, FIELD_MAX);
	first_line(root, "/proc/sys/kernel/hostname", u->nodename, FIELD_MAX);
	first_line(root, "/proc/sys/kernel/domainname", u->domainname,
		   FIELD_MAX);
}

static int write_uname(const char *root, struct kn_buf *out)
{
	struct uname_fields u;
	int rc;

	uname_read(root, &u);
	const char *labels[] = {"domainname", u.domainname, "machine",
				u.machine,    "nodename",   u.nodename,
				"release",    u.release,    "sysname",
				u.sysname,    "version",    u.version,
				NULL};
	if ((rc = kn_prom_family(out, "node_uname_info", "gauge",
				 "Labeled system information as provided by "
				 "the uname system call.")) < 0)
		return rc;
	return kn_prom_sample(out, "node_uname_info", labels, 1);
}

/* The os-release keys node_os_info carries, in its label order. */
enum os_key {
	OS_BUILD_ID,
	OS_ID,
	OS_ID_LIKE,
	OS_IMAGE_ID,
	OS_IMAGE_VERSION,
	OS_NAME,
	OS_PRETTY_NAME,
	OS_VARIANT,
	OS_VARIANT_ID,
	OS_VERSION,
	OS_VERSION_CODENAME,
	OS_VERSION_ID,
	OS_KEYS
};
static const char *const OS_FILE_KEYS[OS_KEYS] = {
	"BUILD_ID", "ID", "ID_LIKE", "IMAGE_ID", "IMAGE_VERSION", "NAME",
	"PRETTY_NAME", "VARIANT", "VARIANT_ID", "VERSION", "VERSION_CODENAME",
	"VERSION_ID"};
static const char *const OS_LABELS[OS_KEYS] = {
	"build_id", "id", "id_like", "image_id", "image_version", "name",
	"pretty_name", "variant", "variant_id", "version", "version_codename",
	"version_id"};

/*
 * One os-release value: unquoted, or in single quotes (taken as is), or
 * in double quotes (where \ escapes the next character), as the shell
 * reads the file (os-release(5)).
 */
static void os_value(const char *v, char *out, size_t len)
{
	size_t k = 0;
	char quote = (*v == '"' || *v == '\'') ? *v++ : 0;

	for (; *v && k + 1 < len; v++) {
		if (quote && *v == quote)
			break;
		if (quote == '"' && *v == '\\' && v[1])
			v++;
		out[k++] = *v;
	}
	out[k] = '\0';
}

static int write_os(const char *root, struct kn_buf *out,
		    struct kn_error *err)
{
	static const char *const files[] = {"/etc/os-release",
					    "/usr/lib/os-release"};
	char values[OS_KEYS][FIELD_MAX], *text = NULL, *line, *save = NULL;
	const char *labels[OS_KEYS * 2 + 1];
	size_t n = strlen(root), len;
	double version;
	int rc = -ENOENT;

	while (n > 0 && root[n - 1] == '/')
		n--;
	for (size_t f = 0; f < 2 && rc == -ENOENT; f++) {
		char *path = kn_asprintf("%.*s%s", (int)n, root, files[f]);
		rc = kn_read_file(path, OS_RELEASE_MAX, &text, &len);
		free(path);
	}
	if (rc < 0)
		return 0; /* node_exporter too has no series without the file */
	memset(values, 0, sizeof(values));
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		if (!eq || line[0] == '#')
			continue;
		*eq = '\0';
		for (size_t k = 0; k < OS_KEYS; k++)
			if (!strcmp(line, OS_FILE_KEYS[k]))
				os_value(eq + 1, values[k], FIELD_MAX);
	}
	free(text);
	for (size_t k = 0; k < OS_KEYS; k++) {
		labels[2 * k] = OS_LABELS[k];
		labels[2 * k + 1] = values[k];
	}
	labels[OS_KEYS * 2] = NULL;
	if ((rc = kn_prom_family(out, "node_os_info", "gauge",
				 "A metric with a constant '1' value labeled "
				 "by build_id, id, id_like, image_id, "
				 "image_version, name, pretty_name, variant, "
				 "variant_id, version, version_codename, "
				 "version_id.")) < 0 ||
	    (rc = kn_prom_sample(out, "node_os_info", labels, 1)) < 0)
		goto full;
	/* The major.minor prefix of VERSION_ID, when it has one. */
	version = strtod(values[OS_VERSION_ID], NULL);
	if (version > 0) {
		const char *vl[] = {"id", values[OS_ID], "id_like",
				    values[OS_ID_LIKE], "name", values[OS_NAME],
				    NULL};
		if ((rc = kn_prom_family(out, "node_os_version", "gauge",
					 "Metric containing the major.minor "
					 "part of the OS version.")) < 0 ||
		    (rc = kn_prom_sample(out, "node_os_version", vl,
					 version)) < 0)
			goto full;
	}
	return 0;
full:
	return rc == -EINVAL ? kn_errorf(err, KN_EIO, NULL,
					 "%s: os-release: bad value", root)
			     : kn_errorf(err, KN_ETOOBIG, NULL,
					 "scrape too large");
}

int kn_node_identity(const char *root, int64_t now_ms, struct kn_buf *out,
		     struct kn_error *err)
{
	int rc;

	if ((rc = write_uname(root, out)) < 0 ||
	    (rc = kn_prom_family(out, "node_time_seconds", "gauge",
				 "System time in seconds since epoch "
				 "(1970).")) < 0 ||
	    (rc = kn_prom_sample(out, "node_time_seconds", NULL,
				 (double)now_ms / 1000.0)) < 0)
		return kn_errorf(err, KN_ETOOBIG, NULL, "scrape too large");
	return write_os(root, out, err);
}
