"""Files a template reads are inputs of its fingerprint (datafiles.py, fingerprint.py).

Each way of reading a data file (`open`, `Path.read_text`, `json.load`,
`yaml.safe_load`, `np.load`), from the template or from a helper it uses, at import
or inside `schedule`: editing the file makes exactly the entries that run the read
stale, naming the file. Real git repositories, real files; nothing is run.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import CONFIG, commit_all, freshen_all, make_repo, run_cli, write
from small_mm import SMALL_MM

from tvmtune_ci.check.fingerprint import fingerprint_template
from tvmtune_ci.check.staleness import TEMPLATE_CHANGED, TEMPLATE_INVALID, Report, find_stale
from tvmtune_ci.core.config import load_config
from tvmtune_ci.core.errors import ConfigError
from tvmtune_ci.tune.hostcheck import host_target

# way -> (module-level prelude, the read as statements binding `value`, data file)
WAYS = {
    "open": (
        "",
        'with open(os.path.join(os.path.dirname(__file__), "tiles.txt")) as f:\n    value = f.read()\n',
        "operators/tiles.txt",
    ),
    "read_text": ("", 'value = (Path(__file__).parent / "tiles.txt").read_text()\n', "operators/tiles.txt"),
    "json.load": (
        "",
        'with open(Path(__file__).with_name("tiles.json")) as f:\n    value = json.load(f)\n',
        "operators/tiles.json",
    ),
    "yaml.safe_load": (
        # The repository root, from __file__.
        "ROOT = Path(__file__).resolve().parents[1]\n",
        'with (ROOT / "data" / "limits.yaml").open() as f:\n    value = yaml.safe_load(f)\n',
        "data/limits.yaml",
    ),
    "np.load": ('_TILES = Path(__file__).parent / "tiles.npy"\n', "value = np.load(_TILES)\n", "operators/tiles.npy"),
}

IMPORTS = """\
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import yaml
"""

TEMPLATE = """\
{imports}
from tvmtune_ci.template import define_knob, define_split
{helper_import}
WORKLOADS = {{"w": {{"M": 4096}}}}

KNOBS = [define_split("tile", "M", parts=3, max_factor=64), define_knob("unroll", [0, 16])]
{module_code}

def compute(M):
    return M


def reference(A):
    return A


