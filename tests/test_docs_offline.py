"""The documentation site opened from ``site/`` as files fetches nothing from the network (issue 24 item 6).

mkdocs-material's ``offline`` plugin makes search work from ``file://`` by running its Web Worker through
the iframe-worker shim, which it loads from ``https://unpkg.com/iframe-worker/shim`` unless a polyfill named
iframe-worker is listed; the theme also links Google Fonts and, on a page with a diagram, loads mermaid from
unpkg. The site is built here from the real ``mkdocs.yml`` (into a temporary folder) and its pages and
scripts are read as a browser would load them: no ``<script src>``, ``<link href>``, ``<img src>`` or
``<iframe src>`` names an ``http(s)`` URL, the shim and mermaid are files of the site, and the only remote
URLs left in the theme's bundle are loaded behind a guard the site satisfies.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: what a page loads: the element, the attribute and its value
_LOADS = re.compile(r"<(script|link|img|iframe)\b[^>]*?\b(src|href)=\"([^\"]*)\"", re.I)
_REMOTE = re.compile(r"^(?:https?:)?//", re.I)
#: the theme bundle's remote scripts and the global whose presence skips each
#: (``typeof mermaid=="undefined"``, ``typeof ResizeObserver=="undefined"``)
_GUARDED = {
    "https://unpkg.com/mermaid@11/dist/mermaid.min.js": "mermaid",
    "https://unpkg.com/resize-observer-polyfill": "ResizeObserver",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built from the project's ``mkdocs.yml`` (strict, as ``make docs`` builds it)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    out = tmp_path_factory.mktemp("site")
    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(out), strict=True)
    build(config)
    return out


def _pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def test_no_page_loads_anything_from_the_network(site: Path) -> None:
    """Before: every page had ``<script src="https://unpkg.com/iframe-worker/shim">`` and Google Fonts'
    ``<link rel="preconnect">`` and stylesheet."""
    remote = {
        f"{page.relative_to(site)}: <{tag} {attr}={url}>"
        for page in _pages(site)
        for tag, attr, url in _LOADS.findall(page.read_text(encoding="utf-8"))
        if _REMOTE.match(url) and not (tag.lower() == "link" and _is_plain_link(page, url))
    }
    assert not remote, sorted(remote)[:10]


def _is_plain_link(page: Path, url: str) -> bool:
    """A ``<link>`` that loads nothing (``rel="canonical"``, ``alternate``): read from the page's tag."""
    for tag in re.findall(r"<link\b[^>]*>", page.read_text(encoding="utf-8"), re.I):
        if f'href="{url}"' in tag:
            rel = re.search(r'rel="([^"]*)"', tag)
            return rel is not None and rel.group(1).lower() in ("canonical", "alternate", "author", "license")
    return False


def test_search_runs_offline_through_the_vendored_shim_and_the_inlined_index(site: Path) -> None:
    """The offline plugin's two halves: the worker shim, here a file of the site on every page, and the
    search index inlined into a script (``search/search_index.js``)."""
    for page in _pages(site):
        if page.name == "404.html":  # served by a web server only, with absolute URLs by design
            continue
        shims = [u for t, _a, u in _LOADS.findall(page.read_text(encoding="utf-8")) if "iframe-worker" in u]
        assert shims, f"{page.relative_to(site)} loads no iframe-worker shim"
        for shim in shims:
            assert (page.parent / shim).resolve().is_file(), f"{page.relative_to(site)}: {shim} is missing"
    index = (site / "search" / "search_index.js").read_text(encoding="utf-8")
    assert index.startswith("var __index = {") and '"docs":' in index


def test_the_themes_remote_scripts_are_all_skipped(site: Path) -> None:
    """The theme's bundle fetches mermaid when a page has a diagram and the global ``mermaid`` is not
    defined, and a ResizeObserver polyfill when the browser has none (every current browser has one): a page
    with a diagram loads the vendored mermaid before the bundle, and the bundle names no other remote
    script (nor, without a ``repo_url``, calls GitHub's API)."""
    bundle = "\n".join(p.read_text(encoding="utf-8") for p in (site / "assets" / "javascripts").glob("*.js"))
    scripts = set(
        re.findall(r"https?://(?:unpkg\.com|cdn\.jsdelivr\.net|cdnjs\.[a-z.]+)/[^\"'`\s)]+", bundle)
    )
    assert scripts <= set(_GUARDED), sorted(scripts - set(_GUARDED))
    # the bundle asks GitHub's or GitLab's API for the repository's facts only when a repo_url is set
    assert not re.search(r"^repo_url:", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    for url, name in _GUARDED.items():
        if url in bundle:
            assert f'typeof {name}=="undefined"' in bundle, f"the guard of {url} changed"
    diagrams = [p for p in _pages(site) if 'class="mermaid"' in p.read_text(encoding="utf-8")]
    assert diagrams, "docs/request-flow.md has a mermaid diagram"
    for page in diagrams:
        html = page.read_text(encoding="utf-8")
        local = re.search(r'<script src="([^"]*mermaid[^"]*\.js)"', html)
        assert local is not None, f"{page.relative_to(site)} has a diagram and no local mermaid"
        assert (page.parent / local.group(1)).resolve().is_file()
        assert html.index(local.group(0)) < html.index("assets/javascripts/bundle.")
