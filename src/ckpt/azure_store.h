/*
 * The Azure backend's store object, shared by its request code
 * (azure.c) and its opening (azure_open.c).
 */
#ifndef KILN_CKPT_AZURE_STORE_H
#define KILN_CKPT_AZURE_STORE_H

#include <curl/curl.h>

#include "ckpt/internal.h"

struct azure {
	char *origin;    /* scheme://host[:port] */
	char *path_base; /* "" or "/account" */
	char *account;
	char *container;
	char *prefix;
	unsigned char key[128];
	size_t key_len;
	char *sas;
	char *version;
	size_t block_size;
	size_t single_put_max;
	int parallel;
	int max_retries;
	int64_t retry_base_ms;
	CURL *easy;
	CURLM *multi;
	CURL *block_easy[KN_BLOB_MAX_PARALLEL];
};

#endif
