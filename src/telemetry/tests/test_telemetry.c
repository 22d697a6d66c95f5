/*
 * Unit tests for telemetry: the exposition writer's escaping and grammar,
 * node metrics from the fixture tree tests/fixtures/node-basic, and GPU
 * metrics through the real dlopen path loaded with the stand-in NVML
 * (fake_nvml.c) answering from the JSON files in tests/fixtures/nvml.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/tests/testmain.h"
#include "telemetry/telemetry.h"

static char fixture_path[1024];

static const char *fixture(const char *rel)
{
	const char *dir = getenv("KILN_TEST_FIXTURES");
	assert_non_null(dir);
	snprintf(fixture_path, sizeof(fixture_path), "%s/%s", dir, rel);
	return fixture_path;
}

static void use_nvml(const char *answers)
{
	assert_non_null(getenv("KILN_TEST_FAKE_NVML"));
	setenv("KILN_NVML_LIBRARY", getenv("KILN_TEST_FAKE_NVML"), 1);
	setenv("KILN_FAKE_NVML", fixture(answers), 1);
}

/* The line in text that starts with prefix (up to its newline), or "". */
static char line_buf[1024];
static const char *line_of(const char *text, const char *prefix)
{
	const char *p = text;
	size_t plen = strlen(prefix);

	line_buf[0] = '\0';
	while (p && *p) {
		if (!strncmp(p, prefix, plen)) {
			size_t n = strcspn(p, "\n");
			if (n >= sizeof(line_buf))
				n = sizeof(line_buf) - 1;
			memcpy(line_buf, p, n);
			line_buf[n] = '\0';
			return line_buf;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return line_buf;
}

static void test_prom_escaping(void **state)
{
	struct kn_buf b;
	const char *labels[] = {"path", "a\\b \"q\"\nx", "mode", "idle", NULL};
	(void)state;

	kn_buf_init(&b, 4096);
	assert_int_equal(kn_prom_family(&b, "kiln_x_total", "counter",
					"Back\\slash and\nnewline \"kept\"."), 0);
	assert_int_equal(kn_prom_sample(&b, "kiln_x_total", labels, 3), 0);
	assert_string_equal(b.data,
			    "# HELP kiln_x_total Back\\\\slash and\\nnewline "
			    "\"kept\".\n"
			    "# TYPE kiln_x_total counter\n"
			    "kiln_x_total{path=\"a\\\\b \\\"q\\\"\\nx\","
			    "mode=\"idle\"} 3\n");
	kn_buf_release(&b);
}

static void test_prom_values(void **state)
{
	struct kn_buf b;
	(void)state;

	kn_buf_init(&b, 4096);
	assert_int_equal(kn_prom_sample(&b, "a", NULL, NAN), 0);
	assert_int_equal(kn_prom_sample(&b, "a", NULL, INFINITY), 0);
	assert_int_equal(kn_prom_sample(&b, "a", NULL, -INFINITY), 0);
	assert_int_equal(kn_prom_sample(&b, "a", NULL, 2040109465600.0), 0);
	assert_int_equal(kn_prom_sample(&b, "a", NULL, 0.25), 0);
	assert_int_equal(kn_prom_sample(&b, "a", NULL, -7), 0);
	assert_string_equal(b.data, "a NaN\na +Inf\na -Inf\na 2040109465600\n"
				    "a 0.25\na -7\n");
	kn_buf_release(&b);
}

static void test_prom_rejects_bad_names(void **state)
{
	struct kn_buf b;
	const char *bad_label[] = {"9x", "v", NULL};
	const char *reserved[] = {"__name__", "v", NULL};
	const char *colon_label[] = {"a:b", "v", NULL};
	(void)state;

	kn_buf_init(&b, 4096);
	assert_int_equal(kn_prom_family(&b, "1abc", "gauge", "h"), -EINVAL);
	assert_int_equal(kn_prom_family(&b, "a-b", "gauge", "h"), -EINVAL);
	assert_int_equal(kn_prom_sample(&b, "", NULL, 1), -EINVAL);
	assert_int_equal(kn_prom_sample(&b, "ok", bad_label, 1), -EINVAL);
	assert_int_equal(kn_prom_sample(&b, "ok", reserved, 1), -EINVAL);
	assert_int_equal(kn_prom_sample(&b, "ok", colon_label, 1), -EINVAL);
	assert_int_equal(kn_prom_family(&b, "job:rate5m", "gauge", "h"), 0);
	kn_buf_release(&b);
}

static void test_prom_cap(void **state)
{
	struct kn_buf b;
	(void)state;

	kn_buf_init(&b, 16);
	assert_int_equal(kn_prom_family(&b, "abc", "gauge",
					"a help text longer than the cap"),
			 -E2BIG);
	kn_buf_release(&b);
}

static void test_prom_histogram(void **state)
{
	static const double bounds[] = {0.005, 0.1, 2.5};
	const char *labels[] = {"priority", "10", NULL};
	struct kn_prom_histogram h;
	struct kn_buf b;
	(void)state;

	kn_prom_histogram_init(&h, bounds, 3);
	kn_prom_histogram_observe(&h, 0.005); /* le is inclusive */
	kn_prom_histogram_observe(&h, 0.05);
	kn_prom_histogram_observe(&h, 7);
	kn_buf_init(&b, 4096);
	assert_int_equal(kn_prom_histogram_write(&b, "kiln_x_seconds", labels,
						 &h), 0);
	assert_string_equal(b.data,
			    "kiln_x_seconds_bucket{priority=\"10\",le=\"0.005\"} 1\n"
			    "kiln_x_seconds_bucket{priority=\"10\",le=\"0.1\"} 2\n"
			    "kiln_x_seconds_bucket{priority=\"10\",le=\"2.5\"} 2\n"
			    "kiln_x_seconds_bucket{priority=\"10\",le=\"+Inf\"} 3\n"
			    "kiln_x_seconds_sum{priority=\"10\"} 7.055\n"
			    "kiln_x_seconds_count{priority=\"10\"} 3\n");
	kn_buf_release(&b);
	kn_buf_init(&b, 4096);
	assert_int_equal(kn_prom_histogram_write(&b, "kiln_y", NULL, &h), 0);
	assert_non_null(strstr(b.data, "kiln_y_bucket{le=\"+Inf\"} 3\n"));
	assert_non_null(strstr(b.data, "kiln_y_count 3\n"));
	kn_buf_release(&b);
}

/* The line for want's series (all of want up to its value) in text. */
static void assert_sample(const char *text, const char *want)
{
	const char *value = strrchr(want, ' ');
	char series[512];

	assert_non_null(value);
	snprintf(series, sizeof(series), "%.*s", (int)(value - want + 1), want);
	assert_string_equal(line_of(text, series), want);
}

/* What the node-basic root gives, as node_exporter would give it. */
static const char *const NODE_SAMPLES[] = {
	"node_boot_time_seconds 1764689166",
	"node_load15 0.4",
	"node_context_switches_total 987654321",
	"node_intr_total 1234567",
	"node_procs_running 2",
	/* vmstat's default fields only, and file descriptors */
	"node_vmstat_pgmajfault 321",
	"node_vmstat_oom_kill 2",
	"node_filefd_allocated 4096",
	"node_filefd_maximum 1048576",
	/* identity: uname's fields from the root's /proc/sys/kernel, and
	   os-release, labelled as node_exporter labels them */
	"node_uname_info{domainname=\"(none)\",machine=\"x86_64\","
	"nodename=\"node-a\",release=\"6.1.0-27-amd64\","
	"sysname=\"Linux\",version=\"#1 SMP PREEMPT_DYNAMIC Debian "
	"6.1.115-1 (2024-11-01)\"} 1",
	"node_os_info{build_id=\"\",id=\"debian\",id_like=\"\",image_id=\"\","
	"image_version=\"\",name=\"Debian GNU/Linux\",pretty_name=\"Debian "
	"GNU/Linux 12 (bookworm)\",variant=\"\",variant_id=\"\",version=\"12 "
	"(bookworm)\",version_codename=\"bookworm\",version_id=\"12\"} 1",
	"node_os_version{id=\"debian\",id_like=\"\","
	"name=\"Debian GNU/Linux\"} 12",
	/* memory: kB to bytes; parentheses folded; unitless keys as is */
	"node_memory_MemTotal_bytes 2040109465600",
	"node_memory_Active_anon_bytes 209715200",
	"node_memory_HugePages_Total 0",
	"node_network_receive_bytes_total{device=\"eth0\"} 9876543210",
	"node_network_transmit_drop_total{device=\"eth0\"} 3",
	/* disks: sectors are 512 bytes */
	"node_disk_read_bytes_total{device=\"sda\"} 1228800000",
	"node_disk_write_time_seconds_total{device=\"nvme0n1\"} 30",
};

/* Text the scrape holds, and text it must not. */
static const char *const NODE_HOLDS[] = {
	"# TYPE node_cpu_seconds_total counter\n",
	"# TYPE node_vmstat_pswpout untyped\n",
	"# TYPE node_time_seconds gauge\n",
	"# HELP node_memory_MemAvailable_bytes Memory information field "
	"MemAvailable_bytes.\n",
	/* filesystems: real ones only, labelled as node_exporter does */
	"node_filesystem_avail_bytes{device=\"/dev/nvme0n1\",fstype=\"xfs\","
	"mountpoint=\"/mnt/scratch\"} ",
	"mountpoint=\"/run\"",
};
static const char *const NODE_LACKS[] = {
	"cpu=\"\"", /* the total of all CPUs */
	"node_vmstat_nr_free_pages",
	/* partitions and loop devices */
	"device=\"sda1\"", "device=\"loop0\"", "device=\"nvme0n1p1\"",
	"mountpoint=\"/proc\"", "mountpoint=\"/sys\"",
};

static void test_node_fixture(void **state)
{
	struct kn_node_options opt = {fixture("node-basic"), NULL};
	struct kn_error err;
	struct kn_buf b;
	char want[256];
	(void)state;

	kn_buf_init(&b, KN_PROM_MAX_BYTES);
	assert_int_equal(kn_node_collect(&opt, &b, &err), 0);
	/* CPU: ticks / USER_HZ, every mode of every CPU, not the total. */
	snprintf(want, sizeof(want),
		 "node_cpu_seconds_total{cpu=\"1\",mode=\"user\"} %.0f",
		 10200.0 / (double)sysconf(_SC_CLK_TCK));
	assert_sample(b.data, want);
	for (size_t i = 0; i < sizeof(NODE_SAMPLES) / sizeof(*NODE_SAMPLES); i++)
		assert_sample(b.data, NODE_SAMPLES[i]);
	for (size_t i = 0; i < sizeof(NODE_HOLDS) / sizeof(*NODE_HOLDS); i++)
		if (!strstr(b.data, NODE_HOLDS[i]))
			fail_msg("missing: %s", NODE_HOLDS[i]);
	for (size_t i = 0; i < sizeof(NODE_LACKS) / sizeof(*NODE_LACKS); i++)
		if (strstr(b.data, NODE_LACKS[i]))
			fail_msg("present: %s", NODE_LACKS[i]);
	assert_int_equal(b.data[b.len - 1], '\n');
	kn_buf_release(&b);
}

static void test_node_listed_mounts(void **state)
{
	const char *mounts[] = {"/mnt/scratch", NULL};
	struct kn_node_options opt = {fixture("node-basic"), mounts};
	struct kn_error err;
	struct kn_buf b;
	(void)state;

	kn_buf_init(&b, KN_PROM_MAX_BYTES);
	assert_int_equal(kn_node_collect(&opt, &b, &err), 0);
	assert_non_null(strstr(b.data, "mountpoint=\"/mnt/scratch\""));
	assert_null(strstr(b.data, "mountpoint=\"/run\""));
	assert_null(strstr(b.data, "mountpoint=\"/\""));
	kn_buf_release(&b);
}

static void test_node_errors(void **state)
{
	struct kn_node_options opt = {"/nonexistent-kiln-root", NULL};
	struct kn_error err;
	struct kn_buf b;
	char dir[] = "/tmp/kiln-telemetry-XXXXXX", path[256];
	FILE *f;
	(void)state;

	kn_buf_init(&b, KN_PROM_MAX_BYTES);
	assert_int_not_equal(kn_node_collect(&opt, &b, &err), 0);
	assert_non_null(strstr(err.message, "/nonexistent-kiln-root/proc/stat"));

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/proc", dir);
	assert_int_equal(kn_mkdir_p(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/proc/stat", dir);
	f = fopen(path, "w");
	fputs("cpu0 1 2 3 4 5 6 7 8\n", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/proc/meminfo", dir);
	f = fopen(path, "w");
	fputs("MemTotal: 10 kB\ngarbage without colon\n", f);
	fclose(f);
	opt.root = dir;
	assert_int_not_equal(kn_node_collect(&opt, &b, &err), 0);
	assert_non_null(strstr(err.message, "/proc/meminfo:2: malformed"));
	kn_rm_rf(dir);
	kn_buf_release(&b);
}

static void test_mem_total_and_ib(void **state)
{
	struct kn_ib_port *ports;
	struct kn_error err;
	int64_t total;
	size_t n;
	(void)state;

	assert_int_equal(kn_node_mem_total(fixture("node-basic"), &total, &err), 0);
	assert_int_equal(total, 1992294400LL * 1024);
	assert_int_equal(kn_ib_ports(fixture("node-basic"), &ports, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_string_equal(ports[0].device, "mlx5_0");
	assert_string_equal(ports[1].device, "mlx5_1");
	assert_int_equal(ports[0].port, 1);
	assert_string_equal(ports[0].state, "ACTIVE");
	assert_string_equal(ports[0].phys_state, "LinkUp");
	assert_true(ports[0].rate_gbps == 400.0);
	assert_string_equal(ports[0].link_layer, "InfiniBand");
	free(ports);
	assert_int_equal(kn_ib_ports("/nonexistent-kiln-root", &ports, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_null(ports);
}

static void test_nvml_sample_and_write(void **state)
{
	struct kn_nvml *nv;
	struct kn_gpu_sample s[2];
	unsigned xid[2] = {0, 0};
	struct kn_error err;
	struct kn_buf b;
	(void)state;

	use_nvml("nvml/h100x2.json");
	assert_int_equal(kn_nvml_open(&nv, &err), 0);
	assert_int_equal(kn_nvml_count(nv), 2);
	assert_string_equal(kn_nvml_driver_version(nv), "550.54.15");
	for (unsigned i = 0; i < 2; i++)
		assert_int_equal(kn_nvml_sample(nv, i, &s[i], &err), 0);
	assert_int_not_equal(kn_nvml_sample(nv, 2, &s[0], &err), 0);
	assert_string_equal(s[1].name, "NVIDIA H100 80GB HBM3");
	assert_string_equal(s[1].pci_bus_id, "00000000:19:00.0");
	assert_int_equal(s[0].fb_used, 45520809984ULL);
	assert_int_equal(s[0].throttle, KN_THROTTLE_SW_POWER_CAP);
	assert_true(s[0].have & KN_GPU_THROTTLE); /* through the older name */
	assert_int_equal(s[0].nvlinks, 18);
	assert_int_equal(s[0].pcie_max_width, 16);
	assert_int_equal(kn_nvml_poll_xids(nv, xid, &err), 0);
	assert_int_equal(xid[0], 0);
	assert_int_equal(xid[1], 13);

	kn_buf_init(&b, KN_PROM_MAX_BYTES);
	assert_int_equal(kn_gpu_write(s, xid, 2, "node-a", &b, &err), 0);
	assert_string_equal(
		line_of(b.data, "DCGM_FI_DEV_FB_USED{gpu=\"0\""),
		"DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-5a1c9e00-7b2d-4c3e-9f10-"
		"abcdef012340\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\","
		"modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-a\"} 43412");
	assert_non_null(strstr(b.data, "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n"));
	assert_non_null(strstr(line_of(b.data, "DCGM_FI_DEV_XID_ERRORS{gpu=\"1\""),
			       "} 13"));
	assert_non_null(strstr(line_of(b.data, "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\""),
			       "} 312.456"));
	assert_non_null(strstr(b.data, "Hostname=\"node-a\",link=\"17\"} 3\n"));
	kn_buf_release(&b);
	kn_nvml_close(nv);
}

/* Per-process usage: GPU 0 runs pids 4242 (20 GiB) and 4343 (1 GiB);
   4242's SM samples after t=900us are 60 and 80 (mean 70%), the one at
   500us is older. GPU 1 has no per-process calls in the fixture. */
static void test_nvml_processes(void **state)
{
	struct kn_nvml *nv;
	struct kn_gpu_proc_usage p[KN_GPU_PROCS_MAX];
	struct kn_error err;
	size_t n = 99;
	(void)state;

	use_nvml("nvml/h100x2.json");
	assert_int_equal(kn_nvml_open(&nv, &err), 0);
	assert_int_equal(kn_nvml_processes(nv, 0, 900, p, KN_GPU_PROCS_MAX, &n,
					   &err), 0);
	assert_int_equal(n, 2);
	assert_int_equal(p[0].pid, 4242);
	assert_int_equal(p[0].memory_bytes, 21474836480LL);
	assert_float_equal(p[0].sm_util, 0.70, 1e-9);
	assert_int_equal(p[1].pid, 4343);
	assert_float_equal(p[1].sm_util, 0.10, 1e-9);
	/* No samples since then: memory only. */
	assert_int_equal(kn_nvml_processes(nv, 0, 5000, p, KN_GPU_PROCS_MAX, &n,
					   &err), 0);
	assert_int_equal(n, 2);
	assert_true(p[0].sm_util < 0);
	/* Room for one: the first. */
	assert_int_equal(kn_nvml_processes(nv, 0, 0, p, 1, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_int_equal(p[0].pid, 4242);
	/* A device that does not list processes: none. */
	assert_int_equal(kn_nvml_processes(nv, 1, 0, p, KN_GPU_PROCS_MAX, &n,
					   &err), 0);
	assert_int_equal(n, 0);
	assert_int_not_equal(kn_nvml_processes(nv, 2, 0, p, KN_GPU_PROCS_MAX,
					       &n, &err), 0);
	kn_nvml_close(nv);
}

static void test_nvml_unsupported_fields(void **state)
{
	struct kn_nvml *nv;
	struct kn_gpu_sample s;
	struct kn_error err;
	struct kn_buf b;
	(void)state;

	use_nvml("nvml/t4-minimal.json");
	assert_int_equal(kn_nvml_open(&nv, &err), 0);
	assert_int_equal(kn_nvml_sample(nv, 0, &s, &err), 0);
	assert_int_equal(s.have, KN_GPU_FB | KN_GPU_TEMP);
	assert_int_equal(s.nvlinks, 0);
	kn_buf_init(&b, KN_PROM_MAX_BYTES);
	assert_int_equal(kn_gpu_write(&s, NULL, 1, "h", &b, &err), 0);
	assert_non_null(strstr(b.data, "DCGM_FI_DEV_GPU_TEMP{"));
	assert_non_null(strstr(b.data, "DCGM_FI_DEV_XID_ERRORS{"));
	assert_null(strstr(b.data, "DCGM_FI_DEV_GPU_UTIL"));
	assert_null(strstr(b.data, "DCGM_FI_DEV_NVLINK_LINK_STATUS"));
	assert_null(strstr(b.data, "pci_bus_id=\"0"));
	kn_buf_release(&b);
	kn_nvml_close(nv);
}

static void test_nvml_absent(void **state)
{
	struct kn_nvml *nv = NULL;
	struct kn_error err;
	(void)state;

	setenv("KILN_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
	assert_int_equal(kn_nvml_open(&nv, &err), -ENOENT);
	assert_non_null(strstr(err.message, "cannot load"));
	assert_null(nv);
	use_nvml("nvml/no-driver.json");
	assert_int_equal(kn_nvml_open(&nv, &err), -ENOENT);
	assert_non_null(strstr(err.message, "nvmlInit failed"));
}

static void test_nvml_app_clocks(void **state)
{
	struct kn_nvml *nv;
	struct kn_gpu_clocks cur, max, again;
	struct kn_error err;
	(void)state;

	use_nvml("nvml/h100x2.json");
	assert_int_equal(kn_nvml_open(&nv, &err), 0);
	assert_int_equal(kn_nvml_app_clocks(nv, 0, &cur, &max, &err), 0);
	assert_int_equal(cur.sm_mhz, 1755);
	assert_int_equal(max.sm_mhz, 1980);
	assert_int_equal(max.mem_mhz, 2619);
	assert_int_equal(kn_nvml_set_app_clocks(nv, 0, &max, &err), 0);
	assert_int_equal(kn_nvml_app_clocks(nv, 0, &again, &max, &err), 0);
	assert_int_equal(again.sm_mhz, 1980);
	assert_int_equal(kn_nvml_reset_app_clocks(nv, 0, &err), 0);
	assert_int_equal(kn_nvml_app_clocks(nv, 0, &again, &max, &err), 0);
	assert_int_equal(again.sm_mhz, 1755);
	kn_nvml_close(nv);

	use_nvml("nvml/t4-minimal.json");
	assert_int_equal(kn_nvml_open(&nv, &err), 0);
	assert_int_not_equal(kn_nvml_app_clocks(nv, 0, &cur, &max, &err), 0);
	assert_non_null(strstr(err.message, "application clocks"));
	assert_int_equal(kn_nvml_set_app_clocks(nv, 0, &max, &err), -EPERM);
	assert_non_null(strstr(err.message, "needs root"));
	kn_nvml_close(nv);
}

KN_TEST_MAIN(NULL, NULL,
	cmocka_unit_test(test_prom_escaping),
	cmocka_unit_test(test_prom_values),
	cmocka_unit_test(test_prom_rejects_bad_names),
	cmocka_unit_test(test_prom_cap),
	cmocka_unit_test(test_prom_histogram),
	cmocka_unit_test(test_node_fixture),
	cmocka_unit_test(test_node_listed_mounts),
	cmocka_unit_test(test_node_errors),
	cmocka_unit_test(test_mem_total_and_ib),
	cmocka_unit_test(test_nvml_sample_and_write),
	cmocka_unit_test(test_nvml_processes),
	cmocka_unit_test(test_nvml_unsupported_fields),
	cmocka_unit_test(test_nvml_absent),
	cmocka_unit_test(test_nvml_app_clocks))
