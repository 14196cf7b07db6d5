"""The hosted site: it holds every file it links, says where it lives, and can be found.

* Every link of the built site (href, src, srcset, CSS url(), the 404 page's absolute
  links, canonical and OpenGraph URLs, sitemap entries, the notebooks' links to the
  site) names a file the site holds. `make test` checks the pages `make html` built,
  which must not link the whole-book PDF; the slow tier checks the site `make site`
  built, which links the PDF and holds it.
* The book's repository and site come from the hosted build's environment
  (_ext/hosting.py), conf.py's as the default: each environment on its own, conf.py read
  in each, and (slow) the whole book built as a fork's GitHub Actions run builds it,
  offline, with no trace of the original's address left.
* sitemap.xml, canonical links, OpenGraph and Twitter tags: on every page, absolute, on
  the site's own address, with the 1200 x 630 preview image the site serves.
* One torch pin (requirements.txt); the hosted builds run exactly `make site`.
* (slow) The Pages workflow, run here as a hosted runner runs it (.ci/hosted-dry-run).
"""

from __future__ import annotations

import html as html_module
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from sitetools import CHAPTERS, HOSTING, HTML, ROOT, built_pages, require_built_site

sys.path.insert(0, str(ROOT / "_ext"))
from hosting import Hosting, github_repository, hosted  # noqa: E402

PDF_NAME = "self-attention-verified.pdf"
SITE_STAMP = ROOT / "_build" / ".site-built"  # `make site` touches it; `make html` removes it
ORIGINAL = Hosting("https://github.com/selfattn-verified/self-attention-verified",
                   "https://selfattn-verified.github.io/self-attention-verified/")
VENV_BIN = Path(sys.executable).parent


# --- the crawl -----------------------------------------------------------------------

class _Links(HTMLParser):
    """Every URL a page names: href, src, srcset, data, poster, and the content of the
    meta tags that hold a URL (og:url, og:image)."""

    URL_META = {"og:url", "og:image", "twitter:image"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[tuple[str, str]] = []  # (what, url)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v for k, v in attrs if v is not None}
        for key in ("href", "src", "data", "poster"):
            if key in a:
                self.urls.append((f"<{tag} {key}>", a[key]))
        if "srcset" in a:
            self.urls += [(f"<{tag} srcset>", part.split()[0])
                          for part in a["srcset"].split(",") if part.strip()]
        if tag == "meta" and a.get("property") in self.URL_META:
            self.urls.append((f"<meta {a['property']}>", a.get("content", "")))


def _target(url: str, base: Path, root: Path, site: Hosting) -> Path | None | str:
    """The file ``url`` (found in a file in ``base``) names in the site at ``root``:
    None for another host or a scheme without a file, a message for a path outside."""
    if url.startswith(("mailto:", "javascript:", "data:", "tel:", "blob:")):
        return None
    if url.startswith(site.site_url):
        path = urlsplit(url).path[len(urlsplit(site.site_url).path):]
        return root / unquote(path)
    parts = urlsplit(url)
    if parts.scheme or url.startswith("//"):
        return None  # another host (a launch link, the repository): not the site's file
    if parts.path.startswith("/"):
        if parts.path.startswith(site.site_path):
            return root / unquote(parts.path[len(site.site_path):])
        return f"absolute path outside the site {site.site_path}"
    if not parts.path:
        return base  # a fragment on the same file
    return base.parent / unquote(parts.path)


def broken_links(root: Path, site: Hosting) -> tuple[list[str], int]:
    """Every link of the site at ``root`` that names a file the site lacks; and the count
    of links checked (so a crawl that finds nothing cannot pass)."""
    broken, checked = [], 0

    def check(where: Path, what: str, url: str) -> None:
        nonlocal checked
        target = _target(url, where, root, site)
        if target is None:
            return
        checked += 1
        if isinstance(target, str):
            broken.append(f"{where.relative_to(root)}: {what} {url} ({target})")
            return
        target = Path(os.path.normpath(target))
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            broken.append(f"{where.relative_to(root)}: {what} {url}")

    for page in sorted(root.rglob("*.html")):
        if ".doctrees" in page.parts or "_static" in page.parts:
            continue  # _static's .html files are the themes' Jinja macros, not pages
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        for what, url in parser.urls:
            check(page, what, url)
    for sheet in sorted((root / "_static").rglob("*.css")):
        css = sheet.read_text(encoding="utf-8", errors="replace")
        for m in re.finditer(r"url\(\s*[\"']?([^\"')]+)|@import\s+[\"']([^\"']+)", css):
            check(sheet, "css url()", (m.group(1) or m.group(2)).strip())
    sitemap = root / "sitemap.xml"
    if sitemap.is_file():
        for loc in ET.parse(sitemap).getroot().iter("{http://www.sitemaps.org/schemas/sitemap/0.9}loc"):
            check(sitemap, "<loc>", loc.text or "")
    link_to_site = re.compile(re.escape(site.site_url) + r"[^\s)\"'<>\\]*")
    for notebook in sorted((root / "_sources").rglob("*.ipynb")):
        for url in link_to_site.findall(notebook.read_text(encoding="utf-8")):
            check(notebook, "notebook link", url)
    return broken, checked


def pdf_linkers(root: Path) -> list[str]:
    """The pages that link the whole-book PDF (front page text or download menu)."""
    pattern = re.compile(r'href="(?:[^"]*/)?' + re.escape(PDF_NAME) + '"')
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.html")
                  if pattern.search(p.read_text(encoding="utf-8")))


