"""Every action the console offers, clicked in a real browser as an
operator, with its effect checked through the API: cancel, evict and
retry a job; cordon, drain and uncordon a node; scale and restart a
deployment; promote and roll back a model alias. A viewer sees none of
the buttons and the API refuses every one of them; a user sees them on
its own jobs only."""
import pytest

from conftest import job_yaml, wait_for
from test_cost import COMMIT
from test_console import js_errors, login, wait_text
from test_console_traffic import patient
from test_deployments import deploy, detail, wait_ready

pytest.importorskip("selenium")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from test_console import browser  # noqa: E402,F401 (fixture)


def click(driver, page_css, action):
    """Click the action's button on the page once it is there (the page
    is drawn anew after each action: a button found a moment ago may be
    gone)."""
    css = f'{page_css} button[data-action="{action}"]'

    def clicked():
        try:
            buttons = driver.find_elements(By.CSS_SELECTOR, css)
            if buttons and buttons[0].is_enabled():
                buttons[0].click()
                return True
        except StaleElementReferenceException:
            pass
        return None
    wait_for(clicked, what=f"the {action} button")


def open_page(driver, s, hash_, css, text):
    url = f"{s.url}/#/{hash_}"
    # The same address again changes no fragment: load the page anew.
    if driver.current_url == url:
        driver.refresh()
    else:
        driver.get(url)
    return wait_text(driver, css, text)


def node_state(s):
    return s.request("GET", "/v1/nodes").json()["nodes"][0]["state"]


def model(s):
    r = s.request("GET", "/v1/models/tiny")
    assert r.status_code == 200, r.text
    return {a["alias"]: a["version"] for a in r.json()["aliases"]}


@pytest.fixture
def world(server, tmp_path):
    """A sleeping job, a preemptible one, one that failed from a spec
    file with a relative workdir, a deployment and a model with two
    versions (alias prod on the first)."""
    s = server
    ids = {}
    ids["sleeper"] = s.submit(job_yaml("sleeper", ["/bin/sleep", "300"]))
    # Saves a checkpoint, then sleeps; once resumed from it, ends.
    script = ('if [ -n "$KILN_RESUME_FROM" ]; then exit 0; fi; ' + COMMIT +
              'sleep 300 & wait')
    ids["spot"] = s.submit(job_yaml("spot", ["/bin/sh", "-c", script],
                                    preemptible=True,
                                    checkpoint={"grace": "5s"}))
    specs = tmp_path / "specs"
    (specs / "work").mkdir(parents=True)
    r = s.request("POST", "/v1/jobs", data=job_yaml(
        "failer", ["/bin/sh", "-c", "pwd; exit 3"], workdir="work",
        retries=0), params={"file": "failer.yaml",
                            "path": str(specs / "failer.yaml")})
    assert r.status_code == 201, r.text
    ids["failer"] = r.json()["job"]["id"]
    for j in ("sleeper", "spot"):
        s.wait_state(ids[j], "running")
    synced = (s.home / "blobs" / str(ids["spot"]) / "checkpoints" /
              "step-1" / "MANIFEST.json")
    wait_for(synced.exists, what="the checkpoint synced")
    s.wait_state(ids["failer"], "failed")
    deploy(s, patient("chat"))
    wait_ready(s, "chat", 1, timeout=60)
    out = tmp_path / "out"
    out.mkdir()
    for v in (1, 2):
        (out / "weights.bin").write_text(f"version {v}\n")
        s.cli("model", "push", str(out), "--name", "tiny",
              *(["--alias", "prod"] if v == 1 else []), check=True)
    return s, ids


