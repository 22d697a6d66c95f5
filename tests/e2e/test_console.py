"""The web console in a real browser (Debian's chromium, headless,
driven through chromium-driver by python3-selenium) against a real
server: its headers and size, logins (an API token, a one-time `kiln ui`
link that works once), and that it raises no JavaScript error and loads
nothing from another origin. Screenshots of each page go to
build/console/ (docs/console.md shows them)."""
import json
import shutil
import time
from pathlib import Path

import pytest
import requests

from conftest import Server, job_yaml, kill_processes_under, wait_for
from test_deployments import MODEL_SERVER, deploy, wait_ready
from test_gateway import Gateway
from test_cost import COMMIT
from test_pipeline import PREPARE, TRAIN, keygen
from test_workflows import run, sh, steps, wait_run, write_workflow

selenium = pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "build" / "console"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture
def browser(tmp_path):
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--window-size=1280,800",
                "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--disable-default-apps",
                f"--user-data-dir={tmp_path / 'chromium'}"):
        opts.add_argument(arg)
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    opts.set_capability("goog:loggingPrefs",
                        {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def js_errors(driver):
    """Severe console entries: uncaught errors, CSP violations, failed
    loads."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def requested_urls(driver):
    """Every URL the page asked the network for, from the performance
    log (Network.requestWillBeSent)."""
    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def assert_same_origin(driver, server):
    """Nothing went to the network but the server (the browser's own
    chrome:// pages are not the network)."""
    urls = requested_urls(driver)
    assert any(u.startswith(server.url + "/ui/") for u in urls), urls
    foreign = [u for u in urls if u.split(":", 1)[0] in
               ("http", "https", "ws", "wss") and
               not u.startswith(server.url + "/")]
    assert not foreign, foreign


def wait_text(driver, css, text, timeout=30):
    def found():
        # A page is drawn anew on each navigation: an element found a
        # moment ago may be gone; look again.
        try:
            for e in driver.find_elements(By.CSS_SELECTOR, css):
                if text in e.text:
                    return e
        except StaleElementReferenceException:
            pass
        return None
    try:
        return wait_for(found, timeout=timeout, interval=0.05,
                        what=f"{text!r} in {css}")
    except AssertionError as e:
        shown = [x.text for x in driver.find_elements(By.CSS_SELECTOR, css)]
        raise AssertionError(f"{e}; it shows {shown!r:.2000}") from None


def login(driver, server, token):
    driver.get(server.url + "/")
    field = wait_for(lambda: (lambda e: e if e.is_displayed() else None)(
        driver.find_element(By.ID, "token")), what="the login form")
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#login button").click()
    wait_text(driver, "#who", "(")


def shot(driver, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def test_console_is_served_with_strict_headers(server):
    s = server
    r = requests.get(s.url + "/", timeout=30)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/html; charset=utf-8"
    csp = r.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "http" not in csp
    assert "frame-ancestors 'none'" in csp
    assert r.headers["X-Frame-Options"] == "DENY"
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["Referrer-Policy"] == "no-referrer"
    # No inline script or style in the page: everything is a file.
    assert "<script>" not in r.text and "style=" not in r.text
    total = len(r.content)
    for name, kind in (("app.js", "text/javascript"), ("pages.js", "text/javascript"),
                       ("app.css", "text/css"), ("favicon.svg", "image/svg+xml")):
        a = requests.get(f"{s.url}/ui/{name}", timeout=30)
        assert a.status_code == 200, name
        assert a.headers["Content-Type"].startswith(kind)
        assert a.headers["X-Content-Type-Options"] == "nosniff"
        total += len(a.content)
        # Revalidation: the same bytes answer 304 with no body.
        again = requests.get(f"{s.url}/ui/{name}", timeout=30,
                             headers={"If-None-Match": a.headers["ETag"]})
        assert again.status_code == 304 and again.content == b""
    assert total < 300 * 1024, f"first load is {total} bytes"
    assert requests.get(s.url + "/ui/nope.js", timeout=30).status_code == 404
    assert requests.get(s.url + "/ui/../admin.token",
                        timeout=30).status_code == 404


def test_one_time_code_works_once(server):
    s = server
    res = s.cli("ui", check=True)
    link = res.stdout.strip()
    assert link.startswith(s.url + "/#code=kui_")
    code = link.split("#code=", 1)[1]
    r = requests.post(s.url + "/v1/console/sessions", json={"code": code},
                      timeout=30)
    assert r.status_code == 201, r.text
    session = r.json()["session"]
    assert r.json()["role"] == "admin"
    who = s.request("GET", "/v1/whoami", token=session)
    assert who.status_code == 200 and who.json()["name"] == "admin"
    # The same code again is refused.
    again = requests.post(s.url + "/v1/console/sessions", json={"code": code},
                          timeout=30)
    assert again.status_code == 401
    assert "already used" in again.json()["error"]["message"]
    # Only an admin may ask for a code.
    viewer = s.create_token("watcher", "viewer")
    assert s.request("POST", "/v1/console/codes",
                     token=viewer).status_code == 403
    # Logging out ends the session at once.
    assert s.request("DELETE", "/v1/console/sessions",
                     token=session).status_code == 200
    assert s.request("GET", "/v1/whoami", token=session).status_code == 401


def test_session_ends_with_its_token(server):
    s = server
    secret = s.create_token("op", "operator")
    r = s.request("POST", "/v1/console/sessions", token=secret, json={})
    assert r.status_code == 201, r.text
    session = r.json()["session"]
    assert s.request("GET", "/v1/nodes", token=session).status_code == 200
    assert s.request("DELETE", "/v1/tokens/op").status_code == 200
    assert s.request("GET", "/v1/nodes", token=session).status_code == 401
    # A made-up session or a bad token makes none.
    assert s.request("GET", "/v1/nodes",
                     token="kses_" + "A" * 43).status_code == 401
    assert s.request("POST", "/v1/console/sessions", token="kiln_nope",
                     json={}).status_code == 401


def test_cross_site_request_carries_no_credential(server):
    """What another site's page can make a browser send: its Origin and
    whatever cookies the browser holds for us (the console sets none),
    never the Authorization header the console's own script adds."""
    s = server
    job = s.submit("kind: Job\nname: held\ncommand: [\"/bin/true\"]\n"
                   "resources: {gpus: 8}\n")
    r = requests.post(f"{s.url}/v1/jobs/{job}/cancel", timeout=30,
                      headers={"Origin": "https://evil.example",
                               "Content-Type": "text/plain"},
                      cookies={"session": "anything"})
    assert r.status_code == 401
    assert "Set-Cookie" not in r.headers
    assert s.job(job)["state"] == "queued"
    # Logging in sets no cookie either.
    r = s.request("POST", "/v1/console/sessions", json={})
    assert r.status_code == 201 and "Set-Cookie" not in r.headers


def test_job_pages_newest_first(server):
    s = server
    ids = [s.submit(job_yaml(f"p{i}", ["/bin/true"], resources={"gpus": 8}))
           for i in range(5)]

    def page(**params):
        r = s.request("GET", "/v1/jobs", params=params)
        assert r.status_code == 200, r.text
        return [j["id"] for j in r.json()["jobs"]]
    assert page(order="desc", limit=2) == ids[:-3:-1]
    assert page(order="desc", limit=2, before=ids[3]) == [ids[2], ids[1]]
    assert page(order="desc", limit=2, before=ids[1]) == [ids[0]]
    assert page(before=ids[2]) == ids[:2]
    for bad, field in (({"order": "sideways"}, "order"),
                       ({"before": "x"}, "before")):
        r = s.request("GET", "/v1/jobs", params=bad)
        assert r.status_code == 400 and r.json()["error"]["field"] == field


def test_browser_login_with_link_and_token(server, browser):
    s = server
    link = s.cli("ui", check=True).stdout.strip()
    browser.get(link)
    wait_text(browser, "#who", "admin (admin)")
    # The code left the address bar, and the session is the tab's.
    assert "code=" not in browser.current_url
    wait_text(browser, "#page-overview", "vm")
    browser.find_element(By.ID, "logout").click()
    wait_for(lambda: browser.find_element(By.ID, "login").is_displayed(),
             what="the login form after logout")
    # The used link does not log in again.
    browser.get(link)
    wait_text(browser, "#login-error", "already used")
    # That refusal is the one error the browser logs: read it away.
    assert [e for e in browser.get_log("browser")
            if "console/sessions" in e["message"]]
    login(browser, s, s.admin_token)
    wait_text(browser, "#page-overview", "vm")
    shot(browser, "overview")
    assert not js_errors(browser), js_errors(browser)
    assert_same_origin(browser, s)


@pytest.fixture
def stack(tmp_path):
    """A server whose node is in zone-1, with a gateway in front of its
    deployments; both stopped at the end."""
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home, extra=["--node-labels", "zone=zone-1"]).start()
    g = Gateway(home, ["--refresh", "200ms"])
    yield s, g
    g.stop()
    s.stop()
    kill_processes_under(home)


def populate(s, g, tmp_path):
    """Jobs, a workflow whose train step made a signed model with
    lineage, a deployment served through the gateway, and an alert."""
    ids = {}
    # prepare → train, which commits a checkpoint (synced at the latest
    # when its attempt ends) before it writes its model.
    train = COMMIT + TRAIN
    run_id = run(s, write_workflow(tmp_path, (
        "kind: Workflow\nname: pipe\nsteps:\n"
        f"  - name: prepare\n    job: {{command: {sh(PREPARE)}}}\n"
        "  - name: train\n    needs: [prepare]\n"
        "    inputs: [prepare.outputs/data.txt]\n"
        f"    job: {{command: {sh(train)}, checkpoint: {{every: 1s}}}}\n")))
    w = wait_run(s, run_id, timeout=60)
    assert w["state"] == "succeeded", json.dumps(w["steps"])
    ids["workflow"] = run_id
    ids["prepare"] = steps(w)["prepare"]["job"]
    ids["train"] = steps(w)["train"]["job"]
    s.cli("model", "push", "--from-job", str(ids["train"]), "--name", "tiny",
          "--alias", "staging", check=True)
    keygen(s, tmp_path / "ops")
    s.cli("model", "sign", "tiny@1", "--key", str(tmp_path / "ops"),
          check=True)
    # Probes patient enough for a loaded machine: the page must find the
    # replica ready, not between restarts.
    deploy(s, "kind: Deployment\nname: chat\nmodel: /tmp\n"
           f"command: [\"/usr/bin/python3\", \"{MODEL_SERVER}\"]\n"
           "replicas: 1\nreadiness: {path: /health, period_s: 0.5}\n"
           "liveness: {path: /live, period_s: 1, failure_threshold: 30}\n")
    wait_ready(s, "chat", 1, timeout=60)
    secret = s.cli("key", "create", "--name", "app", "--deployments", "chat",
                   check=True).stdout.strip().split()[-1]
    g.start()
    wait_for(lambda: g.call(secret, "chat").status_code == 200,
             what="the gateway to route chat")
    r = s.request("POST", "/v1/gateway/alerts", json={
        "deployment": "chat", "signal": "latency_ms", "value": 900.0,
        "low": 10.0, "high": 200.0, "window_s": 60,
        "started_at_ms": int(time.time() * 1000)})
    assert r.status_code == 202, r.text
    # A job with an input, done before the queue fills.
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a b c\n")
    ids["reader"] = s.submit(job_yaml("reader", ["/bin/true"],
                                      inputs=[f"file://{vocab}"]))
    s.wait_state(ids["reader"], "succeeded")
    # A job that prints a line a second until cancelled on 3 GPUs, one
    # on half a GPU, and one that waits for 2.
    ids["ticker"] = s.submit(job_yaml(
        "ticker", ["/bin/sh", "-c",
                   "i=0; while true; do echo \"<img src=x onerror=alert(1)> tick $i\";"
                   " i=$((i+1)); sleep 0.5; done"], resources={"gpus": 3}))
    s.wait_state(ids["ticker"], "running")
    ids["half"] = s.submit(job_yaml("half", ["/bin/sleep", "300"],
                                    resources={"gpus": 0.5}))
    s.wait_state(ids["half"], "running")
    # One that can never fit while the ticker runs: it waits, with a reason.
    ids["waiting"] = s.submit(job_yaml("waiting", ["/bin/true"],
                                       resources={"gpus": 2}))
    return ids


def test_every_page_with_real_content(stack, browser, tmp_path):
    s, g = stack
    ids = populate(s, g, tmp_path)
    login(browser, s, s.admin_token)
    driver = browser

    def page(hash_, css, text):
        driver.get(f"{s.url}/#/{hash_}")
        return wait_text(driver, css, text)

    page("overview", "#page-overview", "zone=zone-1")
    wait_text(driver, "#page-overview", "Waiting because")
    assert len(driver.find_elements(By.CSS_SELECTOR, ".gpu.alloc")) == 3
    assert len(driver.find_elements(By.CSS_SELECTOR, ".gpu.shared")) == 1
    # The queue says why the 2-GPU job waits.
    queue_row = wait_text(driver, "#page-overview tr", "waiting")
    assert s.job(ids["waiting"])["reason"] in queue_row.text
    shot(driver, "overview")

    page("jobs", "#page-jobs", "ticker")
    wait_text(driver, "#page-jobs", "running")
    shot(driver, "jobs")
    # Filtering runs on the server.
    page("jobs?state=queued", "#page-jobs", "waiting")
    assert "ticker" not in driver.find_element(By.ID, "page-jobs").text

    # The ticker's log follows as it is written.
    log = page(f"job/{ids['ticker']}", "pre.log", "tick 1")
    first = log.text.count("tick")
    wait_for(lambda: log.text.count("tick") >= first + 2, timeout=30,
             what="the live log to grow")
    # What a task prints is text, not markup: no element, no alert.
    wait_text(driver, "pre.log", "<img src=x onerror=alert(1)> tick")
    assert not driver.find_elements(By.CSS_SELECTOR, "pre.log img")
    driver.execute_script("arguments[0].scrollIntoView()",
                          driver.find_element(By.CSS_SELECTOR, "pre.log"))
    shot(driver, "job")

    # The train step's job: its outputs and goodput.
    train = s.job(ids["train"])
    assert train["outputs"]
    page(f"job/{ids['train']}", "#page-job", "succeeded")
    for o in train["outputs"]:
        wait_text(driver, "#page-job td", o["name"])
    wait_text(driver, "#page-job dd",
              f"{train['goodput']['percent']:.1f}% (useful")
    # A job's inputs, with the digest of what it fetched.
    reader = ids["reader"]
    inputs = s.job(reader)["inputs"]
    page(f"job/{reader}", "#page-job", "succeeded")
    wait_text(driver, "#page-job td", "vocab.txt")
    wait_text(driver, "#page-job td", inputs[0]["sha256"][:16])

    page("deployments", "#page-deployments", "zone-1: 1/1")
    page("deployment/chat", "#page-deployment", "zone-1")
    wait_text(driver, "#page-deployment", "gateway_anomaly_latency_ms")
    wait_text(driver, "#page-deployment", "app")
    shot(driver, "deployment")

    page("models", "#page-models", "staging→1")
    page("model/tiny", "#page-model", "admin")
    wait_text(driver, ".signer", "admin")
    graph = wait_for(lambda: driver.find_elements(By.CSS_SELECTOR,
                                                  "#page-model svg.graph"),
                     what="the lineage graph")
    assert f"job #{ids['train']}" in graph[0].get_attribute("textContent")
    drawn = graph[0].get_attribute("textContent")
    assert "input prepare/data.txt" in drawn
    # Back through the input to the job that made it, and the checkpoint.
    assert f"job #{ids['prepare']} prepare" in drawn
    assert "checkpoint step-1" in drawn
    driver.execute_script("arguments[0].scrollIntoView()", graph[0])
    shot(driver, "model")

    page("workflows", "#page-workflows", "pipe")
    page(f"workflow/{ids['workflow']}", "#page-workflow", "succeeded")
    edges = wait_for(lambda: driver.find_elements(
        By.CSS_SELECTOR, "#page-workflow path.edge"), what="DAG edges")
    assert [(e.get_attribute("data-from"), e.get_attribute("data-to"))
            for e in edges] == [("prepare", "train")]
    shot(driver, "workflow")

    page("cost", "#page-cost", "GPU-hours")
    shot(driver, "cost")

    page("alerts", "#page-alerts", "gateway_anomaly_latency_ms")
    # A new alert shows in the open page's table, without a reload.
    r = s.request("POST", "/v1/gateway/alerts", json={
        "deployment": "chat", "signal": "error_rate", "value": 40.0,
        "low": 0.0, "high": 5.0, "window_s": 60,
        "started_at_ms": int(time.time() * 1000)})
    assert r.status_code == 202, r.text
    wait_text(driver, "#alerts tr", "gateway_anomaly_error_rate")
    # Live events: a cancel shows up in the open stream.
    wait_text(driver, "#events", "job")
    s.request("POST", f"/v1/jobs/{ids['waiting']}/cancel")
    wait_text(driver, "#events", '"state":"cancelled"')
    shot(driver, "alerts")

    page("audit", "#verify", "Chain verified")
    wait_text(driver, "#page-audit", "console.login")
    shot(driver, "audit")

    # A phone's width: the same pages, none wider than the screen (wide
    # tables scroll inside their own box).
    driver.set_window_size(390, 844)
    for hash_, css, text in (("jobs", "#page-jobs", "ticker"),
                             (f"job/{ids['ticker']}", "#page-job", "tick"),
                             ("deployment/chat", "#page-deployment", "zone-1"),
                             ("model/tiny", "#page-model", "admin"),
                             (f"workflow/{ids['workflow']}", "#page-workflow",
                              "succeeded"),
                             ("cost", "#page-cost", "GPU-hours"),
                             ("alerts", "#page-alerts", "gateway_anomaly"),
                             ("audit", "#page-audit", "console.login"),
                             ("overview", "#page-overview", "zone=zone-1")):
        page(hash_, css, text)
        width = driver.execute_script(
            "return document.documentElement.scrollWidth")
        assert width <= driver.execute_script(
            "return window.innerWidth") + 1, (hash_, width)
    shot(driver, "overview-phone")
    driver.set_window_size(1280, 800)

    assert not js_errors(driver), js_errors(driver)
    assert_same_origin(driver, s)


def test_actions_follow_the_role(server, browser):
    s = server
    job = s.submit(job_yaml("sleeper", ["/bin/sleep", "300"]))
    s.wait_state(job, "running")
    viewer = s.create_token("watcher", "viewer")
    operator = s.create_token("op", "operator")

    login(browser, s, viewer)
    browser.get(f"{s.url}/#/job/{job}")
    wait_text(browser, "#page-job", "sleeper")
    for hash_, css in (("overview", "#page-overview"), ("jobs", "#page-jobs"),
                       (f"job/{job}", "#page-job")):
        browser.get(f"{s.url}/#/{hash_}")
        wait_text(browser, css, "sleeper" if "job" in hash_ else "vm")
        assert not browser.find_elements(By.CSS_SELECTOR, "button.act"), hash_
    # The API refuses the viewer all the same.
    assert s.request("POST", f"/v1/jobs/{job}/cancel",
                     token=viewer).status_code == 403
    browser.find_element(By.ID, "logout").click()

    login(browser, s, operator)
    browser.get(f"{s.url}/#/job/{job}")
    wait_text(browser, "#page-job", "sleeper")
    assert browser.find_elements(By.CSS_SELECTOR,
                                 "#page-overview button.act, #page-job button.act")
    browser.find_element(By.CSS_SELECTOR,
                         "#page-job button[data-action=cancel]").click()
    s.wait_state(job, "cancelled")
    audit = s.request("GET", "/v1/audit",
                      params={"action": "job.cancel"}).json()["audit"]
    assert audit[0]["actor"] == "op" and audit[0]["outcome"] == "ok"
    assert not js_errors(browser), js_errors(browser)
