"""Turn an executed MyST-NB chapter into a notebook that runs anywhere.

The chapters are MyST text notebooks. Executed as they are, outside the build,
they fail and read badly: they import ``myst_nb`` for ``glue``, their markdown
holds ``{glue:text}`` placeholders instead of numbers, and MyST roles and
directives (``{term}``, ``{cite:p}``, ``:::{admonition}``, ``(label)=``) show
as raw text in Jupyter and Colab. :func:`publish` makes the published copy:

* every glue placeholder is replaced by the number the build computed (from
  myst-nb's ``<docname>.glue.json``, formatted exactly as the page shows it);
* roles become Markdown links to the site, directives become block quotes or
  ``<details>`` blocks, labels and MyST comments disappear;
* ``glue`` calls and the ``myst_nb`` import are removed from the code (with
  :mod:`ast`, so calls that span lines go too) and cells left empty are dropped;
* a first cell installs ``selfattn`` (CPU torch) and any other package a cell
  imports that ``selfattn`` does not bring (chapter 6: torchmetrics);
* executed outputs are kept.

Everything here is plain functions over notebook dicts, so the tests can run
them without Sphinx; :mod:`launch_notebooks` calls them from the build.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib.metadata as metadata
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SETUP_MARK = "selfattn-launch-setup"
PUBLISHED_MARK = "selfattn_published"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

# Modules a Jupyter kernel always has, whatever the environment.
KERNEL_MODULES = {"IPython", "ipykernel", "ipywidgets", "matplotlib_inline", "traitlets"}
BUILD_ONLY_MODULES = {"myst_nb"}


class PublishError(ValueError):
    """The chapter uses MyST syntax, or a glue key, the publisher cannot translate."""


# --- glue -----------------------------------------------------------------------

def coalesce_streams(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A cell's outputs with each stream merged into one, as myst-nb renders them."""
    from myst_nb.core.utils import coalesce_streams as merge
    from nbformat import from_dict

    copies = [from_dict(copy.deepcopy(o)) for o in outputs]
    for out in copies:  # nbformat's JSON may split a text into a list of lines
        if isinstance(out.get("text"), list):
            out["text"] = "".join(out["text"])
    return merge(copies)


def format_glue(data: dict[str, Any], fmt: str) -> str:
    """The text myst-nb's ``{glue:text}`key:fmt``` role shows for ``data``."""
    from myst_nb.core.variables import format_plain_text

    if "text/plain" not in data:
        raise PublishError(f"glue data has no text/plain: {sorted(data)}")
    return format_plain_text(data["text/plain"], fmt)


def glue_text(values: dict[str, Any], body: str, *, any_role: bool) -> str:
    """Resolve the body of a glue role (``key`` or ``key:fmt``) against ``values``."""
    key, fmt = body, ""
    if not any_role and ":" in body:
        key, fmt = body.rsplit(":", 1)
    if key not in values:
        raise PublishError(f"glue key {key!r} not found in the executed notebook")
    data = values[key].get("data", values[key])
    return format_glue(data, fmt or ("s" if not any_role else ""))


# --- references -----------------------------------------------------------------

@dataclass
class Resolver:
    """Where cross-references point in a published notebook.

    Every callable returns ``(text, url)``; ``url`` is absolute (the published
    site), because a downloaded notebook has no pages next to it.
    """

    doc: Callable[[str], tuple[str, str]] = lambda t: (t, "")
    ref: Callable[[str], tuple[str, str]] = lambda t: (t, "")
    term: Callable[[str], str] = lambda t: ""
    py: Callable[[str], str] = lambda t: ""
    cite: Callable[[list[str], str], str] = lambda keys, mode: ", ".join(keys)
    image: Callable[[str], str] = lambda path: ""  # a figure's file -> its URL on the site
    cited: list[str] = field(default_factory=list)


