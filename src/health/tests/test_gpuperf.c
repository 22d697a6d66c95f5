/*
 * Unit tests for the GPU performance checks: the bandwidth and FLOP
 * arithmetic on hand-computed figures, the threshold, the expected-figure
 * table (shipped data, model lookup, bad files), the report over samples,
 * and whole runs through the stand-in CUDA library (fake_cuda.c) with
 * scripted elapsed times: pass, fail below the fraction, no figure, fp16
 * before Ampere, and skips without CUDA, a GPU or cuBLAS.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/tests/testmain.h"
#include "health/health.h"

#define H100 "{\"name\":\"NVIDIA H100 80GB HBM3\",\"memory\":85899345920," \
	     "\"cc\":9,"

static void assert_near(double got, double want)
{
	if (fabs(got - want) > 1e-6 * fabs(want))
		fail_msg("got %.9g, want %.9g", got, want);
}

static void test_arithmetic(void **state)
{
	(void)state;
	/* 40 copies of 1 GiB in 25.6 ms: 2 * 2^30 * 40 / 0.0256 s. */
	assert_near(kn_copy_gbs(1LL << 30, 40, 25.6), 3355.4432);
	/* 20 GEMMs of 8192^3 in 25 ms: 2 * 549755813888 * 20 / 0.025 s. */
	assert_near(kn_gemm_tflops(8192, 8192, 8192, 20, 25.0), 879.6093022208);
	assert_near(kn_gemm_tflops(4096, 2048, 1024, 1, 1.0), 17.179869184);
	assert_true(kn_copy_gbs(1 << 20, 1, 0) == 0);
	assert_true(kn_gemm_tflops(1, 1, 1, 1, -1) == 0);
}

static void test_judge(void **state)
{
	(void)state;
	assert_int_equal(kn_gpu_perf_judge(500, 0, 0.7), KN_CHECK_SKIP);
	assert_int_equal(kn_gpu_perf_judge(699.9, 1000, 0.7), KN_CHECK_FAIL);
	assert_int_equal(kn_gpu_perf_judge(700, 1000, 0.7), KN_CHECK_PASS);
	assert_int_equal(kn_gpu_perf_judge(1200, 1000, 0.7), KN_CHECK_PASS);
	assert_int_equal(kn_gpu_perf_judge(950, 1000, 1.0), KN_CHECK_FAIL);
}

static void test_table(void **state)
{
	struct kn_gpu_perf_table t;
	struct kn_error err;
	const struct kn_gpu_perf_row *r;
	(void)state;

	assert_int_equal(kn_gpu_perf_load(KN_TEST_DATA_DIR "/gpu-perf.csv", &t, &err), 0);
	r = kn_gpu_perf_lookup(&t, "NVIDIA H100 80GB HBM3", 79.6);
	assert_non_null(r);
	assert_string_equal(r->model, "H100-80GB");
	assert_true(r->mem_bandwidth_gbs == 3350 && r->tensor_tflops == 989);
	r = kn_gpu_perf_lookup(&t, "NVIDIA A100-SXM4-40GB", 39.4);
	assert_non_null(r);
	assert_string_equal(r->model, "A100-40GB");
	r = kn_gpu_perf_lookup(&t, "NVIDIA A100 80GB PCIe", 79.1);
	assert_string_equal(r->model, "A100-80GB");
	assert_string_equal(kn_gpu_perf_lookup(&t, "NVIDIA H200", 139.8)->model,
			    "H200-141GB");
	assert_string_equal(kn_gpu_perf_lookup(&t, "Tesla T4", 14.6)->model,
			    "T4-16GB");
	r = kn_gpu_perf_lookup(&t, "Tesla V100-PCIE-16GB", 15.8);
	assert_string_equal(r->model, "V100-16GB");
	assert_true(r->mem_bandwidth_gbs == 0 && r->tensor_tflops == 0);
	/* H100 NVL (94 GB) is no H100-80GB; an unknown family has no row. */
	assert_null(kn_gpu_perf_lookup(&t, "NVIDIA H100 NVL", 93.0));
	assert_null(kn_gpu_perf_lookup(&t, "NVIDIA L4", 22.0));
	kn_gpu_perf_table_release(&t);
}

static void test_table_errors(void **state)
{
	static const struct {
		const char *text, *want;
	} bad[] = {
		{"model,mem_bandwidth_gbs\nX-1GB,1\n", ":1: no column \"tensor_tflops\""},
		{"model,mem_bandwidth_gbs,tensor_tflops\nX-1GB,1,2\nY-2GB,abc,3\n",
		 ":3: mem_bandwidth_gbs \"abc\""},
		{"model,mem_bandwidth_gbs,tensor_tflops\nX-1GB,1,-2\n",
		 ":2: tensor_tflops \"-2\""},
		{"model,mem_bandwidth_gbs,tensor_tflops\n,1,2\n", ":2: model"},
		{"model,mem_bandwidth_gbs,tensor_tflops\nX-1GB,1\n", ":2: 2 fields"},
	};
	char path[] = "/tmp/kiln-test-gpuperf-XXXXXX";
	struct kn_gpu_perf_table t;
	struct kn_error err;
	int fd = mkstemp(path);
	(void)state;

	assert_true(fd >= 0);
	close(fd);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		FILE *f = fopen(path, "w");
		fputs(bad[i].text, f);
		fclose(f);
		assert_true(kn_gpu_perf_load(path, &t, &err) < 0);
		if (!strstr(err.message, bad[i].want) ||
		    !strstr(err.message, path))
			fail_msg("case %zu: %s", i, err.message);
	}
	unlink(path);
	assert_true(kn_gpu_perf_load("/nonexistent.csv", &t, &err) < 0);
	assert_non_null(strstr(err.message, "/nonexistent.csv"));
}

