/*
 * The GPU product table: kiln's model names against the
 * nvidia.com/gpu.product labels on Kubernetes nodes.
 *
 * A line is "model,product,source"; the source runs to the end of the
 * line (it may hold quotes), so no CSV quoting is needed or accepted in
 * the first two columns. The table is tiny: linear search.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kube/kube.h"

/* A table of every GPU there is would still be far below this. */
#define PRODUCTS_MAX_BYTES (256 * 1024)
#define PRODUCTS_HEADER "model,product,source"

struct kn_kube_product {
	char *model;
	char *product;
};

struct kn_kube_products {
	struct kn_kube_product *rows;
	size_t n;
};

void kn_kube_products_free(struct kn_kube_products *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		KN_FREE_ALL(p->rows[i].model, p->rows[i].product);
	}
	KN_FREE_ALL(p->rows, p);
}

/* Model and product names: letters, digits, '-', '.', '_'. */
static bool name_ok(const char *s, size_t len)
{
	if (len == 0 || len > 63)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || strchr("-._", s[i])))
			return false;
	return true;
}

int kn_kube_products_parse(const char *text, size_t len, const char *file,
			   struct kn_kube_products **out,
			   struct kn_error *err)
{
	struct kn_kube_products *p = kn_xcalloc(1, sizeof(*p));
	const char *line = text, *end = text + len;
	int lineno = 0, rc = 0;

	if (len > PRODUCTS_MAX_BYTES) {
		rc = kn_errorf(err, KN_ETOOBIG, NULL, "%s: larger than %d bytes",
			       file, PRODUCTS_MAX_BYTES);
		goto out;
	}
	while (line < end) {
		const char *nl = memchr(line, '\n', (size_t)(end - line));
		const char *stop = nl ? nl : end;
		const char *c1, *c2;
		size_t n = (size_t)(stop - line);

		lineno++;
		if (n && line[n - 1] == '\r')
			n--;
		if (lineno == 1) {
			if (n != strlen(PRODUCTS_HEADER) ||
			    memcmp(line, PRODUCTS_HEADER, n)) {
				rc = kn_errorf(err, KN_EINVAL, NULL,
					       "%s:1: the header must be \"%s\"",
					       file, PRODUCTS_HEADER);
				goto out;
			}
			goto next;
		}
		if (n == 0)
			goto next;
		c1 = memchr(line, ',', n);
		c2 = c1 ? memchr(c1 + 1, ',', (size_t)(line + n - c1 - 1)) :
			  NULL;
		if (!c1 || !name_ok(line, (size_t)(c1 - line))) {
			rc = kn_errorf(err, KN_EINVAL, "model",
				       "%s:%d: model: want a GPU model name "
				       "such as H100-80GB", file, lineno);
			goto out;
		}
		if (!c2 || !name_ok(c1 + 1, (size_t)(c2 - c1 - 1))) {
			rc = kn_errorf(err, KN_EINVAL, "product",
				       "%s:%d: product: want a node label value "
				       "such as NVIDIA-H100-80GB-HBM3",
				       file, lineno);
			goto out;
		}
		if (c2 + 1 >= line + n) {
			rc = kn_errorf(err, KN_EINVAL, "source",
				       "%s:%d: source: say where the product "
				       "name comes from", file, lineno);
			goto out;
		}
		p->rows = kn_xrealloc(p->rows, (p->n + 1) * sizeof(*p->rows));
		p->rows[p->n].model = strndup(line, (size_t)(c1 - line));
		p->rows[p->n].product =
			strndup(c1 + 1, (size_t)(c2 - c1 - 1));
		if (!p->rows[p->n].model || !p->rows[p->n].product)
			abort();
		p->n++;
next:
		line = nl ? nl + 1 : end;
	}
	if (lineno == 0)
		rc = kn_errorf(err, KN_EINVAL, NULL, "%s: empty", file);
out:
	if (rc < 0) {
		kn_kube_products_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

int kn_kube_products_load(const char *path, struct kn_kube_products **out,
			  struct kn_error *err)
{
	char *text;
	size_t len;
	int rc = kn_read_file(path, PRODUCTS_MAX_BYTES, &text, &len);

	if (rc < 0)
		return kn_errorf(err, rc == -EFBIG ? KN_ETOOBIG : KN_EIO, NULL,
				 "%s: %s", path, strerror(-rc));
	rc = kn_kube_products_parse(text, len, path, out, err);
	free(text);
	return rc;
}

size_t kn_kube_products_for(const struct kn_kube_products *p,
			    const char *model, const char **out, size_t max)
{
	size_t k = 0;

	for (size_t i = 0; p && i < p->n; i++) {
		if (!kn_sched_model_accepts(model, p->rows[i].model))
			continue;
		if (k < max)
			out[k] = p->rows[i].product;
		k++;
	}
	return k;
}

const char *kn_kube_model_for(const struct kn_kube_products *p,
			      const char *product)
{
	for (size_t i = 0; p && i < p->n; i++)
		if (!strcasecmp(p->rows[i].product, product))
			return p->rows[i].model;
	return NULL;
}
