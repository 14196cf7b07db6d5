"""Sphinx configuration for *Self-Attention, Verified*.

The build executes every chapter (MyST-NB text notebooks) against the
``selfattn`` package, treats every warning as an error (see the Makefile) and
typesets math at build time with KaTeX served from the build itself, so the
site works offline and no page waits for a math script.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).parent.resolve()
sys.path.insert(0, str(ROOT / "_ext"))
sys.path.insert(0, str(ROOT / "code"))

project = "Self-Attention, Verified"
author = "The Self-Attention, Verified authors"
copyright = "2026, " + author
html_title = project

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_copybutton",
    "sphinx_togglebutton",
    "author_year",  # the reference list labelled and sorted as cited: [Vaswani et al., 2017]
    "sphinxcontrib.bibtex",
    "sphinxcontrib.katex",  # math rendered to HTML at build time (Node + KaTeX)
    "katex_local",  # KaTeX CSS + fonts from node_modules into _static; parse errors fail
    "offscreen_sections",  # full layout when the reader jumps to a section (custom.css)
    "lazy_images",  # figures load as the reader nears them (loading="lazy")
    "figure_twins",  # a diagram's dark-mode copy shares its light twin's figure number
    "vega_local",  # Vega-Lite from node_modules into _static; loaded only where a figure needs it
    "exec_cache",  # re-executes chapters whenever code/selfattn changes; heals a broken cache
    "chapter_execution",  # runs the chapters over both cores; failing cell in one screen; times
    "launch_notebooks",  # Colab/Binder/download point at executed .ipynb files
    "sphinx_last_updated_by_git",  # "last updated" from each page's git history
    "notfound.extension",  # a 404 page with absolute links
    "absolute_404",  # ... its links in the text too (sphinx-notfound-page leaves them)
    "sphinx.ext.githubpages",  # .nojekyll, so GitHub Pages serves _static
]

exclude_patterns = [
    "_build", ".venv", "**/.ipynb_checkpoints", "README.md", "code", "tests",
    "node_modules", ".ci", "benchmarks", ".pytest_cache", "images/README.md", "_extra",
    ".github", ".hypothesis", "_ext",
]
html_extra_path = ["_extra"]  # binder/requirements.txt for launching the published notebooks
# A shallow clone, or a download without .git, has no dates: not an error.
suppress_warnings = ["git.too_shallow", "git.subprocess_error"]
git_untracked_show_sourcelink = True
templates_path = ["_templates"]
html_static_path = ["_static"]
html_css_files = ["custom.css", "print.css"]  # print.css: what paper shows
# Patches of other libraries' behaviour, and why each is there: _ext/README.md.
html_js_files = [("scroll-hints.js", {"defer": "defer"}),  # fade the cut-off edge of wide boxes
                 ("a11y.js", {"defer": "defer"}),  # accessible names match visible text
                 # "On this page" follows the reader; a tapped entry closes the phone drawer
                 ("page-contents.js", {"defer": "defer"}),
                 ("print-light.js", {"defer": "defer"})]  # dark mode prints dark on white

# --- search ---------------------------------------------------------------
# The chapter and section that teach a term rank above the glossary, the API reference and
# pages that only mention it; excerpts are the article's prose (_ext/search_scorer.js).
html_search_scorer = "_ext/search_scorer.js"
extensions.append("search_teaching")  # where each glossary term is taught, for the search

# --- strictness -----------------------------------------------------------
nitpicky = True
# Types from libraries whose inventories we cannot fetch offline.
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|numpy|np|nn|matplotlib|collections\.abc|typing)(\..*)?"),
    (r"py:class", r"(optional|array_like|ndarray|Tensor|Module|Figure|Axes|callable)"),
]

# --- MyST / MyST-NB -------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist", "substitution"]
myst_heading_anchors = 3
nb_execution_mode = "cache"
nb_execution_timeout = 600
nb_execution_raise_on_error = True  # an unexpected cell error fails the build
nb_execution_show_tb = True
nb_merge_streams = True
nb_output_stderr = "warn"  # stray stderr (e.g. a library warning) fails the build
nb_render_image_options = {"alt": "Figure drawn by the code above"}
# Figures: each one is output as SVG and PDF (selfattn.plotting.use_book_style). The
# web page shows the SVG (vector, text kept as text); the LaTeX/PDF build takes the PDF.
nb_mime_priority_overrides = [
    ("html", "image/svg+xml", 0),
    ("latex", "application/pdf", 0),
    ("latex", "image/png", 1),
]

exec_cache_watch = ["code/selfattn"]
exec_cache_root = "_build/.jupyter_cache"

# --- math -----------------------------------------------------------------
katex_prerender = True  # no math JavaScript in the page; CSS + fonts: _ext/katex_local.py

# --- bibliography ---------------------------------------------------------
bibtex_bibfiles = ["references.bib"]
bibtex_default_style = "author_year"  # _ext/author_year.py
bibtex_reference_style = "author_year"

# --- autodoc --------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Signatures name their arrays `Array` (NumPy array or torch tensor): show that name,
# linked to its definition, instead of the expanded union.
autodoc_type_aliases = {"Array": "selfattn.array_types.Array"}


def _alias_repr_workaround() -> None:
    """Sphinx 9.0 renders an alias nested in a union or a tuple (``Array | None``,
    ``tuple[Array, Array]``) as ``TypeAliasForwardRef('...')``, a broken reference.
    Its repr is what ends up in the text: make it the alias's target name."""
    from sphinx.util.inspect import TypeAliasForwardRef

    TypeAliasForwardRef.__repr__ = lambda self: self.name  # type: ignore[method-assign]


