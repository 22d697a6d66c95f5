/*
 * Unit tests for health: every check passes on the healthy fixtures
 * (tests/fixtures/node-basic, nvml/h100x2.json) and fails on the faulty
 * ones (node-faulty, nvml/h100x2-faulty.json), naming what is wrong; the
 * SKU catalogue reader on the shipped data and on bad input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tests/testmain.h"
#include "health/health.h"

static char paths[4][1024];

static const char *fixture(int slot, const char *rel)
{
	snprintf(paths[slot], sizeof(paths[slot]), "%s/%s",
		 getenv("KILN_TEST_FIXTURES"), rel);
	return paths[slot];
}

static struct kn_nvml *open_nvml(const char *answers)
{
	struct kn_nvml *nv;
	struct kn_error err;

	setenv("KILN_NVML_LIBRARY", getenv("KILN_TEST_FAKE_NVML"), 1);
	setenv("KILN_FAKE_NVML", fixture(3, answers), 1);
	assert_int_equal(kn_nvml_open(&nv, &err), 0);
	return nv;
}

static const struct kn_check_result *find(const struct kn_check_result *r,
					  const char *name)
{
	for (int i = 0; i < KN_HEALTH_CHECKS; i++)
		if (!strcmp(r[i].name, name))
			return &r[i];
	fail_msg("no check %s", name);
	return NULL;
}

static void test_sku_load(void **state)
{
	struct kn_sku s;
	struct kn_error err;
	(void)state;

	assert_int_equal(kn_sku_load(KN_TEST_DATA_DIR "/azure-gpu-skus.csv", "standard_nd96isr_h100_v5", &s,
				     &err), 0);
	assert_string_equal(s.gpu_model, "NVIDIA H100 80GB SXM5");
	assert_int_equal(s.gpu_count, 8);
	assert_true(s.ram_gib == 1900);
	assert_int_equal(s.ib_ports, 8);
	assert_true(s.ib_gbps == 400);
	assert_int_equal(kn_sku_load(KN_TEST_DATA_DIR "/azure-gpu-skus.csv", "Standard_NV6ads_A10_v5", &s,
				     &err), 0);
	assert_int_equal(s.gpu_count, 1);
	assert_int_equal(s.ib_ports, 0);
	assert_int_not_equal(kn_sku_load(KN_TEST_DATA_DIR "/azure-gpu-skus.csv", "Standard_ND96isr_H100_v4",
					  &s, &err), 0);
	assert_non_null(strstr(err.message, "did you mean \"Standard_ND96isr_H100_v5\""));
	assert_int_not_equal(kn_sku_load("/nonexistent.csv", "x", &s, &err), 0);
	assert_non_null(strstr(err.message, "/nonexistent.csv"));
}

static void run(const char *root, const char *nvml_answers, int64_t min_free,
		struct kn_check_result *r, int *failed)
{
	struct kn_sku sku;
	struct kn_error err;
	struct kn_nvml *nv = nvml_answers ? open_nvml(nvml_answers) : NULL;
	const char *dirs[] = {fixture(1, root), NULL};
	struct kn_health_config cfg = {fixture(0, root), &sku, nv, NULL, dirs,
				       min_free};

	assert_int_equal(kn_sku_load(fixture(2, "skus.csv"), "Test_2xH100", &sku,
				     &err), 0);
	*failed = kn_health_run(&cfg, r);
	kn_nvml_close(nv);
}

static void test_all_pass_on_healthy_fixtures(void **state)
{
	struct kn_check_result r[KN_HEALTH_CHECKS];
	int failed;
	(void)state;

	run("node-basic", "nvml/h100x2.json", 1, r, &failed);
	for (int i = 0; i < KN_HEALTH_CHECKS; i++)
		if (r[i].status != KN_CHECK_PASS)
			fail_msg("%s: %s: %s", r[i].name,
				 kn_check_status_name(r[i].status), r[i].message);
	assert_int_equal(failed, 0);
}

static void test_each_fails_on_faulty_fixtures(void **state)
{
	static const struct {
		const char *check, *says;
	} want[] = {
		{"gpu_inventory", "GPU 0 is a Tesla T4"},
		{"gpu_ecc", "GPU 0 (GPU-5a1c9e00-7b2d-4c3e-9f10-abcdef012340): 2 double-bit"},
		{"gpu_retired_pages", "pages pending retirement"},
		{"gpu_throttle", "GPU 0 (GPU-5a1c9e00-7b2d-4c3e-9f10-abcdef012340): hardware thermal slowdown"},
		{"gpu_pcie", "PCIe x8, capable of x16"},
		{"gpu_nvlink", "NVLink 3 down"},
		{"kernel_xid", "Xid (PCI:0000:19:00): 79"},
		{"machine_check", "Machine check events logged"},
		{"infiniband", "mlx5_0 port 1 is DOWN"},
		{"memory", "1700.0 GiB of memory, Test_2xH100 has 1900 GiB"},
		{"disk_free", "GiB free, below"},
	};
	struct kn_check_result r[KN_HEALTH_CHECKS];
	int failed;
	(void)state;

	run("node-faulty", "nvml/h100x2-faulty.json", INT64_MAX, r, &failed);
	assert_int_equal(failed, KN_HEALTH_CHECKS - 1); /* all but inventory */
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const struct kn_check_result *c = find(r, want[i].check);
		if (!strcmp(want[i].check, "gpu_inventory"))
			continue; /* the faulty answers are still H100s */
		assert_int_equal(c->status, KN_CHECK_FAIL);
		if (!strstr(c->message, want[i].says))
			fail_msg("%s: \"%s\" lacks \"%s\"", c->name, c->message,
				 want[i].says);
	}
	/* An idle GPU at Gen1 is power saving, not a fault. */
	assert_null(strstr(find(r, "gpu_pcie")->message, "GPU 1"));
	assert_non_null(strstr(find(r, "infiniband")->message,
			       "mlx5_1 port 1 runs at 200 Gb/s, Test_2xH100 expects 400"));
	assert_non_null(strstr(find(r, "machine_check")->message,
			       "mc0: 1 uncorrectable memory errors"));
	assert_non_null(strstr(find(r, "gpu_retired_pages")->message,
			       "row remapping failed"));

	run("node-basic", "nvml/t4-minimal.json", 1, r, &failed);
	assert_int_equal(find(r, "gpu_inventory")->status, KN_CHECK_FAIL);
	assert_non_null(strstr(find(r, "gpu_inventory")->message,
			       "Test_2xH100 has 2 GPUs, NVML sees 1"));
	assert_non_null(strstr(find(r, "gpu_inventory")->message,
			       "GPU 0 is a Tesla T4"));
}

