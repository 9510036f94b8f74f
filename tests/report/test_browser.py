"""The trajectory viewer in a real headless Chromium: the script runs, renders steps, escapes text.

Chromium comes from ``.ci/install-chromium.sh`` (Debian's ``chromium`` package). If it is absent,
the test runs that script once; it skips only if Chromium is absent and cannot be installed.
"""

from __future__ import annotations

import html as html_lib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.report.report_helpers import HOSTILE

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / ".ci" / "install-chromium.sh"


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of a Chromium binary, installing Debian's package if needed (else skip with the reason)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    try:
        proc = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"chromium is not installed and {INSTALL} could not install it: {e}")
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if proc.returncode != 0 or not found:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        pytest.skip(f"chromium is not installed and {INSTALL} could not install it (exit {proc.returncode}): "
                    + " / ".join(tail))
    return found


def _chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--window-size=1280,900", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_viewer_renders_in_chromium(built_report, chromium, tmp_path):
    # run 1 = the synthetic EMPO² run; iteration 0, episode 1 has tips and hostile text
    url = built_report.viewer.resolve().as_uri() + "#run=1&it=0&ep=1"
    dom = _chromium(chromium, tmp_path / "profile", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'data-rendered="1"' in html, "the viewer script did not finish"
    assert len(re.findall(r'<section class="step">', html)) == 3  # the episode's 3 steps
    # in the order things happened: the initial observation, then per step the action, its verdict, its result
    cards = html.split('<section class="step">')
    assert "Initial observation" in cards[0] and "Observation after" not in cards[0]
    third = cards[3]
    assert third.index('class="exec action"') < third.index("invalid action") < third.index(
        "Observation after this action") < third.index("The end of episode 1.")
    assert html.count('<li><pre>') == 2 * 3  # 2 retrieved tips at each of the 3 steps
    # shown 1-based, as the logs (the embedded data keeps the stored 0-based ids)
    assert "<h2>it1-t1-r2</h2>" in html and "<h2>it0-t0-r1</h2>" not in html and "Take the key." in html
    # iterations are numbered like metrics.jsonl rows, out of the planned count
    assert "iteration 12 of 12  (iter-00012.jsonl)" in html and "of 13" not in html
    # hostile text is shown as text: escaped in the serialised DOM, never parsed into elements
    # (the DOM serialiser escapes <, > and & in text nodes, and leaves quotes as they are)
    assert html_lib.escape(HOSTILE, quote=False) in html and "<b>x</b>" not in html
    assert html.count("&lt;tip&gt;") >= 3

    shot = built_report.out / "viewer_screenshot.png"
    res = _chromium(chromium, tmp_path / "profile2", f"--screenshot={shot}", url)
    assert res.returncode == 0, res.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a rendered page, not a blank one


def test_viewer_filters_and_evaluations_in_chromium(built_report, chromium, tmp_path):
    # synthetic run, first iteration: episodes 0 and 2 succeed (75), episode 1 fails (-100)
    url = built_report.viewer.resolve().as_uri() + "#run=1&it=0&ep=0&score=negative"
    html = _chromium(chromium, tmp_path / "p1", "--dump-dom", url).stdout
    assert 'data-rendered="1"' in html
    assert len(re.findall(r'<div class="ep-id">', html)) == 1  # only the failed episode is listed
    assert "<h2>it1-t1-r2</h2>" in html  # and shown, though ep=0 was asked (it does not pass the filter)
    assert "1 match the filters" in html
    # the real run: iterations 1..3, then its evaluations; index 4 = eval_after.json
    url = built_report.viewer.resolve().as_uri() + "#run=0&it=4&ep=0"
    html = _chromium(chromium, tmp_path / "p2", "--dump-dom", url).stdout
    assert "evaluation after training (test split)" in html and "<h2>eval-after-e1</h2>" in html
    assert len(re.findall(r'<div class="ep-id">', html)) == 2
    assert 'class="step"' in html  # its actions, as steps
