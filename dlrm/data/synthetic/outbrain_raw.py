"""Raw Outbrain Click Prediction CSVs with a known optimum, to test and benchmark the Outbrain preprocessing.

Writes Kaggle's seven files (`dlrm.data.outbrain.RAW_FILES`: schema, value formats,
relationships and proportions of the real data, scaled from the number of clicks_train rows) and the
generator's truth beside them: `bayes_ap.csv`, per display with clicks the expected AP@12 of ranking its
ads by the hidden score (`outbrain_click_model`), and `outbrain_raw.json`, the row counts and the Bayes
and random-ranking MAP@12. The preprocessing chooses the test displays, so the Bayes MAP@12 of its test
split is the mean of `expected_ap` over them.

The output is a function of (clicks, seed): displays are generated and written in chunks of
`CHUNK_DISPLAYS`, each from its own seed, which also bounds the memory.

    python -m dlrm.data.synthetic.outbrain_raw --out DIR --clicks N [--seed S] [--gzip] [--overwrite]
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

import numpy as np

from dlrm import argtypes
from dlrm.data.outbrain import LAST_TRAIN_DAY, MS_PER_DAY, RAW_FILES
from dlrm.data.synthetic.outbrain_click_model import TERMS, ClickModel, build_click_model
from dlrm.data.synthetic.outbrain_csv import (
    CsvFile,
    raw_file,
    write_bayes,
    write_clicks,
    write_documents,
    write_events,
    write_promoted_content,
)
from dlrm.data.synthetic.outbrain_displays import (
    CLICK_DAYS,
    Displays,
    Schedule,
    build_schedule,
    sample_displays,
    sample_events,
)
from dlrm.data.synthetic.outbrain_world import World, build_world
from dlrm.output_dir import OutputDir

GENERATOR_VERSION = 1
CHUNK_DISPLAYS = 1 << 15  # displays per independently seeded chunk (part of the determinism contract)
SUMMARY_FILE = "outbrain_raw.json"
BAYES_FILE = "bayes_ap.csv"
BAYES_COLUMNS = ("display_id", "day", "expected_ap")
MIN_CLICKS = 2  # one display of two ads
# Chunk k of the displays with clicks is drawn from SeedSequence([seed, DISPLAY_STREAM, k]), of the events
# without clicks from SeedSequence([seed, EXTRA_EVENT_STREAM, k]).
DISPLAY_STREAM, EXTRA_EVENT_STREAM = 4, 5
DAY_GROUPS = {f"days_0_{LAST_TRAIN_DAY}": (0, LAST_TRAIN_DAY),
              f"days_{LAST_TRAIN_DAY + 1}_{CLICK_DAYS - 1}": (LAST_TRAIN_DAY + 1, CLICK_DAYS - 1)}


@dataclass
class MapTotals:
    """Sums over displays of the expected AP@12 (Bayes and random order), overall and per day group, and
    of each score term's variance across a display's ads."""

    displays: dict[str, int] = field(default_factory=lambda: dict.fromkeys(["all", *DAY_GROUPS], 0))
    bayes: dict[str, float] = field(default_factory=lambda: dict.fromkeys(["all", *DAY_GROUPS], 0.0))
    random: dict[str, float] = field(default_factory=lambda: dict.fromkeys(["all", *DAY_GROUPS], 0.0))
    term_variance: dict[str, float] = field(default_factory=dict)

    def add(self, displays: Displays) -> None:
        day = displays.events.timestamp // MS_PER_DAY
        groups = {"all": np.ones(day.size, dtype=bool),
                  **{name: (day >= first) & (day <= last) for name, (first, last) in DAY_GROUPS.items()}}
        for name, members in groups.items():
            self.displays[name] += int(members.sum())
            self.bayes[name] += float(displays.expected_ap[members].sum())
            self.random[name] += float(displays.random_ap[members].sum())
        for name, value in displays.term_variance.items():
            self.term_variance[name] = self.term_variance.get(name, 0.0) + value

    def means(self, sums: dict[str, float]) -> dict[str, Optional[float]]:
        return {name: round(total / self.displays[name], 6) if self.displays[name] else None
                for name, total in sums.items()}


def _chunk_rng(seed: int, stream: int, chunk: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, stream, chunk]))


def write_displays(out_dir: str, world: World, model: ClickModel, schedule: Schedule, seed: int,
                   compress: bool) -> tuple[MapTotals, dict[str, int]]:
    """clicks_train, events and the Bayes file, chunk by chunk; the totals and rows per file."""
    clicks, events = raw_file(out_dir, "clicks_train", compress), raw_file(out_dir, "events", compress)
    bayes = CsvFile(out_dir, BAYES_FILE.removesuffix(".csv"), BAYES_COLUMNS)
    totals = MapTotals()
    try:
        for chunk, first in enumerate(range(0, schedule.sizes.size, CHUNK_DISPLAYS)):
            last = min(first + CHUNK_DISPLAYS, schedule.sizes.size)
            displays = sample_displays(_chunk_rng(seed, DISPLAY_STREAM, chunk), world, model, first + 1,
                                       schedule.sizes[first:last], schedule.timestamps[first:last])
            write_clicks(clicks, displays)
            write_events(events, world, displays.events)
            write_bayes(bayes, displays)
            totals.add(displays)
        extra = schedule.extra_timestamps
        for chunk, first in enumerate(range(0, extra.size, CHUNK_DISPLAYS)):
            timestamps = extra[first:first + CHUNK_DISPLAYS]
            first_id = schedule.sizes.size + first + 1
            rng = _chunk_rng(seed, EXTRA_EVENT_STREAM, chunk)
            write_events(events, world, sample_events(rng, world, first_id, timestamps))
    finally:
        for out in (clicks, events, bayes):
            out.close()
    return totals, {"clicks_train": clicks.rows, "events": events.rows}


def generate_outbrain_raw(out_dir: str, clicks: int, seed: int, gzip: bool = False) -> dict:
    """Write the seven raw CSVs (`.csv.gz` with `gzip`), `bayes_ap.csv` and `outbrain_raw.json` into
    `out_dir` (created if need be): `clicks` clicks_train rows from `seed`. Returns the summary."""
    if clicks < MIN_CLICKS:
        raise ValueError(f"clicks must be >= {MIN_CLICKS} (one display of two ads), got {clicks}")
    started = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    world = build_world(clicks, seed)
    model = build_click_model(world, seed)
    schedule = build_schedule(clicks, seed)
    totals, rows = write_displays(out_dir, world, model, schedule, seed, gzip)
    rows["promoted_content"] = write_promoted_content(out_dir, world, gzip)
    rows.update(write_documents(out_dir, world.documents, gzip))
    spread = {name: round(float(np.sqrt(totals.term_variance[name] / totals.displays["all"])), 4)
              for name in (*TERMS, "total")}
    summary = {
        "generator": "dlrm.data.synthetic.outbrain_raw", "version": GENERATOR_VERSION, "seed": seed,
        "clicks": clicks, "gzip": gzip,
        "files": {stem: f"{stem}.csv.gz" if gzip else f"{stem}.csv" for stem in RAW_FILES},
        "rows": {stem: rows[stem] for stem in RAW_FILES},
        "displays": int(schedule.sizes.size), "events_without_clicks": int(schedule.extra_timestamps.size),
        "bayes_file": BAYES_FILE,
        "bayes_map_at_12": totals.means(totals.bayes),
        "random_map_at_12": totals.means(totals.random),
        "click_model": {"weights": asdict(model.weights),
                        "within_display_std": spread},
    }
    with open(os.path.join(out_dir, SUMMARY_FILE), "w") as out:
        json.dump(summary, out, indent=1)
        out.write("\n")
    return {**summary, "seconds": round(time.perf_counter() - started, 3)}


def build_parser() -> argtypes.ArgumentParser:
    parser = argtypes.ArgumentParser(prog="python -m dlrm.data.synthetic.outbrain_raw",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output directory (new or empty, or see --overwrite)")
    parser.add_argument("--clicks", required=True, type=argtypes.positive_int,
                        help=f"clicks_train rows (at least {MIN_CLICKS}); every other file is sized from it")
    parser.add_argument("--seed", type=argtypes.seed, default=12345, help="(default: 12345)")
    parser.add_argument("--gzip", action="store_true", help="write the seven CSVs gzip-compressed (.csv.gz)")
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace the output already in --out (only one this generator wrote, which holds "
                             f"{SUMMARY_FILE})")
    argtypes.add_debug_flag(parser)
    return parser


def generate_from_flags(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.clicks < MIN_CLICKS:
        parser.error(f"argument --clicks: expected at least {MIN_CLICKS} (one display of two ads), got {args.clicks}")
    output = OutputDir(args.out, "--out", "raw Outbrain dataset", SUMMARY_FILE)
    with output.staged(args.overwrite) as staging:
        summary = generate_outbrain_raw(staging, args.clicks, args.seed, args.gzip)
    keys = ("clicks", "seed", "rows", "bayes_map_at_12", "random_map_at_12", "seconds")
    print(json.dumps({"out": os.path.abspath(args.out), **{key: summary[key] for key in keys}}, indent=1))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    from dlrm.cli_errors import run_main

    return run_main(generate_from_flags, argv)


if __name__ == "__main__":
    raise SystemExit(main())
