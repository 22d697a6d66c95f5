/*
 * libFuzzer harness for the --task-user-map parser (kn_user_map_parse):
 * a map that parses must answer every one of its users by position and
 * name a user of the allowed characters; one that does not must say
 * where (FILE:LINE:COLUMN) and leave the out-parameter alone.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/sandbox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_user_map *map = (struct kn_user_map *)&size;
	struct kn_error err;
	char *text;

	if (size > 65536)
		return 0;
	text = malloc(size + 1);
	if (!text)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	if (kn_user_map_parse(text, "map", &map, &err) != 0) {
		if (map != (struct kn_user_map *)&size ||
		    strncmp(err.message, "map:", 4) != 0)
			abort();
		free(text);
		return 0;
	}
	for (size_t i = 0; i < kn_user_map_count(map); i++) {
		const char *user = kn_user_map_user_at(map, i);
		size_t n = strlen(user);
		if (n == 0 || n > 32 || user[0] == '-' ||
		    strspn(user, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
				 "TUVWXYZ0123456789._-") != n)
			abort();
	}
	kn_user_map_lookup(map, "alice");
	kn_user_map_free(map);
	free(text);
	return 0;
}
