"""The admin console in headless Chromium (Selenium with Debian's chromium-driver).

Run by Tests/Browser/run, which starts the gateway with the shipped plugins.yaml and makes the
administrator `root` and the user `ada`. Environment: GATEWAY_URL, CONFIG_FILE (the plugins.yaml
the gateway reads), SHOTS (the screenshots' folder).

Each test drives the console as an operator would and checks the result where it shows: in the
page, with curl against the API, or in the user's own view of the API.
"""
import json
import os
import re
import subprocess
import threading
import time
import unittest
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

BASE = os.environ["GATEWAY_URL"]
CONFIG_FILE = os.environ["CONFIG_FILE"]
SHOTS = os.environ.get("SHOTS", ".build/console-screenshots")
ADMIN = ("root", "console-admin-password")
USER = ("ada", "console-user-password")

PAGES = ["/admin", "/admin/traffic", "/admin/operations", "/admin/users", "/admin/users/ada", "/admin/keys",
         "/admin/providers", "/admin/cache", "/admin/configuration", "/admin/audit"]
ADMIN_API = ["/v1/admin/users", "/v1/admin/keys", "/v1/admin/providers", "/v1/admin/cache", "/v1/admin/configuration",
             "/v1/admin/plugins", "/v1/admin/instances", "/v1/admin/audit"]