def _split_target(body: str) -> tuple[str | None, str]:
    """``text <target>`` -> (text, target); ``target`` -> (None, target)."""
    m = re.fullmatch(r"(?s)(.*?)\s*<([^<>]+)>", body.strip())
    if m and m.group(1):
        return m.group(1), m.group(2)
    return None, body.strip()


def _link(text: str, url: str) -> str:
    return f"[{text}]({url})" if url else text


ROLE = re.compile(r"\{(?P<name>[A-Za-z][\w:+.-]*)\}`(?P<body>[^`]+)`")


def convert_role(name: str, body: str, values: dict[str, Any], resolver: Resolver) -> str:
    """Plain Markdown for one MyST role."""
    if name in ("glue:text", "glue:any", "glue", "glue:"):
        return glue_text(values, body, any_role=name != "glue:text")
    if name == "math":
        return f"${body}$"
    if name in ("term",):
        text, target = _split_target(body)
        return _link(text or target, resolver.term(target))
    if name in ("doc", "ref", "numref", "any", "std:ref", "std:doc"):
        text, target = _split_target(body)
        kind = "doc" if name.endswith("doc") else "ref"
        title, url = (resolver.doc if kind == "doc" else resolver.ref)(target)
        if text and name == "numref":
            text = text.replace("%s", "").replace("{number}", "").strip()
        return _link(text or title, url)
    if name.startswith("cite"):
        keys = [k.strip() for k in body.split(",") if k.strip()]
        resolver.cited.extend(k for k in keys if k not in resolver.cited)
        mode = name.split(":", 1)[1] if ":" in name else "p"
        return resolver.cite(keys, mode)
    if name.startswith("py:") or name in ("func", "class", "meth", "mod", "attr", "obj", "data"):
        text, target = _split_target(body)
        short = target.lstrip("~")
        shown = text or (short.rsplit(".", 1)[-1] if target.startswith("~") else short)
        if name.endswith("func") or name.endswith("meth"):
            shown += "()" if not shown.endswith(")") else ""
        return _link(f"`{shown}`", resolver.py(short))
    if name in ("abbr", "kbd", "sub", "sup", "samp", "file", "command", "code", "literal"):
        text, _ = _split_target(body)
        return {"sub": f"<sub>{body}</sub>", "sup": f"<sup>{body}</sup>"}.get(
            name, f"`{text or body}`" if name != "abbr" else (text or body))
    if name == "eq":
        return f"({body})"
    raise PublishError(f"the publisher does not know the MyST role {{{name}}}")


def convert_roles(line: str, values: dict[str, Any], resolver: Resolver) -> str:
    return ROLE.sub(lambda m: convert_role(m["name"], m["body"], values, resolver), line)


# --- directives -----------------------------------------------------------------

FENCE_OPEN = re.compile(r"^(?P<indent>\s*)(?P<fence>:{3,}|`{3,}|~{3,})\s*(?P<info>.*)$")
TITLES = {
    "note": "Note", "important": "Important", "tip": "Tip", "hint": "Hint",
    "warning": "Warning", "caution": "Caution", "attention": "Attention",
    "danger": "Danger", "error": "Error", "seealso": "See also", "admonition": "",
}


def _directive_body(lines: list[str]) -> tuple[dict[str, str], list[str]]:
    """Split the ``:key: value`` options (or a ``---`` YAML block) off a directive body."""
    options: dict[str, str] = {}
    i = 0
    if lines and lines[0].strip() == "---":
        end = next((j for j in range(1, len(lines)) if lines[j].strip() == "---"), None)
        if end is not None:
            for opt in lines[1:end]:
                k, _, v = opt.partition(":")
                options[k.strip()] = v.strip()
            return options, lines[end + 1:]
    while i < len(lines):
        m = re.match(r"^\s*:([\w-]+):\s*(.*)$", lines[i])
        if not m:
            break
        options[m.group(1)] = m.group(2)
        i += 1
    return options, lines[i:]


def _quote(lines: list[str]) -> list[str]:
    return [f"> {line}".rstrip() for line in lines]


