/*
 * The pure half of the scale set client: what kiln sends (URLs, bodies)
 * and what it reads from Azure's answers.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "vmss/vmss.h"

/* Resource group names allow these besides letters and digits; the
   other parts allow fewer, so one rule keeps URLs plain. */
static bool id_part_ok(const char *s, size_t len)
{
	if (len == 0 || len > 90)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("-_.()", s[i]))
			return false;
	return true;
}

int kn_vmss_check_id(const char *id, const char *field, struct kn_error *err)
{
	static const char *const fixed[] = {
		"subscriptions", NULL, "resourceGroups", NULL, "providers",
		"Microsoft.Compute", "virtualMachineScaleSets", NULL,
	};
	const char *p = id;
	size_t k = 0;

	while (*p == '/' && k < sizeof(fixed) / sizeof(*fixed)) {
		const char *start = ++p;
		size_t len = strcspn(start, "/");

		p = start + len;
		if (fixed[k] ? strlen(fixed[k]) != len ||
				       strncasecmp(start, fixed[k], len)
			     : !id_part_ok(start, len))
			break;
		k++;
	}
	if (k < sizeof(fixed) / sizeof(*fixed) || *p)
		return kn_errorf(err, KN_EINVAL, field,
				 "%s: \"%s\" is not /subscriptions/SUB/"
				 "resourceGroups/RG/providers/Microsoft.Compute/"
				 "virtualMachineScaleSets/NAME",
				 field, id);
	return 0;
}

char *kn_vmss_url(const char *arm_url, const char *id, const char *suffix)
{
	return kn_asprintf("%s%s%s?api-version=%s", arm_url, id,
			   suffix ? suffix : "", KN_VMSS_API_VERSION);
}

char *kn_vmss_capacity_body(int64_t capacity)
{
	return kn_asprintf("{\"sku\":{\"capacity\":%lld}}", (long long)capacity);
}

char *kn_vmss_delete_body(const char *instance_id)
{
	json_t *doc = json_pack("{s:[s]}", "instanceIds", instance_id);
	char *text = json_dumps(doc, JSON_COMPACT);

	json_decref(doc);
	if (!text)
		abort();
	return text;
}

char *kn_vmss_imds_token_url(const char *imds_url, const char *client_id)
{
	struct kn_buf b;

	kn_buf_init(&b, 8192);
	kn_buf_printf(&b,
		      "%s/metadata/identity/oauth2/token?api-version=%s"
		      "&resource=",
		      imds_url, KN_VMSS_IMDS_API_VERSION);
	kn_buf_append_url_encoded(&b, KN_VMSS_RESOURCE, false);
	if (client_id) {
		kn_buf_printf(&b, "&client_id=");
		kn_buf_append_url_encoded(&b, client_id, false);
	}
	return b.data;
}

char *kn_vmss_login_token_url(const char *login_url, const char *tenant_id)
{
	return kn_asprintf("%s/%s/oauth2/v2.0/token", login_url, tenant_id);
}

char *kn_vmss_login_token_body(const char *client_id, const char *secret)
{
	struct kn_buf b;

	kn_buf_init(&b, 64 * 1024);
	kn_buf_printf(&b, "grant_type=client_credentials&client_id=");
	kn_buf_append_url_encoded(&b, client_id, false);
	kn_buf_printf(&b, "&scope=");
	kn_buf_append_url_encoded(&b, KN_VMSS_RESOURCE ".default", false);
	kn_buf_printf(&b, "&client_secret=");
	kn_buf_append_url_encoded(&b, secret, false);
	return b.data;
}

static json_t *load(const char *body, size_t len, const char *what,
		    struct kn_error *err)
{
	json_error_t jerr;
	json_t *doc = json_loadb(body, len, 0, &jerr);

	if (!json_is_object(doc)) {
		json_decref(doc);
		kn_errorf(err, KN_EIO, NULL, "%s: not a JSON object: %.120s",
			  what, doc ? "" : jerr.text);
		return NULL;
	}
	return doc;
}

int kn_vmss_parse_token(const char *body, size_t len, char **token,
			int64_t *expires_in_s, struct kn_error *err)
{
	json_t *doc = load(body, len, "token answer", err), *exp;
	const char *access;
	int rc = 0;

	if (!doc)
		return -EIO;
	access = json_string_value(json_object_get(doc, "access_token"));
	exp = json_object_get(doc, "expires_in");
	*expires_in_s = json_is_integer(exp) ? json_integer_value(exp)
			: json_is_string(exp)
				? strtoll(json_string_value(exp), NULL, 10)
				: 0;
	if (!access || !*access || *expires_in_s <= 0)
		rc = kn_errorf(err, KN_EIO, NULL,
			       "token answer: no access_token or expires_in");
	else
		*token = kn_xstrdup(access);
	json_decref(doc);
	return rc;
}

