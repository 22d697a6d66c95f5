/*
 * libFuzzer harness for ckpt's parsers of outside text: store URLs,
 * connection strings, List Blobs XML pages and checkpoint manifests. The
 * first byte picks the parser; the rest is the input. Invariants checked
 * beyond "no crash": parsed manifests re-serialize and parse back the same,
 * listed names are never empty.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void manifest(const char *text, size_t len)
{
	struct kn_ckpt_manifest m = {0}, back = {0};
	struct kn_error err;
	char *json;

	if (kn_ckpt_manifest_parse(text, len, "fuzz", &m, &err) < 0)
		return;
	json = kn_ckpt_manifest_to_json(&m);
	if (kn_ckpt_manifest_parse(json, strlen(json), "again", &back, &err) < 0 ||
	    back.n != m.n || strcmp(back.name, m.name) != 0)
		abort();
	for (size_t i = 0; i < m.n; i++)
		if (strcmp(back.files[i].path, m.files[i].path) != 0 ||
		    back.files[i].size != m.files[i].size)
			abort();
	free(json);
	kn_ckpt_manifest_release(&m);
	kn_ckpt_manifest_release(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_error err;
	char *text;
	size_t len;

	if (size < 1 || size > 65536)
		return 0;
	len = size - 1;
	text = malloc(size);
	memcpy(text, data + 1, len);
	text[len] = '\0';
	switch (data[0] % 4) {
	case 0: {
		struct kn_azure_url u;
		if (kn_azure_parse_url(text, &u, &err) == 0) {
			if (!u.account[0] || !u.container[0])
				abort();
			kn_azure_url_release(&u);
		}
		break;
	}
	case 1: {
		struct kn_azure_conn c;
		if (kn_azure_parse_connection_string(text, &c, &err) == 0)
			kn_azure_conn_release(&c);
		break;
	}
	case 2: {
		struct kn_blob_list list = {0};
		char *marker = NULL;
		if (kn_azure_parse_list(text, len, "p/", &list, &marker,
					&err) == 0) {
			for (size_t i = 0; i < list.n; i++)
				if (!list.items[i].name[0])
					abort();
			free(marker);
		}
		kn_blob_list_release(&list);
		break;
	}
	default:
		manifest(text, len);
	}
	free(text);
	return 0;
}
