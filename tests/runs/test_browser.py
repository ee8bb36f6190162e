"""The report as a person sees it: a demo report loaded in headless Chromium (Debian's
``chromium`` package, driven by Playwright's Python API; Playwright's own browser download
is not used). ``make install`` installs chromium when it is absent; without it the test
skips locally and fails under CI (``CI`` set), so CI never passes without looking.

The report is the one of the session's demo run (the ``demo_run`` fixture, shared with the
demo test), so this test adds only the browser's few seconds. A full-page screenshot is
written to the run directory as ``report.png``.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDTH = 1400


def _unavailable(reason: str) -> None:
    """Fail under CI, skip (with the reason) elsewhere."""
    message = f"{reason}; run `make install` (installs Debian's chromium and playwright)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium (module-scoped), closed at the end."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed")
    executable = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if executable is None:
        _unavailable(f"no chromium at {CHROMIUM} nor on PATH")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def page(browser, demo_run):
    """The demo's report (the session's demo run, shared with the demo test) loaded at
    1,400 px wide, and the console errors it logged."""
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto((demo_run[0] / "report.html").as_uri(), wait_until="load")
    yield page, errors
    page.close()


def test_report_fits_the_window_and_shows_every_figure(page, demo_run):
    page, errors = page
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    widths = page.evaluate("Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)")
    assert len(widths) >= 8 and all(w > 0 for w in widths)  # every figure decoded
    assert errors == []
    shot = demo_run[0] / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes().startswith(b"\x89PNG")


def test_headline_comes_first_and_raw_rows_are_collapsed(page):
    page, _ = page
    sections = page.evaluate("Array.from(document.querySelectorAll('section')).map(s => s.id)")
    assert sections == ["headline", "figures", "tables", "run", "raw"]
    tops = page.evaluate("['headline', 'figures'].map(id => document.getElementById(id).offsetTop)")
    assert tops[0] < tops[1] < 2000  # the headline is on the first screens, before figures
    headline = page.inner_text("#headline")
    assert "modes" in headline and "line rate fraction" in headline  # fabric per mode
    assert (
        page.evaluate("Array.from(document.querySelectorAll('details')).some(d => d.open)") is False
    )
    heights = page.evaluate(
        "Array.from(document.querySelectorAll('#raw details')).map(d => "
        "[d.getBoundingClientRect().height, d.querySelector('summary').offsetHeight])"
    )
    assert heights and all(shown <= summary + 4 for shown, summary in heights)  # one line each


def test_tables_scroll_inside_their_box_and_hide_no_number(page):
    page, _ = page
    wraps = page.evaluate(
        "Array.from(document.querySelectorAll('table')).map(t => "
        "[t.parentElement.className, getComputedStyle(t.parentElement).overflowX])"
    )
    assert wraps and all(w == ["table-wrap", "auto"] for w in wraps)
    text = page.inner_text("#tables") + "\n" + page.inner_text("#headline")
    shown = re.findall(r"(?<![A-Za-z_])[-+]?(?:nan|inf(?:inity)?)(?![A-Za-z_])", text, re.I)
    assert not shown, shown
    if "—" in text:  # every non-finite value shown as a dash is explained
        assert "not finite" in text or "not a number" in text