def test_the_crawl_finds_a_missing_file(tmp_path: Path) -> None:
    """The crawl itself can fail: a link, an image, a stylesheet's font, a canonical URL
    and a link under the site's absolute prefix to files that are not there."""
    site = Hosting("https://github.com/example/book", "https://example.github.io/book/")
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "a.css").write_text("@font-face{src:url(fonts/gone.woff2)}")
    (tmp_path / "here.html").write_text("<p id=x>here</p>")
    (tmp_path / "index.html").write_text(
        '<link rel="stylesheet" href="_static/a.css"><a href="here.html#x">ok</a>'
        '<a href="gone.html">x</a><img src="_images/gone.png" alt="">'
        '<link rel="canonical" href="https://example.github.io/book/gone2.html">'
        '<a href="/book/gone3.html">x</a><a href="/elsewhere/">x</a>'
        '<a href="https://github.com/example/book">repo</a><a href="#top">top</a>')
    broken, checked = broken_links(tmp_path, site)
    assert checked == 9
    assert [b.split(": ", 1)[1] for b in broken] == [
        "<a href> gone.html", "<img src> _images/gone.png",
        "<link href> https://example.github.io/book/gone2.html", "<a href> /book/gone3.html",
        "<a href> /elsewhere/ (absolute path outside the site /book/)",
        "css url() fonts/gone.woff2",
    ]


@pytest.mark.build  # reads the built site (make test builds it; test-fast does not)
def test_every_link_of_the_built_site_names_a_file_it_holds() -> None:
    """After `make html` (make test) or `make site` (the slow tier): no link, image,
    script, stylesheet, font, canonical or sitemap URL names a file the site lacks."""
    require_built_site()
    broken, checked = broken_links(HTML, HOSTING)
    assert checked > 1000, f"only {checked} links checked: the crawl missed the pages"
    assert broken == [], f"{len(broken)} links to files the site does not hold:\n" + "\n".join(
        broken[:40])


@pytest.mark.build  # reads the built site (make test builds it; test-fast does not)
def test_the_pages_link_the_pdf_exactly_when_the_site_holds_it() -> None:
    """`make html` alone: no page links the PDF (the site has none). `make site`: the
    front page and every chapter's download menu link it, and the site holds it."""
    require_built_site()
    linkers = pdf_linkers(HTML)
    if not SITE_STAMP.is_file():
        assert linkers == [], f"make html built pages that link a PDF it never built: {linkers}"
        return
    assert (HTML / PDF_NAME).is_file(), "make site's pages link a PDF the site lacks"
    expected = {"index.html"} | {f"chapters/{c.stem}.html" for c in CHAPTERS}
    assert expected <= set(linkers), f"not linking the PDF: {sorted(expected - set(linkers))}"


