"""The web console in a real browser: Debian's Chromium, driven through chromedriver by Selenium,
against `gpufleet up --demo`.

Every page loads with no error in the browser's console; a GPU failed with `gpufleet fault` turns red
on the map within 5 s; a pending job shows describe's reason; the cost page shows each job's GPU-hours
and cost as `gpufleet history` counts them; a queue's token sees only its queue.
A screenshot of each page is written to $GPUFLEET_CONSOLE_SCREENSHOTS, or to the test's tmp dir.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

PAGES = ("fleet", "queues", "work", "events", "cost")
START_SECONDS = 60.0
T = TypeVar("T")

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="chromium and chromedriver are not installed (Debian packages chromium, chromium-driver; "
    "scripts/ensure-chromium.sh installs them where it can)",
)


@dataclass
class Plane:
    url: str
    admin: str
    state: Path

    def api(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token or self.admin}"}, timeout=30
        )

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "gpufleet.cli.main", *args, "--server", self.url, "--token", self.admin],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


def _until(what: str, probe: Callable[[], T | None], seconds: float) -> T:
    """Polls `probe` until it answers; an element the console redrew meanwhile counts as not yet."""
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + seconds
    while True:
        try:
            found = probe()
        except StaleElementReferenceException:
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {seconds:g} s")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    state = tmp_path_factory.mktemp("console-state")
    log = (state / "up.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.cli.main", "up", "--demo", "--port", "0", "--state", str(state)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def ready() -> str | None:
            assert process.poll() is None, (state / "up.log").read_text()
            url_file = state / "server.url"
            if not url_file.exists():
                return None
            url = url_file.read_text().strip()
            try:
                return url if httpx.get(f"{url}/healthz", timeout=2).status_code == 200 else None
            except httpx.HTTPError:
                return None

        url = _until("gpufleet up answers", ready, START_SECONDS)
        yield Plane(url, (state / "admin-token").read_text().strip(), state)
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1100"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    named = os.environ.get("GPUFLEET_CONSOLE_SCREENSHOTS")
    directory = Path(named) if named else tmp_path_factory.mktemp("console-screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _errors(driver: Any) -> list[str]:
    """The browser console's errors since the last call (the log is emptied as it is read)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _open(driver: Any, page: str) -> None:
    driver.execute_script("location.hash = arguments[0]", page)
    _until(f"page {page} shown", lambda: driver.find_element("id", page).is_displayed(), 5)


def _visit_all(driver: Any, shots: Path, who: str) -> None:
    for page in PAGES:
        _open(driver, page)
        time.sleep(0.3)  # one more draw of the view, so the screenshot shows the page filled
        driver.save_screenshot(str(shots / f"{who}-{page}.png"))
    assert _errors(driver) == []


def _sign_in(driver: Any, url: str, token: str) -> None:
    driver.get(url + "/")
    form = _until("the sign-in form", lambda: driver.find_element("id", "token"), 10)
    form.send_keys(token)
    driver.find_element("css selector", "#signin-form button").click()


# The console redraws its views every second, so an element found in one call may be gone by the
# next: what a test reads, it reads in the browser in one script.
def _text(driver: Any, selector: str) -> str:
    return str(
        driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]), e => e.textContent).join('\\n')",
            selector,
        )
    )


def _texts(driver: Any, selector: str) -> list[str]:
    return list(
        driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]), e => e.textContent)", selector
        )
    )


def _attribute(driver: Any, selector: str, name: str) -> str | None:
    found = driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.getAttribute(arguments[1]) : null",
        selector,
        name,
    )
    return None if found is None else str(found)


def _attributes(driver: Any, selector: str, name: str) -> set[str]:
    return set(
        driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]), e => e.getAttribute(arguments[1]))",
            selector,
            name,
        )
    )


