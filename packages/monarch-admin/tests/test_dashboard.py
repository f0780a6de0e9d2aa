"""The web dashboard in a real headless browser (Debian's ``chromium`` and
``chromium-driver``) over a real job: the page shows the job's processes and
actors in its tables and its graph, an actor that fails shows as failed with
its reason, the explorer shows one entity, the page says when the server is
gone; it takes the token from the printed URL's fragment, out of the address
bar, and sends it in a header to the API, on loopback and off it."""

from __future__ import annotations

import base64
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from monarch_actor import Actor, ActorMesh, ProcMesh, endpoint, this_host
from monarch_admin import AdminServer, admin_token, disable_admin, enable_admin, enable_dashboard

CHROMIUM = next(
    filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
)
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs a headless browser: apt-get install chromium chromium-driver",
)

WAIT = 60.0  # seconds: the page refreshes every 2 s; a loaded CI machine is slower
SCREENSHOT = Path(__file__).resolve().parents[3] / "docs" / "img" / "dashboard.png"
T = TypeVar("T")


class Trainer(Actor):
    @endpoint
    def step(self, n: int) -> int:
        return n

    @endpoint
    def explode(self) -> None:
        raise RuntimeError("trainer exploded on purpose")


class Loader(Actor):
    @endpoint
    def load(self) -> str:
        return "batch"


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    # --no-sandbox: CI runs as root, where chromium's sandbox refuses to start
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1440,1000",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    yield driver
    driver.quit()


class Job(NamedTuple):
    procs: ProcMesh
    trainers: ActorMesh[Trainer]
    loaders: ActorMesh[Loader]


# names of this test's own: the session's controller may run other tests' meshes too
MESH, TRAINERS, LOADERS = "dashboard-test", "dash_trainers", "dash_loaders"


@pytest.fixture
def job() -> Iterator[Job]:
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name=MESH)
    trainers = procs.spawn(TRAINERS, Trainer)
    loaders = procs.spawn(LOADERS, Loader)
    for n in range(3):
        trainers.step.call(n).get(timeout=30)
    loaders.load.call().get(timeout=30)
    yield Job(procs, trainers, loaders)
    procs.stop().get(timeout=60)


@pytest.fixture
def dashboard(capsys: pytest.CaptureFixture[str]) -> Iterator[AdminServer]:
    server = enable_dashboard(0)
    assert capsys.readouterr().out == f"Monarch Dashboard: {server.url}/#token={server.token}\n"
    yield server
    disable_admin()


def until(driver: WebDriver, condition: Callable[[WebDriver], T], what: str) -> T:
    """Wait for ``condition`` to be truthy; on timeout, fail with what the page shows."""
    try:
        return WebDriverWait(
            driver, WAIT, ignored_exceptions=[StaleElementReferenceException]
        ).until(condition)
    except TimeoutException:
        shown = driver.find_element(By.TAG_NAME, "body").text
        pytest.fail(f"the page did not show {what} within {WAIT} s; it shows:\n{shown[:4000]}")


def rows(driver: WebDriver, table: str) -> list[list[str]]:
    """The visible cells of a table's rows (read at once: the page re-renders every 2 s)."""
    found: list[list[str]] = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' tbody tr')]"
        ".map(r => [...r.cells].map(c => c.innerText.trim()))",
        f"#{table}",
    )
    return found


def rows_of(driver: WebDriver, name: str) -> dict[str, list[str]]:
    return {row[0]: row for row in rows(driver, "actors") if row[0].startswith(f"{name}[")}


def graph_nodes(driver: WebDriver, kind: str) -> dict[str, dict[str, Any]]:
    found: list[dict[str, Any]] = driver.execute_script(
        "return [...document.querySelectorAll('#graph .node[data-kind=' + arguments[0] + ']')]"
        ".map(n => ({text: n.querySelector('text').textContent, status: n.dataset.status,"
        " failed: n.classList.contains('failed'), id: n.dataset.id}))",
        kind,
    )
    return {node["text"]: node for node in found}


