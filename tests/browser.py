"""A real headless Chromium for the explorer page's tests: Debian's ``chromium``, driven
by the Playwright Python package (never a browser Playwright downloads). Where either is
missing, the tests that need it are skipped with one line saying so."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest

CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else \
    shutil.which("chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("no Chromium installed (/usr/bin/chromium): the page's browser tests "
                    "are skipped")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed: the page's browser tests are "
                    "skipped")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM,
                              args=["--no-sandbox", "--headless=new", "--disable-gpu"])
        yield b
        b.close()


class Opened:
    """A page opened from a file, with every console error and uncaught exception kept."""

    def __init__(self, browser: Any, path: Path, width: int = 1280, height: int = 900,
                 scheme: str = "light") -> None:
        self.context = browser.new_context(viewport={"width": width, "height": height},
                                           color_scheme=scheme)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text)
                     if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.resolve().as_uri())

    def close(self) -> None:
        self.context.close()

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
