/*
 * Unit tests for the scale set client's pure half: the requests it
 * builds and its reading of Azure's answers, in the formats of Azure's
 * REST reference (the same documents tests/e2e/vmss_replay.py serves).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "vmss/vmss.h"

#define ID                                                                 \
	"/subscriptions/00000000-1111-2222-3333-444444444444/resourceGroups/" \
	"rg-gpu/providers/Microsoft.Compute/virtualMachineScaleSets/a100"

static void test_check_id(void **state)
{
	struct kn_error err;

	(void)state;
	assert_int_equal(kn_vmss_check_id(ID, "vmss", &err), 0);
	/* ARM's fixed segments are case-insensitive. */
	assert_int_equal(kn_vmss_check_id("/SUBSCRIPTIONS/s/resourcegroups/r/"
					  "providers/microsoft.compute/"
					  "virtualmachinescalesets/n",
					  "vmss", &err),
			 0);
	const char *bad[] = {
		"",
		"subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/"
		"virtualMachineScaleSets/n",
		"/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/"
		"virtualMachines/n",
		"/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/"
		"virtualMachineScaleSets/n/extra",
		"/subscriptions/s/resourceGroups/r g/providers/"
		"Microsoft.Compute/virtualMachineScaleSets/n",
		"/subscriptions//resourceGroups/r/providers/Microsoft.Compute/"
		"virtualMachineScaleSets/n",
		"/subscriptions/s/resourceGroups/r/providers/Microsoft.Compute/"
		"virtualMachineScaleSets/n?x=1",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		assert_int_not_equal(kn_vmss_check_id(bad[i], "vmss", &err), 0);
		assert_string_equal(err.field, "vmss");
		assert_non_null(strstr(err.message, "virtualMachineScaleSets/"
						    "NAME"));
	}
}

static void test_requests(void **state)
{
	char *s;

	(void)state;
	s = kn_vmss_url("https://management.azure.com", ID, "/virtualMachines");
	assert_string_equal(s, "https://management.azure.com" ID
			       "/virtualMachines?api-version=2024-07-01");
	free(s);
	s = kn_vmss_capacity_body(3);
	assert_string_equal(s, "{\"sku\":{\"capacity\":3}}");
	free(s);
	s = kn_vmss_delete_body("17");
	assert_string_equal(s, "{\"instanceIds\":[\"17\"]}");
	free(s);
	s = kn_vmss_imds_token_url("http://169.254.169.254", NULL);
	assert_string_equal(s, "http://169.254.169.254/metadata/identity/"
			       "oauth2/token?api-version=2018-02-01&resource="
			       "https%3A%2F%2Fmanagement.azure.com%2F");
	free(s);
	s = kn_vmss_imds_token_url("http://h", "c1d2");
	assert_non_null(strstr(s, "&client_id=c1d2"));
	free(s);
	s = kn_vmss_login_token_url("https://login.microsoftonline.com", "t1");
	assert_string_equal(s, "https://login.microsoftonline.com/t1/oauth2/"
			       "v2.0/token");
	free(s);
	s = kn_vmss_login_token_body("app", "s&e=c+r t");
	assert_string_equal(s, "grant_type=client_credentials&client_id=app"
			       "&scope=https%3A%2F%2Fmanagement.azure.com%2F."
			       "default&client_secret=s%26e%3Dc%2Br%20t");
	free(s);
}

