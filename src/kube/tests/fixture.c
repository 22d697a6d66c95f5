#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "kube/kube.h"
#include "spec/spec.h"

const char *kube_fixtures;
struct kn_kube_products *fixture_products;

int fixture_products_load(void **state)
{
	struct kn_error err;

	(void)state;
	return kn_kube_products_load(KN_TEST_DATA_DIR "/gpu-products.csv",
				     &fixture_products, &err);
}

int fixture_products_free(void **state)
{
	(void)state;
	kn_kube_products_free(fixture_products);
	return 0;
}

json_t *fixture_load(const char *dir, const char *name)
{
	char path[512];
	json_t *v;

	snprintf(path, sizeof(path), "%s/%s%s%s", kube_fixtures, dir,
		 dir[0] ? "/" : "", name);
	v = json_load_file(path, 0, NULL);
	assert_non_null(v);
	return v;
}

json_t *fixture_at(json_t *v, const char *path)
{
	const char *p = path;

	while (v && *p) {
		size_t len = strlen(p), best = 0;
		char key[256];

		if (p[0] == '[') {
			v = json_array_get(v, (size_t)atoi(p + 1));
			p = strchr(p, ']') + 1;
		} else {
			for (size_t n = len; n > 0; n--) {
				if (n < len && p[n] != '.')
					continue;
				snprintf(key, sizeof(key), "%.*s", (int)n, p);
				if (json_object_get(v, key)) {
					best = n;
					break;
				}
			}
			if (!best)
				return NULL;
			snprintf(key, sizeof(key), "%.*s", (int)best, p);
			v = json_object_get(v, key);
			p += best;
		}
		if (*p == '.')
			p++;
	}
	return v;
}

const char *fixture_str(json_t *v, const char *path)
{
	const char *s = json_string_value(fixture_at(v, path));

	assert_non_null(s);
	return s;
}

json_int_t fixture_num(json_t *v, const char *path)
{
	json_t *n = fixture_at(v, path);

	assert_true(json_is_integer(n));
	return json_integer_value(n);
}


struct kn_job_spec *fixture_job_spec(const char *text)
{
	struct kn_job_spec *spec = NULL;
	struct kn_error err = {0};

	if (kn_job_spec_parse(text, strlen(text), "j.yaml", &spec, &err) != 0)
		fail_msg("j.yaml: %s", err.message);
	return spec;
}

struct kn_deployment_spec *fixture_deployment_spec(const char *text)
{
	struct kn_deployment_spec *d = NULL;
	struct kn_error err = {0};

	if (kn_deployment_spec_parse(text, strlen(text), "d.yaml", NULL, &d,
				     &err) != 0)
		fail_msg("d.yaml: %s", err.message);
	return d;
}
