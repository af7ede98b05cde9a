"""The public API stays where users import it, whatever moves inside the package:
`tvmtune_ci.build_best`, `best_config`, `build_model` (resolved lazily: importing the
package never imports TVM), the template API, and the CLI's entry point."""

from __future__ import annotations

import inspect

import tvmtune_ci


def test_every_public_name_imports_from_where_the_docs_say() -> None:
    assert set(tvmtune_ci.__all__) == {"__version__", "build_best", "best_config", "build_model"}
    for name in ("build_best", "best_config", "build_model"):
        fn = getattr(tvmtune_ci, name)
        assert callable(fn) and fn.__name__ == name, name
    assert "lift" in inspect.signature(tvmtune_ci.build_model).parameters
    from tvmtune_ci.template import define_split, define_structure  # where templates import them

    assert callable(define_split) and callable(define_structure)
    from tvmtune_ci.cli import main  # the console script's target (pyproject.toml)

    assert callable(main)