static void test_tokens(void **state)
{
	/* IMDS: expires_in is a string. */
	const char *imds = "{\"access_token\":\"eyJ0eXAi\",\"client_id\":"
			   "\"c\",\"expires_in\":\"86399\",\"expires_on\":"
			   "\"1733300000\",\"ext_expires_in\":\"86399\","
			   "\"not_before\":\"1733213300\",\"resource\":"
			   "\"https://management.azure.com/\",\"token_type\":"
			   "\"Bearer\"}";
	/* Entra ID v2: a number. */
	const char *login = "{\"token_type\":\"Bearer\",\"expires_in\":3599,"
			    "\"ext_expires_in\":3599,\"access_token\":"
			    "\"eyJ0eXAiOiJKV1Qi\"}";
	struct kn_error err;
	char *token = NULL;
	int64_t exp = 0;

	(void)state;
	assert_int_equal(kn_vmss_parse_token(imds, strlen(imds), &token, &exp,
					     &err),
			 0);
	assert_string_equal(token, "eyJ0eXAi");
	assert_int_equal(exp, 86399);
	free(token);
	assert_int_equal(kn_vmss_parse_token(login, strlen(login), &token,
					     &exp, &err),
			 0);
	assert_string_equal(token, "eyJ0eXAiOiJKV1Qi");
	assert_int_equal(exp, 3599);
	free(token);
	assert_int_not_equal(kn_vmss_parse_token("{\"token_type\":\"Bearer\"}",
						 24, &token, &exp, &err),
			     0);
	assert_int_not_equal(kn_vmss_parse_token("<html>", 6, &token, &exp,
						 &err),
			     0);
}

static void test_capacity_and_vms(void **state)
{
	const char *vmss =
		"{\"name\":\"a100\",\"id\":\"" ID "\",\"type\":"
		"\"Microsoft.Compute/virtualMachineScaleSets\",\"location\":"
		"\"westus2\",\"sku\":{\"name\":\"Standard_NC24ads_A100_v4\","
		"\"tier\":\"Standard\",\"capacity\":2},\"properties\":{"
		"\"provisioningState\":\"Succeeded\"}}";
	const char *page1 =
		"{\"value\":[{\"name\":\"a100_0\",\"instanceId\":\"0\","
		"\"zones\":[\"1\"],\"properties\":{\"osProfile\":{"
		"\"computerName\":\"a100000000\"},\"provisioningState\":"
		"\"Succeeded\"}}],\"nextLink\":\"https://management.azure.com"
		"/x?$skiptoken=2\"}";
	const char *page2 =
		"{\"value\":[{\"name\":\"a100_3\",\"instanceId\":\"3\","
		"\"properties\":{\"osProfile\":{\"computerName\":"
		"\"a100000003\"},\"provisioningState\":\"Creating\"}}]}";
	const char *broken = "{\"value\":[{\"instanceId\":\"3\"}]}";
	struct kn_vmss_vm *vms = NULL;
	struct kn_error err;
	char *next = NULL;
	int64_t cap = -1;
	size_t n = 0;

	(void)state;
	assert_int_equal(kn_vmss_parse_capacity(vmss, strlen(vmss), &cap,
						&err),
			 0);
	assert_int_equal(cap, 2);
	assert_int_not_equal(kn_vmss_parse_capacity("{\"sku\":{}}", 10, &cap,
						    &err),
			     0);
	assert_int_equal(kn_vmss_parse_vms(page1, strlen(page1), &vms, &n,
					   &next, &err),
			 0);
	assert_string_equal(next, "https://management.azure.com/x?"
				  "$skiptoken=2");
	free(next);
	assert_int_equal(kn_vmss_parse_vms(page2, strlen(page2), &vms, &n,
					   &next, &err),
			 0);
	assert_null(next);
	assert_int_equal(n, 2);
	assert_string_equal(vms[0].instance_id, "0");
	assert_string_equal(vms[0].computer_name, "a100000000");
	assert_string_equal(vms[0].state, "Succeeded");
	assert_string_equal(vms[0].zone, "1");
	assert_string_equal(vms[1].computer_name, "a100000003");
	assert_string_equal(vms[1].state, "Creating");
	assert_string_equal(vms[1].zone, "");
	assert_int_not_equal(kn_vmss_parse_vms(broken, strlen(broken), &vms,
					       &n, &next, &err),
			     0);
	assert_non_null(strstr(err.message, "computerName"));
	/* A node needs a name: an empty one is refused too. */
	const char *unnamed =
		"{\"value\":[{\"instanceId\":\"4\",\"properties\":{"
		"\"osProfile\":{\"computerName\":\"\"},"
		"\"provisioningState\":\"Succeeded\"}}]}";
	assert_int_not_equal(kn_vmss_parse_vms(unnamed, strlen(unnamed), &vms,
					       &n, &next, &err),
			     0);
	assert_int_equal(n, 2);
	free(vms);
}

