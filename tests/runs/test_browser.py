"""The report as a person sees it: a demo report loaded in headless Chromium (Debian's
``chromium`` package, driven by Playwright's Python API; Playwright's own browser download
is not used). ``make install`` installs chromium when it is absent; without it the test
skips locally and fails under CI (``CI`` set), so CI never passes without looking.

The report is the one of the session's demo run (the ``demo_run`` fixture, shared with the
demo test), so this test adds only the browser's few seconds. It asserts what a person sees:
the findings first (a number and a comparison in the first paragraph, their figures before
the other figures), every figure with data on each of its axes (the ``data-artists`` and
``data-min-artists`` the report counted), no image wider than its column or the window,
tables in their own scroll boxes, the ``--json`` output and raw rows collapsed at the end.
A full-page screenshot is written to the run directory as ``report.png``.
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


def test_report_fits_the_window_and_every_figure_shows_data(page, demo_run):
    page, errors = page
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    images = page.evaluate(
        "Array.from(document.images).map(i => ({alt: i.alt, natural: i.complete ? "
        "i.naturalWidth : 0, column: i.parentElement.clientWidth, "
        "right: i.getBoundingClientRect().right, artists: Number(i.dataset.artists), "
        "least: Number(i.dataset.minArtists)}))"
    )
    assert len(images) >= 8 and all(i["natural"] > 0 for i in images)  # every figure decoded
    for i in images:  # never an empty axis; never wider than the page, nor scaled down to fit
        assert i["artists"] > 0 and i["least"] > 0, i
        assert i["natural"] <= i["column"] and i["right"] <= WIDTH, i
    assert errors == []
    shot = demo_run[0] / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes().startswith(b"\x89PNG")


def test_findings_come_first_with_numbers_and_a_comparison(page):
    page, _ = page
    sections = page.evaluate("Array.from(document.querySelectorAll('section')).map(s => s.id)")
    assert sections == ["findings", "figures", "tables", "run", "command", "raw"]
    assert page.evaluate("document.getElementById('findings').offsetTop") < 900  # first screen
    first = page.inner_text("#findings p")
    assert re.search(r"\d", first), first
    assert re.search(r"faster|slower|than|\bvs\b|better|worse|%", first), first
    shown = page.evaluate(
        "Array.from(document.querySelectorAll('#findings img')).map(i => i.offsetTop)"
    )
    figures = page.evaluate("document.getElementById('figures').offsetTop")
    assert 1 <= len(shown) <= 2 and all(top < figures for top in shown)  # the figures with it
    command = page.text_content("#command")  # what --json printed: collapsed, at the end
    assert "modes" in command and "line rate fraction" in command
    assert (
        page.evaluate("Array.from(document.querySelectorAll('details')).some(d => d.open)") is False
    )
    heights = page.evaluate(
        "Array.from(document.querySelectorAll('#raw details, #command details')).map(d => "
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
    text = page.inner_text("#tables") + "\n" + page.text_content("#command")
    text += "\n" + page.inner_text("#findings")
    shown = re.findall(r"(?<![A-Za-z_])[-+]?(?:nan|inf(?:inity)?)(?![A-Za-z_])", text, re.I)
    assert not shown, shown
    if "—" in text:  # every non-finite value shown as a dash is explained
        assert "not finite" in text or "not a number" in text