def click(driver: WebDriver, css: str) -> None:
    """Click the element (found again if a refresh replaced it)."""

    def clicked(d: WebDriver) -> bool:
        d.find_element(By.CSS_SELECTOR, css).click()
        return True

    until(driver, clicked, f"a clickable {css}")


def text_of(driver: WebDriver, css: str) -> str:
    return str(
        driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : ''", css
        )
    )


def write_screenshot(driver: WebDriver, server: AdminServer, loaders: ActorMesh[Loader]) -> None:
    """The overview, whole, as docs/img/dashboard.png (after some traffic for its plot)."""
    wanted = len(server.history()) + 6
    deadline = time.monotonic() + WAIT
    while len(server.history()) < wanted:  # calls until the sampler has seen them
        assert time.monotonic() < deadline, "the mesh admin stopped sampling"
        loaders.load.call().get(timeout=30)
    click(driver, "nav [data-tab=overview]")
    until(
        driver,
        lambda d: (
            d.execute_script("return (document.querySelector('#chart')._points || []).length")
            >= min(wanted, 450) - 1
        ),
        "the plot with the new samples",
    )
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.write_bytes(base64.b64decode(shot["data"]))


def test_the_page_shows_the_job_and_an_actor_failing_with_its_reason(
    job: Job,
    dashboard: AdminServer,
    browser: WebDriver,
    failures: list[Any],
) -> None:
    trainers = job.trainers
    browser.get(dashboard.dashboard_url)
    assert browser.title == "Monarch Dashboard"
    # the token left the address bar (history, screenshots) for this tab's storage
    assert browser.current_url.partition("#")[::2] == (f"{dashboard.url}/", "overview")

    # overview: the counts, each actor with its counters, and the activity plot
    shown = until(
        browser,
        lambda d: len(rows_of(d, TRAINERS)) == 2 and rows_of(d, TRAINERS),
        "the two trainers in the actors table",
    )
    for rank in (0, 1):
        row = shown[f"{TRAINERS}[{rank}]"]
        assert row[1:3] == ["Trainer", "idle"], row
        assert row[3] == "3" and row[7] == "step", row  # messages, last handler
        assert row[9] == socket.gethostname(), row
    assert sorted(rows_of(browser, LOADERS)) == [f"{LOADERS}[0]", f"{LOADERS}[1]"]
    assert int(text_of(browser, "#card-actors .value")) >= 4
    assert int(text_of(browser, "#card-procs .value")) >= 2
    assert text_of(browser, "#card-hosts .value") == "1"
    failed_before = int(text_of(browser, "#card-failed .value"))
    assert TRAINERS not in text_of(browser, "#failures")
    until(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#chart path.line"),
        "the message activity plot (two samples of /v1/history)",
    )

    # the graph: controller, the proc mesh, both procs in this host's band, their actors
    click(browser, "nav [data-tab=topology]")
    ours = {f"{TRAINERS}[0]", f"{TRAINERS}[1]", f"{LOADERS}[0]", f"{LOADERS}[1]"}
    actors = until(
        browser,
        lambda d: ours <= set(graph_nodes(d, "actor")) and graph_nodes(d, "actor"),
        "the four actors in the graph",
    )
    assert not any(actors[name]["failed"] for name in ours)
    assert {f"proc {MESH}[0]", f"proc {MESH}[1]"} <= set(graph_nodes(browser, "proc"))
    assert len(graph_nodes(browser, "controller")) == 1
    assert any(MESH in text for text in graph_nodes(browser, "mesh"))
    bands = browser.execute_script(
        "return [...document.querySelectorAll('#graph .band')].map(b => b.dataset.host)"
    )
    assert bands == [socket.gethostname()]

    # an endpoint raising in a broadcast fails the actor: red in the graph...
    trainers.explode.broadcast()

    def failed_in_graph(d: WebDriver) -> bool:
        nodes = graph_nodes(d, "actor")
        return all(nodes[f"{TRAINERS}[{r}]"]["failed"] for r in (0, 1))

    until(browser, failed_in_graph, "both trainers red in the graph")
    assert not graph_nodes(browser, "actor")[f"{LOADERS}[0]"]["failed"]

    # ... failed with its reason in the overview
    click(browser, "nav [data-tab=overview]")

    def failed_in_table(d: WebDriver) -> bool:
        shown = rows_of(d, TRAINERS)
        return all(row[2].startswith("failed") for row in shown.values()) and len(shown) == 2

    until(browser, failed_in_table, "both trainers failed in the actors table")
    assert "trainer exploded on purpose" in rows_of(browser, TRAINERS)[f"{TRAINERS}[0]"][2]
    listed = until(
        browser,
        lambda d: (t := text_of(d, "#failures")).count("trainer exploded on purpose") == 2 and t,
        "both failures with their reason",
    )
    assert f"{TRAINERS}[0] (Trainer)" in listed and f"{TRAINERS}[1] (Trainer)" in listed
    assert "RuntimeError" in listed
    assert int(text_of(browser, "#card-failed .value")) == failed_before + 2
    assert text_of(browser, "#conn") == "live"

    # the explorer: an actor's details and its recent events, then its process
    click(browser, f"#actors tr[data-id^='actor:{TRAINERS}-'][data-id$='/1'].s-failed")
    detail = until(
        browser,
        lambda d: (
            "explode" in (t := text_of(d, "#detail"))
            and "Recent events" in t
            and "Loading" not in t
            and t
        ),
        "the failed trainer's details and events",
    )
    assert f"{TRAINERS}[1]" in detail and "Trainer" in detail
    assert "trainer exploded on purpose" in detail
    events = [row[1:3] for row in rows(browser, "detail .events")]
    raised = ["failed", "explode: RuntimeError: trainer exploded on purpose"]
    assert raised in events and ["handled", "step"] in events, events
    assert events.index(raised) < events.index(["handled", "step"])  # newest first
    assert f"{MESH}[1]" in detail
    click(browser, "#detail a.go[data-go^='proc:']")
    until(
        browser,
        lambda d: "PID" in (t := text_of(d, "#detail")) and "Actors (2)" in t,
        "the process's details",
    )
    click(browser, "#detail [data-stacks]")
    stacks = until(browser, lambda d: text_of(d, "#detail pre"), "the process's Python stacks")
    assert "thread" in stacks.lower()

    if os.environ.get("MONARCH_WRITE_SCREENSHOTS") == "1":
        write_screenshot(browser, dashboard, job.loaders)

    # the failure really went up the supervision tree, to the controller's hook
    until(browser, lambda _: failures, "(in Python) the failure at the controller")
    assert "trainer exploded on purpose" in failures[0].report()