static void test_operation_and_errors(void **state)
{
	const char *running = "{\"startTime\":\"2024-12-03T07:00:00Z\","
			      "\"status\":\"InProgress\",\"name\":\"9f0c\"}";
	const char *failed =
		"{\"startTime\":\"2024-12-03T07:00:00Z\",\"endTime\":"
		"\"2024-12-03T07:01:00Z\",\"status\":\"Failed\",\"error\":{"
		"\"code\":\"SkuNotAvailable\",\"message\":\"The requested "
		"size is not available in zone 1.\"},\"name\":\"9f0c\"}";
	const char *denied =
		"{\"error\":{\"code\":\"AuthorizationFailed\",\"message\":"
		"\"The client 'c' does not have authorization to perform "
		"action 'Microsoft.Compute/virtualMachineScaleSets/write'.\"}}";
	const char *aad = "{\"error\":\"invalid_client\",\"error_description\":"
			  "\"AADSTS7000215: Invalid client secret provided.\"}";
	struct kn_error err;
	char status[32], why[256], text[512];

	(void)state;
	assert_int_equal(kn_vmss_parse_operation(running, strlen(running),
						 status, sizeof(status), why,
						 sizeof(why), &err),
			 0);
	assert_string_equal(status, "InProgress");
	assert_string_equal(why, "");
	assert_int_equal(kn_vmss_parse_operation(failed, strlen(failed), status,
						 sizeof(status), why,
						 sizeof(why), &err),
			 0);
	assert_string_equal(status, "Failed");
	assert_string_equal(why, "SkuNotAvailable: The requested size is not "
				 "available in zone 1.");
	kn_vmss_error_text(403, denied, strlen(denied), text, sizeof(text));
	assert_string_equal(text, "HTTP 403 AuthorizationFailed: The client "
				  "'c' does not have authorization to perform "
				  "action 'Microsoft.Compute/"
				  "virtualMachineScaleSets/write'.");
	kn_vmss_error_text(401, aad, strlen(aad), text, sizeof(text));
	assert_string_equal(text, "HTTP 401 invalid_client: AADSTS7000215: "
				  "Invalid client secret provided.");
	kn_vmss_error_text(502, "<html>", 6, text, sizeof(text));
	assert_string_equal(text, "HTTP 502 no error in the answer");
	assert_int_equal(kn_vmss_retry_after_ms("17"), 17000);
	assert_int_equal(kn_vmss_retry_after_ms(" 0 "), 0);
	assert_int_equal(kn_vmss_retry_after_ms(NULL), -1);
	assert_int_equal(kn_vmss_retry_after_ms(""), -1);
	assert_int_equal(kn_vmss_retry_after_ms("Wed, 21 Oct 2015"), -1);
}

static void test_client_config(void **state)
{
	struct kn_vmss_config cfg = {.id = ID,
				     .identity = KN_VMSS_SERVICE_PRINCIPAL,
				     .client_id = "app"};
	struct kn_vmss_client *c = NULL;
	struct kn_error err;

	(void)state;
	assert_int_not_equal(kn_vmss_client_new(&cfg, NULL, &c, &err), 0);
	assert_string_equal(err.field, "identity");
	cfg.tenant_id = "t";
	cfg.client_secret = "s";
	assert_int_equal(kn_vmss_client_new(&cfg, NULL, &c, &err), 0);
	kn_vmss_client_free(c);
	cfg.id = "/subscriptions/s";
	assert_int_not_equal(kn_vmss_client_new(&cfg, NULL, &c, &err), 0);
	assert_string_equal(err.field, "vmss");
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_check_id),
	cmocka_unit_test(test_requests),
	cmocka_unit_test(test_tokens),
	cmocka_unit_test(test_capacity_and_vms),
	cmocka_unit_test(test_operation_and_errors),
	cmocka_unit_test(test_client_config))