def convert_directive(
    name: str, argument: str, body: list[str], values: dict[str, Any], resolver: Resolver
) -> list[str]:
    """Plain Markdown lines for one directive (its body already converted)."""
    options, content = _directive_body(body)
    while content and not content[0].strip():
        content = content[1:]
    while content and not content[-1].strip():
        content = content[:-1]
    content = convert_markdown_lines(content, values, resolver)
    classes = options.get("class", "").split()
    if name in ("math",):
        return ["$$", *content, "$$"]
    if name == "raw":
        # raw HTML without scripts passes through (Jupyter sanitises scripts anyway:
        # the site's redirect snippets do nothing in a notebook); other formats go
        raw = body  # verbatim: no role conversion inside
        keep = argument.split()[:1] == ["html"] and "<script" not in "\n".join(raw).lower()
        return raw if keep else []
    if name in ("dropdown", "toggle") or "dropdown" in classes:
        title = convert_roles(argument, values, resolver) or "Details"
        return [f"<details><summary>{title}</summary>", "", *content, "", "</details>"]
    if name in TITLES or name.startswith("admonition"):
        title = argument or TITLES.get(name, "") or name.title()
        title = convert_roles(title, values, resolver)
        return _quote([f"**{title}**", "", *content] if title else content)
    if name == "container" and "screen-only" in argument.split():
        # prose that asks for a slider or a click: a notebook shows the static figure,
        # so it keeps the ``print-only`` twin instead
        return []
    if name in ("epigraph", "pull-quote", "highlights", "topic", "sidebar", "margin",
                "card", "container", "div", "rubric"):
        head = [f"**{convert_roles(argument, values, resolver)}**", ""] if argument else []
        return _quote([*head, *content]) if name != "container" else content
    if name in ("code", "code-block", "sourcecode"):
        return [f"```{argument}", *_directive_body(body)[1], "```"]
    if name == "only":
        # builder-specific content (e.g. a diagram's dark-mode twin): a notebook
        # keeps only what every builder shows
        return []
    if name in ("figure", "image"):
        # ``NAME.*`` lets each Sphinx builder pick a format; a notebook shows the SVG
        uri = re.sub(r"\.\*$", ".svg", argument)
        url = resolver.image(uri)
        alt = options.get("alt", "").replace("]", ")").replace("[", "(")
        image = [f"![{alt}]({url})"] if url else []
        caption = [f"*{line}*" if line.strip() else line for line in content]
        return [*image, *([""] if image and caption else []), *caption]
    raise PublishError(f"the publisher does not know the MyST directive {{{name}}}")


def convert_markdown_lines(
    lines: list[str], values: dict[str, Any], resolver: Resolver
) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = FENCE_OPEN.match(line)
        if m:
            fence, info = m["fence"], m["info"].strip()
            close = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
            end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), len(lines))
            body = [ln[len(m["indent"]):] if ln.startswith(m["indent"]) else ln
                    for ln in lines[i + 1:end]]
            d = re.match(r"^\{(?P<name>[\w:.-]+)\}\s*(?P<arg>.*)$", info)
            if d:
                converted = convert_directive(d["name"], d["arg"].strip(), body, values, resolver)
                out.extend(m["indent"] + c if c else c for c in converted)
            else:  # an ordinary code block: copied verbatim
                out.extend(lines[i:end + 1])
            i = end + 1
            continue
        label = re.match(r"^\s*\(([\w.:-]+)\)=\s*$", line)
        if label:  # (label)= -> an anchor that same-notebook links can jump to
            # (a blank line after it: an HTML block runs until one, and would
            # swallow the heading that follows)
            out.extend([f'<a id="{label.group(1)}"></a>', ""])
            i += 1
            continue
        if re.match(r"^%", line):  # MyST comment
            i += 1
            continue
        # $$ ... $$ (label): drop the equation label
        line = re.sub(r"(\$\$)\s*\([\w.:-]+\)\s*$", r"\1", line)
        out.append(convert_roles(line, values, resolver))
        i += 1
    return out


