"""docs/cli.md is what the command's parsers say (regenerated and compared)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_cli_reference", ROOT / "docs" / "make_cli_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_is_up_to_date() -> None:
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert page == generator().render(), "run: python docs/make_cli_reference.py"


def test_the_reference_names_every_command_and_option() -> None:
    from lionexec.__main__ import parsers

    text = generator().render()
    for prog, parser in parsers().items():
        assert f"## `{prog}`" in text
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help") and action.help != "==SUPPRESS==":
                    assert option in text, (prog, option)
