/*
 * The one parser of a node pool's definition, shared by the server's
 * --pool and the simulator's --autoscale pools so the two read the same
 * text the same way. Pure: it checks what the text alone can say; the
 * server checks the rest (devices, the command, Azure's credentials).
 */
#include "sched/sched.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool name_ok(const char *name)
{
	size_t len = strlen(name);

	if (len == 0 || len > KN_POOL_NAME_MAX)
		return false;
	for (const char *p = name; *p; p++)
		if (!(isalnum((unsigned char)*p) || *p == '-' || *p == '_'))
			return false;
	return true;
}

static int parse_count(const char *flag, const char *text, const char *key,
		       const char *value, int *out, struct kn_error *err)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(value, &end, 10);
	if (errno || end == value || *end || n < 0 || n > 1000)
		return kn_errorf(err, KN_EINVAL, "pool",
				 "%s \"%s\": %s: \"%s\" is not a number in "
				 "0..1000",
				 flag, text, key, value);
	*out = (int)n;
	return 0;
}

/* provider=azure's options: vmss= and azure-* (docs/capacity.md). */
static int azure_option(struct kn_pool_spec *p, const char *flag,
			const char *text, const char *key, const char *value,
			struct kn_error *err)
{
	char **slot = !strcmp(key, "vmss")		    ? &p->vmss
		      : !strcmp(key, "azure-identity")	    ? &p->azure_identity
		      : !strcmp(key, "azure-client-id")	    ? &p->azure_client_id
		      : !strcmp(key, "azure-arm-url")	    ? &p->azure_arm_url
		      : !strcmp(key, "azure-imds-url")	    ? &p->azure_imds_url
		      : !strcmp(key, "azure-login-url")	    ? &p->azure_login_url
							    : NULL;

	if (!slot)
		return kn_errorf(err, KN_EINVAL, "pool",
				 "%s \"%s\": %s: not one of vmss, "
				 "azure-identity, azure-client-id, "
				 "azure-arm-url, azure-imds-url, "
				 "azure-login-url",
				 flag, text, key);
	free(*slot);
	*slot = kn_xstrdup(value);
	return 0;
}

static int parse_provider(struct kn_pool_spec *p, const char *flag,
			  const char *text, const char *value,
			  struct kn_error *err)
{
	if (!strcmp(value, "sim"))
		p->provider = KN_POOL_PROVIDER_SIM;
	else if (!strcmp(value, "command"))
		p->provider = KN_POOL_PROVIDER_COMMAND;
	else if (!strcmp(value, "azure"))
		p->provider = KN_POOL_PROVIDER_AZURE;
	else
		return kn_errorf(err, KN_EINVAL, "pool",
				 "%s \"%s\": provider: \"%s\" is not one of "
				 "sim, command, azure",
				 flag, text, value);
	return 0;
}

static void add_zones(struct kn_pool_spec *p, const char *value)
{
	char *copy = kn_xstrdup(value), *save = NULL;

	for (char *z = strtok_r(copy, ",", &save); z;
	     z = strtok_r(NULL, ",", &save)) {
		p->zones = kn_xrealloc(p->zones,
				       (p->n_zones + 1) * sizeof(*p->zones));
		p->zones[p->n_zones++] = kn_xstrdup(z);
	}
	free(copy);
}

/* One option after NAME SKU GPUS. */
static int parse_option(struct kn_pool_spec *p, const char *flag,
			const char *text, char *item, struct kn_buf *labels,
			bool *has_max, struct kn_error *err)
{
	char *eq = strchr(item, '=');
	const char *value = eq ? eq + 1 : NULL;

	if (!strcmp(item, "spot")) {
		p->spot = true;
		return 0;
	}
	if (!eq || eq == item)
		return kn_errorf(err, KN_EINVAL, "pool",
				 "%s \"%s\": \"%s\" is not KEY=VALUE or spot",
				 flag, text, item);
	*eq = '\0';
	if (!strcmp(item, "min"))
		return parse_count(flag, text, "min", value, &p->min, err);
	if (!strcmp(item, "max")) {
		*has_max = true;
		return parse_count(flag, text, "max", value, &p->max, err);
	}
	if (!strcmp(item, "scale-down-delay")) {
		if (kn_parse_duration(value, &p->scale_down_delay_ms) < 0)
			return kn_errorf(err, KN_EINVAL, "pool",
					 "%s \"%s\": scale-down-delay: \"%s\" "
					 "is not a duration (e.g. 10m)",
					 flag, text, value);
		return 0;
	}
	if (!strcmp(item, "provider"))
		return parse_provider(p, flag, text, value, err);
	if (!strcmp(item, "command")) {
		free(p->command);
		p->command = kn_xstrdup(value);
		return 0;
	}
	if (!strcmp(item, "zones")) {
		add_zones(p, value);
		return 0;
	}
	if (!strcmp(item, "vmss") || !strncmp(item, "azure-", 6))
		return azure_option(p, flag, text, item, value, err);
	if (!strcmp(item, "pool") || !strcmp(item, "sku") ||
	    !strcmp(item, "pricing") || !strcmp(item, "zone"))
		return kn_errorf(err, KN_EINVAL, "pool",
				 "%s \"%s\": label %s= is the pool's own "
				 "(from its name, SKU, spot and zones)",
				 flag, text, item);
	kn_buf_printf(labels, " %s=%s", item, value);
	return 0;
}

