"""Renders an HTML file in headless Chromium (Debian's `chromium`) and
reports what a person would see: how many images there are, how many
loaded (naturalWidth > 0), and every error or console message."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

# Injected at the start of <head> of a copy of the page: records errors
# (including images that fail to load: capture phase), then on `load`
# writes the result into the DOM, which --dump-dom prints.
_PROBE = """<script>
window.__tierlab_errors = [];
window.addEventListener('error', e => window.__tierlab_errors.push(
  'error: ' + (e.message || (e.target && e.target.tagName + ' ' + (e.target.alt || '')))), true);
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const r = {images: imgs.length,
             loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
             broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt),
             errors: window.__tierlab_errors, title: document.title,
             text_chars: document.body.innerText.length,
             // What the first screen (1280 x 800 at the top) shows.
             first_screen: [...document.querySelectorAll('h1,h2,h3,p,li')]
               .filter(e => e.getBoundingClientRect().top < 800)
               .map(e => e.innerText).join('\\n')};
  const pre = document.createElement('pre');
  pre.id = 'tierlab-check';
  pre.textContent = JSON.stringify(r);
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def render(page: Path, workdir: Path) -> dict:
    """Loads `page` in headless Chromium; returns the probe's findings plus
    `console`: the page's console messages from Chromium's log."""
    exe = chromium()
    assert exe is not None
    text = page.read_text(encoding="utf-8")
    assert "<head>" in text
    probe = workdir / f"probe-{page.stem}.html"
    probe.write_text(text.replace("<head>", "<head>" + _PROBE, 1), encoding="utf-8")
    proc = subprocess.run(
        [
            exe, "--headless", "--window-size=1280,800", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000",
            f"--user-data-dir={workdir / 'chromium-profile'}",
            "--dump-dom", probe.resolve().as_uri(),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r'<pre id="tierlab-check">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"the page did not finish loading in Chromium: {proc.stderr[-2000:]}"
    result = json.loads(html.unescape(found.group(1)))
    result["console"] = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return result
