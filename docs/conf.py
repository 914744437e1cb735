"""Sphinx configuration for the lionexec documentation.

Build with ``nox -s docs`` (strict: every warning is an error). Pages are Markdown (MyST);
the API reference is generated from the docstrings (Google style, through napoleon). Nothing
is fetched from the network at build time.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pygments.lexers.python import PythonLexer

# Document the source tree next to this directory (the same code nox installs).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lionexec  # noqa: E402

project = "lionexec"
author = "the lionexec authors"
copyright = "the lionexec authors"  # noqa: A001
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

# Output
html_theme = "alabaster"
html_title = f"lionexec {release}"
html_static_path: list[str] = []


def setup(app: object) -> None:
    # ```python-no-run fences: highlighted as Python, skipped by tests/test_docs_examples.py.
    app.add_lexer("python-no-run", PythonLexer)  # type: ignore[attr-defined]
