/*
 * An Azure Virtual Machine Scale Sets client (ARM REST): read and set a
 * scale set's capacity, list its VMs, delete one instance, with tokens
 * from a managed identity (IMDS) or a service principal (client
 * credentials). The node pools' `azure` provider
 * (src/server/pool_providers.c) runs it on a worker thread: every call
 * blocks.
 *
 * The pure half (URLs, bodies, parsing of Azure's answers) is separate so
 * unit tests reach it without a network. Formats follow Azure's REST
 * reference for Compute api-version 2024-07-01 (docs/capacity.md); kiln
 * is tested against recordings of them, not against Azure.
 */
#ifndef KILN_VMSS_H
#define KILN_VMSS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define KN_VMSS_API_VERSION "2024-07-01"
#define KN_VMSS_IMDS_API_VERSION "2018-02-01"
#define KN_VMSS_ARM_URL "https://management.azure.com"
#define KN_VMSS_IMDS_URL "http://169.254.169.254"
#define KN_VMSS_LOGIN_URL "https://login.microsoftonline.com"
/* The token's audience: ARM. */
#define KN_VMSS_RESOURCE "https://management.azure.com/"

enum kn_vmss_identity {
	KN_VMSS_MANAGED_IDENTITY,
	KN_VMSS_SERVICE_PRINCIPAL,
};

struct kn_vmss_config {
	/* /subscriptions/S/resourceGroups/RG/providers/
	   Microsoft.Compute/virtualMachineScaleSets/NAME */
	const char *id;
	/* Base URLs without a trailing slash; NULL: Azure's public cloud. */
	const char *arm_url, *imds_url, *login_url;
	enum kn_vmss_identity identity;
	/* Managed identity: a user-assigned one's client id, or NULL for
	   the system-assigned one. Service principal: the app's id. */
	const char *client_id;
	const char *tenant_id;     /* service principal */
	const char *client_secret; /* service principal; never shown */
};

struct kn_vmss_vm {
	char instance_id[32];
	char computer_name[64];
	char state[32]; /* provisioningState: Creating, Succeeded, ... */
	char zone[16];  /* "" outside zones */
};

/* ---- pure ---- */

/* A scale set's resource id as above; err names field. */
int kn_vmss_check_id(const char *id, const char *field, struct kn_error *err);
/* ARM URL of the scale set id (plus suffix such as "/virtualMachines"),
   with the api-version. */
char *kn_vmss_url(const char *arm_url, const char *id, const char *suffix);
/* {"sku":{"capacity":N}} */
char *kn_vmss_capacity_body(int64_t capacity);
/* {"instanceIds":["ID"]} */
char *kn_vmss_delete_body(const char *instance_id);
char *kn_vmss_imds_token_url(const char *imds_url, const char *client_id);
char *kn_vmss_login_token_url(const char *login_url, const char *tenant_id);
/* The client-credentials form body (holds the secret: free it wiped). */
char *kn_vmss_login_token_body(const char *client_id, const char *secret);

/* A token answer (IMDS gives expires_in as a string, Entra ID as a
   number): *token malloc'd. */
int kn_vmss_parse_token(const char *body, size_t len, char **token,
			int64_t *expires_in_s, struct kn_error *err);
/* A scale set's sku.capacity. */
int kn_vmss_parse_capacity(const char *body, size_t len, int64_t *capacity,
			   struct kn_error *err);
/* One page of a VM list: appends to *vms, *next_link malloc'd or NULL. */
int kn_vmss_parse_vms(const char *body, size_t len, struct kn_vmss_vm **vms,
		      size_t *n, char **next_link, struct kn_error *err);
/* An Azure-AsyncOperation status document: status into out (InProgress,
   Succeeded, Failed, Canceled); on Failed or Canceled, Azure's error
   into why. */
int kn_vmss_parse_operation(const char *body, size_t len, char *out,
			    size_t out_len, char *why, size_t why_len,
			    struct kn_error *err);
/* What an error answer says: ARM's {"error":{"code","message"}}, or
   Entra ID's and IMDS's {"error","error_description"}, or the status. */
void kn_vmss_error_text(long status, const char *body, size_t len, char *out,
			size_t out_len);
/* Retry-After in seconds (ARM sends no dates) as ms; -1 if absent. */
int64_t kn_vmss_retry_after_ms(const char *value);

/* ---- the client: blocking ---- */

struct kn_vmss_client;

/* Copies cfg; a call gives up when *stop turns non-zero (may be NULL). */
int kn_vmss_client_new(const struct kn_vmss_config *cfg,
		       volatile const int *stop, struct kn_vmss_client **out,
		       struct kn_error *err);
void kn_vmss_client_free(struct kn_vmss_client *c);
int kn_vmss_capacity(struct kn_vmss_client *c, int64_t *capacity,
		     struct kn_error *err);
/* PATCH the capacity and wait for the operation to end. */
int kn_vmss_set_capacity(struct kn_vmss_client *c, int64_t capacity,
			 struct kn_error *err);
/* Every VM of the scale set (*vms malloc'd). */
int kn_vmss_list(struct kn_vmss_client *c, struct kn_vmss_vm **vms,
		 size_t *n, struct kn_error *err);
/* Delete one instance and wait for the operation to end. */
int kn_vmss_delete_instance(struct kn_vmss_client *c, const char *instance_id,
			    struct kn_error *err);

#endif