/* The options that only make sense together. */
static int check_provider(const struct kn_pool_spec *p, const char *flag,
			  const char *text, struct kn_error *err)
{
	bool azure = p->provider == KN_POOL_PROVIDER_AZURE;

	if ((p->provider == KN_POOL_PROVIDER_COMMAND) != (p->command != NULL))
		return kn_errorf(err, KN_EINVAL, "pool", "%s \"%s\": command: %s",
				 flag, text,
				 p->command ? "needs provider=command"
					    : "provider=command needs "
					      "command=PATH");
	if (!azure && (p->vmss || p->azure_identity || p->azure_client_id ||
		       p->azure_arm_url || p->azure_imds_url ||
		       p->azure_login_url))
		return kn_errorf(err, KN_EINVAL, "pool",
				 "%s \"%s\": vmss and azure-* options need "
				 "provider=azure",
				 flag, text);
	if (!azure)
		return 0;
	if (!p->vmss)
		return kn_errorf(err, KN_EINVAL, "pool",
				 "%s \"%s\": vmss: provider=azure needs "
				 "vmss=/subscriptions/SUB/resourceGroups/RG/"
				 "providers/Microsoft.Compute/"
				 "virtualMachineScaleSets/NAME",
				 flag, text);
	if (p->n_zones)
		return kn_errorf(err, KN_EINVAL, "pool",
				 "%s \"%s\": zones: an azure pool's zones are "
				 "its scale set's (each node is labelled with "
				 "its VM's)",
				 flag, text);
	if (p->azure_identity && strcmp(p->azure_identity, "managed") &&
	    strcmp(p->azure_identity, "service-principal"))
		return kn_errorf(err, KN_EINVAL, "pool",
				 "%s \"%s\": azure-identity: \"%s\" is not "
				 "managed or service-principal",
				 flag, text, p->azure_identity);
	return 0;
}

int kn_pool_spec_parse(const char *text, const char *flag,
		       struct kn_pool_spec *p, struct kn_error *err)
{
	char *copy = kn_xstrdup(text), *save = NULL, *name, *sku, *gpus;
	struct kn_buf labels;
	bool has_max = false;
	int rc = 0;

	memset(p, 0, sizeof(*p));
	kn_buf_init(&labels, 4096);
	p->min = 1;
	p->scale_down_delay_ms = 10 * 60 * 1000;
	p->provider = KN_POOL_PROVIDER_SIM;
	name = strtok_r(copy, " \t", &save);
	sku = name ? strtok_r(NULL, " \t", &save) : NULL;
	gpus = sku ? strtok_r(NULL, " \t", &save) : NULL;
	if (!gpus) {
		rc = kn_errorf(err, KN_EINVAL, "pool",
			       "%s \"%s\": want \"NAME SKU GPUS [min=N] "
			       "[max=N] [spot] [zones=a,b] "
			       "[scale-down-delay=10m] [K=V ...]\", e.g. "
			       "\"a100 Standard_NC24ads_A100_v4 1xA100-80GB "
			       "max=4\"",
			       flag, text);
		goto out;
	}
	if (!name_ok(name)) {
		rc = kn_errorf(err, KN_EINVAL, "pool",
			       "%s \"%s\": name: \"%s\" is not 1..%d of "
			       "A-Z a-z 0-9 - _",
			       flag, text, name, KN_POOL_NAME_MAX);
		goto out;
	}
	kn_strlcpy(p->name, name, sizeof(p->name));
	p->sku = kn_xstrdup(sku);
	p->gpus = kn_xstrdup(gpus);
	for (char *item = strtok_r(NULL, " \t", &save); rc == 0 && item;
	     item = strtok_r(NULL, " \t", &save))
		rc = parse_option(p, flag, text, item, &labels, &has_max, err);
	if (rc < 0)
		goto out;
	if (!has_max)
		p->max = p->min > 10 ? p->min : 10;
	if (p->max < 1 || p->min > p->max) {
		rc = kn_errorf(err, KN_EINVAL, "pool",
			       "%s \"%s\": max: %d is below min %d or 1", flag,
			       text, p->max, p->min);
		goto out;
	}
	rc = check_provider(p, flag, text, err);
	if (rc < 0)
		goto out;
	p->labels = kn_xstrdup(labels.data ? labels.data : "");
out:
	kn_buf_release(&labels);
	free(copy);
	if (rc < 0)
		kn_pool_spec_release(p);
	return rc;
}

void kn_pool_spec_release(struct kn_pool_spec *p)
{
	KN_FREE_ALL(p->sku, p->gpus);
	for (size_t i = 0; i < p->n_zones; i++)
		free(p->zones[i]);
	KN_FREE_ALL(p->zones, p->labels, p->command, p->vmss, p->azure_identity,
		    p->azure_client_id, p->azure_arm_url, p->azure_imds_url,
		    p->azure_login_url);
	memset(p, 0, sizeof(*p));
}

const char *kn_pool_provider_name(enum kn_pool_provider provider)
{
	switch (provider) {
	case KN_POOL_PROVIDER_COMMAND:
		return "command";
	case KN_POOL_PROVIDER_AZURE:
		return "azure";
	case KN_POOL_PROVIDER_SIM:
		break;
	}
	return "sim";
}
