"""Open a page in real headless Chromium (Debian's ``chromium``, driven by Playwright) and report what
a person would see: console errors, every request the page made, the charts drawn, a screenshot.

Tests use the ``browser_page`` fixture of conftest; without Chromium or Playwright they skip, saying
which is missing (``.ci/run`` installs both).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


def missing() -> str | None:
    """Why pages cannot be tested here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install -e '.[test]')"
    if chromium_path() is None:
        return "Chromium is not installed (apt-get install chromium)"
    return None


@dataclass
class Seen:
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL but the page itself
    dialogs: list[str] = field(default_factory=list)  # alert/confirm/prompt: script ran that should not
    charts: int = 0  # vega-embed containers holding an <svg> or <canvas>
    chart_errors: int = 0  # containers whose spec failed (class chart-error)
    text: str = ""
    screenshot: Path | None = None


def open_page(path: Path, screenshot: Path | None = None, width: int = 1280, click: str | None = None,
              height: int | None = None) -> Seen:
    """Load ``path`` (file://) in headless Chromium with the network cut off, wait for the charts,
    and collect what happened. ``click``: a CSS selector to click once loaded (filters); ``height``:
    keep only the top of the page in the screenshot."""
    from playwright.sync_api import sync_playwright

    seen = Seen()
    url = Path(path).resolve().as_uri()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.on("console", lambda m: m.type == "error" and seen.console_errors.append(m.text))
            page.on("pageerror", lambda e: seen.page_errors.append(str(e)))
            page.on("dialog", lambda d: (seen.dialogs.append(d.message), d.dismiss()))
            page.on("request", lambda r: r.url != url and seen.requests.append(r.url))
            page.route("**/*", lambda route: route.continue_() if route.request.url == url else route.abort())
            page.goto(url, wait_until="load")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.chart')].every(c => c.querySelector('svg, canvas') "
                "|| c.classList.contains('chart-error'))", timeout=30_000)
            if click:
                page.click(click)
                page.wait_for_timeout(300)
            seen.charts = page.locator(".chart svg, .chart canvas").count()
            seen.chart_errors = page.locator(".chart-error").count()
            seen.text = page.inner_text("body")
            if screenshot:
                clip = {"x": 0, "y": 0, "width": width, "height": height} if height else None
                page.screenshot(path=str(screenshot), full_page=True, clip=clip)
                seen.screenshot = Path(screenshot)
        finally:
            browser.close()
    return seen


def not_blank(png: Path) -> bool:
    """A screenshot with more than a few colours (a blank or all-white page has one or two)."""
    import zlib

    data = png.read_bytes()
    # decode the IDAT stream enough to count distinct byte values in the pixels
    chunks, i = [], 8
    while i < len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        if data[i + 4:i + 8] == b"IDAT":
            chunks.append(data[i + 8:i + 8 + n])
        i += 12 + n
    return len(set(zlib.decompress(b"".join(chunks)))) > 16
