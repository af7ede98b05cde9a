"""History replay, the TVM-free part: old configurations mapped into an edited
template's knob space by name, and the knob diff."""

from __future__ import annotations

from tvmtune_ci.core.history import KnobDiff, knob_diff, map_all, map_config, probes
from tvmtune_ci.core.replayreport import ReplayReport
from tvmtune_ci.core.template import define_knob, define_split, define_structure

WL = {"M": 64, "N": 128, "dtype": "float32"}
AVX2 = {"kind": "llvm", "mcpu": "znver3"}
OLD = [
    define_split("tile_i", "M", parts=2, max_factor=8),
    define_split("tile_j", "N", parts=2, max_factor=32),
    define_knob("unroll", [0, 16]),
    define_structure("cache", [False, True]),
]


def test_a_config_keeps_every_knob_that_is_still_valid() -> None:
    new = [*OLD[:2], define_knob("unroll", [0, 16, 64]), OLD[3]]
    m = map_config({"tile_i": [8, 8], "tile_j": [4, 32], "unroll": 16, "cache": True}, new, WL, AVX2)
    assert m.knobs == {"tile_i": [8, 8], "tile_j": [4, 32], "unroll": 16, "cache": True}
    assert m.reset == ()


def test_invalid_knobs_are_repaired_and_new_ones_take_the_default() -> None:
    new = [
        define_split("tile_i", "M", parts=3, max_factor=8),  # parts changed
        define_split("tile_j", "N//LANES", parts=2, max_factor=4),  # extent changed
        define_knob("unroll", [0, 64]),  # 16 no longer offered
        define_structure("pack", ["none", "global"]),  # new
    ]
    m = map_config({"tile_i": [8, 8], "tile_j": [4, 4], "unroll": 16, "cache": True}, new, WL, AVX2)
    # tile_j [4, 4] multiplies to 16 = 128 // 8 lanes on AVX2: still valid there.
    # tile_i keeps its inner factor 8 (now in 3 parts), unroll 16 becomes the nearest 0.
    assert m.knobs == {"tile_i": [8, 1, 8], "tile_j": [4, 4], "unroll": 0, "pack": "none"}
    assert m.kept == ("tile_j",) and m.reset == ("tile_i", "unroll", "pack")
    # An innermost factor above a lowered max_factor: the largest divisor within it.
    lower = [define_split("tile_i", "M", parts=2, max_factor=4)]
    assert map_config({"tile_i": [8, 8]}, lower, WL, AVX2).knobs == {"tile_i": [16, 4]}


def test_configs_that_become_one_point_or_keep_nothing_are_dropped() -> None:
    new = [OLD[0], define_knob("unroll2", [0])]
    a = {"tile_i": [8, 8], "unroll": 0}
    b = {"tile_i": [8, 8], "unroll": 16}  # differs only in a removed knob
    c = {"tile_j": [1, 128]}  # keeps nothing: just the default
    assert [m.knobs for m in map_all([a, b, c], new, WL, AVX2)] == [{"tile_i": [8, 8], "unroll2": 0}]


def test_knob_diff_names_added_removed_and_changed() -> None:
    new = [
        define_split("tile_i", "M", parts=2, max_factor="VREGS//2"),
        OLD[1],
        define_knob("unroll", [0, 16, 64]),
        define_structure("pack", ["none"]),
    ]
    d = knob_diff(OLD, new, WL, AVX2)
    assert d.added == ("pack",) and d.removed == ("cache",)
    # tile_i's bound VREGS//2 is 8 on AVX2, as before: evaluated, not a change.
    assert d.changed == ("unroll: knob [0, 16] -> knob [0, 16, 64]",)
    avx512 = knob_diff(OLD, new, WL, {"kind": "llvm", "mcpu": "znver4"})
    assert avx512.changed[0] == ("tile_i: split of 64 in 2, innermost <= 8 -> split of 64 in 2, innermost <= 16")
    unknown = knob_diff(None, new, WL, AVX2, old_names=["tile_i", "gone"])
    assert not unknown.known and unknown.removed == ("gone",)
    assert "old declaration unreadable" in unknown.sentence()


def test_the_report_round_trips_and_reads_well() -> None:
    r = ReplayReport(
        source="mm_host_2026-01-01.json",
        offered=3,
        whole=2,
        built=3,
        correct=2,
        measured=2,
        knob_diff=KnobDiff(added=("pack",)),
        reset_counts={"pack": 1},
        failures=("x: wrong",),
        old_best_s=0.001,
        old_best_rel=0.01,
        verdict="equal",
        seeded=True,
        finals_left_out=4,
    )
    assert ReplayReport.from_json(r.to_json()) == r
    text = " | ".join(r.sentences())
    assert (
        "4 of the search's finalists were programs mm_host_2026-01-01.json measured, which the "
        "edit left unchanged as it did the old best's: left out of the finals"
    ) in text
    # A report written before the field existed reads as none left out.
    older = {k: v for k, v in r.to_json().items() if k != "finals_left_out"}
    assert ReplayReport.from_json(older).finals_left_out == 0
    assert "left out of the finals" not in " | ".join(ReplayReport.from_json(older).sentences())
    assert "3 old configuration(s) of mm_host_2026-01-01.json replayed: 2 with every knob kept" in text
    assert "repaired or new: pack in 1" in text and "2 computed the right result" in text
    assert "old best on the new template: 1 ms ± 1.0%; equal within noise" in text