def schedule(sch, cfg):
{schedule_code}
"""


def template(module_code: str = "", schedule_code: str = "    pass\n", helper_import: str = "") -> str:
    return TEMPLATE.format(
        imports=IMPORTS, helper_import=helper_import, module_code=module_code, schedule_code=schedule_code
    )


def write_data(root: Path, rel: str, version: int) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if rel.endswith(".npy"):
        np.save(path, np.arange(4) * version)
    elif rel.endswith(".json"):
        path.write_text(json.dumps({"tile": 8 * version}))
    else:
        path.write_text(f"tile: {8 * version}\n")


def files_for(way: str, where: str, when: str) -> dict[str, str]:
    """The repo's files: `uses` runs the read, `other` uses the helper module's
    `unrelated` only (so it imports the helper, and runs its import-time code)."""
    prelude, read, _ = WAYS[way]
    if when == "import":
        code, body = prelude + read + "TABLE = value\n", "def table():\n    return TABLE\n"
    else:
        code, body = prelude, "def table():\n" + textwrap.indent(read, "    ") + "    return value\n"
    helper = IMPORTS + "\n\ndef unrelated(sch):\n    return sch\n\n\n"
    if where == "template":
        uses = template(code + "\n" + body, "    table()\n")
    else:
        helper += code + "\n" + body
        uses = template(schedule_code="    table()\n", helper_import="from operators._h import table\n")
    other = template(schedule_code="    unrelated(sch)\n", helper_import="from operators._h import unrelated\n")
    return {"operators/uses.py": uses, "operators/other.py": other, "operators/_h.py": helper}


def stale(report: Report) -> dict[str, list[tuple[str, str | None]]]:
    return {
        f"{e.operator}/{e.target_name}": [(r.code, r.file) for r in e.reasons] for e in report.entries if not e.fresh
    }


def report_of(root: Path, **kw: object) -> Report:
    return find_stale(load_config(root / "tvmtune.yaml"), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("when", ["import", "schedule"])
@pytest.mark.parametrize("where", ["template", "helper"])
@pytest.mark.parametrize("way", list(WAYS))
def test_editing_a_data_file_makes_exactly_its_readers_stale(tmp_path: Path, way: str, where: str, when: str) -> None:
    data = WAYS[way][2]
    root = make_repo(tmp_path, operators=False, files=files_for(way, where, when), commit=False)
    write_data(root, data, 1)
    freshen_all(root)
    commit_all(root, "tuned")
    before = report_of(root)
    assert before.stale == () and before.warnings == ()
    # Committed and unmodified: nothing is parsed (the data file's blob is recorded).
    assert before.templates_trusted == 4

    write_data(root, data, 2)
    report = report_of(root)
    # Importing the helper runs its import-time read for every template that imports it.
    readers = ["uses"] + (["other"] if where == "helper" and when == "import" else [])
    expected = {f"{op}/{t}": [(TEMPLATE_CHANGED, data)] for op in readers for t in ("avx512", "avx2")}
    assert stale(report) == expected
    reason = report.stale[0].reasons[0]
    reader = "operators/uses.py" if where == "template" else "operators/_h.py"
    assert reason.detail.startswith(f"{data} changed: a data file its template read at {reader}:")
    # Committed, the edit is still seen (git's blob is not the recorded one).
    commit_all(root, "edit the data")
    assert stale(report_of(root)) == expected
    assert stale(report_of(root, rehash=True)) == expected


def test_the_read_is_found_at_its_line_and_the_file_recorded(tmp_path: Path) -> None:
    root = make_repo(tmp_path, operators=False, files=files_for("read_text", "helper", "schedule"))
    write_data(root, "operators/tiles.txt", 1)
    fp = fingerprint_template(root / "operators/uses.py", root)
    src = (root / "operators/_h.py").read_text().splitlines()
    line = next(i for i, text in enumerate(src, 1) if "read_text" in text)
    assert fp.inputs == {"operators/tiles.txt:<data>": f"operators/_h.py:{line}"}
    assert "operators/tiles.txt" in fp.files
    # What other does not run is not its input.
    assert fingerprint_template(root / "operators/other.py", root).inputs == {}


def test_a_missing_data_file_is_an_error_naming_it(tmp_path: Path) -> None:
    root = make_repo(tmp_path, operators=False, files=files_for("json.load", "template", "import"))
    write_data(root, "operators/tiles.json", 1)
    freshen_all(root)
    commit_all(root, "tuned")
    (root / "operators/tiles.json").unlink()
    report = report_of(root)
    src = (root / "operators/uses.py").read_text().splitlines()
    line = next(i for i, text in enumerate(src, 1) if "tiles.json" in text)
    for e in report.entries:
        if e.operator == "uses":
            (r,) = e.reasons
            assert (r.code, r.file, r.line) == (TEMPLATE_INVALID, "operators/uses.py", line)
            assert "reads operators/tiles.json, which does not exist" in r.detail
        else:
            assert e.fresh


def test_a_file_it_writes_is_not_an_input(tmp_path: Path) -> None:
    code = 'with open(Path(__file__).with_name("out.txt"), "w") as f:\n    f.write("x")\n'
    root = make_repo(tmp_path, operators=False, files={"operators/op.py": template(code)})
    fp = fingerprint_template(root / "operators/op.py", root)
    assert fp.inputs == {} and fp.notes == ()


UNFOLLOWED = """\
HERE = Path(__file__).parent
TABLES = {p.stem: json.loads(p.read_text()) for p in sorted((HERE / "data").glob("*.json"))}
"""


def test_a_read_it_cannot_follow_is_reported_at_its_line_and_inputs_declare_it(tmp_path: Path) -> None:
    files = {"operators/op.py": template(UNFOLLOWED), "operators/plain.py": template()}
    root = make_repo(tmp_path, operators=False, files=files, commit=False)
    write(root, "operators/data/a.json", '{"tile": 8}')
    write(root, "operators/data/b.json", '{"tile": 16}')
    freshen_all(root)
    commit_all(root, "tuned")
    src = (root / "operators/op.py").read_text().splitlines()
    line = next(i for i, text in enumerate(src, 1) if "read_text" in text)
    report = report_of(root)
    assert report.stale == ()
    assert [w for w in report.warnings if "cannot follow" in w] == [report.warnings[0]]
    assert report.warnings[0].startswith(
        f"operators/op.py:{line}: reads a file tvmtune-ci cannot follow: declare it "
        "(p.read_text(): tvmtune-ci cannot tell which file it is; run by op): list the files "
        "it reads under `operators.op.inputs` in tvmtune.yaml"
    )
    # The glob declares what the read reads: no warning, and its files are inputs.
    config = CONFIG + "operators:\n  op:\n    inputs: [operators/data/*.json]\n"
    (root / "tvmtune.yaml").write_text(config)
    glob_line = config.splitlines().index("    inputs: [operators/data/*.json]") + 1
    report = report_of(root)
    assert report.warnings == ()
    expected = [(TEMPLATE_CHANGED, f"operators/data/{n}.json") for n in "ab"]
    assert stale(report) == {"op/avx512": expected, "op/avx2": expected}
    assert report.stale[0].reasons[0].detail == (
        f"operators/data/a.json is read now: a data file its template declared at tvmtune.yaml:{glob_line} (inputs)"
    )
    freshen_all(root)
    commit_all(root, "declared")
    assert report_of(root).stale == () and report_of(root).templates_trusted == 4
    # An edit of a declared file, and a new file under the glob, are stale.
    write(root, "operators/data/b.json", '{"tile": 32}')
    assert stale(report_of(root))["op/avx2"] == [(TEMPLATE_CHANGED, "operators/data/b.json")]
    freshen_all(root)
    commit_all(root, "re-tuned after b")
    write(root, "operators/data/c.json", '{"tile": 64}')  # untracked: the glob matches more
    assert stale(report_of(root))["op/avx2"] == [(TEMPLATE_CHANGED, "operators/data/c.json")]
    # --changed-since sees a data file edit.
    assert {e.operator for e in report_of(root, changed_since="HEAD").entries} == {"op"}


def test_a_glob_that_matches_nothing_is_an_error_at_its_line(repo: Path) -> None:
    config = CONFIG + "operators:\n  matmul:\n    inputs:\n      - operators/nothing/*.json\n"
    (repo / "tvmtune.yaml").write_text(config)
    report = report_of(repo, operators=["matmul"])
    for e in report.entries:
        (r,) = [r for r in e.reasons if r.code == TEMPLATE_INVALID]
        assert (r.file, r.line) == ("tvmtune.yaml", len(config.splitlines()))
        assert "'operators/nothing/*.json' matches no file" in r.detail


@pytest.mark.parametrize("entry", ["/etc/x.json", "../x.json", "a/../../x", 3, ""])
def test_an_input_glob_outside_the_repository_is_a_config_error(repo: Path, entry: object) -> None:
    (repo / "tvmtune.yaml").write_text(CONFIG + f"operators:\n  matmul:\n    inputs: [{json.dumps(entry)}]\n")
    with pytest.raises(ConfigError, match=r"tvmtune.yaml:\d+: operators.matmul.inputs entry"):
        load_config(repo / "tvmtune.yaml")


ENV_READS = """\
DEBUG = os.environ.get("OP_DEBUG")
"""


def test_environment_variables_are_reported_at_their_line_and_in_the_manifest(tmp_path: Path) -> None:
    schedule = '    limit = int(os.environ["TILE_MAX"])\n    width = os.getenv("WIDTH", "8")\n'
    root = make_repo(tmp_path, operators=False, files={"operators/op.py": template(ENV_READS, schedule)}, commit=False)
    manifests = freshen_all(root)
    commit_all(root, "tuned")
    src = (root / "operators/op.py").read_text().splitlines()

    def at(text: str) -> int:
        return next(i for i, line in enumerate(src, 1) if text in line)

    report = report_of(root)
    assert report.stale == () and report.templates_trusted == 2  # from the manifest
    assert [w.split(" (run by")[0] for w in report.warnings] == [
        f"operators/op.py:{at('OP_DEBUG')}: reads environment variable OP_DEBUG (os.environ.get)",
        f"operators/op.py:{at('TILE_MAX')}: reads environment variable TILE_MAX (os.environ[...])",
        f"operators/op.py:{at('WIDTH')}: reads environment variable WIDTH (os.getenv)",
    ]
    assert report_of(root, rehash=True).warnings == report.warnings  # parsed: the same
    notes = manifests[0].sources["notes"]
    assert [(n["kind"], n["line"], n["what"].split()[0]) for n in notes] == [
        ("env", at("OP_DEBUG"), "OP_DEBUG"),
        ("env", at("TILE_MAX"), "TILE_MAX"),
        ("env", at("WIDTH"), "WIDTH"),
    ]


@pytest.mark.parametrize(
    "read,data",
    [
        ('value = (Path(__file__).parent / "tiles.txt").read_text()\n', "operators/tiles.txt"),
        # The file's name is not in the code: it is the template's namesake.
        ('value = Path(__file__).with_suffix(".json").read_text()\n', "operators/uses.json"),
    ],
    ids=["named", "namesake"],
)
def test_changed_since_checks_the_readers_of_an_edited_data_file(tmp_path: Path, read: str, data: str) -> None:
    files = {
        "operators/uses.py": template(
            "def table():\n" + textwrap.indent(read, "    ") + "    return value\n", "    table()\n"
        ),
        "operators/other.py": template(),
    }
    root = make_repo(tmp_path, operators=False, files=files, commit=False)
    write_data(root, data, 1)
    freshen_all(root)
    commit_all(root, "tuned")
    assert report_of(root, changed_since="HEAD").entries == ()
    write_data(root, data, 2)
    report = report_of(root, changed_since="HEAD")
    assert {e.operator for e in report.entries} == {"uses"}
    assert stale(report) == {f"uses/{t}": [(TEMPLATE_CHANGED, data)] for t in ("avx512", "avx2")}


NOT_READS = """\
def helper(sch, cfg, archive, table):
    get = table.get
    get("a")
    load = table.load
    load(1)
    table.get("x")
    archive.open("tiles.bin")
    sch.get_loops(sch.get_sblock("C"))
    cfg.knob(sch, "unroll")
    environ = {"X": 1}
    return environ["X"]
