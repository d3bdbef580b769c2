"""Take docs/dashboard.png: the dashboard during a live local Ray sweep (model-guided, small shapes).

    python docs/dashboard_screenshot.py [OUT.png] [--workdir DIR]

Needs `.[ray,dashboard]`, selenium, and Debian's chromium and chromium-driver. It writes a sweep
spec (five small matmul tasks, 12 trials each, the xgb cost model), starts `autotune sweep` on it
and `autotune dashboard` on its log, waits in headless Chromium until one task is done while others
still run and the predicted-against-measured plots show, takes the screenshot, stops both, and
keeps the PNG small (a 256-colour palette; cropped below the second row of prediction plots).
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SPEC = """[defaults]
trials = 12
threads = 1
cost_model = "xgb"

[[task]]
op = "matmul"
shapes = ["32x32x32", "48x48x48", "64x64x64", "96x64x32", "64x32x64"]
"""


def live_enough(driver) -> bool:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By
    note = driver.find_element(By.ID, "sweep-note").text
    plots = driver.find_elements(By.CSS_SELECTOR, "#predicted .js-plotly-plot")
    predicted = driver.find_element(By.ID, "predicted-note").text.split()
    return (len(plots) >= 2 and "running" in driver.find_element(By.ID, "sweep").text
            and " 0 of 5 tasks done" not in note and predicted and predicted[0].isdigit() and int(predicted[0]) >= 20)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=str(Path(__file__).with_name("dashboard.png")))
    ap.add_argument("--workdir", default="/tmp/autotune-dashboard-shot")
    ap.add_argument("--port", type=int, default=8765)
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    (work / "spec.toml").write_text(SPEC)
    log = work / "sweep.jsonl"
    log.unlink(missing_ok=True)
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    bindir = Path(sys.executable).parent
    sweep = subprocess.Popen([str(bindir / "autotune"), "sweep", "spec.toml", "--log", str(log)], cwd=work, env=env,
                             stdout=open(work / "sweep.out", "w"), stderr=open(work / "sweep.err", "w"))
    board = subprocess.Popen([str(bindir / "autotune"), "dashboard", str(log), "--port", str(args.port)], cwd=work,
                             env=env, stdout=open(work / "dashboard.out", "w"), stderr=open(work / "dashboard.err", "w"))
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,2000",
              "--hide-scrollbars"):
        opts.add_argument(a)
    driver = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
    raw = work / "raw.png"
    try:
        time.sleep(3)
        driver.get(f"http://127.0.0.1:{args.port}/")
        WebDriverWait(driver, 900, poll_frequency=1).until(live_enough)
        time.sleep(1.0)  # the last redraw
        print(driver.find_element(By.ID, "sweep-note").text)
        plots = driver.find_elements(By.CSS_SELECTOR, "#predicted .js-plotly-plot")
        bottom = max(p.location["y"] + p.size["height"] for p in plots[:2])
        driver.save_screenshot(str(raw))
    finally:
        driver.quit()
        board.send_signal(signal.SIGINT)
        sweep.send_signal(signal.SIGINT)
        for p in (board, sweep):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.terminate()
                p.wait(30)
    from PIL import Image
    im = Image.open(raw).convert("RGB")
    im = im.crop((0, 0, im.width, min(im.height, int(bottom) + 10)))
    im.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(args.out, optimize=True)
    print(f"{args.out}: {Path(args.out).stat().st_size >> 10} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