@pytest.mark.slow
@pytest.mark.build
def test_after_make_site_every_link_resolves_and_the_pdf_is_served() -> None:
    """The slow tier reads the site `make site` built (the hosted site): the PDF is in it,
    equal to the one `make pdf` wrote, linked from the front page and every menu, and
    every link of the site, the PDF's included, names a file it holds."""
    require_built_site()
    assert SITE_STAMP.is_file(), "make test-slow builds the hosted site (make site) first"
    built = ROOT / "_build" / "pdf" / PDF_NAME
    assert (HTML / PDF_NAME).read_bytes() == built.read_bytes(), "the site's PDF is stale"
    assert len(pdf_linkers(HTML)) >= 1 + len(CHAPTERS)
    broken, checked = broken_links(HTML, HOSTING)
    assert checked > 1000 and broken == [], broken[:40]


# --- where the book lives ------------------------------------------------------------

FORK = {"GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": "Forker/attention-fork",
        "GITHUB_SERVER_URL": "https://github.com"}
RTD_FORK = {"READTHEDOCS": "True",
            "READTHEDOCS_CANONICAL_URL": "https://attention-fork.readthedocs.io/en/stable/",
            "READTHEDOCS_GIT_CLONE_URL": "https://github.com/Forker/attention-fork.git"}


@pytest.mark.parametrize(("environ", "repository", "site"), [
    ({}, ORIGINAL.repository_url, ORIGINAL.site_url),
    # a shell that happens to have the variable is not a hosted build
    ({"GITHUB_REPOSITORY": "Forker/attention-fork"}, ORIGINAL.repository_url,
     ORIGINAL.site_url),
    ({**FORK, "GITHUB_REPOSITORY": "selfattn-verified/self-attention-verified"},
     ORIGINAL.repository_url, ORIGINAL.site_url),
    (FORK, "https://github.com/Forker/attention-fork",
     "https://forker.github.io/attention-fork/"),
    ({**FORK, "GITHUB_REPOSITORY": "Forker/Forker.github.io"},
     "https://github.com/Forker/Forker.github.io", "https://forker.github.io/"),
    (RTD_FORK, "https://github.com/Forker/attention-fork",
     "https://attention-fork.readthedocs.io/en/stable/"),
    ({**RTD_FORK, "READTHEDOCS_GIT_CLONE_URL": "git@github.com:Forker/attention-fork.git"},
     "https://github.com/Forker/attention-fork",
     "https://attention-fork.readthedocs.io/en/stable/"),
    # not on GitHub: the launch links need GitHub, so the original's repository stays
    ({**RTD_FORK, "READTHEDOCS_GIT_CLONE_URL": "https://gitlab.com/f/attention-fork.git"},
     ORIGINAL.repository_url, "https://attention-fork.readthedocs.io/en/stable/"),
    ({**FORK, "BOOK_SITE_URL": "https://attention.example.org",
      "BOOK_REPOSITORY_URL": "https://github.com/Forker/other/"},
     "https://github.com/Forker/other", "https://attention.example.org/"),
], ids=["local", "local-with-variable", "actions-original", "actions-fork",
        "actions-user-site", "rtd-https", "rtd-ssh", "rtd-gitlab", "custom-domain"])
def test_hosted_addresses_follow_the_build_environment(
        environ: dict, repository: str, site: str) -> None:
    found = hosted(ORIGINAL.repository_url, ORIGINAL.site_url, environ)
    assert (found.repository_url, found.site_url) == (repository, site)
    assert found.site_path == urlsplit(site).path


def test_github_clone_urls() -> None:
    for url in ("https://github.com/a/b", "https://github.com/a/b.git",
                "git@github.com:a/b.git", "ssh://git@github.com/a/b.git"):
        assert github_repository(url) == "https://github.com/a/b", url
    assert github_repository("https://gitlab.com/a/b.git") is None


