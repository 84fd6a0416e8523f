"""Open a built deck in headless Chromium, offline, and report what happened.

    python slides/browser.py slides/04_pipeline.html [--shots DIR]

Drives Chromium through the Chrome DevTools Protocol over ``--remote-debugging-pipe`` (file
descriptors 3 and 4, NUL-separated JSON; the transport Puppeteer uses): standard library only,
no port to collide with. Networking is off three ways: DNS resolves nothing
(``--host-resolver-rules``), the page is emulated offline, and every request is logged
(``Network.requestWillBeSent``) so a caller can assert that none left the machine.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
    "--hide-scrollbars",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--remote-debugging-pipe",
]
WIDTH, HEIGHT = 1280, 800


def find_chromium() -> str | None:
    """``$CHROMIUM`` or the first of chromium / chromium-browser / google-chrome on PATH."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _dup_high(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Chromium:
    """A headless Chromium process and one CDP connection to it. Use as a context manager.

    Every wait is bounded (``timeout`` seconds, raising TimeoutError): nothing can hang."""

    def __init__(self, exe: str, timeout: float = 30.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="minipar-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # The child must see the pipes as fds 3 (commands in) and 4 (replies out). Move the
        # child's ends to fds >= 10 first, so that redirecting onto 3 cannot clobber the other.
        to_chrome_r, from_chrome_w = (_dup_high(to_chrome_r), _dup_high(from_chrome_w))
        self.log = open(Path(self.profile) / "stderr.log", "wb")
        self.proc = subprocess.Popen(
            [
                "bash",
                "-c",
                f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}',
                exe,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                f"--window-size={WIDTH},{HEIGHT}",
                "about:blank",
            ],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._inbox: queue.Queue = queue.Queue()
        self._next_id = 0
        self.events: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        buf = b""
        with os.fdopen(self._from_chrome, "rb", buffering=0) as f:
            while chunk := f.read(1 << 16):
                buf += chunk
                *msgs, buf = buf.split(b"\0")
                for m in msgs:
                    self._inbox.put(json.loads(m))
        self._inbox.put(None)  # Chromium closed the pipe (exited)

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send one CDP command and return its result; events seen meanwhile go to ``events``."""
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        try:
            os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        except BrokenPipeError:
            raise RuntimeError(f"Chromium exited (code {self.proc.poll()}); {self._stderr_tail()}") from None
        while True:
            reply = self._get()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _get(self) -> dict:
        try:
            m = self._inbox.get(timeout=self.timeout)
        except queue.Empty:
            raise TimeoutError(f"Chromium sent nothing for {self.timeout} s") from None
        if m is None:
            raise RuntimeError(f"Chromium exited (code {self.proc.poll()}); {self._stderr_tail()}")
        return m

    def _stderr_tail(self) -> str:
        self.log.flush()
        return "its stderr ends:\n" + (Path(self.profile) / "stderr.log").read_text(errors="replace")[-2000:]

    def wait_event(self, method: str, session: str) -> dict:
        for e in self.events:
            if e.get("method") == method and e.get("sessionId") == session:
                return e
        while True:
            e = self._get()
            self.events.append(e)
            if e.get("method") == method and e.get("sessionId") == session:
                return e

    def close(self):
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Page:
    """One tab with Network, Page and Runtime events on, offline, at WIDTH x HEIGHT."""

    def __init__(self, browser: Chromium):
        self.b = browser
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.target = target
        self.s = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Network", "Page", "Runtime"):
            self.call(f"{domain}.enable")
        self.call(
            "Network.emulateNetworkConditions",
            {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
        )
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )

    def call(self, method, params=None):
        return self.b.call(method, params, self.s)

    def eval(self, expr: str, await_promise: bool = False):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": await_promise})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr[:60]}...: {r['exceptionDetails'].get('exception', {}).get('description')}")
        return r["result"].get("value")

    def wait_for(self, expr: str, what: str):
        t = time.monotonic()
        while not self.eval(expr):
            if time.monotonic() - t > self.b.timeout:
                raise TimeoutError(f"{what}: still false after {self.b.timeout} s: {expr}")
            time.sleep(0.05)

    def events(self, method):
        return [e["params"] for e in self.b.events if e.get("sessionId") == self.s and e.get("method") == method]

    def screenshot(self, path: Path):
        png = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(png))

    def close(self):
        self.b.call("Target.closeTarget", {"targetId": self.target})


# MathJax 2 typesets through its queue: once it has started (``isReady``), a callback queued now
# runs after everything queued before it (start-up typesetting, re-rendering on slidechanged).
MATHJAX_READY = "!window.MathJax || MathJax.isReady === true"
MATHJAX_DONE = """new Promise(done => window.MathJax ? MathJax.Hub.Queue(() => done(true)) : done(false))"""


# nbconvert's template loads reveal.js through require.js, so there is no global ``Reveal``:
# take the module require.js defined. reveal.js adds the class "ready" once initialised.
FIND_REVEAL = """(() => {
  if (!document.querySelector('.reveal.ready')) return false;
  const defined = window.requirejs ? requirejs.s.contexts._.defined : {};
  const key = Object.keys(defined).find(k => /dist\\/reveal\\.js$/.test(k));
  window.__reveal = window.Reveal || (key && defined[key]);
  return !!(window.__reveal && __reveal.isReady());
})()"""

STATE = """(() => {
  const Reveal = __reveal, slides = Reveal.getSlides();
  const imgs = [...document.images];
  return {
    total: Reveal.getTotalSlides(),
    images: imgs.length,
    images_broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80)),
    math: document.querySelectorAll('.MathJax_CHTML, .mjx-chtml.MathJax_CHTML, .MathJax_Display').length,
    math_errors: document.querySelectorAll('.mjx-merror, .MathJax_Error').length,
    math_raw: slides.filter(s => /\\$\\$|\\\\\\[|\\\\\\(/.test(s.innerText)).length,
    first_figure: slides.findIndex(s => s.querySelector('img')),
    overflow: slides.map((s, i) => s.scrollHeight > s.clientHeight + 2 ? i : -1).filter(i => i >= 0),
    overflow_detail: slides.map((s, i) => [i, s.scrollHeight, s.clientHeight,
        ((s.querySelector('h1,h2,h3,h4') || {}).innerText || s.innerText || '').trim().split('\\n')[0].slice(0, 70)])
      .filter(([i, sh, ch]) => sh > ch + 2),
  };
})()"""


def check_deck(browser: Chromium, deck: Path, shots: Path | None = None) -> dict:
    """Open ``deck`` from disk and return what a test asserts on:

    ``ready`` (reveal.js initialised), ``total`` (``Reveal.getTotalSlides()``), ``images`` and
    ``images_broken``, ``math`` (typeset formulas), ``math_errors``, ``math_raw`` (slides still
    showing TeX delimiters), ``overflow`` (indices of slides taller than the slide area: they
    scroll), ``overflow_detail`` (``[index, content height, slide height, first heading]`` of each),
    ``requests`` (every URL the page asked for), ``failed``
    (``url: error`` of each failed load), ``exceptions`` (uncaught JS errors) and ``shots``
    (PNG paths: the first slide and the first slide with a figure, when ``shots`` is given).
    """
    deck = Path(deck).resolve()
    page = Page(browser)
    try:
        page.call("Page.navigate", {"url": deck.as_uri()})
        browser.wait_event("Page.loadEventFired", page.s)
        try:
            page.wait_for(FIND_REVEAL, "reveal.js initialised")
        except TimeoutError as e:
            failed = [
                f"{x['request']['url'][:100]}"
                for x in page.events("Network.requestWillBeSent")
                if not x["request"]["url"].startswith(("file:", "data:"))
            ]
            raise TimeoutError(f"{e}; requests that left the page's folder: {failed}") from None
        page.wait_for(MATHJAX_READY, "MathJax started")
        page.eval(MATHJAX_DONE, await_promise=True)
        # lay out every slide (reveal.js only displays those near the current one) to measure them
        page.eval("__reveal.configure({viewDistance: 1000}); new Promise(r => requestAnimationFrame(r))", True)
        out = page.eval(STATE)
        out["ready"] = True
        out["shots"] = []
        if shots is not None:
            page.eval("__reveal.configure({transition: 'none'}); __reveal.slide(0, 0)")
            page.eval(MATHJAX_DONE, await_promise=True)
            out["shots"].append(shots / f"{deck.stem}-first.png")
            page.screenshot(out["shots"][-1])
            if out["first_figure"] >= 0:
                page.eval(
                    f"(() => {{ const i = __reveal.getIndices(__reveal.getSlides()[{out['first_figure']}]);"
                    " __reveal.slide(i.h, i.v); })()"
                )
                page.eval(MATHJAX_DONE, await_promise=True)
                out["shots"].append(shots / f"{deck.stem}-figure.png")
                page.screenshot(out["shots"][-1])
        urls = {e["requestId"]: e["request"]["url"] for e in page.events("Network.requestWillBeSent")}
        out["requests"] = sorted({u[:40] + "..." if u.startswith("data:") else u for u in urls.values()})
        out["failed"] = [
            f"{urls.get(e['requestId'], '?')}: {e['errorText']}" for e in page.events("Network.loadingFailed")
        ]
        out["exceptions"] = [
            e["exceptionDetails"].get("exception", {}).get("description") or e["exceptionDetails"].get("text")
            for e in page.events("Runtime.exceptionThrown")
        ]
        return out
    finally:
        page.close()


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Check decks in headless Chromium, offline.")
    ap.add_argument("decks", nargs="+", type=Path)
    ap.add_argument("--shots", type=Path, default=None, help="folder for PNG screenshots")
    args = ap.parse_args(argv)
    exe = find_chromium()
    if not exe:
        sys.exit("Chromium not found: apt-get install chromium (or set CHROMIUM=/path/to/chrome)")
    with Chromium(exe) as b:
        for d in args.decks:
            t = time.perf_counter()
            r = check_deck(b, d, args.shots)
            r["seconds"] = round(time.perf_counter() - t, 2)
            print(
                json.dumps(
                    {"deck": str(d), **{k: v if k != "shots" else list(map(str, v)) for k, v in r.items()}}, indent=1
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