def api(method, path, token=None, body=None, headers=None):
    """A request to the gateway's API: (status, parsed JSON or text, headers)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(BASE + path, data=data, method=method)
    if token:
        request.add_header("Authorization", "Bearer " + token)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            status, raw, fields = reply.status, reply.read(), reply.headers
    except urllib.error.HTTPError as error:
        status, raw, fields = error.code, error.read(), error.headers
    try:
        return status, json.loads(raw or b"null"), fields
    except ValueError:
        return status, raw.decode(errors="replace"), fields


def sign_in_api(username, password):
    status, reply, _ = api("POST", "/v1/auth/login", body={"username": username, "password": password})
    assert status == 200, (status, reply)
    return reply["token"]


def curl_status(path, key):
    """The status curl gets for `path` with `key` as X-Api-Key."""
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "X-Api-Key: " + key, BASE + path],
                         capture_output=True, text=True, timeout=30)
    return int(out.stdout)


def make_driver():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900",
                     "--lang=en-US"]:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(60)
    return driver


class Console(unittest.TestCase):
    driver = None

    @classmethod
    def setUpClass(cls):
        os.makedirs(SHOTS, exist_ok=True)
        cls.driver = make_driver()

    @classmethod
    def tearDownClass(cls):
        if cls.driver:
            cls.driver.quit()

    # -- helpers ---------------------------------------------------------------------------

    def open(self, path):
        self.driver.get(BASE + path)
        return self.driver

    def wait(self, condition, timeout=20):
        return WebDriverWait(self.driver, timeout).until(condition)

    def sign_in(self, username, password):
        self.driver.delete_all_cookies()
        self.open("/admin/login")
        self.driver.find_element(By.ID, "login-username").send_keys(username)
        field = self.driver.find_element(By.ID, "login-password")
        field.send_keys(password)
        field.send_keys(Keys.ENTER)
        self.wait(lambda d: "/admin/login" not in d.current_url or d.find_elements(By.CSS_SELECTOR, "[role=alert]"))

    def flash(self):
        elements = self.driver.find_elements(By.CSS_SELECTOR, ".flash")
        return " ".join(element.text for element in elements)

    def csp_errors(self):
        return [entry["message"] for entry in self.driver.get_log("browser")
                if "Content Security Policy" in entry["message"] or entry["level"] == "SEVERE"]

    def shoot(self, name):
        self.driver.save_screenshot(os.path.join(SHOTS, name + ".png"))

    def submit(self, form):
        button = form.find_element(By.CSS_SELECTOR, "button[type=submit], button:not([type])")
        button.click()

    # -- tests, in order -------------------------------------------------------------------

    def test_01_sign_in_and_every_plugin(self):
        self.open("/admin")
        self.assertIn("/admin/login", self.driver.current_url, "an anonymous visitor is sent to sign in")
        self.sign_in(*ADMIN)
        self.assertTrue(self.driver.current_url.rstrip("/").endswith("/admin"), self.driver.current_url)
        ids = {row.get_attribute("data-plugin") for row in self.driver.find_elements(By.CSS_SELECTOR, "[data-plugin]")}
        for plugin in ["events", "transit", "todo", "suggest", "feeds"]:
            self.assertIn(plugin, ids, "the overview lists every enabled plugin")
        self.assertTrue(self.driver.find_elements(By.CSS_SELECTOR, "#instances tbody tr"), "the instances are listed")
        cookie = self.driver.get_cookie("gateway_console")
        self.assertTrue(cookie["httpOnly"], cookie)
        self.assertEqual(cookie.get("sameSite"), "Strict", cookie)
        self.assertEqual(self.csp_errors(), [])

    def test_02_create_key_use_revoke(self):
        self.open("/admin/keys?user=ada")
        form = self.driver.find_element(By.CSS_SELECTOR, "form[method=post][action='/admin/keys']")
        form.find_element(By.NAME, "label").send_keys("console test")
        form.find_element(By.NAME, "scopes").send_keys("todo:read")
        self.submit(form)
        secret = self.wait(EC.presence_of_element_located((By.ID, "new-key-secret"))).text.strip()
        self.assertTrue(secret.startswith("gk_"), secret)
        self.assertEqual(curl_status("/v1/todo/buckets", secret), 200, "the new key works with curl")
        self.shoot("keys-created-desktop")
        # Revoke it from the table: the row of the key's label.
        row = next(row for row in self.driver.find_elements(By.CSS_SELECTOR, "table tbody tr") if "console test" in row.text)
        revoke = row.find_element(By.CSS_SELECTOR, "form[action$='/revoke']")
        self.submit(revoke)
        self.driver.switch_to.alert.accept()
        self.wait(lambda d: "revoked" in self.flash().lower())
        self.assertEqual(curl_status("/v1/todo/buckets", secret), 401, "a revoked key is refused at once")

    def test_03_purge_cache(self):
        # Something in the cache first: a cacheable read, twice (the second a hit).
        api("GET", "/v1/suggest?q=tai")
        _, _, headers = api("GET", "/v1/suggest?q=tai")
        self.assertEqual(headers.get("X-Cache"), "HIT")
        self.open("/admin/cache")
        entries = int(self.driver.find_element(By.CSS_SELECTOR, "#cache-stats [data-field=entries]").text.split()[0])
        self.assertGreater(entries, 0, "the cache holds the read")
        form = next(f for f in self.driver.find_elements(By.CSS_SELECTOR, "form[action='/admin/cache/purge']")
                    if f.find_elements(By.CSS_SELECTOR, "input[name=scope][value=all]"))
        self.submit(form)
        self.driver.switch_to.alert.accept()
        self.wait(lambda d: "purged" in self.flash().lower())
        _, _, headers = api("GET", "/v1/suggest?q=tai")
        self.assertEqual(headers.get("X-Cache"), "MISS", "the next read after the purge is a miss")
        entries = int(self.driver.find_element(By.CSS_SELECTOR, "#cache-stats [data-field=entries]").text.split()[0])
        self.assertEqual(entries, 0, "the cache is empty after the purge")
        status, reply, _ = api("GET", "/v1/admin/audit?limit=5", token=sign_in_api(*ADMIN))
        self.assertIn("cache.purge", [entry["action"] for entry in reply["items"]], "the purge is in the audit log")

    def test_04_live_chart_moves_under_load(self):
        self.open("/admin/traffic")
        stop = threading.Event()

        def load():
            while not stop.is_set():
                try:
                    urllib.request.urlopen(BASE + "/v1/suggest?q=ta", timeout=5).read()
                except Exception:
                    pass
        workers = [threading.Thread(target=load) for _ in range(4)]
        for worker in workers:
            worker.start()
        try:
            canvas = self.driver.find_element(By.ID, "chart-rate")
            before = self.driver.execute_script("return arguments[0].toDataURL()", canvas)
            self.wait(lambda d: number(d.find_element(By.ID, "traffic-rate").text) > 5, timeout=30)
            time.sleep(2.5)
            after = self.driver.execute_script("return arguments[0].toDataURL()", canvas)
            self.assertNotEqual(before, after, "the chart was redrawn with the load")
            cell = self.driver.find_element(By.CSS_SELECTOR, "#traffic-plugins tr[data-plugin=suggest] td[data-field=rate]")
            self.assertGreater(number(cell.text), 0, "the suggest plugin's rate shows")
            self.shoot("traffic-under-load-desktop")
        finally:
            stop.set()
            for worker in workers:
                worker.join()

    def test_05_confirm_reservation_notifies_user(self):
        user_token = sign_in_api(*USER)
        reservation = make_reservation(user_token)
        self.open("/admin/plugins/events/reservations")
        row = self.wait(lambda d: next((r for r in d.find_elements(By.CSS_SELECTOR, "table tbody tr") if reservation in r.text), None))
        confirm = next(form for form in row.find_elements(By.TAG_NAME, "form")
                       if form.find_element(By.CSS_SELECTOR, "button").text.strip().lower().startswith("confirm"))
        self.submit(confirm)
        self.wait(lambda d: "confirmed" in self.flash().lower())
        status, reply, _ = api("GET", "/v1/me/notifications", token=user_token)
        self.assertEqual(status, 200, reply)
        texts = json.dumps(reply)
        self.assertIn("onfirm", texts, "the user has a notification of the confirmation")

    def test_06_configuration_error_at_its_line_then_apply(self):
        self.open("/admin/configuration")
        area = self.driver.find_element(By.ID, "config-text")
        original = area.get_attribute("value")
        self.assertNotIn("demo-master-key-change-me", original, "secrets are masked")
        lines = original.split("\n")
        # A mistake: an unknown key under server.
        index = next(i for i, line in enumerate(lines) if line.startswith("server:"))
        broken = lines[:index + 1] + ["  colour: blue"] + lines[index + 1:]
        self.set_text(area, "\n".join(broken))
        self.driver.find_element(By.CSS_SELECTOR, "button[name=intent][value=validate]").click()
        error = self.wait(EC.presence_of_element_located((By.CSS_SELECTOR, "#config-errors li[data-line]")))
        self.assertEqual(error.get_attribute("data-line"), str(index + 2), "the error is placed at the line of the mistake")
        self.assertTrue(self.driver.find_elements(By.CSS_SELECTOR, f"#L{index + 2}.config-error"), "the line is marked in the listing")
        self.shoot("configuration-error-desktop")
        # Fixed: a change that applies live (a rate limit).
        fixed = [line.replace("anonymous: 1000000/min", "anonymous: 999999/min") for line in original.split("\n")]
        area = self.driver.find_element(By.ID, "config-text")
        self.set_text(area, "\n".join(fixed))
        self.driver.find_element(By.CSS_SELECTOR, "button[name=intent][value=apply]").click()
        self.wait(lambda d: "applied" in self.flash().lower())
        self.assertIn("limits", self.flash())
        with open(CONFIG_FILE) as file:
            written = file.read()
        self.assertIn("anonymous: 999999/min", written)
        self.assertIn("demo-master-key-change-me", written, "the masked secrets kept their values")

    def set_text(self, area, text):
        self.driver.execute_script("arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))", area, text)

    def test_07_csrf_and_csp(self):
        self.open("/admin/cache")
        # A change without the page's CSRF token is refused.
        session = self.driver.get_cookie("gateway_console")["value"]
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-b", "gateway_console=" + session,
                              "-d", "scope=all", BASE + "/admin/cache/purge"], capture_output=True, text=True)
        self.assertEqual(out.stdout, "403", "no CSRF token: refused")
        token = self.driver.find_element(By.CSS_SELECTOR, "meta[name=csrf-token]").get_attribute("content")
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-b", "gateway_console=" + session,
                              "-H", "Origin: https://evil.example", "-d", "scope=all&csrf=" + token, BASE + "/admin/cache/purge"],
                             capture_output=True, text=True)
        self.assertEqual(out.stdout, "403", "another origin: refused")
        # The session cookie is no credential for the API itself.
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-b", "gateway_console=" + session,
                              BASE + "/v1/admin/users"], capture_output=True, text=True)
        self.assertEqual(out.stdout, "401", "the console cookie does not open the API")
        # CSP: every page sends it, and an inline script is not run.
        for path in PAGES:
            _, _, headers = api("GET", path, headers={"Cookie": "gateway_console=" + session})
            self.assertIn("script-src 'self'", headers.get("Content-Security-Policy", ""), path)
            self.assertNotIn("unsafe-inline", headers.get("Content-Security-Policy", ""), path)
        html = self.driver.page_source
        self.assertIsNone(re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "no inline script in the page")
        self.assertIsNone(re.search(r"\son[a-z]+=", html), "no inline handlers")
        ran = self.driver.execute_script(
            "var s = document.createElement('script'); s.textContent = 'window.inlineRan = true'; document.head.appendChild(s);"
            "return window.inlineRan === true")
        self.assertFalse(ran, "the policy blocks inline script")
        self.driver.get_log("browser")  # the violation just caused, read and dropped

    def test_08_every_page_usable_and_shot(self):
        problems = []
        for dark in [False, True]:
            self.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})
            for width, label in [(1280, "desktop"), (375, "375px")]:
                self.driver.set_window_size(width, 900)
                for path in PAGES + ["/admin/plugins/events/reservations"] + plugin_views(self.driver):
                    self.open(path)
                    name = (path.strip("/").replace("/", "-") or "admin") + "-" + label + ("-dark" if dark else "")
                    self.shoot(name)
                    # Every visible field has a label; the page does not scroll sideways.
                    unlabelled = self.driver.execute_script(
                        "return [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]"
                        ".filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')).map(e => e.name || e.id)")
                    if unlabelled:
                        problems.append(f"{path}: fields without a label: {unlabelled}")
                    if width == 375:
                        overflow = self.driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
                        if overflow > 1:
                            problems.append(f"{path} at 375 px scrolls sideways by {overflow} px")
            background = self.driver.execute_script("return getComputedStyle(document.body).backgroundColor")
            if dark:
                self.assertNotEqual(background, self.light_background, "dark mode follows the system")
            else:
                self.light_background = background
        self.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        self.driver.set_window_size(1280, 900)
        self.assertEqual(problems, [])
        self.assertEqual(self.csp_errors(), [])

    def test_09_keyboard(self):
        self.open("/admin/users")
        body = self.driver.find_element(By.TAG_NAME, "body")
        body.send_keys(Keys.TAB)
        focused = self.driver.switch_to.active_element
        self.assertIn("skip", (focused.text or "").lower(), "the first Tab reaches the skip link")
        focused.send_keys(Keys.ENTER)
        # The search form works from the keyboard alone.
        search = self.driver.find_element(By.CSS_SELECTOR, "form[method=get] input[name=q]")
        search.send_keys("ad")
        search.send_keys(Keys.ENTER)
        self.wait(lambda d: "q=ad" in d.current_url)
        self.assertIn("ada", self.driver.find_element(By.TAG_NAME, "table").text)

    def test_10_operations_explorer(self):
        self.open("/admin/operations")
        operation = self.driver.find_element(By.CSS_SELECTOR, "details.operation[data-name='accounts.admin.cache']")
        operation.find_element(By.TAG_NAME, "summary").click()
        self.submit(operation.find_element(By.CSS_SELECTOR, "form.explorer"))
        reply = operation.find_element(By.CSS_SELECTOR, "pre.reply")
        self.wait(lambda d: "200" in reply.text)
        self.assertIn("hitRate", reply.text)

    def test_11_non_administrator_refused(self):
        self.sign_in(*USER)
        self.assertIn("not", self.driver.find_element(By.TAG_NAME, "main").text.lower(), "a user is told the console is not theirs")
        self.assertIsNone(self.driver.get_cookie("gateway_console"), "no console session for a user")
        user_token = sign_in_api(*USER)
        for path in PAGES:
            _, _, _ = api("GET", path, headers={"Cookie": "gateway_console=" + user_token})
            status, _, headers = api("GET", path, headers={"Cookie": "gateway_console=" + user_token})
            self.assertIn(status, (403,), f"{path} with a user's session: {status}")
        for path in ADMIN_API:
            status, _, _ = api("GET", path, token=user_token)
            self.assertEqual(status, 403, f"{path} as a user")
            status, _, _ = api("GET", path)
            self.assertEqual(status, 401, f"{path} anonymous")


def number(text):
    """The first number of a figure's text (0 for a placeholder such as —)."""
    match = re.search(r"[0-9]+(\.[0-9]+)?", text or "")
    return float(match.group(0)) if match else 0.0


