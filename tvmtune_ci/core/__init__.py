"""The TVM-free core: what every side reads and writes.

Configuration (`config`), targets and what a template may ask about one (`targets`,
`targetinfo`, `cudatags`), the template API and its version (`template`,
`templateapi`, `constraints`), the on-disk formats (`manifest`, `records`, `runs`,
`layout`, `tunetypes`), the replay report of an old log (`history`), files and locks
(`fsutil`, `lock`), the estimator (`stats`), reading git (`git`), the reason codes
(`reasons`) and the one error base (`errors`).

Nothing here imports TVM, numpy, GitPython, or another subpackage of tvmtune_ci:
`tests/test_import_boundary.py` reads every import and fails otherwise.
"""
