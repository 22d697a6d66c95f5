/*
 * registry: models as named, numbered, immutable versions of a set of
 * files, their manifests, Ed25519 signatures over them, and the parallel
 * hashing that pushes and verifications share.
 *
 * Blobs are content-addressed: a file with digest D lives in the blob
 * store as "sha256/D", written create-only, so two versions sharing a file
 * share its blob. A version's manifest is a JSON object
 *
 *   {"name": N, "version": K, "files": [{"path", "sha256", "size"}...],
 *    "created_by": WHO, "created_at_ms": T, "lineage": null,
 *    "metrics": null}
 *
 * with files sorted by path. Its canonical bytes, the ones signed, are
 * json_dumps(manifest, JSON_SORT_KEYS | JSON_COMPACT): keys sorted, no
 * whitespace, integers as integers (docs/registry.md).
 *
 * Nothing here talks to the store or the network; callers hand in files.
 */
#ifndef KILN_REGISTRY_H
#define KILN_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"

#define KN_MODEL_NAME_MAX 64
#define KN_ED25519_PUB_LEN 32
#define KN_ED25519_SIG_LEN 64

/* ---- names and references ---- */

/* 1..64 of A-Z a-z 0-9 '.' '_' '-', starting with a letter or digit. */
bool kn_model_name_ok(const char *name);
/* An alias is a name that is not all digits (those are versions). */
bool kn_model_alias_ok(const char *alias);
/* 64 lowercase hex digits. */
bool kn_sha256_hex_ok(const char *hex);

/* "N", "N@3" or "N@alias". */
struct kn_model_ref {
	char name[KN_MODEL_NAME_MAX + 1];
	int64_t version;                   /* 0 when none or an alias */
	char alias[KN_MODEL_NAME_MAX + 1]; /* "" when none or a version */
};
/*
 * Parse a reference; with need_at, "N" alone is refused. err names field
 * and says what a good one looks like.
 */
int kn_model_ref_parse(const char *text, bool need_at, const char *field,
		       struct kn_model_ref *out, struct kn_error *err);
/* A reference names a version or alias (has an '@' part). */
bool kn_model_ref_has_at(const struct kn_model_ref *ref);

/* ---- files and manifests ---- */

struct kn_model_file {
	char *path; /* relative, '/'-separated, no "." or ".." parts */
	int64_t size;
	char sha256[KN_SHA256_HEX + 1];
};

struct kn_model_files {
	struct kn_model_file *items; /* sorted by path, no duplicates */
	size_t n;
};
void kn_model_files_release(struct kn_model_files *f);
/* Take a copy of one file (path is copied) into f, unsorted. */
void kn_model_files_add(struct kn_model_files *f, const char *path,
			int64_t size, const char *sha256);
/* Sort by path; -EINVAL naming the path when one appears twice. */
int kn_model_files_sort(struct kn_model_files *f, struct kn_error *err);
/* The total of every file's size. */
int64_t kn_model_files_bytes(const struct kn_model_files *f);

/*
 * Read a JSON array of {"path", "sha256", "size"} (field names it in
 * errors: "files[3].sha256: ..."), check each and sort by path.
 */
int kn_model_files_from_json(json_t *array, const char *field,
			     struct kn_model_files *out, struct kn_error *err);
json_t *kn_model_files_to_json(const struct kn_model_files *f);

/* A new manifest object (see the top of this file). */
json_t *kn_model_manifest_new(const char *name, int64_t version,
			      const struct kn_model_files *files,
			      const char *created_by, int64_t created_at_ms);
/* The canonical bytes (malloc'd, NUL-terminated), or NULL on bad JSON. */
char *kn_model_manifest_canonical(const json_t *manifest);
/* Check a manifest's shape and read its files, name and version. */
int kn_model_manifest_read(const json_t *manifest, const char *source,
			   struct kn_model_files *files, const char **name,
			   int64_t *version, struct kn_error *err);

/* "sha256/HEX", malloc'd. */
char *kn_model_blob_name(const char *sha256);
/* "models/NAME/VERSION.json", malloc'd. */
char *kn_model_manifest_blob_name(const char *name, int64_t version);

/* ---- signatures (Ed25519, OpenSSL 3) ---- */

/* sha256 hex of the raw 32-byte public key. */
void kn_model_key_id(const unsigned char pub[KN_ED25519_PUB_LEN],
		     char id[KN_SHA256_HEX + 1]);
