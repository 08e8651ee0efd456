"""Public Criteo facts used by presets, the generator and the planner (pure Python, no TensorFlow).

Sources: NVIDIA's DLRM and DCNv2 examples (DeepLearningExamples, TensorFlow2 Recommendation) and the
MLPerf recommendation benchmark. The counts below exclude the shared id-0 bucket;
`preset_cardinalities` adds it (one row per table), because our datasets reserve id 0 for missing /
unseen / below-threshold values. A preset's row cap (MLPerf: 40M rows per table, as its hashing of
the raw ids gives) applies after that extra row, so a capped table has exactly the cap's rows.

Hotness: ids per row of each feature (1 = one-hot). The Criteo presets are one-hot; the `mlperf`
presets carry the MLPerf DLRM-DCNv2 multi-hot hotness.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from dlrm.choices import named_choice

NUM_NUMERICAL = 13
NUM_CATEGORICAL = 26

# Frequency threshold 15 ("small"): 4.19B params at dim 128, 15.6 GiB fp32.
T15 = (7912889, 33823, 17139, 7339, 20046, 4, 7105, 1382, 63, 5554114, 582469, 245828, 11, 2209,
       10667, 104, 4, 968, 15, 8165896, 2675940, 7156453, 302516, 12022, 97, 35)
# Frequency threshold 3 ("large"): 22.8B params, 84.9 GiB.
T3 = (45833188, 36746, 17245, 7413, 20243, 3, 7114, 1441, 62, 29275261, 1572176, 345138, 10, 2209,
      11267, 128, 4, 974, 14, 48937457, 11316796, 40094537, 452104, 12606, 104, 35)
# Frequency threshold 0 ("extra large"): 113B params, 421 GiB; largest table 227.6M rows.
T0 = (227605432, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 130229467, 3067956, 405282, 10, 2209,
      11938, 155, 4, 976, 14, 292775614, 40790948, 187188510, 590152, 12973, 108, 36)
# Small, Criteo-shaped (a few large tables, many small ones) for tests and the embedded demo.
TINY = (4000, 1200, 900, 600, 1500, 4, 700, 300, 60, 3500, 2500, 2000, 11, 400, 800, 100, 4, 500,
        15, 3800, 2800, 3200, 1000, 650, 90, 35)

# MLPerf DLRM-DCNv2 (multi-hot Criteo 1TB): ids per row of each feature, tables capped at 40M rows.
MLPERF_HOTNESS = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)
MLPERF_MAX_ROWS = 40_000_000
ONE_HOT = (1,) * NUM_CATEGORICAL


@dataclass(frozen=True)
class Preset:
    """Table sizes (without the id-0 row), ids per row, and an optional cap on every table's rows."""

    counts: tuple[int, ...]
    hotness: tuple[int, ...] = ONE_HOT
    max_rows: Optional[int] = None


_PRESETS = {
    "tiny": Preset(TINY), "t15": Preset(T15), "t3": Preset(T3), "t0": Preset(T0),
    "mlperf": Preset(T0, MLPERF_HOTNESS, MLPERF_MAX_ROWS),  # the MLPerf DLRM-DCNv2 benchmark's shape
    "mlperf_tiny": Preset(TINY, MLPERF_HOTNESS),  # its hotness on the tiny tables: trains in seconds
}
PRESET_NAMES = tuple(_PRESETS)


def _preset(name: str) -> Preset:
    return named_choice(_PRESETS, name, "cardinality preset")


def preset_cardinalities(name: str, reserve_zero: bool = True, max_rows: Optional[int] = None) -> list[int]:
    """Table sizes for a preset; with `reserve_zero`, one extra row per table for id 0.

    Every table is capped at the preset's row cap and at `max_rows` (whichever is smaller).
    """
    preset = _preset(name)
    return cap_rows([n + 1 if reserve_zero else n for n in preset.counts], preset.max_rows, max_rows)


def preset_hotness(name: str) -> list[int]:
    """Ids per row of each of the preset's features (1 = one-hot), in table order."""
    return list(_preset(name).hotness)


def cap_rows(rows: Sequence[int], *caps: Optional[int]) -> list[int]:
    """`rows` with every table capped at each cap given (None = no cap)."""
    limit = min((c for c in caps if c is not None), default=None)
    return [int(r) if limit is None else min(int(r), limit) for r in rows]