def convert_markdown(source: str, values: dict[str, Any], resolver: Resolver) -> str:
    """Plain Markdown (Jupyter, Colab) for one MyST markdown cell."""
    lines = convert_markdown_lines(source.split("\n"), values, resolver)
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


# --- code -----------------------------------------------------------------------

def _is_glue_stmt(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in BUILD_ONLY_MODULES:
        return True
    if isinstance(node, ast.Import) and all(
        a.name.split(".")[0] in BUILD_ONLY_MODULES for a in node.names
    ):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        name = func.id if isinstance(func, ast.Name) else (
            func.attr if isinstance(func, ast.Attribute) else "")
        return name == "glue" or _is_xmode(node.value)
    return False


def _is_xmode(call: ast.Call) -> bool:
    """``get_ipython().run_line_magic("xmode", ...)``: the pages' short tracebacks. A
    reader who runs the notebook and meets an error gets the whole traceback, with the
    line numbers that the build's one-line messages leave out."""
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr == "run_line_magic"
            and bool(call.args) and isinstance(call.args[0], ast.Constant)
            and call.args[0].value == "xmode")


def _removable(node: ast.stmt) -> bool:
    """A glue statement, or a loop/if/with whose every statement is removable."""
    if _is_glue_stmt(node):
        return True
    if isinstance(node, ast.For | ast.While | ast.If | ast.With):
        stmts = [*node.body, *getattr(node, "orelse", [])]
        return bool(stmts) and all(_removable(s) for s in stmts)
    return False


def _glue_ranges(body: Iterable[ast.stmt]) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for node in body:
        if _removable(node):
            ranges.append((node.lineno, node.end_lineno or node.lineno))
        elif isinstance(node, ast.For | ast.While | ast.If | ast.With | ast.Try
                        | ast.FunctionDef | ast.ClassDef):
            for part in ("body", "orelse", "finalbody"):
                children = getattr(node, part, [])
                keep = [c for c in children if not _removable(c)]
                if not keep and children:
                    raise PublishError(
                        f"line {node.lineno}: a block would be empty without its glue calls")
                ranges.extend(_glue_ranges(children))
    return ranges


def strip_glue(source: str) -> str:
    """``source`` without ``glue(...)`` calls, ``myst_nb`` imports and the build's
    ``xmode`` setting (any layout)."""
    if "glue" not in source and "myst_nb" not in source and "xmode" not in source:
        return source
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics: fall back to whole-line removal
        return "\n".join(ln for ln in source.split("\n") if not re.match(
            r"^\s*(glue\(|from myst_nb|import myst_nb|%xmode\b)", ln))
    drop: set[int] = set()
    for start, end in _glue_ranges(tree.body):
        drop.update(range(start, end + 1))
    lines = source.split("\n")
    kept = [ln for n, ln in enumerate(lines, start=1) if n not in drop]
    text = "\n".join(kept)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def is_empty_code(source: str) -> bool:
    """Nothing left but blank lines and comments."""
    return all(not ln.strip() or ln.strip().startswith("#") for ln in source.split("\n"))


def imported_modules(sources: Iterable[str]) -> set[str]:
    """Top-level names of every module the code imports."""
    names: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


@functools.cache
def _requirement_closure(dist: str) -> frozenset[str]:
    """Normalised names of ``dist`` and everything it requires (installed metadata).

    Cached, like :func:`_module_owners`: what is installed does not change during a
    build, and each page asks again."""
    seen: set[str] = set()
    todo = [dist]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for req in reqs:
            if "extra ==" in req:
                continue
            todo.append(re.split(r"[\s;<>=!~\[(@]", req, maxsplit=1)[0])
    return frozenset(seen)


