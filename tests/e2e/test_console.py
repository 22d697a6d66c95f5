"""The web console in a real browser (Debian's chromium, headless,
driven through chromium-driver by python3-selenium) against a real
server: its headers and size, logins (an API token, a one-time `kiln ui`
link that works once), and that it raises no JavaScript error and loads
nothing from another origin. Screenshots of each page go to
build/console/ (docs/console.md shows them)."""
import json
import shutil
from pathlib import Path

import pytest
import requests

from conftest import wait_for

selenium = pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
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
        for e in driver.find_elements(By.CSS_SELECTOR, css):
            if text in e.text:
                return e
        return None
    return wait_for(found, timeout=timeout, interval=0.2,
                    what=f"{text!r} in {css}")


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