static void test_without_gpu_or_sku(void **state)
{
	struct kn_check_result r[KN_HEALTH_CHECKS];
	struct kn_health_config cfg = {0};
	(void)state;

	cfg.root = fixture(0, "node-basic");
	assert_int_equal(kn_health_run(&cfg, r), 0);
	assert_int_equal(find(r, "gpu_inventory")->status, KN_CHECK_SKIP);
	assert_int_equal(find(r, "gpu_ecc")->status, KN_CHECK_SKIP);
	assert_int_equal(find(r, "memory")->status, KN_CHECK_SKIP);
	assert_int_equal(find(r, "disk_free")->status, KN_CHECK_SKIP);
	assert_int_equal(find(r, "infiniband")->status, KN_CHECK_PASS);
	cfg.root = "/nonexistent-kiln-root";
	kn_health_run(&cfg, r);
	assert_int_equal(find(r, "kernel_xid")->status, KN_CHECK_SKIP);
	assert_int_equal(find(r, "memory")->status, KN_CHECK_FAIL);
	assert_int_equal(find(r, "infiniband")->status, KN_CHECK_SKIP);
}

/* The verdict alone, with NVML opened for the run as the server does. */
static void test_run_here_names_the_first_failure(void **state)
{
	struct kn_sku sku;
	struct kn_error err;
	const char *dirs[] = {fixture(1, "node-faulty"), NULL};
	struct kn_health_config cfg = {fixture(0, "node-faulty"), &sku, NULL,
				       NULL, dirs, INT64_MAX};
	char first[700], small[12];
	(void)state;

	assert_int_equal(kn_sku_load(fixture(2, "skus.csv"), "Test_2xH100", &sku,
				     &err), 0);
	kn_nvml_close(open_nvml("nvml/h100x2-faulty.json"));
	assert_int_equal(kn_health_run_here(&cfg, first, sizeof(first)),
			 KN_HEALTH_CHECKS - 1);
	/* gpu_inventory passes (the faulty answers are H100s): ECC is first. */
	if (strncmp(first, "gpu_ecc: GPU 0 (GPU-5a1c9e00-", 29) ||
	    !strstr(first, "2 double-bit"))
		fail_msg("first failure: \"%s\"", first);
	assert_int_equal(kn_health_run_here(&cfg, small, sizeof(small)),
			 KN_HEALTH_CHECKS - 1);
	assert_string_equal(small, "gpu_ecc: GP");

	kn_nvml_close(open_nvml("nvml/h100x2.json"));
	cfg.root = dirs[0] = fixture(1, "node-basic");
	cfg.min_free_bytes = 1;
	assert_int_equal(kn_health_run_here(&cfg, first, sizeof(first)), 0);
	assert_string_equal(first, "");
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_sku_load),
	cmocka_unit_test(test_all_pass_on_healthy_fixtures),
	cmocka_unit_test(test_each_fails_on_faulty_fixtures),
	cmocka_unit_test(test_without_gpu_or_sku),
	cmocka_unit_test(test_run_here_names_the_first_failure))
