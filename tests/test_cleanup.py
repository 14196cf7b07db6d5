"""Tests that start a server, Chromium or a build clean up after themselves, also when
they fail: no stray processes, no open port, no temporary folders.

Each check runs the real fixtures or helpers in a child process marked by a unique
environment variable, makes it fail, and then looks for anything left behind.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from sitetools import ROOT, chromium_path, processes_with_env, require_built_site, under_ci

TESTS = ROOT / "tests"

# A test module that borrows the real browser fixtures (tests/conftest.py) and fails while the
# server and Chromium are up: once with a failed assertion, once with an exception
# inside an open page visit.
PROBE = textwrap.dedent('''
    import os
    from pathlib import Path

    from conftest import browser, site  # noqa: F401  (the real fixtures)
    from sitetools import OfflinePage


    def test_fails_with_server_and_browser_running(browser, site):
        Path(os.environ["PROBE_OUT"]).write_text(site)
        visit = OfflinePage(browser, site, "index.html")
        assert visit.response.ok
        assert False, "deliberate failure"


    def test_raises_in_the_middle_of_a_visit(browser, site):
        OfflinePage(browser, site, "chapters/01-concept.html")
        raise RuntimeError("deliberate error")
''')


def _leftovers(marker: str, seconds: float = 10.0) -> list[str]:
    """Processes still carrying ``marker``, after giving them ``seconds`` to exit."""
    deadline = time.monotonic() + seconds
    while (left := processes_with_env(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _port_is_closed(url: str) -> bool:
    port = int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.html
def test_failing_browser_tests_leave_no_process_port_or_temp_dir(tmp_path: Path) -> None:
    require_built_site()
    if chromium_path() is None:
        if under_ci():
            pytest.fail("Chromium is missing under CI: `make test` installs Debian's chromium")
        pytest.skip("Chromium not installed (apt-get install chromium)")
    probe = tmp_path / "probe" / "test_probe.py"
    probe.parent.mkdir()
    probe.write_text(PROBE)
    # The child's TMPDIR, empty again afterwards. Short: Chromium puts Unix sockets in it,
    # and a socket path may not exceed 107 bytes.
    temp = Path(tempfile.mkdtemp(prefix="cleanup-"))
    try:
        _run_failing_browser_probe(tmp_path, probe, temp)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _run_failing_browser_probe(tmp_path: Path, probe: Path, temp: Path) -> None:
    marker = f"CLEANUP_PROBE_{uuid.uuid4().hex}"
    env = dict(os.environ, TMPDIR=str(temp), PROBE_OUT=str(tmp_path / "url"),
               PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    env[marker] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(probe), "-q", "-p", "no:cacheprovider",
         "-p", "no:randomly", "--rootdir", str(probe.parent), "-o", "addopts=",
         "--basetemp", str(tmp_path / "basetemp")],
        cwd=probe.parent, env=env, capture_output=True, text=True, timeout=300,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-3000:]  # both probe tests failed, nothing else
    assert "2 failed" in out and "deliberate failure" in out and "deliberate error" in out, out
    assert _leftovers(marker) == [], "processes left behind by a failing browser test"
    assert _port_is_closed((tmp_path / "url").read_text()), "the test server still listens"
    assert sorted(p.name for p in temp.iterdir()) == [], "temporary files left behind"


def _plain_build(book: Path, env: dict[str, str], *opts: str) -> subprocess.CompletedProcess:
    """sphinx-build as `make html` runs it: no process-group kill afterwards."""
    cmd = [str(Path(sys.executable).parent / "sphinx-build"), "-W", "-q", *opts,
           "-b", "html", ".", "_build/html"]
    return subprocess.run(cmd, cwd=book, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.build
def test_failing_builds_leave_no_process(tmp_path: Path) -> None:
    """`make html` failing on a cell (kernels running, two workers) or on a formula
    (KaTeX's Node server running) leaves no process behind."""
    import test_build

    marker = f"CLEANUP_PROBE_{uuid.uuid4().hex}"
    book = tmp_path / "cell"
    book.mkdir()
    test_build._mini_book(book, 41, extra_cell="raise RuntimeError('deliberate')")
    env = dict(os.environ, PYTHONPATH=str(book / "pkg"), **{marker: "1"})
    result = _plain_build(book, env, "-j", "2")
    assert result.returncode != 0 and "RuntimeError: deliberate" in result.stderr, result.stderr
    assert _leftovers(marker) == [], "a failing cell's build left processes behind"
    math = tmp_path / "math"
    math.mkdir()
    test_build._math_book(math, r"\frac{1}{\sqrt{d_k}", build=False)
    result = _plain_build(math, dict(os.environ, **{marker: "1"}))
    assert result.returncode != 0 and "KaTeX" in result.stderr + result.stdout, result.stderr
    assert _leftovers(marker) == [], "a failing formula's build left processes behind"