def test_the_admin_sees_the_fleet_a_failed_gpu_at_once_and_why_a_job_waits(
    plane: Plane, browser: Any, shots: Path
) -> None:
    _sign_in(browser, plane.url, plane.admin)
    _until("the map", lambda: browser.find_elements("css selector", "[data-node] [data-gpu]"), 15)
    _visit_all(browser, shots, "admin")

    # A pending job's reason, in the words describe prints.
    with plane.api() as api:
        jobs = api.get("/apis/gpufleet.io/v1alpha1/trainingjobs").json()["items"]
    waiting = _until(
        "a pending job with a reason",
        lambda: next((j for j in jobs if (j.get("status") or {}).get("pendingReason")), None),
        1,
    )
    meta = waiting["metadata"]
    _open(browser, "work")
    row = f'tr[data-work="{meta["namespace"]}/{meta["name"]}"] pre.reason'
    described = plane.cli("describe", "tj", meta["name"], "-n", meta["namespace"])
    shown = _until("the pending reason shown", lambda: _text(browser, row), 5)
    assert shown.startswith("Pending: " + waiting["status"]["pendingReason"]["type"])
    assert waiting["status"]["pendingReason"]["message"].split(";")[0] in shown
    assert shown.splitlines()[0].removeprefix("Pending: ") in described

    # A GPU failed through the CLI is red on the map within 5 s.
    _open(browser, "fleet")
    with plane.api() as api:
        pools = api.get("/v1/console").json()["map"]
    nodes = [n for p in pools for r in p["racks"] for n in r["nodes"] if n["phase"] == "Ready"]
    node = next(n for n in nodes if n["gpus"] and n["gpus"][0]["state"] == "allocated")["name"]
    cell = f'[data-node="{node}"] [data-gpu="0"]'
    assert _attribute(browser, cell, "data-state") not in (None, "failed")
    plane.cli("fault", "gpu-failure", node, "--gpu", "0")
    failed_at = time.monotonic()
    _until(
        "the failed GPU on the map",
        lambda: _attribute(browser, cell, "data-state") == "failed",
        5,
    )
    assert time.monotonic() - failed_at <= 5
    browser.save_screenshot(str(shots / "admin-fleet-after-fault.png"))

    # The events that follow come live, without a reload.
    _open(browser, "events")
    _until("an event of the failure", lambda: "XID" in _text(browser, "#event-rows"), 10)
    browser.save_screenshot(str(shots / "admin-events-after-fault.png"))
    assert _errors(browser) == []


def _job_costs(driver: Any) -> dict[str, tuple[float, float, float]]:
    """The cost page's per-job table: GPUs, GPU-hours and cost of each job, read in one script."""
    rows = driver.execute_script(
        "return Array.from(document.querySelectorAll('#cost-jobs tr'),"
        " tr => [tr.getAttribute('data-job'), ...Array.from(tr.cells, c => c.textContent)])"
    )
    # Columns: job, queue, state, pool, GPUs, GPU-hours, cost, lost GPU-hours.
    return {row[0]: (float(row[5]), float(row[6]), float(row[7])) for row in rows}


def test_the_cost_page_shows_each_jobs_gpu_hours_and_cost_as_history_counts_them(
    plane: Plane, browser: Any, shots: Path
) -> None:
    browser.get(plane.url + "/")
    if not browser.find_element("id", "signout").is_displayed():
        _sign_in(browser, plane.url, plane.admin)
    _open(browser, "cost")
    _until("some job running up a cost", lambda: any(c > 0 for _, _, c in _job_costs(browser).values()), 15)
    started = time.monotonic()
    shown = _job_costs(browser)
    history = json.loads(plane.cli("history", "--all", "-o", "json"))["items"]
    apart = time.monotonic() - started
    browser.save_screenshot(str(shots / "admin-cost-jobs.png"))
    assert set(shown) == {f"{r['namespace']}/{r['name']}" for r in history}
    for record in history:
        gpus, hours, cost = shown[f"{record['namespace']}/{record['name']}"]
        assert gpus == pytest.approx(record["gpus"], abs=0.01)
        # The two are read a moment apart, the page's figures up to one redraw (1.5 s) old and rounded
        # to two digits: a running job's GPU-hours grow by its GPUs for every second in between.
        slack = record["gpus"] * (apart + 3.0) / 3600 + 0.01
        assert record["gpuHours"] - slack <= hours <= record["gpuHours"] + 0.01, (record, hours)
        price = record["cost"] / record["gpuHours"] if record["gpuHours"] else 0.0
        assert record["cost"] - slack * price - 0.01 <= cost <= record["cost"] + 0.01, (record, cost)
    assert _errors(browser) == []


