"""Where the book is hosted: its repository and its site, read from the hosted build.

conf.py names the original book's addresses. A fork that deploys the book must link
its own repository and site, or every launch button, install cell, "edit" link,
canonical link and sitemap entry of its site points at the original. The hosted
builds say where they are in their environment; :func:`hosted` reads it, in this
order (the first that applies wins, each address separately):

1. ``BOOK_REPOSITORY_URL`` / ``BOOK_SITE_URL``: set by hand, e.g. for a custom domain.
2. Read the Docs (``READTHEDOCS=True``): ``READTHEDOCS_CANONICAL_URL`` is the site
   (``https://NAME.readthedocs.io/en/latest/``); ``READTHEDOCS_GIT_CLONE_URL`` the
   repository, when it is on GitHub (the launch links need GitHub).
3. GitHub Actions (``GITHUB_ACTIONS=true``): ``GITHUB_SERVER_URL/GITHUB_REPOSITORY`` is the
   repository; on github.com its Pages site is ``https://OWNER.github.io/REPO/``
   (``OWNER.github.io`` itself is served at the root).
4. Otherwise conf.py's defaults: a local build links the original.

conf.py imports this module (it is not a Sphinx extension): plain functions of a
mapping, so the tests call them with any environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Hosting", "hosted"]

GITHUB = "https://github.com"
_GITHUB_REPO = re.compile(r"^(?:https://|ssh://git@|git@)github\.com[/:]"
                          r"(?P<owner>[\w.-]+)/(?P<repo>[\w.-]+?)(?:\.git)?/?$")


@dataclass(frozen=True)
class Hosting:
    """The book's repository and site."""

    repository_url: str  # https://github.com/OWNER/REPO (no trailing slash)
    site_url: str  # the site's root, with a trailing slash

    @property
    def owner_repo(self) -> str:
        """``OWNER/REPO`` of a GitHub repository (what Colab and Binder take)."""
        return self.repository_url.removeprefix(GITHUB + "/")

    @property
    def site_path(self) -> str:
        """The path the site is served under: ``/REPO/`` on GitHub Pages, ``/en/latest/``
        on Read the Docs (the 404 page links with it)."""
        return urlsplit(self.site_url).path or "/"


def _slash(url: str) -> str:
    return url.rstrip("/") + "/"


def github_repository(clone_url: str) -> str | None:
    """``https://github.com/OWNER/REPO`` for a GitHub clone URL (https or ssh), else None."""
    m = _GITHUB_REPO.match(clone_url.strip())
    return f"{GITHUB}/{m['owner']}/{m['repo']}" if m else None


def github_pages_site(owner_repo: str) -> str:
    """GitHub Pages' address of a repository's project site (or of its user site)."""
    owner, _, repo = owner_repo.partition("/")
    host = f"{owner.lower()}.github.io"
    return f"https://{host}/" if repo.lower() == host else f"https://{host}/{repo}/"


def hosted(repository: str, site: str, environ: Mapping[str, str] | None = None) -> Hosting:
    """The book's addresses in the build ``environ`` (default: this process's), with
    ``repository`` and ``site`` (conf.py's, the original's) where it says nothing."""
    env = os.environ if environ is None else environ
    repo_url, site_url = repository.rstrip("/"), _slash(site)
    if env.get("GITHUB_ACTIONS") == "true" and env.get("GITHUB_REPOSITORY"):
        server = env.get("GITHUB_SERVER_URL", GITHUB).rstrip("/")
        repo_url = f"{server}/{env['GITHUB_REPOSITORY']}"
        if server == GITHUB:
            site_url = github_pages_site(env["GITHUB_REPOSITORY"])
    if env.get("READTHEDOCS") == "True":
        repo_url = github_repository(env.get("READTHEDOCS_GIT_CLONE_URL", "")) or repo_url
        if env.get("READTHEDOCS_CANONICAL_URL"):
            site_url = _slash(env["READTHEDOCS_CANONICAL_URL"])
    if env.get("BOOK_REPOSITORY_URL"):
        repo_url = env["BOOK_REPOSITORY_URL"].rstrip("/")
    if env.get("BOOK_SITE_URL"):
        site_url = _slash(env["BOOK_SITE_URL"])
    return Hosting(repository_url=repo_url, site_url=site_url)