static struct kn_gpu_perf_sample sample(const char *name, double gib,
					double gbs, double tflops)
{
	struct kn_gpu_perf_sample s;

	memset(&s, 0, sizeof(s));
	snprintf(s.name, sizeof(s.name), "%s", name);
	s.mem_gib = gib;
	s.copy_bytes = 1LL << 30;
	s.copy_gbs = gbs;
	s.gemm_n = 8192;
	s.gemm_type = "bf16";
	s.gemm_tflops = tflops;
	return s;
}

static void test_report(void **state)
{
	struct kn_gpu_perf_row rows[] = {{"H100-80GB", 3350, 989},
					 {"A10-24GB", 600, 0}};
	struct kn_gpu_perf_table t = {rows, 2};
	struct kn_gpu_perf_sample s[3] = {
		sample("NVIDIA H100 80GB HBM3", 79.6, 3000, 800),
		sample("NVIDIA H100 80GB HBM3", 79.6, 2000, 700),
		sample("NVIDIA A10", 22.5, 500, 100),
	};
	struct kn_check_result r[KN_GPU_PERF_CHECKS];
	(void)state;

	/* 2000 < 0.7 * 3350 = 2345: GPU 1 fails and only it is named. */
	assert_int_equal(kn_gpu_perf_report(&t, 0.7, s, 2, NULL, NULL, r), 1);
	assert_string_equal(r[0].name, "gpu_mem_bandwidth");
	assert_int_equal(r[0].status, KN_CHECK_FAIL);
	assert_non_null(strstr(r[0].message, "GPU 1 (NVIDIA H100 80GB HBM3): "
					     "2000 GB/s"));
	assert_non_null(strstr(r[0].message, "below 70% of H100-80GB's 3350"));
	assert_null(strstr(r[0].message, "GPU 0"));
	assert_string_equal(r[1].name, "gpu_gemm");
	assert_int_equal(r[1].status, KN_CHECK_PASS);
	assert_non_null(strstr(r[1].message, "GPU 0 (NVIDIA H100 80GB HBM3): "
					     "800.0 TFLOP/s"));
	assert_non_null(strstr(r[1].message, "81% of H100-80GB's 989"));
	/* A stricter fraction fails both GEMMs. */
	assert_int_equal(kn_gpu_perf_report(&t, 0.9, s, 2, NULL, NULL, r), 2);
	assert_non_null(strstr(r[1].message, "GPU 0"));
	assert_non_null(strstr(r[1].message, "GPU 1"));
	/* A10: a bandwidth figure, no TFLOP/s figure. */
	assert_int_equal(kn_gpu_perf_report(&t, 0.7, &s[2], 1, NULL, NULL, r), 0);
	assert_int_equal(r[0].status, KN_CHECK_PASS);
	assert_int_equal(r[1].status, KN_CHECK_SKIP);
	assert_non_null(strstr(r[1].message, "no expected figure for A10-24GB, "
					     "nothing compared"));
	/* A model missing from the table. */
	s[2] = sample("NVIDIA L4", 22.0, 250, 100);
	kn_gpu_perf_report(&t, 0.7, &s[2], 1, NULL, NULL, r);
	assert_int_equal(r[0].status, KN_CHECK_SKIP);
	assert_non_null(strstr(r[0].message, "no expected figure for this model"));
	/* A GPU whose measurement failed fails both checks. */
	s[2] = sample("NVIDIA H100 80GB HBM3", 79.6, 0, 0);
	snprintf(s[2].error, sizeof(s[2].error), "copy: out of memory");
	assert_int_equal(kn_gpu_perf_report(&t, 0.7, &s[2], 1, NULL, NULL, r), 2);
	assert_non_null(strstr(r[1].message, "copy: out of memory"));
	/* Nothing measured; no cuBLAS. */
	assert_int_equal(kn_gpu_perf_report(&t, 0.7, NULL, 0, "no GPU: x", NULL,
					    r), 0);
	assert_int_equal(r[0].status, KN_CHECK_SKIP);
	assert_string_equal(r[1].message, "no GPU: x");
	kn_gpu_perf_report(&t, 0.7, s, 1, NULL, "no cuBLAS: y", r);
	assert_int_equal(r[0].status, KN_CHECK_PASS);
	assert_int_equal(r[1].status, KN_CHECK_SKIP);
	assert_string_equal(r[1].message, "no cuBLAS: y");
}

