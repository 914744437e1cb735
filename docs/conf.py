"""Sphinx configuration for the lionexec documentation.

Build with ``nox -s docs`` (strict: every warning is an error). Pages are Markdown (MyST);
the API reference is generated from the docstrings (Google style, through napoleon). Nothing
is fetched from the network at build time.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pygments.lexers.python import PythonLexer
from sphinx.application import Sphinx
from sphinx.util import logging

# Document the source tree next to this directory (the same code nox installs).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lionexec

logger = logging.getLogger(__name__)

project = "lionexec"
author = "the lionexec authors"
copyright = "the lionexec authors"
version = release = lionexec.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Markdown
myst_heading_anchors = 3

# API reference
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# "Attributes:" sections become :ivar: fields, not attribute entries that would clash with
# the attributes autodoc documents itself.
napoleon_use_ivar = True

# Cross-references. Unresolved references to plain (dotted) identifiers are expected: the
# docstrings name stdlib, trio, attrs and cattrs objects, type variables and short names that
# have no page here, and no inventory is fetched. They render as plain text. A target that is
# *not* an identifier, though, is a docstring napoleon misread (a property or attribute
# docstring whose first line reads "text: more text" becomes a type "text"), so nitpicky mode
# stays on to turn exactly those into errors.
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"[A-Za-z_][\w.]*")]

# Output
html_theme = "alabaster"
html_title = f"lionexec {release}"
html_static_path: list[str] = []


def _check_api_page(app: Sphinx) -> None:
    """Warn (an error under -W) if api.md's table misses a name of ``lionexec.__all__``."""
    text = (Path(app.srcdir) / "api.md").read_text(encoding="utf-8")
    for name in lionexec.__all__:
        if f".{name}`" not in text:
            logger.warning("api.md: lionexec.%s is missing from the top-level table", name)


def setup(app: Sphinx) -> None:
    # ```python-no-run fences: highlighted as Python, skipped by tests/test_docs_examples.py.
    app.add_lexer("python-no-run", PythonLexer)
    app.connect("builder-inited", _check_api_page)