"""


def test_calls_that_only_look_like_reads_are_not_inputs_nor_warnings(tmp_path: Path) -> None:
    files = {"operators/op.py": template(NOT_READS, "    helper(sch, cfg, None, {})\n")}
    root = make_repo(tmp_path, operators=False, files=files)
    fp = fingerprint_template(root / "operators/op.py", root)
    assert fp.inputs == {} and fp.notes == ()


# SMALL_MM with its parallel loop decided by a data file read at import, and an
# environment variable read in schedule.
MM_READING = SMALL_MM.replace(
    "import numpy as np\n",
    "import json\nimport os\nfrom pathlib import Path\n\nimport numpy as np\n\n"
    '_LIMITS = json.loads(Path(__file__).with_name("mm_limits.json").read_text())\n',
).replace(
    "    sch.parallel(i0)\n",
    '    if _LIMITS["parallel"] and not os.environ.get("MM_SERIAL"):\n        sch.parallel(i0)\n',
)


def test_a_retune_records_its_data_files_and_check_trusts_them_until_one_changes(tmp_path: Path) -> None:
    pytest.importorskip("tvm")
    assert MM_READING.count("_LIMITS") == 2 and "MM_SERIAL" in MM_READING
    config = (
        "format: 1\ntrials: 8\nbatch_size: 8\n"
        "measure: {time_cap_s: 1.0, usable_precision: 10, history_s: 1}\n"
        f"targets:\n  host:\n    target: {json.dumps(host_target(2))}\n"
        # Declared too: what load_step fingerprints must be what check does.
        "operators:\n  mm:\n    inputs: [operators/extra/*.csv]\n"
    )
    files = {
        "operators/mm.py": MM_READING,
        "operators/mm_limits.json": '{"parallel": true}',
        "operators/extra/shapes.csv": "M,N\n64,64\n",
    }
    root = make_repo(tmp_path, config=config, files=files, operators=False)
    r = run_cli(root, "retune")
    assert r.returncode == 0, r.stdout + r.stderr
    m = json.loads((root / "tuning_logs/mm/host/manifest.json").read_text())
    assert set(m["sources"]["blobs"]) == {"operators/mm.py", "operators/mm_limits.json", "operators/extra/shapes.csv"}
    assert m["sources"]["globs"] == {"operators/extra/*.csv": ["operators/extra/shapes.csv"]}
    assert [n["what"] for n in m["sources"]["notes"]] == ["MM_SERIAL (os.environ.get)"]
    assert {"operators/mm_limits.json:<data>", "operators/extra/shapes.csv:<data>"} <= set(m["dependencies"])
    commit_all(root, "tuned")
    data = json.loads(run_cli(root, "check", "--format", "json").stdout)
    assert data["entries"][0]["fresh"] and data["templates_trusted"] == 1
    assert any("reads environment variable MM_SERIAL" in w for w in data["warnings"])
    write(root, "operators/mm_limits.json", '{"parallel": false}')
    data = json.loads(run_cli(root, "check", "--format", "json").stdout)
    (reason,) = data["entries"][0]["reasons"]
    assert (reason["code"], reason["file"]) == ("template_changed", "operators/mm_limits.json")
