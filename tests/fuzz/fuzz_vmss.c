/*
 * libFuzzer harness for the scale set client's readers of Azure's
 * answers (tokens, the scale set, VM list pages, operation status, error
 * bodies, Retry-After) and of the vmss= resource id. The first byte
 * picks the reader; the rest is the input. Invariants beyond "no crash":
 * a token is never empty and expires in the future, listed VMs have a
 * non-empty instance id and computer name, every field NUL-terminated.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmss/vmss.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void vms(const char *text, size_t len)
{
	struct kn_vmss_vm *list = NULL;
	struct kn_error err;
	char *next = NULL;
	size_t n = 0;

	if (kn_vmss_parse_vms(text, len, &list, &n, &next, &err) == 0) {
		for (size_t i = 0; i < n; i++)
			if (!list[i].instance_id[0] ||
			    !list[i].computer_name[0] ||
			    strnlen(list[i].state, sizeof(list[i].state)) ==
				    sizeof(list[i].state) ||
			    strnlen(list[i].zone, sizeof(list[i].zone)) ==
				    sizeof(list[i].zone))
				abort();
		if (next && !next[0])
			abort();
	}
	free(next);
	free(list);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kn_error err;
	char *text, status[32], why[256], out[512];
	int64_t value = 0;
	size_t len;

	if (size < 1 || size > 65536)
		return 0;
	len = size - 1;
	text = malloc(size);
	memcpy(text, data + 1, len);
	text[len] = '\0';
	switch (data[0] % 6) {
	case 0: {
		char *token = NULL;

		if (kn_vmss_parse_token(text, len, &token, &value, &err) == 0 &&
		    (!token[0] || value <= 0))
			abort();
		free(token);
		break;
	}
	case 1:
		if (kn_vmss_parse_capacity(text, len, &value, &err) == 0 &&
		    value < 0)
			abort();
		break;
	case 2:
		vms(text, len);
		break;
	case 3:
		kn_vmss_parse_operation(text, len, status, sizeof(status), why,
					sizeof(why), &err);
		break;
	case 4:
		kn_vmss_error_text(403, text, len, out, sizeof(out));
		if (strncmp(out, "HTTP 403 ", 9) != 0)
			abort();
		break;
	default:
		value = kn_vmss_retry_after_ms(text);
		if (value < -1)
			abort();
		kn_vmss_check_id(text, "vmss", &err);
		break;
	}
	free(text);
	return 0;
}
