"""Take the README's screenshot of the web page: `python scripts/screenshot_web.py`.

Starts `fw web` on a temporary copy of sample_home, opens the edit page of the agent `ops`
in Debian's chromium (through Playwright) and saves docs/agent-edit.png. Needs the `test`
extra (Playwright) and /usr/bin/chromium; nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "docs" / "agent-edit.png"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def fw_command() -> list[str]:
    beside = Path(sys.executable).parent / "fw"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "framework_cli"]


def main() -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(REPO / "sample_home", home, ignore=shutil.ignore_patterns(".index", ".index.json", ".lock"))
        server = subprocess.Popen([*fw_command(), "--home", str(home), "web", "--listen", "127.0.0.1:0"],
                                  stdout=subprocess.PIPE, text=True, env={**os.environ, "FW_HOME": str(home)})
        try:
            assert server.stdout is not None
            url = server.stdout.readline().strip().removeprefix("fw web: ")
            base = url.split("/?", 1)[0]
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1100, "height": 900}, device_scale_factor=1)
                page.goto(url)
                page.goto(f"{base}/agents/ops/edit")
                OUT.parent.mkdir(exist_ok=True)
                page.screenshot(path=str(OUT), full_page=True)
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"saved {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