def _conf_values(environ: dict[str, str]) -> dict:
    """conf.py run in a clean interpreter with ``environ``: the values that carry the
    book's addresses."""
    code = (
        "import json, runpy, sys\n"
        "from sphinx.util.tags import Tags\n"
        "g = runpy.run_path('conf.py', init_globals={'tags': Tags()})\n"
        "keys = ['launch_install_spec', 'publish_site_url', 'notfound_urls_prefix',\n"
        "        'html_baseurl', 'ogp_site_url']\n"
        "out = {k: g[k] for k in keys}\n"
        "out['repository_url'] = g['html_theme_options']['repository_url']\n"
        "print(json.dumps(out))\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "READTHEDOCS", "BOOK_"))}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, **environ},
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


@pytest.mark.parametrize(("environ", "repository", "site"), [
    ({}, ORIGINAL.repository_url, ORIGINAL.site_url),
    (FORK, "https://github.com/Forker/attention-fork",
     "https://forker.github.io/attention-fork/"),
    (RTD_FORK, "https://github.com/Forker/attention-fork",
     "https://attention-fork.readthedocs.io/en/stable/"),
], ids=["local", "actions-fork", "rtd-fork"])
def test_conf_takes_every_address_from_the_hosting(
        environ: dict, repository: str, site: str) -> None:
    """The repository button, edit and issue links (repository_url), the notebooks'
    install cell, their links to the site, the 404 page's prefix, canonical and
    OpenGraph URLs: all from one place."""
    values = _conf_values(environ)
    assert values == {
        "repository_url": repository, "launch_install_spec": f"selfattn @ git+{repository}@main",
        "publish_site_url": site, "notfound_urls_prefix": urlsplit(site).path,
        "html_baseurl": site, "ogp_site_url": site,
    }


# --- found by search engines and shared links ---------------------------------------

def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is no PNG"
    return struct.unpack(">II", data[16:24])


def _meta(html: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for tag in re.findall(r"<meta\s[^>]*>", html):
        key = re.search(r'(?:property|name)="([^"]+)"', tag)
        content = re.search(r'content="([^"]*)"', tag)
        if key and content:
            found.setdefault(key.group(1), []).append(content.group(1))
    for href in re.findall(r'<link rel="canonical" href="([^"]+)"', html):
        found.setdefault("canonical", []).append(href)
    return found


@pytest.mark.build  # reads the built site (make test builds it; test-fast does not)
def test_every_page_has_its_canonical_url_and_a_shared_link_preview() -> None:
    """A shared link shows the page's title, its first paragraph and the preview image;
    search engines get one canonical address per page. Every URL is the site's own."""
    require_built_site()
    site = HOSTING.site_url
    image = HTML / "social-preview.png"
    assert image.is_file() and _png_size(image) == (1200, 630)
    assert image.read_bytes() == (ROOT / "images" / "social-preview.png").read_bytes()
    pages = [p for p in built_pages() if p.name != "404.html"]
    assert len(pages) >= len(CHAPTERS) + 5
    for page in pages:
        rel = page.relative_to(HTML).as_posix()
        html = page.read_text(encoding="utf-8")
        meta = _meta(html)
        one = {k: v[0] for k, v in meta.items() if len(v) == 1}
        assert one.get("canonical") == site + rel, (rel, meta.get("canonical"))
        assert one.get("og:url") == site + rel, (rel, meta.get("og:url"))
        assert one.get("og:image") == site + "social-preview.png", rel
        assert (one.get("og:image:width"), one.get("og:image:height")) == ("1200", "630"), rel
        assert one.get("og:image:alt", "").startswith("Self-Attention, Verified"), rel
        assert one.get("twitter:card") == "summary_large_image", rel
        assert one.get("og:site_name") == "Self-Attention, Verified", rel
        title = re.search(r"<title>(.*?)</title>", html, re.S).group(1)
        assert one.get("og:title") and one["og:title"] in title, (rel, one.get("og:title"))
        description = one.get("og:description", "")
        assert len(description) > 40, (rel, description)
        assert not re.search(r"\{(glue|term|cite|ref|doc)|:::|\$\$", description), (
            rel, description)


@pytest.mark.build  # reads the built site (make test builds it; test-fast does not)
def test_shared_link_descriptions_are_plain_text_and_each_pages_own() -> None:
    """A link preview shows the description as it is: no TeX ($, backslashes, braces:
    seven pages' first paragraphs showed raw formulas), the same text for search engines
    (<meta name="description">) and for previews (og:description), and no two pages alike
    (sliding-windows and kv-memory opened, and so were described, alike)."""
    require_built_site()
    seen: dict[str, str] = {}
    for page in built_pages():
        rel = page.relative_to(HTML).as_posix()
        if rel == "404.html":
            continue
        meta = _meta(page.read_text(encoding="utf-8"))
        og, plain = ([html_module.unescape(v) for v in meta.get(k, [])]
                     for k in ("og:description", "description"))
        assert len(og) == 1 and plain == og, f"{rel}: og {og}, description {plain}"
        text = og[0]
        assert not re.search(r"[$\\{}]", text), f"{rel}: TeX in its description: {text!r}"
        assert len(text) >= 80 and not text.endswith("..."), f"{rel}: {text!r}"
        assert text not in seen, f"{rel} and {seen.get(text)} share the description {text!r}"
        seen[text] = rel
    assert len(seen) >= len(CHAPTERS) + 5, sorted(seen.values())


@pytest.mark.build  # reads the built site (make test builds it; test-fast does not)
def test_sitemap_lists_every_page_at_the_sites_address() -> None:
    require_built_site()
    ns = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
    urls = {u.findtext(f"{ns}loc"): u.findtext(f"{ns}lastmod")
            for u in ET.parse(HTML / "sitemap.xml").getroot().iter(f"{ns}url")}
    expected = {HOSTING.site_url + p.relative_to(HTML).as_posix()
                for p in built_pages() if p.name != "404.html"}
    assert set(urls) == expected
    for chapter in CHAPTERS:  # each chapter's last commit, as its "last updated" line
        lastmod = urls[f"{HOSTING.site_url}chapters/{chapter.stem}.html"]
        assert lastmod and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", lastmod), lastmod


@pytest.mark.slow
@pytest.mark.build
def test_sitemap_lists_every_page_after_an_incremental_build(tmp_path: Path) -> None:
    """After an edit to one page Sphinx writes that page alone; sitemap.xml still lists
    all of them (_ext/sitemap_every_page.py: sphinx-sitemap lists the written ones)."""
    shutil.copytree(ROOT / "_ext", tmp_path / "_ext")
    (tmp_path / "conf.py").write_text(
        "import sys\nfrom pathlib import Path\n"
        "sys.path.insert(0, str(Path(__file__).parent / '_ext'))\n"
        "extensions = ['sphinx_sitemap', 'sitemap_every_page']\n"
        "html_baseurl = 'https://example.org/book/'\n"
        "sitemap_url_scheme = '{link}'\nexclude_patterns = ['_build', '_ext']\n"
        "sitemap_excludes = ['search.html', 'genindex.html']\n")
    pages = ["index", "one", "two", "three"]
    (tmp_path / "index.rst").write_text("Book\n====\n\n.. toctree::\n\n   one\n   two\n   three\n")
    for name in pages[1:]:
        (tmp_path / f"{name}.rst").write_text(f"{name.title()}\n=====\n\nText.\n")

    def build_and_read() -> set[str]:
        cmd = [str(VENV_BIN / "sphinx-build"), "-N", "-W", "-q", "-b", "html", ".", "_build"]
        result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        ns = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
        root = ET.parse(tmp_path / "_build" / "sitemap.xml").getroot()
        return {u.findtext(f"{ns}loc") for u in root.iter(f"{ns}url")}

    every = {f"https://example.org/book/{name}.html" for name in pages}
    assert build_and_read() == every
    (tmp_path / "two.rst").write_text("Two\n=====\n\nEdited text.\n")
    assert build_and_read() == every  # sphinx-sitemap alone: index.html and two.html


# --- one pin, one command ------------------------------------------------------------

def _torch_pin() -> str:
    lines = [ln for ln in (ROOT / "requirements.txt").read_text().split("\n")
             if ln.startswith("torch==")]
    assert len(lines) == 1, lines
    return lines[0].split("==", 1)[1].split()[0]


def test_torch_version_is_written_once() -> None:
    """requirements.txt's torch== line is the pin. The lock file (make lock writes it
    from there) and Binder's CPU environment agree with it; the Makefile, the hosted
    builds, the README and the tests read it; no other file spells a torch version."""
    from packaging.requirements import Requirement

    pin = _torch_pin()
    lock = (ROOT / "requirements-lock.txt").read_text().split("\n")
    assert [ln for ln in lock if ln.startswith("torch==")] == [f"torch=={pin}"]
    binder = (ROOT / "_extra" / "binder" / "requirements.txt").read_text().split("\n")
    assert [ln for ln in binder if ln.startswith("torch==")] == [f"torch=={pin}+cpu"]
    package = next(d for d in __import__("tomllib").loads(
        (ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        if d.startswith("torch"))
    assert Requirement(package).specifier.contains(pin), f"pyproject's {package} excludes {pin}"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True,
                           text=True).stdout.split()
    allowed = {"requirements.txt", "requirements-lock.txt", "_extra/binder/requirements.txt"}
    spelled = []
    for name in files:
        path = ROOT / name
        if name in allowed or not path.is_file() or path.suffix in (".png", ".pdf", ".svg"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if re.search(r"torch\s*==\s*\d|torch [0-9]+\.[0-9]+\.[0-9]+", text):
            spelled.append(name)
    assert spelled == [], f"a torch version outside requirements.txt: {spelled}"


def _makefile_list(name: str) -> list[str]:
    m = re.search(rf"^{name}\s*:=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert m, f"no {name} in the Makefile"
    return m.group(1).split()


def test_both_hosted_builds_run_exactly_make_site() -> None:
    """GitHub Actions and Read the Docs build the site with `make site` and nothing else
    that builds (no make html/pdf, no sphinx-build, no pip of their own); Read the Docs
    installs the Makefile's own TeX list (it cannot run sudo make latex-deps)."""
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "pages.yml").read_text())
    (job,) = workflow["jobs"].values()
    runs = [s["run"] for s in job["steps"] if "run" in s]
    rtd = yaml.safe_load((ROOT / ".readthedocs.yaml").read_text())
    rtd_runs = []
    for step in rtd["build"]["jobs"].values():  # build: {html: [...]}, or a list
        for commands in (step.values() if isinstance(step, dict) else [step]):
            rtd_runs += commands
    builds = re.compile(r"\bmake (html|pdf)\b|sphinx-build|\bpip\b|latexmk")
    for where, commands in (("pages.yml", runs), (".readthedocs.yaml", rtd_runs)):
        assert sum(bool(re.search(r"\bmake site\b", c)) for c in commands) == 1, where
        assert not [c for c in commands if builds.search(c)], (where, commands)
    assert runs.index("make site") < runs.index("make test")
    assert rtd_runs[0] == "make site PYTHON=python"
    assert set(rtd["build"]["apt_packages"]) == {"make", *_makefile_list("LATEX_DEBS")}


# --- slow: a fork's build, offline; the workflow run as a hosted runner --------------

def _offline(command: list[str]) -> list[str]:
    """``command`` in a network namespace of its own with only loopback (the kernels
    talk over it): proof that nothing is fetched. Needs root (CI runs as root)."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("ip")):
        return command
    return ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
            *command]


@pytest.mark.slow
@pytest.mark.build
def test_a_forks_hosted_build_links_the_fork_everywhere(tmp_path: Path) -> None:
    """The whole book built as GitHub Actions builds a fork (GITHUB_REPOSITORY) and
    offline: repository, edit and issue links, Colab and Binder launch links, the
    notebooks' install cell and links, canonical, OpenGraph, sitemap and 404 URLs name
    the fork; the original's owner appears in no file of the site."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "READTHEDOCS", "BOOK_"))}
    env.update(FORK, PYTHONHASHSEED="0", OMP_NUM_THREADS="2")
    out = tmp_path / "html"
    build = subprocess.run(
        _offline([str(VENV_BIN / "sphinx-build"), "-n", "-W", "--keep-going", "-j", "auto",
                  "-q", "-b", "html", "-d", str(tmp_path / "doctrees"), str(ROOT), str(out)]),
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert build.returncode == 0, build.stderr[-4000:]
    fork = Hosting("https://github.com/Forker/attention-fork",
                   "https://forker.github.io/attention-fork/")
    for chapter in CHAPTERS:
        page = (out / "chapters" / f"{chapter.stem}.html").read_text(encoding="utf-8")
        assert f'href="{fork.repository_url}"' in page
        assert f"{fork.repository_url}/edit/main/chapters/{chapter.stem}.md" in page
        assert f"{fork.repository_url}/issues/new?title=" in page
        colab = re.findall(r'href="(https://colab\.research\.google\.com[^"]+)"', page)
        assert colab and "/github/Forker/attention-fork/blob/gh-pages/" in colab[0], colab
        binder = re.findall(r'href="(https://mybinder\.org[^"]+)"', page)
        assert binder and binder[0].startswith(
            "https://mybinder.org/v2/gh/Forker/attention-fork/binder-env?"), binder
        assert "github.com%252FForker%252Fattention-fork" in binder[0], binder
        assert f'<link rel="canonical" href="{fork.site_url}chapters/{chapter.stem}.html"' in page
        notebook = json.loads((out / "_sources" / "chapters" / f"{chapter.stem}.ipynb")
                              .read_text(encoding="utf-8"))
        setup = "".join(notebook["cells"][0]["source"]) + "".join(notebook["cells"][1]["source"])
        assert f"git+{fork.repository_url}@main" in setup, setup
    assert "/attention-fork/" in (out / "404.html").read_text(encoding="utf-8")
    assert f"selfattn @ git+{fork.repository_url}@main" in (
        out / "binder" / "requirements.txt").read_text()
    leftovers = sorted(str(p.relative_to(out)) for p in out.rglob("*")
                       if p.is_file() and p.suffix in (".html", ".ipynb", ".xml", ".txt", ".js")
                       and "selfattn-verified" in p.read_text(encoding="utf-8", errors="replace"))
    assert leftovers == [], f"the original's address is left in: {leftovers}"
    broken, checked = broken_links(out, fork)
    assert checked > 1000 and broken == [], broken[:20]


@pytest.mark.slow
@pytest.mark.build
def test_the_pages_workflow_runs_as_a_hosted_runner_runs_it() -> None:
    """.ci/hosted-dry-run: the workflow's steps on a fresh clone of HEAD, as an
    unprivileged user, cold cache; the publish steps push to a local remote, whose
    gh-pages must hold the site, its PDF and sitemap, and binder-env the environment."""
    if os.geteuid() != 0:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("the hosted dry run needs root (useradd); CI runs as root")
        pytest.skip("the hosted dry run needs root (useradd)")
    # not under pytest's tmp_path: its folders are closed to other users, the runner too
    work = Path(tempfile.mkdtemp(prefix="hosted-dry-run-")) / "work"
    work.parent.chmod(0o755)
    # its own process group: on a timeout the whole run (make, the kernels) is stopped
    proc = subprocess.Popen([sys.executable, str(ROOT / ".ci" / "hosted-dry-run"),
                             "--work", str(work)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=4500)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
    (ROOT / "_build").mkdir(exist_ok=True)
    (ROOT / "_build" / "hosted-dry-run.log").write_text(output)
    summary = output[output.rfind("dry-run: summary:"):]
    assert proc.returncode == 0, f"{summary}\n(full log: _build/hosted-dry-run.log)"
    assert re.search(r"^\s+\d+\. make site\s+ok", summary, re.M), summary
    assert re.search(r"^\s+\d+\. make test\s+ok", summary, re.M), summary
    assert re.search(r"checks of what was pushed\s+ok", summary), summary
    shutil.rmtree(work.parent, ignore_errors=True)
