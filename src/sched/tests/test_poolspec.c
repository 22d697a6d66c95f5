/* Unit tests for the node pool grammar (kn_pool_spec_parse). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "sched/sched.h"

#define VMSS                                                                 \
	"/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/"     \
	"virtualMachineScaleSets/gpu"

static void test_defaults(void **state)
{
	struct kn_pool_spec p;
	struct kn_error err = {0};

	(void)state;
	assert_int_equal(kn_pool_spec_parse("a100 NC24 1xA100-80GB", "--pool",
					    &p, &err),
			 0);
	assert_string_equal(p.name, "a100");
	assert_string_equal(p.sku, "NC24");
	assert_string_equal(p.gpus, "1xA100-80GB");
	assert_int_equal(p.min, 1);
	assert_int_equal(p.max, 10);
	assert_int_equal(p.scale_down_delay_ms, 600000);
	assert_false(p.spot);
	assert_int_equal(p.n_zones, 0);
	assert_string_equal(p.labels, "");
	assert_int_equal(p.provider, KN_POOL_PROVIDER_SIM);
	assert_string_equal(kn_pool_provider_name(p.provider), "sim");
	assert_null(p.command);
	assert_null(p.vmss);
	kn_pool_spec_release(&p);
	/* max follows a min above 10 when not given. */
	assert_int_equal(kn_pool_spec_parse("a NC 1xT4-16GB min=12", "--pool",
					    &p, &err),
			 0);
	assert_int_equal(p.max, 12);
	kn_pool_spec_release(&p);
}

static void test_every_option(void **state)
{
	struct kn_pool_spec p;
	struct kn_error err = {0};

	(void)state;
	assert_int_equal(
		kn_pool_spec_parse("h100\tND96 8xH100-80GB min=0 max=4 spot "
				   "zones=1,2,3 scale-down-delay=90s "
				   "provider=command command=/opt/grow "
				   "team=ml tier=gold",
				   "--pool", &p, &err),
		0);
	assert_string_equal(p.name, "h100");
	assert_int_equal(p.min, 0);
	assert_int_equal(p.max, 4);
	assert_true(p.spot);
	assert_int_equal(p.n_zones, 3);
	assert_string_equal(p.zones[0], "1");
	assert_string_equal(p.zones[2], "3");
	assert_int_equal(p.scale_down_delay_ms, 90000);
	assert_int_equal(p.provider, KN_POOL_PROVIDER_COMMAND);
	assert_string_equal(p.command, "/opt/grow");
	assert_string_equal(p.labels, " team=ml tier=gold");
	kn_pool_spec_release(&p);

	assert_int_equal(
		kn_pool_spec_parse("az NC48 2xA100-80GB provider=azure vmss=" VMSS
				   " azure-identity=service-principal "
				   "azure-client-id=c azure-arm-url=http://a "
				   "azure-imds-url=http://i "
				   "azure-login-url=http://l",
				   "--pool", &p, &err),
		0);
	assert_int_equal(p.provider, KN_POOL_PROVIDER_AZURE);
	assert_string_equal(kn_pool_provider_name(p.provider), "azure");
	assert_string_equal(p.vmss, VMSS);
	assert_string_equal(p.azure_identity, "service-principal");
	assert_string_equal(p.azure_client_id, "c");
	assert_string_equal(p.azure_arm_url, "http://a");
	assert_string_equal(p.azure_imds_url, "http://i");
	assert_string_equal(p.azure_login_url, "http://l");
	kn_pool_spec_release(&p);
}

/* The message starts with the flag and the text, then names the option. */
static void expect_error(const char *text, const char *needle)
{
	struct kn_pool_spec p;
	struct kn_error err = {0};
	char prefix[512];

	memset(&p, 0x5a, sizeof(p));
	assert_int_equal(kn_pool_spec_parse(text, "--pool", &p, &err), -EINVAL);
	snprintf(prefix, sizeof(prefix), "--pool \"%s\": ", text);
	if (strncmp(err.message, prefix, strlen(prefix)) ||
	    !strstr(err.message, needle))
		fail_msg("\"%s\": \"%s\" lacks \"%s\"", text, err.message,
			 needle);
	/* Nothing is left to free on failure. */
	assert_null(p.sku);
	assert_null(p.labels);
	assert_null(p.zones);
}

static void test_each_bad_option(void **state)
{
	(void)state;
	expect_error("a NC", "want \"NAME SKU GPUS");
	expect_error("", "want \"NAME SKU GPUS");
	expect_error("a/b NC 1xA100-80GB", "name: \"a/b\" is not 1..40");
	expect_error("a12345678901234567890123456789012345678901 NC 1xT4-16GB",
		     "name: ");
	expect_error("a NC 1xA100-80GB min=x", "min: \"x\" is not a number");
	expect_error("a NC 1xA100-80GB min=-1", "min: \"-1\"");
	expect_error("a NC 1xA100-80GB max=2000", "max: \"2000\"");
	expect_error("a NC 1xA100-80GB min=3 max=2", "max: 2 is below min 3");
	expect_error("a NC 1xA100-80GB max=0", "max: 0 is below min 1 or 1");
	expect_error("a NC 1xA100-80GB scale-down-delay=5",
		     "scale-down-delay: \"5\" is not a duration");
	expect_error("a NC 1xA100-80GB bogus", "\"bogus\" is not KEY=VALUE");
	expect_error("a NC 1xA100-80GB =x", "\"=x\" is not KEY=VALUE");
	expect_error("a NC 1xA100-80GB provider=gcp",
		     "provider: \"gcp\" is not one of sim, command, azure");
	expect_error("a NC 1xA100-80GB provider=command",
		     "command: provider=command needs command=PATH");
	expect_error("a NC 1xA100-80GB command=/bin/x",
		     "command: needs provider=command");
	expect_error("a NC 1xA100-80GB sku=x", "label sku= is the pool's own");
	expect_error("a NC 1xA100-80GB zone=1", "label zone=");
	expect_error("a NC 1xA100-80GB pool=x", "label pool=");
	expect_error("a NC 1xA100-80GB pricing=spot", "label pricing=");
	expect_error("a NC 1xA100-80GB vmss=" VMSS,
		     "vmss and azure-* options need provider=azure");
	expect_error("a NC 1xA100-80GB azure-identity=managed",
		     "need provider=azure");
	expect_error("a NC 1xA100-80GB provider=azure",
		     "vmss: provider=azure needs vmss=");
	expect_error("a NC 1xA100-80GB provider=azure vmss=" VMSS " zones=1",
		     "zones: an azure pool's zones");
	expect_error("a NC 1xA100-80GB provider=azure vmss=" VMSS
		     " azure-identity=cli",
		     "azure-identity: \"cli\" is not managed or "
		     "service-principal");
	expect_error("a NC 1xA100-80GB provider=azure vmss=" VMSS
		     " azure-tenant=t",
		     "azure-tenant: not one of vmss, azure-identity");
}

/* The flag is the caller's: a file of pools says "pool". */
static void test_flag_prefix(void **state)
{
	struct kn_pool_spec p;
	struct kn_error err = {0};

	(void)state;
	assert_int_equal(kn_pool_spec_parse("a NC 1xT4-16GB min=x", "pool", &p,
					    &err),
			 -EINVAL);
	assert_string_equal(err.message, "pool \"a NC 1xT4-16GB min=x\": min: "
					 "\"x\" is not a number in 0..1000");
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_defaults),
	cmocka_unit_test(test_every_option),
	cmocka_unit_test(test_each_bad_option),
	cmocka_unit_test(test_flag_prefix))
