/*
 * Kubernetes resource quantities ("500m", "16Gi", "1e9", "131896204Ki").
 *
 * The API always sends the canonical form, which is a decimal number with
 * one suffix; a double holds any amount a node or pod has (far below
 * 2^53 bytes) exactly enough, and amounts are rounded up as the API does
 * when it converts to a coarser unit.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"

struct suffix {
	const char *name;
	double factor;
};

static const struct suffix suffixes[] = {
	{"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0},
	{"Ti", 1099511627776.0}, {"Pi", 1125899906842624.0},
	{"m", 1e-3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
	{"P", 1e15}, {"", 1.0},
};

/* The quantity in base units (cores, bytes). */
static int quantity(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s || !(s[0] == '+' || s[0] == '.' ||
			   (s[0] >= '0' && s[0] <= '9')) ||
	    strpbrk(s, "xX"))  /* strtod reads hex; no quantity is hex */
		return -EINVAL;
	v = strtod(s, &end);
	if (end == s || !isfinite(v) || v < 0)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++)
		if (!strcmp(end, suffixes[i].name)) {
			*out = v * suffixes[i].factor;
			return 0;
		}
	return -EINVAL;
}

int kn_kube_quantity_milli(const char *s, int64_t *out)
{
	double v;

	if (quantity(s, &v) < 0 || v * 1000.0 > (double)INT64_MAX / 2)
		return -EINVAL;
	*out = (int64_t)ceil(v * 1000.0 - 1e-9);
	return 0;
}

int kn_kube_quantity_bytes(const char *s, int64_t *out)
{
	double v;

	if (quantity(s, &v) < 0 || v > (double)INT64_MAX / 2)
		return -EINVAL;
	*out = (int64_t)ceil(v - 1e-9);
	return 0;
}