_alias_repr_workaround()
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# --- where the book is hosted ---------------------------------------------
# The original's repository and site. A hosted build of a fork (GitHub Actions, Read the
# Docs) takes its own from the build's environment (_ext/hosting.py), so the fork's launch
# buttons, install cells, "edit" links, canonical links and sitemap point at the fork.
from hosting import hosted  # noqa: E402

HOSTING = hosted(repository="https://github.com/selfattn-verified/self-attention-verified",
                 site="https://selfattn-verified.github.io/self-attention-verified/")
REPOSITORY = HOSTING.repository_url

# --- theme ----------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_theme_options = {
    "repository_url": REPOSITORY,
    "repository_branch": "main",
    "path_to_docs": "",
    "use_repository_button": True,
    "use_issues_button": True,
    "use_edit_page_button": True,
    "use_download_button": True,
    "show_toc_level": 2,
    # No search button in the top bar: the sidebar's search field is the one (and Ctrl+K).
    # With every navbar_* empty the theme renders no top bar content, so the article
    # header's sidebar buttons are the page's only ones and the themes bind them
    # (pydata-sphinx-theme#2451, sphinx-book-theme#988; see _ext/README.md).
    "navbar_persistent": [],
    "launch_buttons": {
        "colab_url": "https://colab.research.google.com",
        "binderhub_url": "https://mybinder.org",
        "notebook_interface": "classic",
    },
}
launch_notebook_branch = "gh-pages"  # the Pages workflow publishes _build/html there
launch_binder_env_ref = "binder-env"  # _extra/binder only; the workflow keeps its commit stable
publish_site_url = HOSTING.site_url
launch_install_spec = f"selfattn @ git+{REPOSITORY}@main"  # Binder's image
# `make site` builds the package's wheel, named by the commit (0.1.0+g<sha>), and serves it
# at the site's root: each published notebook installs exactly the package its outputs
# came from, from the site it came from (_ext/site_wheel.py).
_site_wheel = os.environ.get("BOOK_WHEEL")
if _site_wheel:
    html_extra_path.append(str(Path(_site_wheel).resolve().parent))
    launch_notebook_install_spec = f"selfattn @ {HOSTING.site_url}{Path(_site_wheel).name}"

# The 404 page links with absolute URLs: the site lives under /<repo>/ on GitHub Pages
# and under /en/latest/ on Read the Docs.
notfound_urls_prefix = HOSTING.site_path

# --- search engines and shared links --------------------------------------
# Every page names its address (<link rel="canonical">), sitemap.xml lists every page
# with its last commit's date, and OpenGraph/Twitter tags give a shared link a title, a
# description (the page's front matter's, _ext/share_descriptions.py) and a preview image drawn by
# images/make_diagrams.py. No tag names another host than the site's own.
html_baseurl = HOSTING.site_url
# The description is each page's own (front matter ``description:``, plain text): the
# first paragraph, sphinxext-opengraph's default, held raw LaTeX on seven pages.
extensions += ["sphinx_sitemap", "sitemap_every_page", "sphinxext.opengraph",
               "share_descriptions"]
sitemap_url_scheme = "{link}"  # not the default {lang}{version}{link}: no /en/ folder here
sitemap_show_lastmod = True
sitemap_excludes = ["search.html", "genindex.html", "py-modindex.html", "404.html"]
html_extra_path.append("images/social-preview.png")  # served at the site's root
ogp_site_url = HOSTING.site_url
ogp_image = "social-preview.png"  # relative to ogp_site_url
ogp_image_alt = f"{project}: the book's title beside the causal attention weights of a sentence"
ogp_social_cards = {"enable": False}  # one preview image for every page, no per-page cards
ogp_custom_meta_tags = [
    '<meta property="og:image:width" content="1200" />',
    '<meta property="og:image:height" content="630" />',
    '<meta name="twitter:card" content="summary_large_image" />',
]
html_last_updated_fmt = "%Y-%m-%d"
# Without this the theme starts with an empty mode and logs a console error.
html_context = {"default_mode": "auto"}

