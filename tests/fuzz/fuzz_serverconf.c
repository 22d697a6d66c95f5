/*
 * libFuzzer harness for the server's config file. Any input must either
 * parse, leaving every list and string it set readable, or fail with a
 * message naming the file and leave the sections' out-parameter alone.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spec/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One option of each kind, as a program's table would have them. */
struct fuzz_target {
	const char *text;
	int64_t ms, bytes, n;
	int small;
	bool on;
	const char **items;
	size_t n_items;
};

static const char *const choices[] = {"a", "b", NULL};

#define O(f) offsetof(struct fuzz_target, f)
static const struct kn_option opts[] = {
	{"text", KN_OPT_STRING, "T", O(text), .help = "t"},
	{"choice", KN_OPT_STRING, "C", O(text), .choices = choices, .help = "c"},
	{"path", KN_OPT_PATH, "P", O(text), .flags = KN_OPT_ABSOLUTE,
	 .help = "p"},
	{"every", KN_OPT_DURATION, "D", O(ms), .min = 1000,
	 .flags = KN_OPT_ZERO_IS_NONE, .help = "d"},
	{"size", KN_OPT_SIZE, "S", O(bytes), .min = 4096, .help = "s"},
	{"count", KN_OPT_COUNT, "N", O(n), .min = 1, .max = 100, .help = "n"},
	{"small", KN_OPT_COUNT, "N", O(small), .min = 1, .max = 9,
	 .flags = KN_OPT_INT, .help = "i"},
	{"on", KN_OPT_BOOL, NULL, O(on), .help = "b"},
	{"item", KN_OPT_LIST, "I", O(items), O(n_items), .help = "l"},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_server_conf conf = {.n_signers = 7};
	struct fuzz_target t = {0};
	struct kn_strpool pool = {0};
	struct kn_error err;
	size_t sum = 0;

	memset(&err, 0, sizeof(err));
	if (kn_server_conf_parse((const char *)data, size, "fuzz.yaml", opts,
				 sizeof(opts) / sizeof(opts[0]), &t, &pool,
				 &conf, NULL, &err) != 0) {
		if (conf.n_signers != 7 || strncmp(err.message, "fuzz.yaml", 9))
			abort();
		kn_strpool_release(&pool);
		return 0;
	}
	for (size_t i = 0; i < t.n_items; i++)
		sum += strlen(t.items[i]);
	for (size_t i = 0; i < conf.n_signers; i++)
		sum += strlen(conf.signers[i].name) +
		       strlen(conf.signers[i].key_file);
	for (size_t i = 0; i < conf.n_stores; i++)
		sum += strlen(conf.stores[i].name) + strlen(conf.stores[i].url);
	if (t.text)
		sum += strlen(t.text);
	kn_server_conf_release(&conf);
	kn_strpool_release(&pool);
	return sum == (size_t)-1;
}