/* A whole run through the stand-in library with answers as JSON. */
static int run(const char *answers, const char *cudart, const char *cublas,
	       struct kn_check_result *r)
{
	struct kn_gpu_perf_config cfg = {KN_TEST_DATA_DIR "/gpu-perf.csv", 0.7};
	struct kn_error err;
	const char *fake = getenv("KILN_TEST_FAKE_CUDA");
	int rc;

	setenv("KILN_CUDART_LIBRARY", cudart ? cudart : fake, 1);
	setenv("KILN_CUBLAS_LIBRARY", cublas ? cublas : fake, 1);
	setenv("KILN_FAKE_CUDA", answers, 1);
	rc = kn_gpu_perf_run(&cfg, r, &err);
	assert_true(rc >= 0);
	return rc;
}

static void test_run(void **state)
{
	struct kn_check_result r[KN_GPU_PERF_CHECKS];
	(void)state;

	/* 2 * 2^30 B per 0.7 ms copy: 3067.8 GB/s, 92% of 3350; one 8192^3
	   GEMM per 1.25 ms: 879.6 TFLOP/s, 89% of 989. */
	assert_int_equal(run("{\"devices\":[" H100 "\"copy_ms\":0.7,"
			     "\"gemm_ms\":1.25}]}", NULL, NULL, r), 0);
	assert_int_equal(r[0].status, KN_CHECK_PASS);
	assert_non_null(strstr(r[0].message, "3068 GB/s copying 1024 MiB, 92% "
					     "of H100-80GB's 3350"));
	assert_int_equal(r[1].status, KN_CHECK_PASS);
	assert_non_null(strstr(r[1].message, "879.6 TFLOP/s on 8192^3 bf16 "
					     "GEMM, 89% of H100-80GB's 989"));

	/* Copies at 1.5 ms: 1431.7 GB/s, below 0.7 * 3350; GEMMs at 3 ms:
	   366.5 TFLOP/s, below 0.7 * 989. */
	assert_int_equal(run("{\"devices\":[" H100 "\"copy_ms\":1.5,"
			     "\"gemm_ms\":3.0}]}", NULL, NULL, r), 2);
	assert_non_null(strstr(r[0].message, "1432 GB/s"));
	assert_non_null(strstr(r[1].message, "366.5 TFLOP/s"));

	/* Before Ampere the GEMM is fp16 (the stand-in refuses bf16 there, as
	   cuBLAS does); V100-16GB has no figures, so nothing is compared. */
	assert_int_equal(run("{\"devices\":[{\"name\":\"Tesla V100-PCIE-16GB\","
			     "\"memory\":17179869184,\"cc\":7,\"copy_ms\":3,"
			     "\"gemm_ms\":20}]}", NULL, NULL, r), 0);
	assert_int_equal(r[0].status, KN_CHECK_SKIP);
	assert_non_null(strstr(r[0].message, "no expected figure for V100-16GB"));
	assert_int_equal(r[1].status, KN_CHECK_SKIP);
	assert_non_null(strstr(r[1].message, "on 8192^3 fp16 GEMM"));

	/* Little memory: smaller buffers and matrices. 384 MiB free: copies
	   of a quarter, 96 MiB; under the 512 MiB 8192^3 wants, so 4096^3. */
	run("{\"devices\":[" "{\"name\":\"NVIDIA H100 80GB HBM3\","
	    "\"memory\":402653184,\"cc\":9,\"copy_ms\":1,\"gemm_ms\":1}]}",
	    NULL, NULL, r);
	assert_non_null(strstr(r[0].message, "copying 96 MiB"));
	assert_non_null(strstr(r[1].message, "on 4096^3 bf16"));

	/* No GPU, no CUDA runtime, no cuBLAS. */
	assert_int_equal(run("{\"devices\":[]}", NULL, NULL, r), 0);
	assert_int_equal(r[0].status, KN_CHECK_SKIP);
	assert_int_equal(r[1].status, KN_CHECK_SKIP);
	assert_non_null(strstr(r[0].message, "no GPU"));
	assert_int_equal(run("{}", "/nonexistent/libcudart.so.12", NULL, r), 0);
	assert_int_equal(r[0].status, KN_CHECK_SKIP);
	assert_non_null(strstr(r[1].message, "no CUDA runtime: cannot load "
					     "/nonexistent/libcudart.so.12"));
	assert_int_equal(run("{\"devices\":[" H100 "\"copy_ms\":0.7,"
			     "\"gemm_ms\":1.25}]}", NULL,
			     "/nonexistent/libcublas.so.12", r), 0);
	assert_int_equal(r[0].status, KN_CHECK_PASS);
	assert_int_equal(r[1].status, KN_CHECK_SKIP);
	assert_non_null(strstr(r[1].message, "no cuBLAS"));
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_arithmetic),
	cmocka_unit_test(test_judge),
	cmocka_unit_test(test_table),
	cmocka_unit_test(test_table_errors),
	cmocka_unit_test(test_report),
	cmocka_unit_test(test_run))