# --- the whole-book PDF (`make pdf`: LaTeX builder + XeLaTeX) ----------------
# The same executed notebooks (jupyter-cache) as the site; figures from their
# image/png outputs, matrix tables from their text/plain (aligned) form.
latex_engine = "xelatex"
latex_documents = [
    ("_pdf/book", "self-attention-verified.tex", project, author, "manual"),
]
# The PDF's root is _pdf/book.md (chapters, then the back matter as appendices);
# `make pdf` passes `-t pdf`. The site never sees that folder, the PDF never
# sees the site's front page (its sections would become chapters).
if tags.has("pdf"):  # noqa: F821  (Sphinx injects `tags` into conf.py)
    root_doc = "_pdf/book"
    extensions.append("pdf_book")  # fills _pdf/book.md's toctrees from index.md
    exclude_patterns += ["index.md", "404.md"]
else:
    exclude_patterns.append("_pdf")
# Figures are numbered by chapter (Fig. 4.2) on the pages and in the PDF, where LaTeX
# otherwise restarts the count in each chapter with no chapter in the number.
numfig = True
numfig_secnum_depth = 1
latex_show_urls = "no"
latex_show_pagerefs = False
latex_elements = {
    "papersize": "a4paper",
    "pointsize": "10pt",
    # GNU FreeFont (Debian fonts-freefont-otf) for text; DejaVu Sans Mono
    # (fonts-dejavu-core) for code and outputs: it has the ᵀ the outputs print.
    "fontpkg": r"""
\setmainfont{FreeSerif}[UprightFont=*, ItalicFont=*Italic,
                        BoldFont=*Bold, BoldItalicFont=*BoldItalic]
\setsansfont{FreeSans}[UprightFont=*, ItalicFont=*Oblique,
                       BoldFont=*Bold, BoldItalicFont=*BoldOblique]
\setmonofont{DejaVu Sans Mono}[Scale=MatchLowercase]
""",
    # long output lines wrap instead of running off the page
    "sphinxsetup": "verbatimwrapslines=true, verbatimforcewraps=true, verbatimmaxoverfull=1",
    # a captioned figure goes here if it fits, else to the top of the next page while
    # the text fills this one ("H" left pages nearly empty before tall figures)
    "figure_align": "!htbp",
    "printindex": r"\footnotesize\raggedright\printindex",
    # a chapter starts on the next page, not the next right-hand one: no blank pages
    # before chapters and appendices (there were 10)
    "extraclassoptions": "openany",
    "preamble": r"""
% DejaVu Sans Mono has no script l (U+2113, the online softmax's running sum): in code
% and outputs it comes from FreeMono; the text fonts have their own.
\usepackage{newunicodechar}
\newfontfamily\selfattnmonofallback{FreeMono}[Scale=MatchLowercase]
\makeatletter
\AtBeginDocument{\edef\selfattn@tt{\ttdefault}}
\newunicodechar{ℓ}{\ifx\f@family\selfattn@tt{\selfattnmonofallback\symbol{"2113}}%
  \else\symbol{"2113}\fi}
% The references are one list, titled as the site titles it (the page "References" is
% left out of the PDF: _ext/pdf_book.py), labelled as cited, [Vaswani et al., 2017],
% with a hanging indent instead of a column as wide as the longest label.
\renewcommand{\@biblabel}[1]{[#1]}
\renewenvironment{sphinxthebibliography}[1]{%
  \renewcommand{\bibname}{References}\clearpage\phantomsection
  \chapter*{\bibname}\addcontentsline{toc}{chapter}{\bibname}%
  \list{\@biblabel{\@arabic\c@enumiv}}{%
    \setlength{\leftmargin}{1.5em}\setlength{\itemindent}{-1.5em}%
    \setlength{\labelwidth}{0pt}\setlength{\labelsep}{0.5em}%
    \setlength{\itemsep}{0.3\baselineskip}%
    \def\makelabel##1{##1}\usecounter{enumiv}}%
  \sloppy\clubpenalty4000\widowpenalty4000\sfcode`\.\@m}
  {\def\@noitemerr{\@latex@warning{Empty `thebibliography' environment}}\endlist}
% Figure and table numbers carry their chapter: 2.3, and D.1 in appendix D (Sphinx's
% numbering, set at \begin{document}, writes \arabic{chapter}: appendix D's figure was 4.1).
\AtBeginDocument{%
  \renewcommand{\thefigure}{\ifnum\c@chapter>\z@\thechapter.\fi\arabic{figure}}%
  \renewcommand{\thetable}{\ifnum\c@chapter>\z@\thechapter.\fi\arabic{table}}%
  % a figure and its caption fit a page: Sphinx lets an image alone be \textheight tall
  \spx@image@maxheight=0.8\textheight}
\makeatother
""",
}

# --- copy buttons ---------------------------------------------------------
# `>>>` examples (the API page) copy as runnable code: prompts stripped, output lines
# left out. Pygments marks prompts .gp and outputs .go; the regex covers blocks it
# did not mark. A block without prompts (a chapter cell) copies whole.
copybutton_exclude = ".linenos, .gp, .go"
copybutton_prompt_text = r">>> |\.\.\. |\$ |In \[\d*\]: | {2,5}\.\.\.: "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = True
copybutton_remove_prompts = True