/*
 * A new key pair: the private key as PEM (PKCS#8) in path, created 0600
 * and refused when path exists, and the public key as PEM
 * (SubjectPublicKeyInfo) in path.pub (0644). id gets the key id.
 */
int kn_model_keygen(const char *path, char id[KN_SHA256_HEX + 1],
		    struct kn_error *err);
/* Sign msg with the private key in key_path; pub gets its public half. */
int kn_model_sign(const char *key_path, const void *msg, size_t len,
		  unsigned char pub[KN_ED25519_PUB_LEN],
		  unsigned char sig[KN_ED25519_SIG_LEN], struct kn_error *err);
/* 0 when sig is pub's signature of msg, else -EBADMSG. */
int kn_model_sig_check(const unsigned char pub[KN_ED25519_PUB_LEN],
		       const void *msg, size_t len,
		       const unsigned char sig[KN_ED25519_SIG_LEN]);
/* The raw public key of a PEM public key file (*.pub). */
int kn_model_pub_load(const char *path, unsigned char pub[KN_ED25519_PUB_LEN],
		      struct kn_error *err);

/* The key ids of dir's *.pub files, sorted; a missing dir is empty. */
struct kn_model_keyring {
	char (*ids)[KN_SHA256_HEX + 1];
	size_t n;
};
int kn_model_keyring_load(const char *dir, struct kn_model_keyring *out,
			  struct kn_error *err);
bool kn_model_keyring_has(const struct kn_model_keyring *k, const char *id);
void kn_model_keyring_release(struct kn_model_keyring *k);

/* A version's signature as the API gives it. */
struct kn_model_sig {
	const char *key_id;     /* sha256 hex of the raw public key */
	const char *public_key; /* base64 of the raw 32 bytes */
	const char *signature;  /* base64 of the 64 bytes */
	bool trusted;           /* the key is in the trusted key ring */
};
/*
 * The gate of pull, verify and deploy: 0 when a signature by a trusted
 * key verifies over the canonical manifest bytes; otherwise -EPERM with
 * err saying why, naming the version at ("NAME@VERSION"): unsigned,
 * signed only by untrusted keys, or a signature that does not verify.
 */
int kn_model_trust_check(const char *at, const char *canonical,
			 const struct kn_model_sig *sigs, size_t n,
			 struct kn_error *err);

/* Standard base64 (with padding); decode returns the length or -EINVAL. */
char *kn_base64_encode(const unsigned char *data, size_t len);
int kn_base64_decode(const char *text, unsigned char *out, size_t max);

/* ---- parallel hashing ---- */

struct kn_hash_item {
	const char *path;               /* in */
	char sha256[KN_SHA256_HEX + 1]; /* out */
	int64_t size;                   /* out: bytes read */
	int error;                      /* out: 0 or a negative errno */
};

/* Bytes hashed so far of total; called at most every 64 MiB per thread. */
typedef void (*kn_hash_progress)(int64_t done, int64_t total, void *arg);

/* The CPU count this process may use (at least 1). */
int kn_hash_threads_default(void);
/*
 * Hash every item's file with up to threads threads (each file on one
 * thread: SHA-256 is sequential), streaming large reads with
 * posix_fadvise(SEQUENTIAL). total (for progress) is the bytes expected.
 * Per-file failures land in item->error; the call itself cannot fail.
 */
void kn_hash_files(struct kn_hash_item *items, size_t n, int threads,
		   int64_t total, kn_hash_progress progress, void *arg);

/* ---- re-validation thresholds (threshold.c) ---- */

#define KN_MODEL_METRIC_MAX 64

/*
 * Check a thresholds document, {"max": {metric: number}, "min": {...}},
 * with at least one threshold. -EINVAL naming the bad part.
 */
int kn_model_thresholds_validate(json_t *doc, struct kn_error *err);
/*
 * Add "METRIC=NUMBER" (the CLI's --max / --min) to doc under kind ("max"
 * or "min"). -EINVAL naming the flag; doc unchanged then.
 */
int kn_model_threshold_add(json_t *doc, const char *kind, const char *text,
			   struct kn_error *err);
/*
 * Whether metrics (metrics.json's object) meet every threshold: a max is
 * broken by a larger value, a min by a smaller one, either by a missing or
 * non-finite metric. When not, why names the first broken one ("loss 2.5 >
 * max 1.8").
 */
bool kn_model_thresholds_pass(json_t *thresholds, json_t *metrics, char *why,
			      size_t len);

#endif