def test_probes_are_the_old_best_with_one_knob_in_the_region_the_edit_opened() -> None:
    old = [define_split("tile_j", "N", parts=2, max_factor=1), define_knob("unroll", [0, 16])]
    new = [
        define_split("tile_j", "N", parts=2, max_factor=64),
        define_knob("unroll", [0, 16, 64]),
        define_structure("pack", ["none", "tile"]),
    ]
    best = {"tile_j": [64, 1], "unroll": 16, "pack": "none"}
    got = probes(best, old, new, {"N": 64}, {}, limit=8)
    assert len(got) == 8 and len({repr(sorted(p.items())) for p in got}) == 8
    for p in got:  # exactly one knob moved, into a value the old template could not take
        moved = [k for k in best if p[k] != best[k]]
        assert len(moved) == 1, p
        assert (
            (moved[0] == "tile_j" and p["tile_j"][1] > 1)
            or (moved[0] == "unroll" and p["unroll"] == 64)
            or (moved[0] == "pack" and p["pack"] == "tile")
        )
    # Round-robin: every knob the edit opened is probed, and tile_j's both ends early.
    assert {"unroll", "pack"} <= {k for p in got for k in best if p[k] != best[k]}
    assert [1, 64] in [p["tile_j"] for p in got[:6]] and [32, 2] in [p["tile_j"] for p in got[:6]]
    assert len(probes(best, old, new, {"N": 64}, {}, limit=3)) == 3
    # Nothing opened (or the old declaration unknown): no probes.
    assert probes(best, new, new, {"N": 64}, {}, limit=8) == []
    assert probes(best, None, new, {"N": 64}, {}, limit=8) == []


# Another target's log (seed-from, the nearest target): a knob counted in the target's
# facts maps to the same tile in elements, and both readings are replayed.
AVX512 = {"kind": "llvm", "mcpu": "znver4"}
GEMM = {"M": 1024, "N": 1024, "K": 1024, "dtype": "float32"}
COLS = define_split("tile_j", "(N + 15)//16*16//LANES", parts=3, max_factor="VREGS//8")


def test_a_vector_count_from_another_target_keeps_its_elements() -> None:
    from tvmtune_ci.core.history import rescale_split

    # AVX-512 16 lanes, 32 registers (max 4) -> AVX2 8 lanes, 16 registers (max 2).
    src, dst = {"N": 1024, "LANES": 16, "VREGS": 32}, {"N": 1024, "LANES": 8, "VREGS": 16}
    # The register tile's 16 columns stay 16 (2 vectors of 8), each block's 64 columns
    # stay 64 (4 x 2 vectors), the 16 parallel tiles stay 16.
    assert rescale_split(COLS, [16, 4, 1], src, dst) == [16, 4, 2]
    # 4 vectors of 16 do not fit 2 registers: the innermost within the bound, the
    # level outside it taking what it gave up (64 x 4 = 256 columns per block).
    assert rescale_split(COLS, [4, 4, 4], src, dst) == [4, 16, 2]
    # And back: AVX2's 2 vectors of 8 are 1 of 16.
    assert rescale_split(COLS, [8, 8, 2], dst, src) == [8, 8, 1]
    # Not a tiling under the source, or the same extent on both: nothing to rescale.
    assert rescale_split(COLS, [16, 4, 2], src, dst) is None
    assert rescale_split(COLS, [16, 4, 1], src, src) is None
    # A prime extent in vectors (N = 8 x 127: 127 vectors on AVX2, 63 on AVX-512):
    # every result is still a legal tiling here, the innermost within its bound.
    acc = define_split("acc", "N//LANES", parts=2, max_factor=8)
    odd_src, odd_dst = {**src, "N": 1016}, {**dst, "N": 1016}
    for v in ([9, 7], [63, 1], [1, 63], [21, 3]):
        assert rescale_split(acc, v, odd_src, odd_dst) == [127, 1]
    # The element rule where the extent allows it: 3 vectors of 16 are 6 of 8.
    assert rescale_split(acc, [21, 3], {**src, "N": 1008}, {**dst, "N": 1008}) == [21, 6]


def test_another_targets_configs_are_replayed_in_both_readings_best_first() -> None:
    knobs = [define_split("tile_i", "M", parts=3, max_factor=8), COLS, define_structure("pack", ["tile", "global"])]
    a = {"tile_i": [2, 128, 4], "tile_j": [16, 4, 1], "pack": "global"}
    b = {"tile_i": [128, 1, 8], "tile_j": [32, 2, 1], "pack": "tile"}
    m = map_all([a, b], knobs, GEMM, AVX2, AVX512)
    # The same elements first, then the same vectors; two configurations, two points.
    assert [x.knobs["tile_j"] for x in m] == [[16, 4, 2], [32, 4, 1]]
    assert m[0].reset == m[0].scaled == ("tile_j",) and m[0].kept == ("tile_i", "pack")
    # A configuration of nothing but a rescaled split is still replayed (not the default).
    (only,) = map_all([{"tile_j": [16, 4, 1]}], [COLS], GEMM, AVX2, AVX512)
    assert only.knobs == {"tile_j": [16, 4, 2]} and only.kept == () and only.scaled == ("tile_j",)
    # With three configurations' room, the second's element reading follows.
    assert [x.knobs["tile_j"] for x in map_all([a, b, a], knobs, GEMM, AVX2, AVX512)] == [
        [16, 4, 2],
        [32, 4, 1],
        [32, 2, 2],
    ]
    # This target's own log: its factors, as before.
    assert map_config(a, knobs, GEMM, AVX2).knobs["tile_j"] == [32, 4, 1]
    # A knob whose extent the facts do not change keeps its value in both readings.
    assert map_config(a, knobs, GEMM, AVX2, AVX512).knobs["tile_i"] == [2, 128, 4]