@functools.cache
def _module_owners() -> dict[str, list[str]]:
    """``importlib.metadata.packages_distributions()``, read once per process: it reads
    every installed file list (about 8,400 paths here), 0.2-0.5 s of CPU a call, and
    each published page needs it."""
    return metadata.packages_distributions()


def extra_requirements(modules: set[str], package: str = "selfattn") -> list[str]:
    """Pinned requirements for the imported modules that ``package`` does not bring."""
    provided = _requirement_closure(package)
    owners = _module_owners()
    extras: set[str] = set()
    for module in modules - KERNEL_MODULES - BUILD_ONLY_MODULES:
        if module in sys.stdlib_module_names or module == package:
            continue
        dists = owners.get(module)
        if not dists:
            raise PublishError(f"no installed distribution provides the module {module!r}")
        dist = dists[0]
        if re.sub(r"[-_.]+", "-", dist).lower() in provided:
            continue
        extras.add(f"{dist}=={metadata.version(dist)}")
    return sorted(extras)


def install_cell(spec: str, extras: list[str]) -> dict[str, Any]:
    """The first cell: installs the package (CPU torch) and the chapter's extras."""
    packages = " ".join([f'"{spec}"', *extras])
    source = (
        "# Run this cell first on Colab or Binder, or anywhere `selfattn` is not installed.\n"
        "# It installs the book's package and the CPU build of PyTorch (no GPU needed).\n"
        f"%pip install --quiet --extra-index-url {CPU_INDEX} {packages}"
    )
    return {
        "cell_type": "code", "execution_count": None, "id": SETUP_MARK,
        "metadata": {"tags": [SETUP_MARK]}, "outputs": [], "source": source,
    }


# --- the notebook ---------------------------------------------------------------

def _text(source: str | list[str]) -> str:
    return "".join(source) if isinstance(source, list) else source


def references_cell(resolver: Resolver, bibliography: Callable[[str], str] | None) -> \
        dict[str, Any] | None:
    if not resolver.cited or bibliography is None:
        return None
    # in the order of the list: by the labels each entry starts with
    items = "\n".join(f"- {entry}" for entry in sorted(map(bibliography, resolver.cited)))
    return {"cell_type": "markdown", "id": "selfattn-references", "metadata": {},
            "source": f"## References\n\n{items}"}


def publish(
    notebook: dict[str, Any],
    glue_values: dict[str, Any],
    *,
    install_spec: str,
    resolver: Resolver | None = None,
    bibliography: Callable[[str], str] | None = None,
    title: str | None = None,
    page_url: str | None = None,
    merge_streams: bool = False,
) -> dict[str, Any]:
    """The published copy of an executed chapter notebook (the input is not changed).

    ``merge_streams``: merge each cell's stdout (and stderr) outputs into one, as the
    page shows them (conf.py's ``nb_merge_streams``), with myst-nb's own function.
    """
    resolver = resolver or Resolver()
    resolver.cited = []
    nb = copy.deepcopy(notebook)
    cells: list[dict[str, Any]] = []
    for cell in nb.get("cells", []):
        if cell.get("id") == SETUP_MARK:
            continue
        source = _text(cell.get("source", ""))
        if cell["cell_type"] == "markdown":
            cell["source"] = convert_markdown(source, glue_values, resolver)
            if not cell["source"].strip():
                continue
        elif cell["cell_type"] == "code":
            cell["source"] = strip_glue(source)
            if is_empty_code(cell["source"]):
                continue
            cell["outputs"] = [o for o in cell.get("outputs", [])
                               if "scrapbook" not in o.get("metadata", {})]
            if merge_streams:
                cell["outputs"] = [dict(o) for o in coalesce_streams(cell["outputs"])]
            tags = cell.get("metadata", {}).get("tags", [])
            if "hide-cell" in tags or "hide-input" in tags:
                cell["metadata"].setdefault("jupyter", {})["source_hidden"] = True
            if "hide-cell" in tags or "hide-output" in tags:
                cell["metadata"].setdefault("jupyter", {})["outputs_hidden"] = True
        cells.append(cell)
    count = 0
    for cell in cells:  # execution counts 1, 2, 3, ... over the cells that remain
        if cell["cell_type"] == "code" and cell.get("execution_count") is not None:
            count += 1
            cell["execution_count"] = count
            for out in cell.get("outputs", []):
                if out.get("output_type") == "execute_result":
                    out["execution_count"] = count
    code = [c["source"] for c in cells if c["cell_type"] == "code"]
    extras = extra_requirements(imported_modules(code))
    head: list[dict[str, Any]] = []
    if title or page_url:
        note = "This notebook is a chapter of *Self-Attention, Verified*"
        note += f" ([read it online]({page_url}))." if page_url else "."
        note += (" Its outputs are the ones the book was built with; run the cells in order,"
                 " starting with the install cell below.")
        head.append({"cell_type": "markdown", "id": "selfattn-about", "metadata": {},
                     "source": note})
    refs = references_cell(resolver, bibliography)
    nb["cells"] = [*head, install_cell(install_spec, extras), *cells, *([refs] if refs else [])]
    meta = nb.setdefault("metadata", {})
    for key in ("jupytext", "source_map", "mystnb"):
        meta.pop(key, None)
    meta[PUBLISHED_MARK] = True
    nb["nbformat"], nb["nbformat_minor"] = 4, max(int(nb.get("nbformat_minor", 5)), 5)
    return nb