int kn_vmss_parse_capacity(const char *body, size_t len, int64_t *capacity,
			   struct kn_error *err)
{
	json_t *doc = load(body, len, "scale set", err), *cap;
	int rc = 0;

	if (!doc)
		return -EIO;
	cap = json_object_get(json_object_get(doc, "sku"), "capacity");
	if (!json_is_integer(cap) || json_integer_value(cap) < 0)
		rc = kn_errorf(err, KN_EIO, NULL,
			       "scale set: no sku.capacity in the answer");
	else
		*capacity = json_integer_value(cap);
	json_decref(doc);
	return rc;
}

int kn_vmss_parse_vms(const char *body, size_t len, struct kn_vmss_vm **vms,
		      size_t *n, char **next_link, struct kn_error *err)
{
	json_t *doc = load(body, len, "VM list", err), *value, *vm;
	const char *next;
	size_t i;

	*next_link = NULL;
	if (!doc)
		return -EIO;
	value = json_object_get(doc, "value");
	if (!json_is_array(value)) {
		json_decref(doc);
		return kn_errorf(err, KN_EIO, NULL,
				 "VM list: no \"value\" array in the answer");
	}
	json_array_foreach(value, i, vm) {
		json_t *props = json_object_get(vm, "properties");
		const char *id =
			json_string_value(json_object_get(vm, "instanceId"));
		const char *name = json_string_value(json_object_get(
			json_object_get(props, "osProfile"), "computerName"));
		const char *state = json_string_value(
			json_object_get(props, "provisioningState"));
		const char *zone = json_string_value(
			json_array_get(json_object_get(vm, "zones"), 0));
		struct kn_vmss_vm *v;

		if (!id || !*id || strlen(id) >= sizeof((*vms)->instance_id) ||
		    !name || !*name ||
		    strlen(name) >= sizeof((*vms)->computer_name) || !state) {
			json_decref(doc);
			return kn_errorf(err, KN_EIO, NULL,
					 "VM list: VM %zu lacks instanceId, "
					 "osProfile.computerName (of at most "
					 "63 characters) or provisioningState",
					 i);
		}
		*vms = kn_xrealloc(*vms, (*n + 1) * sizeof(**vms));
		v = &(*vms)[(*n)++];
		kn_strlcpy(v->instance_id, id, sizeof(v->instance_id));
		kn_strlcpy(v->computer_name, name, sizeof(v->computer_name));
		kn_strlcpy(v->state, state, sizeof(v->state));
		kn_strlcpy(v->zone, zone ? zone : "", sizeof(v->zone));
	}
	next = json_string_value(json_object_get(doc, "nextLink"));
	if (next && *next)
		*next_link = kn_xstrdup(next);
	json_decref(doc);
	return 0;
}

/* ARM's error object {"code","message"} as "CODE: MESSAGE". */
static void arm_error(json_t *e, char *out, size_t out_len)
{
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *message = json_string_value(json_object_get(e, "message"));

	snprintf(out, out_len, "%s: %s", code ? code : "(no code)",
		 message ? message : "(no message)");
}

int kn_vmss_parse_operation(const char *body, size_t len, char *out,
			    size_t out_len, char *why, size_t why_len,
			    struct kn_error *err)
{
	json_t *doc = load(body, len, "operation status", err);
	const char *status;

	if (!doc)
		return -EIO;
	status = json_string_value(json_object_get(doc, "status"));
	if (!status) {
		json_decref(doc);
		return kn_errorf(err, KN_EIO, NULL,
				 "operation status: no \"status\"");
	}
	kn_strlcpy(out, status, out_len);
	why[0] = '\0';
	if (!strcmp(status, "Failed") || !strcmp(status, "Canceled"))
		arm_error(json_object_get(doc, "error"), why, why_len);
	json_decref(doc);
	return 0;
}

void kn_vmss_error_text(long status, const char *body, size_t len, char *out,
			size_t out_len)
{
	json_t *doc = json_loadb(body ? body : "", len, 0, NULL);
	json_t *e = json_object_get(doc, "error");
	char detail[600];

	if (json_is_object(e))
		arm_error(e, detail, sizeof(detail));
	else if (json_is_string(e)) {
		const char *desc = json_string_value(
			json_object_get(doc, "error_description"));

		snprintf(detail, sizeof(detail), "%s: %s", json_string_value(e),
			 desc ? desc : "(no description)");
	}
	else
		snprintf(detail, sizeof(detail), "no error in the answer");
	snprintf(out, out_len, "HTTP %ld %s", status, detail);
	json_decref(doc);
}

int64_t kn_vmss_retry_after_ms(const char *value)
{
	char *end;
	long long s;

	if (!value)
		return -1;
	while (isspace((unsigned char)*value))
		value++;
	errno = 0;
	s = strtoll(value, &end, 10);
	while (isspace((unsigned char)*end))
		end++;
	if (errno || end == value || *end || s < 0 || s > 3600)
		return -1;
	return (int64_t)s * 1000;
}