def test_operator_clicks_every_action(world, browser):
    s, ids = world
    driver = browser
    login(driver, s, s.create_token("op", "operator"))

    # Jobs: cancel, evict, retry.
    open_page(driver, s, f"job/{ids['sleeper']}", "#page-job", "sleeper")
    click(driver, "#page-job", "cancel")
    s.wait_state(ids["sleeper"], "cancelled")
    open_page(driver, s, f"job/{ids['spot']}", "#page-job", "spot")
    click(driver, "#page-job", "evict")
    # Resumed from its checkpoint, it ends.
    first, _ = s.wait_state(ids["spot"], "succeeded",
                            timeout=60)["attempts_detail"]
    assert first["state"] == "preempted" and "evicted by op" in first["reason"]
    assert first["checkpoint"] == "step-1" and first["lost_task_ms"] > 0
    # Its page says where the time went: the preempted attempt's
    # checkpoint and the work lost after it.
    open_page(driver, s, f"job/{ids['spot']}", "#page-job", "succeeded")
    row = wait_text(driver, "#page-job tr", "evicted by op")
    assert "step-1 @" in row.text
    lost = row.find_elements(By.CSS_SELECTOR, "span.error")
    assert lost and lost[0].text.endswith(" s")
    old = s.job(ids["failer"])
    open_page(driver, s, f"job/{ids['failer']}", "#page-job", "failer")
    click(driver, "#page-job", "retry")
    # The retry's own page, for a new job of the operator's.
    wait_for(lambda: driver.current_url.split("#/job/")[-1].isdigit() and
             int(driver.current_url.split("#/job/")[-1]) > ids["failer"],
             what="the retry's page")
    new_id = int(driver.current_url.split("#/job/")[-1])
    new = s.wait_state(new_id, "failed")
    assert new["name"] == "failer" and new["owner"] == "op"
    assert new["spec_yaml"] == old["spec_yaml"]
    # Resolved against the same spec file: the same working directory.
    assert new["spec"]["workdir"] == old["spec"]["workdir"]
    assert s.logs(new_id).strip() == s.logs(ids["failer"]).strip() == \
        old["spec"]["workdir"]
    wait_text(driver, "#page-job", f"Job #{new_id} failer")

    # The node: cordon, uncordon, drain.
    open_page(driver, s, "overview", "#page-overview", "ready")
    click(driver, "#page-overview", "cordon")
    wait_for(lambda: node_state(s) == "cordoned", what="the cordon")
    # Drawn again: its free GPUs shown as off.
    wait_text(driver, "#page-overview", "uncordon")
    assert driver.find_elements(By.CSS_SELECTOR, "#page-overview .gpu.off")
    click(driver, "#page-overview", "uncordon")
    wait_for(lambda: node_state(s) == "ready", what="the uncordon")
    click(driver, "#page-overview", "drain")
    wait_for(lambda: node_state(s) == "draining", what="the drain")
    click(driver, "#page-overview", "uncordon")
    wait_for(lambda: node_state(s) == "ready", what="the node back")

    # The deployment: scale, rollout restart.
    open_page(driver, s, "deployment/chat", "#page-deployment", "Replicas")
    generation = detail(s, "chat")["generation"]
    field = driver.find_element(By.CSS_SELECTOR, "#page-deployment input.replicas")
    field.clear()
    field.send_keys("2")
    click(driver, "#page-deployment", "scale")
    wait_for(lambda: detail(s, "chat")["replicas_wanted"] == 2,
             what="the scale")
    wait_text(driver, "#page-deployment", "of 2")
    click(driver, "#page-deployment", "rollout restart")
    wait_for(lambda: detail(s, "chat")["generation"] > generation + 1,
             what="the restart")

    # The model: promote version 2 to prod, then roll prod back.
    assert model(s) == {"prod": 1}
    open_page(driver, s, "model/tiny", "#page-model", "Alias history")
    alias = driver.find_element(By.CSS_SELECTOR, "#page-model input.alias")
    alias.clear()
    alias.send_keys("prod")
    click(driver, "#page-model", "promote 2")
    wait_for(lambda: model(s) == {"prod": 2}, what="the promotion")
    click(driver, "#page-model", "roll back prod")
    wait_for(lambda: model(s) == {"prod": 1}, what="the roll back")

    audit = s.request("GET", "/v1/audit", params={"actor": "op",
                                                  "limit": 100}).json()
    done = {a["action"] for a in audit["audit"] if a["outcome"] == "ok"}
    assert {"job.cancel", "job.evict", "job.submit", "node.cordon",
            "node.drain", "node.uncordon", "deployment.scale",
            "deployment.restart", "model.promote",
            "model.rollback"} <= done, done
    assert not js_errors(driver), js_errors(driver)


def test_viewer_sees_no_action_and_the_api_refuses_them(world, browser):
    s, ids = world
    viewer = s.create_token("watcher", "viewer")
    login(browser, s, viewer)
    for hash_, css, text in (
            ("overview", "#page-overview", "ready"),
            ("jobs", "#page-jobs", "sleeper"),
            (f"job/{ids['sleeper']}", "#page-job", "sleeper"),
            (f"job/{ids['spot']}", "#page-job", "spot"),
            (f"job/{ids['failer']}", "#page-job", "failer"),
            ("deployment/chat", "#page-deployment", "Replicas"),
            ("model/tiny", "#page-model", "Alias history")):
        open_page(browser, s, hash_, css, text)
        assert not browser.find_elements(By.CSS_SELECTOR,
                                          "button.act, input.replicas, "
                                          "input.alias"), hash_
    node = s.request("GET", "/v1/nodes").json()["nodes"][0]["name"]
    failer = s.job(ids["failer"])
    for method, path, body in (
            ("POST", f"/v1/jobs/{ids['sleeper']}/cancel", None),
            ("POST", f"/v1/jobs/{ids['spot']}/evict", None),
            ("POST", "/v1/jobs", failer["spec_yaml"]),
            ("POST", f"/v1/nodes/{node}/cordon", None),
            ("POST", f"/v1/nodes/{node}/drain", None),
            ("POST", f"/v1/nodes/{node}/uncordon", None),
            ("POST", "/v1/deployments/chat/scale", {"replicas": 3}),
            ("POST", "/v1/deployments/chat/restart", None),
            ("POST", "/v1/models/tiny@2/promote", {"alias": "prod"}),
            ("POST", "/v1/models/tiny/rollback", {"alias": "prod"})):
        kw = {"data": body} if isinstance(body, str) else {"json": body}
        r = s.request(method, path, token=viewer, **kw)
        assert r.status_code == 403, (path, r.status_code, r.text)
    assert s.job(ids["sleeper"])["state"] == "running"
    assert node_state(s) == "ready" and model(s) == {"prod": 1}
    assert detail(s, "chat")["replicas_wanted"] == 1
    assert not js_errors(browser), js_errors(browser)


def test_user_acts_on_its_own_jobs_only(world, browser):
    s, ids = world
    user = s.create_token("alice", "user")
    mine = s.submit(job_yaml("mine", ["/bin/sleep", "300"]), token=user)
    s.wait_state(mine, "running")
    login(browser, s, user)
    open_page(browser, s, f"job/{ids['sleeper']}", "#page-job", "sleeper")
    assert not browser.find_elements(By.CSS_SELECTOR, "button.act")
    open_page(browser, s, "deployment/chat", "#page-deployment", "Replicas")
    assert not browser.find_elements(By.CSS_SELECTOR, "button.act")
    open_page(browser, s, f"job/{mine}", "#page-job", "mine")
    click(browser, "#page-job", "cancel")
    s.wait_state(mine, "cancelled")
    assert not js_errors(browser), js_errors(browser)
