"""kiln advise as a user runs it: no server, the shipped catalog, a user's
own catalog, the human table and -o json with the same facts, warnings on
stderr, and usage errors naming the flag."""
import json
import os
import subprocess

from conftest import KILN


def advise(*args):
    env = dict(os.environ, KILN_HOME="/nonexistent-kiln-home")
    return subprocess.run([KILN, "advise", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def advise_json(*args):
    r = advise(*args, "-o", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def test_training_7b_human_table():
    r = advise("--phase", "train", "--params", "7B", "--dtype", "bf16")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Family: GPU: ND family preferred, NC with Ethernet" in out
    assert "7B params x 2 bytes (bf16) = 14.0 GB" in out
    assert "16 bytes/param" in out and "= 112.0 GB" in out
    assert "total         134.4 GB" in out
    first = [l for l in out.splitlines() if "Standard_" in l][0]
    # Two A100 80GB: the cheapest size holding 134.4 GB; no 1-year price
    # in the catalog for it, shown as a dash.
    assert first.split()[0] == "Standard_NC48ads_A100_v4"
    assert "2 of 2" in first and "$7.35/h $5363/mo" in first and "—" in first
    assert r.stderr == ""


def test_training_7b_json_same_facts():
    j, _ = advise_json("--phase", "train", "--params", "7B")
    assert j["phase"] == "train" and j["dtype"] == "bf16"
    assert abs(j["memory"]["weights_gb"] - 14.0) < 1e-9
    assert abs(j["memory"]["total_gb"] - 134.4) < 1e-9
    assert j["memory"]["train_bytes_per_param"] == 16
    o = j["options"][0]
    assert o["size"] == "Standard_NC48ads_A100_v4"
    assert o["gpu"] == "A100-80GB" and o["gpus_used"] == 2 and o["nodes"] == 1
    assert o["prices"]["on_demand"]["usd_hour"] == 7.346
    assert abs(o["prices"]["on_demand"]["usd_month"] - 7.346 * 730) < 1e-6
    assert o["prices"]["reserved_1y"] == {"usd_hour": None, "usd_month": None}
    assert all(x["capacity_gb"] >= 160 for x in j["options"])
    assert j["warnings"] == []


def test_inference_preset_with_throughput():
    j, _ = advise_json("--phase", "infer", "--preset", "llama-3-8b",
                       "--throughput", "100")
    assert j["preset"] == "llama-3-8b" and j["dtype"] == "fp16"
    assert abs(j["params"] - 8.03e9) < 1
    assert j["memory"]["shape_estimated"] is True
    assert j["throughput"] == 100 and j["decode_efficiency"] == 0.5
    assert j["family"]["recommendation"].startswith("GPU: NC or ND")
    assert (j["family"]["preferred"], j["family"]["alternative"]) == ("NC", "ND")
    for o in j["options"]:
        per_vm = o["tokens_per_s_per_vm"]
        # As many VMs as the decode rate needs, no more.
        assert o["nodes"] * per_vm >= 100 > (o["nodes"] - 1) * per_vm
    codes = {w["code"] for w in j["warnings"]}
    assert "no_bandwidth" in codes  # H100 NVL and MI300X have no figure


def test_small_models_on_cpu_without_prices():
    r = advise("--phase", "infer", "--workload", "small", "--params", "350M")
    assert r.returncode == 0, r.stderr
    assert "Family: CPU: compute-optimized sizes (F series)" in r.stdout
    rows = [l for l in r.stdout.splitlines() if "Standard_" in l]
    assert rows[0].split()[0] == "Standard_F8s_v2"
    assert all(l.split()[0].startswith("Standard_F") for l in rows)
    assert rows[0].count("—") == 5  # GPUS and the four prices
    j, _ = advise_json("--phase", "train", "--workload", "small",
                       "--params", "350M", "--dtype", "fp32")
    assert [o["size"] for o in j["options"]][0] == "Standard_E8s_v5"


def test_warnings():
    r = advise("--phase", "train", "--params", "7B", "--interruptible",
               "--budget", "300", "--nodes", "2")
    assert r.returncode == 0, r.stderr
    assert "warning: spot VMs can be taken back" in r.stderr
    assert "over the budget of $300/month" in r.stderr
    j, _ = advise_json("--phase", "train", "--params", "7B", "--nodes", "2",
                       "--options", "8")
    assert j["family"]["infiniband"] is True
    assert j["options"][0]["infiniband"] is True
    no_ib = [w["size"] for w in j["warnings"] if w["code"] == "no_infiniband"]
    assert no_ib and all(not o["infiniband"] for o in j["options"]
                         if o["size"] in no_ib)
    j, _ = advise_json("--phase", "infer", "--params", "1B")
    premium = [w for w in j["warnings"] if w["code"] == "premium_gpu"]
    assert j["options"][0]["gpu"] == "T4-16GB" and premium
    r = advise("--phase", "train", "--params", "2T")
    assert r.returncode == 1
    assert "no size fits" in r.stderr and "Standard_ND96isr_MI300X_v5" in r.stderr


def test_user_catalog_replaces_and_adds(tmp_path):
    cat = tmp_path / "mine.csv"
    cat.write_text(
        "family,size,gpu_model,gpu_count,gpu_mem_per_gpu_gb,vcpus,ram_gib,"
        "infiniband,payg_linux_usd_hr,spot_usd_hr,ri_1y_usd_hr,ri_3y_usd_hr\n"
        "NC_A100_v4,Standard_NC48ads_A100_v4,NVIDIA A100 80GB PCIe,2,80,48,"
        "440,no,5.00,,,\n"
        "onprem,rack-a,NVIDIA H100 80GB SXM5,2,80,64,512,yes,1.25,,,\n")
    j, _ = advise_json("--phase", "train", "--params", "7B", "--catalog",
                       str(cat))
    sizes = [o["size"] for o in j["options"]]
    assert sizes[0] == "rack-a" and sizes[1] == "Standard_NC48ads_A100_v4"
    assert j["options"][1]["prices"]["on_demand"]["usd_hour"] == 5.0
    assert j["options"][1]["prices"]["spot"]["usd_hour"] is None


def test_bad_catalog_row_names_file_line_column(tmp_path):
    cat = tmp_path / "bad.csv"
    cat.write_text(
        "family,size,gpu_model,gpu_count,gpu_mem_per_gpu_gb,vcpus,ram_gib,"
        "infiniband,payg_linux_usd_hr,spot_usd_hr,ri_1y_usd_hr,ri_3y_usd_hr\n"
        "onprem,box,NVIDIA L40S,1,48,64,512,no,cheap,,,\n")
    r = advise("--phase", "infer", "--params", "7B", "--catalog", str(cat))
    assert r.returncode == 1 and r.stdout == ""
    assert f"--catalog: {cat}:2:39: payg_linux_usd_hr:" in r.stderr


def test_usage_errors_name_the_flag():
    cases = [
        (["--params", "7B"], "--phase is required"),
        (["--phase", "serve", "--params", "7B"], "--phase:"),
        (["--phase", "train", "--workload", "huge", "--params", "7B"], "--workload:"),
        (["--phase", "train", "--params", "7X"], "--params:"),
        (["--phase", "train", "--params", "7B", "--dtype", "fp64"], "--dtype:"),
        (["--phase", "train", "--params", "7B", "--dtype", "int4"], "--dtype:"),
        (["--phase", "train"], "--params N"),
        (["--phase", "infer", "--preset", "nope"], "--preset:"),
        (["--phase", "infer", "--params", "7B", "--throughput", "fast"], "--throughput:"),
        (["--phase", "train", "--params", "7B", "--throughput", "10"], "--throughput:"),
        (["--phase", "infer", "--params", "7B", "--budget", "-5"], "--budget:"),
        (["--phase", "infer", "--params", "7B", "--layers", "32"], "--layers and --hidden"),
        (["--phase", "infer", "--params", "7B", "--nodes", "2", "--throughput", "9"], "--nodes and --throughput"),
    ]
    for args, want in cases:
        r = advise(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert want in r.stderr, (args, r.stderr)


def test_help_lists_every_flag():
    r = subprocess.run([KILN, "advise", "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0
    for flag in ("--phase", "--workload", "--params", "--dtype", "--preset",
                 "--nodes", "--throughput", "--interruptible", "--checkpoints",
                 "--budget", "--context", "--batch", "--layers", "--hidden",
                 "--catalog", "--options"):
        assert flag in r.stdout, flag
