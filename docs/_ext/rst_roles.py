"""A griffe extension for the API pages: the docstrings' reStructuredText roles as Markdown.

The docstrings use Sphinx roles (``:class:`~reasonstate.errors.IllegalTransition```) and ``::`` before
literal blocks. mkdocstrings reads Markdown, where those would show as written. Each role becomes an
optional cross-reference: a link where the target is on the site, plain code where it is not (no build
warning either way); a paragraph ending in ``::`` ends in ``:`` (its indented block is already a code block);
a bulleted list gets the blank line Markdown needs before it.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|data|attr|mod|exc|obj|const):`(~?)([\w.]+)(\(\))?`")
_LITERAL = re.compile(r"(\S)::$", re.M)
# a bulleted list right under its lead-in line ("Invariants:") needs a blank line before it in Markdown
_LIST = re.compile(r"^([ \t]*(?![*-] )\S.*)\n([ \t]*[*-] )", re.M)


def _markdown(text: str, module: str) -> str:
    def ref(match: re.Match[str]) -> str:
        short, target, call = match[1] == "~", match[2], match[3] or ""
        title = target.rsplit(".", 1)[-1] if short else target
        identifier = target if "." in target else f"{module}.{target}"
        return f'<autoref identifier="{identifier}" optional><code>{title}{call}</code></autoref>'

    return _LIST.sub(r"\1\n\n\2", _LITERAL.sub(r"\1:", _ROLE.sub(ref, text)))


class RstRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _markdown(obj.docstring.value, obj.module.path)