def plugin_views(driver):
    """The plugins' views the navigation lists."""
    return sorted({link.get_attribute("href").replace(BASE, "") for link in driver.find_elements(By.CSS_SELECTOR, "nav a[href^='/admin/plugins/'], nav a[href*='/admin/plugins/']")})


def make_reservation(user_token):
    """A reservation of `ada` waiting for confirmation (an event of hers taking requests, a month
    from now); its id."""
    status, venue, _ = api("POST", "/v1/events/venues", token=user_token,
                           body={"name": "衛武營國家藝術文化中心", "address": "高雄市鳳山區三多一路1號", "city": 15, "lat": 22.6237, "lon": 120.3420})
    assert status == 201, (status, venue)
    start = time.strftime("%Y-%m-%dT11:30:00Z", time.gmtime(time.time() + 30 * 86400))
    end = time.strftime("%Y-%m-%dT13:30:00Z", time.gmtime(time.time() + 30 * 86400))
    status, event, _ = api("POST", "/v1/events", token=user_token, body={
        "title": "港都管樂之夜", "description": "高雄市管樂團演出經典電影配樂", "organizer": "高雄市管樂團", "city": 15, "categories": [1],
        "showings": [{"venue": venue["id"], "start": start, "end": end, "priceText": "300元", "capacity": 10}]})
    assert status == 201, (status, event)
    status, reply, _ = api("PATCH", "/v1/events/%d" % event["id"], token=user_token, body={"reservationPolicy": "manual"})
    assert status == 200, (status, reply)
    status, reservation, _ = api("POST", "/v1/events/showings/%d/reservations" % event["showings"][0]["id"], token=user_token, body={"seats": 2})
    assert status == 201 and reservation["status"] == "requested", (status, reservation)
    return str(reservation["id"])


if __name__ == "__main__":
    unittest.main(verbosity=2, failfast=False)