def test_a_handler_that_raised_is_listed_with_its_exception(
    job: Job, dashboard: AdminServer, browser: WebDriver
) -> None:
    browser.get(dashboard.dashboard_url)
    until(browser, lambda d: len(rows_of(d, TRAINERS)) == 2, "the two trainers")
    # one pytest session shares one controller with other packages' tests: their
    # failures may be listed too (and the error card counts theirs), so this looks
    # at its own trainer's entries only
    with pytest.raises(Exception, match="trainer exploded on purpose"):
        job.trainers.slice(gpus=1).explode.call_one().get(timeout=30)  # the actor lives on
    listed = until(
        browser,
        lambda d: "trainer exploded on purpose" in (t := text_of(d, "#failures")) and t,
        "the handler's exception among the failures",
    )
    assert f"{TRAINERS}[1] (Trainer)" in listed and "explode raised" in listed, listed
    assert "RuntimeError: trainer exploded on purpose" in listed, listed
    assert "No failures" not in listed
    assert int(text_of(browser, "#card-errors .value").replace(",", "") or 0) >= 1
    assert rows_of(browser, TRAINERS)[f"{TRAINERS}[1]"][2] == "idle"
    # the actor's own page shows it too
    click(browser, f"#actors tr[data-id^='actor:{TRAINERS}-'][data-id$='/1']")
    detail = until(
        browser,
        lambda d: "Last handler error" in (t := text_of(d, "#detail")) and t,
        "the trainer's last handler error",
    )
    assert "trainer exploded on purpose" in detail


