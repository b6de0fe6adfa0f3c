"""The Dagster UI as a person sees it: Debian's headless Chromium driven by selenium (issue 24, part 5).

GraphQL answers prove the server knows our assets; only a browser proves the pages render them.
Each page visited is kept as a screenshot under ``build/test-artifacts/ui`` (CI keeps the build
directory of a failed run; locally it is one `ls` away).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import ElementClickInterceptedException, TimeoutException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "build" / "test-artifacts" / "ui"
# Hang guards only (a loaded 2-core machine renders the UI slowly); no test asserts a duration.
PAGE_WAIT_S = 90


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
        if found:
            return found
    raise FileNotFoundError(
        f"none of {', '.join(names)} is installed: `make system-deps` installs Debian's chromium and "
        "chromium-driver (system-packages/browser.txt)"
    )


@contextmanager
def chromium() -> Iterator[WebDriver]:
    """A headless Chromium (Debian's build and its matching chromedriver, not a downloaded one)."""
    options = Options()
    options.binary_location = _binary("chromium", "chromium-browser")
    # --no-sandbox: CI runs as root, where Chromium refuses its sandbox; /dev/shm is small in containers.
    flags = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1600,1000")
    for arg in flags:
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(_binary("chromedriver")), options=options)
    driver.set_page_load_timeout(PAGE_WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: WebDriver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def open_page(driver: WebDriver, url: str, *, until_text: str) -> str:
    """Load ``url`` and wait until the page shows ``until_text`` (the UI renders after load, from
    GraphQL); returns the page's visible text. Dagster's first-visit community dialog is dismissed."""
    driver.get(url)
    wait = WebDriverWait(driver, PAGE_WAIT_S)
    try:
        wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "body"), until_text))
    except TimeoutException:
        raise AssertionError(
            f"{url} did not show {until_text!r} within {PAGE_WAIT_S} s; it shows: "
            f"{driver.find_element(By.TAG_NAME, 'body').text[:1500]}"
        ) from None
    _dismiss_dialogs(driver)
    return driver.find_element(By.TAG_NAME, "body").text


def _dismiss_dialogs(driver: WebDriver) -> None:
    # Dagster's first-visit community dialog; it can also open a moment after the page renders.
    for skip in driver.find_elements(By.XPATH, "//button[normalize-space()='Skip']"):
        if skip.is_displayed():
            skip.click()


def click(driver: WebDriver, element: WebElement) -> None:
    """Click ``element`` as a person would: scrolled to the middle of the window first. When an
    overlay still sits on it (a toast, a dialog that opened late, the sticky header on a small
    window), dismiss what can be dismissed and click it through the DOM, as the page would."""
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    try:
        element.click()
    except ElementClickInterceptedException:
        _dismiss_dialogs(driver)
        driver.execute_script("arguments[0].click();", element)


def click_button(driver: WebDriver, label: str) -> None:
    """Click the (first) enabled button whose visible label is ``label``."""
    xpath = f"//button[normalize-space()='{label}' or .//span[normalize-space()='{label}']]"
    click(driver, WebDriverWait(driver, PAGE_WAIT_S).until(ec.element_to_be_clickable((By.XPATH, xpath))))


def open_markdown_entry(driver: WebDriver, key: str) -> None:
    """Open a markdown metadata entry (the UI lists it as "[Show Markdown]" and renders it in a dialog)."""
    row = driver.find_element(By.XPATH, f"//tr[.//span[normalize-space()='{key}']]")
    click(driver, row.find_element(By.XPATH, ".//a[contains(normalize-space(), 'Show Markdown')]"))
    WebDriverWait(driver, PAGE_WAIT_S).until(lambda d: any(src.startswith("data:image/") for src in images(d)))


def images(driver: WebDriver) -> list[str]:
    """The ``src`` of every image on the page (metadata markdown renders ours inline as data URLs)."""
    return [img.get_attribute("src") or "" for img in driver.find_elements(By.TAG_NAME, "img")]
