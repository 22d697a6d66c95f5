/*
 * libFuzzer harness for the gateway's parsers of outside input: the route
 * table (from the server or a file), the saved counters, and the usage
 * scan of model servers' answers, and the request body scan, which must
 * refuse what jansson refuses and read the same "model" and "stream". The
 * first byte picks the parser.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data + 1;
	size_t len = size - 1;
	struct kn_error err;

	if (size < 1 || size > 65536)
		return 0;
	switch (data[0] % 4) {
	case 0: {
		struct kn_gw_config *cfg = NULL;
		if (kn_gw_config_parse_text(text, len, &cfg, &err) == 0) {
			for (size_t i = 0; i < cfg->n_deployments; i++) {
				const char *fb = cfg->deployments[i].fallback;
				if (fb[0] && !kn_gw_config_deployment(cfg, fb))
					abort();
			}
			kn_gw_config_unref(cfg);
		} else if (cfg || !err.message[0]) {
			abort();
		}
		break;
	}
	case 1: {
		struct kn_gw_usage u;
		kn_gw_usage_read(text, len, &u);
		if (u.total_tokens < 0 || u.completion_tokens < 0)
			abort();
		break;
	}
	case 3: {
		static struct kn_gw_body b;
		json_t *doc = json_loadb(text, len, 0, NULL);
		json_t *model = json_object_get(doc, "model");
		if ((kn_gw_body_scan(text, len, &b) == 0) != (doc != NULL))
			abort();
		if (doc && (b.object != json_is_object(doc) ||
			    b.has_model != (model != NULL) ||
			    b.model_string != json_is_string(model) ||
			    b.stream != json_is_true(json_object_get(doc,
								       "stream"))))
			abort();
		if (json_is_string(model) && !b.model_cut &&
		    (b.model_len != json_string_length(model) ||
		     memcmp(b.model, json_string_value(model), b.model_len)))
			abort();
		json_decref(doc);
		break;
	}
	default: {
		json_t *doc = json_loadb(text, len, 0, NULL);
		struct kn_gw_limiter *l = kn_gw_limiter_new();
		if (doc && kn_gw_limiter_load(l, doc, &err) == 0)
			json_decref(kn_gw_limiter_save(l));
		json_decref(doc);
		kn_gw_limiter_free(l);
		break;
	}
	}
	return 0;
}