def test_the_page_says_when_the_server_cannot_be_reached(job: Job, browser: WebDriver) -> None:
    server = enable_admin("127.0.0.1:0", quiet=True)
    try:
        browser.get(server.dashboard_url)
        until(browser, lambda d: len(rows_of(d, TRAINERS)) == 2, "the trainers")
        assert not browser.find_element(By.ID, "banner").is_displayed()
    finally:
        disable_admin()

    banner = until(
        browser,
        lambda d: (b := d.find_element(By.ID, "banner")).is_displayed() and b.text,
        "that the server cannot be reached",
    )
    assert f"Cannot reach the mesh admin server at 127.0.0.1:{server.port}" in banner
    assert "Retrying every 2 s" in banner
    assert text_of(browser, "#conn") == "offline"
    assert len(rows_of(browser, TRAINERS)) == 2  # the last data stays, dimmed

    # it keeps trying: a server on the same address again, and the page is live again
    again = enable_admin(f"127.0.0.1:{server.port}", quiet=True)
    try:
        until(
            browser,
            lambda d: (
                not d.find_element(By.ID, "banner").is_displayed() and text_of(d, "#conn") == "live"
            ),
            "the page live again",
        )
    finally:
        disable_admin()
    assert again.port == server.port


def fresh_tab(driver: WebDriver) -> None:
    """A new tab: its sessionStorage holds no token yet."""
    driver.switch_to.new_window("tab")


def test_without_the_token_the_page_says_how_to_get_it(job: Job, browser: WebDriver) -> None:
    server = enable_admin("127.0.0.1:0", quiet=True)
    try:
        fresh_tab(browser)
        browser.get(f"{server.url}/")
        banner = until(
            browser,
            lambda d: (b := d.find_element(By.ID, "banner")).is_displayed() and b.text,
            "that the server wants the token",
        )
        assert "needs the job's token" in banner and "#token=" in banner, banner
        assert text_of(browser, "#conn") == "unauthorized"
        assert not rows_of(browser, TRAINERS)
        # a query token is not taken: it would sit in history and server logs
        browser.get(f"{server.url}/?token={server.token}")
        until(browser, lambda d: text_of(d, "#conn") == "unauthorized", "still no access")
        # the printed link, pasted into the same tab: the page picks the token up
        browser.get(server.dashboard_url)
        until(browser, lambda d: len(rows_of(d, TRAINERS)) == 2, "the trainers")
        assert server.token not in browser.current_url
        # reloaded without the fragment, the tab still has its token
        browser.get(f"{server.url}/#overview")
        until(browser, lambda d: len(rows_of(d, TRAINERS)) == 2, "the trainers after reload")
        assert text_of(browser, "#conn") == "live"
    finally:
        disable_admin()
        browser.close()
        browser.switch_to.window(browser.window_handles[0])


def test_off_loopback_the_page_forwards_its_token(job: Job, browser: WebDriver) -> None:
    server = enable_admin("0.0.0.0:0", quiet=True)
    try:
        fresh_tab(browser)
        page = f"http://127.0.0.1:{server.port}/"
        browser.get(page)
        until(browser, lambda d: "needs the job's token" in text_of(d, "#banner"), "the 401")
        browser.get(f"{page}#token={admin_token()}")
        until(
            browser,
            lambda d: len(rows_of(d, TRAINERS)) == 2,
            "the trainers, from API calls that carry the token",
        )
        assert text_of(browser, "#conn") == "live"
        assert not browser.find_element(By.ID, "banner").is_displayed()
        assert browser.current_url.partition("#")[::2] == (page, "overview")
    finally:
        disable_admin()
        browser.close()
        browser.switch_to.window(browser.window_handles[0])