def _service_costs(driver: Any) -> dict[str, tuple[float, float, float]]:
    """The cost page's per-service table: GPUs now, GPU-hours and cost of each InferenceService."""
    rows = driver.execute_script(
        "return Array.from(document.querySelectorAll('#cost-services tr'),"
        " tr => [tr.getAttribute('data-service'), ...Array.from(tr.cells, c => c.textContent)])"
    )
    # Columns: service, queue, state, pool, GPUs now, GPU-hours, cost.
    return {row[0]: (float(row[5]), float(row[6]), float(row[7])) for row in rows}


def test_the_cost_page_shows_each_inference_service_as_gpufleet_cost_counts_it(
    plane: Plane, browser: Any, shots: Path
) -> None:
    browser.get(plane.url + "/")
    if not browser.find_element("id", "signout").is_displayed():
        _sign_in(browser, plane.url, plane.admin)
    _open(browser, "cost")
    _until("a service's GPU-hours", lambda: any(h > 0 for _, h, _ in _service_costs(browser).values()), 40)
    started = time.monotonic()
    shown = _service_costs(browser)
    counted = json.loads(plane.cli("cost", "-o", "json"))["services"]
    apart = time.monotonic() - started
    browser.save_screenshot(str(shots / "admin-cost-services.png"))
    assert set(shown) == set(counted) and counted
    for key, record in counted.items():
        gpus, hours, cost = shown[key]
        assert gpus == pytest.approx(record["gpus"], abs=0.01)
        # Read a moment apart, the page up to one redraw old and rounded to two digits (as for jobs).
        slack = record["gpus"] * (apart + 3.0) / 3600 + 0.01
        assert record["gpuHours"] - slack <= hours <= record["gpuHours"] + 0.01, (record, hours)
        price = record["cost"] / record["gpuHours"] if record["gpuHours"] else 0.0
        assert record["cost"] - slack * price - 0.01 <= cost <= record["cost"] + 0.01, (record, cost)
    assert _errors(browser) == []


def test_a_queue_token_sees_only_its_queue(plane: Plane, browser: Any, shots: Path) -> None:
    with plane.api() as api:
        answer = api.post("/v1/tokens", json={"queue": "team-a"})
    assert answer.status_code == 201, answer.text
    browser.get(plane.url + "/")
    if browser.find_element("id", "signout").is_displayed():
        browser.find_element("id", "signout").click()
    _sign_in(browser, plane.url, answer.json()["token"])
    _until("signed in as team-a", lambda: _text(browser, "#who") == "queue team-a", 10)
    _until("team-a's work", lambda: browser.find_elements("css selector", "#work-rows tr"), 10)
    _visit_all(browser, shots, "queue-team-a")

    assert _attributes(browser, "#queue-rows tr", "data-queue") == {"team-a"}
    work = _texts(browser, "#work-rows tr")
    assert work and all("team-a" in row for row in work)
    assert "team-b" not in _text(browser, "main")
    assert browser.find_elements("css selector", "[data-node]") == []
    costs = _job_costs(browser)
    assert costs and all(job.startswith("team-a/") for job in costs), costs
    events = _text(browser, "#event-rows")
    assert "team-b" not in events and "moe-ablation" not in events
