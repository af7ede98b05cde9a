"""The check side: is a committed log set still true for its template, target,
workloads and TVM, and which entries does a change concern.

`staleness` (every reason a log set is stale, the PR scope, orphans), `fingerprint`
(the semantic hash of a template and its in-repo helpers), `datafiles` (the files a
template reads), `sources` (the recorded inputs that let `check` skip a parse),
`renames` (a renamed template's old folder) and `selection` (which entries a command
was asked for).

It runs on PR runners without TVM: it imports only `core`, never `tune` or `publish`
(`tests/test_import_boundary.py` reads every import and fails otherwise).
"""