# --- bibliography ---------------------------------------------------------------

def load_bibliography(paths: Iterable[Path]) -> dict[str, Any]:
    """``key -> pybtex Entry`` from .bib files."""
    from author_year import disambiguate_years
    from pybtex.database import parse_file

    entries: dict[str, Any] = {}
    for path in paths:
        entries.update(parse_file(str(path), bib_format="bibtex").entries)
    disambiguate_years(entries.values())  # Liu et al., 2020a and 2020b, as on the site
    return entries


def citation_formatter(
    entries: dict[str, Any], references_url: str = ""
) -> tuple[Callable[[list[str], str], str], Callable[[str], str]]:
    """Functions for ``Resolver.cite`` (in-text) and the closing reference list.

    Both come from the site's own bibliography style (_ext/author_year.py, through
    pybtex): a citation reads as on the page, "(Vaswani et al., 2017)", and a list
    entry as on the references page, "[Vaswani et al., 2017] Ashish Vaswani, ...".
    """
    from author_year import STYLE_NAME, register, who_and_year
    from pybtex.backends.markdown import Backend as MarkdownBackend
    from pybtex.plugin import find_plugin

    register()
    style = find_plugin("pybtex.style.formatting", STYLE_NAME)()
    formatted = {e.key: e for e in style.format_entries(entries.values())}
    # one held backend: render_as("markdown") would look it up as a plugin per entry
    markdown = MarkdownBackend()

    def cite(keys: list[str], mode: str) -> str:
        parts = []
        for key in keys:
            if key not in entries:
                raise PublishError(f"citation {key!r} is not in the bibliography")
            who, year = who_and_year(entries[key])
            if mode.startswith("t"):
                parts.append(f"{who} ({year})")
            elif mode == "author":
                parts.append(who)
            elif mode == "year":
                parts.append(year)
            else:
                parts.append(f"{who}, {year}")
        text = "; ".join(parts)
        text = f"({text})" if mode in ("p", "ps") else text
        return _link(text, references_url)

    def bibliography(key: str) -> str:
        entry = formatted[key]
        text = entry.text.render(markdown).replace("\n", " ")
        return f"\\[{entry.label}\\] {text}"

    return cite, bibliography


__all__ = [
    "PublishError", "Resolver", "SETUP_MARK", "PUBLISHED_MARK", "publish", "strip_glue",
    "convert_markdown", "extra_requirements", "imported_modules", "install_cell",
    "load_bibliography", "citation_formatter",
]
