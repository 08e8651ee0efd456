"""Outbrain-shaped synthetic click log for Wide & Deep, with a known optimum (Bayes MAP@12, AUC).

The reference's 16 categorical features (13 one-hot, 3 multi-hot of hotness 3), 13 numerical ones,
the label `clicked` and the group id `display_id` (`dlrm.data.synthetic.widedeep_reference`). Each display
(2..12 ads) has one request (document, platform, geo; the document's source, publisher and topic /
entity / category lists) and its ads (ad_id, and the ad's campaign, advertiser, promoted document,
source and publisher, fixed per ad); exactly one ad is clicked, drawn from the softmax of the hidden
score of `dlrm.data.synthetic.widedeep_model` over the display's ads.

Split (the reference's rule): each display gets a day 1..12; displays of days 1..10 go to `train`
with probability 0.8, else to `test`; days 11 and 12 all go to `test`. Display ids increase with the
day. `train` holds its displays in a shuffled order, the rows of a display adjacent; `test` is
ordered by display id. Everything is a deterministic function of (preset, rows, seed): displays are
generated in blocks of `BLOCK_DISPLAYS`, each from its own seed. The whole log is held in memory
while it is ordered (peak ~0.6 GB at 1.5M rows).
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

from dlrm.choices import named_choice
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.writer import SplitBinaryWriter, dataset_dir
from dlrm.data.synthetic.criteo import cap_rows
from dlrm.data.synthetic.presets import WIDEDEEP_PRESETS
from dlrm.data.synthetic.sampling import GeneratorParams, bag_ids, zipf_ids
from dlrm.data.synthetic.widedeep_model import (
    AD_FEATURES,
    COMPONENTS,
    MEMORISATION_FEATURES,
    PAIR_FEATURES,
    REQUEST_FEATURES,
    WideDeepTruth,
    scale_to,
)
from dlrm.data.synthetic.widedeep_reference import FEATURES, GROUP_FEATURE, LABEL, NUMERICAL_FEATURES
from dlrm.exact_metrics import MAP_K, exact_auc, log_loss_from_logits, map_at_k, random_order_ap
from dlrm.feature_crosses import cross_name

GENERATOR_VERSION = 3
BLOCK_DISPLAYS = 1 << 15  # displays per independently seeded block (part of the determinism contract)
CALIBRATION_DISPLAYS = 1 << 15
GROUND_TRUTH_FILE = "ground_truth.npz"
WRITE_ROWS = 1 << 17
TRAIN_MAPPING, TEST_MAPPING = "train", "test"


@dataclass
class WideDeepParams:
    """Shape of the log and of the hidden score (stds are measured over rows, before the softmax)."""

    ad_zipf_exponent: float = 0.5  # ads: a flat law, most ids seen tens of times in the tiny preset
    zipf_exponent: float = 1.2  # every other id draw
    missing_rate: float = 0.02  # share of id 0 (missing) of the request-side one-hot features
    empty_bag_rate: float = 0.05  # documents with no topic / entity / category
    display_extra_ads_p: float = 0.316  # ads per display = 2 + Binomial(10, p): mean ~5.2 as in Outbrain
    days: int = 12
    train_days: int = 10  # displays of later days all go to test
    train_share: float = 0.8  # of the displays of days 1..train_days
    rank: int = 4  # dimension of the hidden request / ad vectors
    memorisation_std: float = 1.5
    pair_memorisation_std: float = 2.0
    pair_head_ids: int = 150  # ids 0..pair_head_ids-1 of each feature of a pair carry pair effects
    generalisation_std: float = 1.5
    numerical_linear_std: float = 0.4
    numerical_nonlinear_std: float = 0.6

    def sampling(self) -> GeneratorParams:
        """The shared id samplers' parameters."""
        return GeneratorParams(zipf_exponent=self.zipf_exponent, missing_rate=self.missing_rate,
                               empty_bag_rate=self.empty_bag_rate)


def preset_tables(preset: str, max_rows: Optional[int] = None) -> dict[str, int]:
    """Feature name -> cardinality of a widedeep preset, in batch order (capped at `max_rows` too)."""
    cap = named_choice(WIDEDEEP_PRESETS, preset, "widedeep preset").max_rows
    cards = cap_rows([f.cardinality for f in FEATURES], cap, max_rows)
    return {f.name: c for f, c in zip(FEATURES, cards)}


def dataset_spec(cards: dict[str, int]) -> FeatureSpec:
    """The split-binary spec: `clicked`, the 13 numericals, one-hot then multi-hot ids (with the
    reference's embedding dims), `display_id` in channel `map`."""
    onehot = {f.name: cards[f.name] for f in FEATURES if f.hotness == 1}
    multi_hot = {f.name: (cards[f.name], f.hotness) for f in FEATURES if f.hotness > 1}
    spec = FeatureSpec.split_binary(LABEL, list(NUMERICAL_FEATURES), onehot, multi_hot=multi_hot,
                                    group=GROUP_FEATURE)
    for f in FEATURES:
        spec.feature_spec[f.name]["embedding_dim"] = f.dim
    return spec


# ------------------------------------------------------------------------------- the hidden world
def _lookup(rng: np.random.Generator, size: int, target_card: int, exponent: float) -> np.ndarray:
    """A fixed attribute of each of `size` entities (e.g. an ad's campaign): Zipf-like ids, entry 0 -> 0."""
    table = zipf_ids(rng, size, target_card, exponent, 0.0)
    table[0] = 0
    return table


def build_truth(cards: dict[str, int], seed: int, params: WideDeepParams) -> WideDeepTruth:
    """Draw the hidden world (entity attributes, effects, vectors, numerical laws) and calibrate it."""
    root = np.random.SeedSequence([seed, GENERATOR_VERSION])
    world_seq, calibration_seq = root.spawn(2)
    rng = np.random.default_rng(world_seq)
    a = params.zipf_exponent
    extra = {
        "ad_campaign": _lookup(rng, cards["ad_id"], cards["campaign_id"], a),
        "ad_document_promo": _lookup(rng, cards["ad_id"], cards["document_id_promo"], a),
        "campaign_advertiser": _lookup(rng, cards["campaign_id"], cards["advertiser_id"], a),
        "document_promo_source": _lookup(rng, cards["document_id_promo"], cards["source_id_promo"], a),
        "source_promo_publisher": _lookup(rng, cards["source_id_promo"], cards["publisher_id_promo"], a),
        "document_source": _lookup(rng, cards["document_id"], cards["source_id"], a),
        "source_publisher": _lookup(rng, cards["source_id"], cards["publisher_id"], a),
        "geo_state": _lookup(rng, cards["geo_location"], cards["geo_location_state"], a),
        "state_country": _lookup(rng, cards["geo_location_state"], cards["geo_location_country"], a),
        "beta": rng.uniform(0.5, 3.0, size=(2, len(NUMERICAL_FEATURES))),  # numericals ~ Beta(a_j, b_j)
    }
    sampling = params.sampling()
    for f in FEATURES:
        if f.hotness > 1:  # a document's topic / entity / category list
            extra[f"document_{f.name}"] = bag_ids(rng, cards["document_id"], cards[f.name], f.hotness, sampling)
    effects = {name: rng.normal(0.0, 1.0, size=cards[name]) for name in MEMORISATION_FEATURES}
    pair_effects = {cross_name(a, r): rng.normal(0.0, 1.0, size=(min(cards[a], params.pair_head_ids),
                                                                 min(cards[r], params.pair_head_ids)))
                    for a, r in PAIR_FEATURES}
    vectors = {name: rng.normal(0.0, 1.0, size=(cards[name], params.rank)) for name in REQUEST_FEATURES + AD_FEATURES}
    num = len(NUMERICAL_FEATURES)
    q = rng.normal(0.0, 1.0, size=(2, num))
    quadratic = np.outer(q[0], q[0]) - np.outer(q[1], q[1])  # indefinite: a saddle, not a bowl
    truth = WideDeepTruth(tuple(f.name for f in FEATURES), tuple(f.hotness for f in FEATURES), effects, pair_effects,
                          vectors,
                          np.zeros(num), rng.normal(0.0, 1.0, size=num), quadratic, extra)
    _calibrate(truth, _sample_block(calibration_seq, CALIBRATION_DISPLAYS, cards, truth, params), params)
    return truth


def _calibrate(truth: WideDeepTruth, block: dict, params: WideDeepParams) -> None:
    """Scale each score component to its target std on a calibration sample."""
    numerical, categorical = block["numerical"], block["categorical"]
    truth.numerical_center = numerical.astype(np.float64).mean(axis=0)
    parts = truth.components(numerical, categorical)
    for name in MEMORISATION_FEATURES:
        truth.effects[name] = truth.effects[name] * scale_to(parts["memorisation"], params.memorisation_std)
    pair_scale = scale_to(parts["pair_memorisation"], params.pair_memorisation_std)
    truth.pair_effects = {k: v * pair_scale for k, v in truth.pair_effects.items()}
    root = np.sqrt(scale_to(parts["generalisation"], params.generalisation_std))  # a product of two sums
    truth.vectors = {k: v * root for k, v in truth.vectors.items()}
    truth.numerical_linear = truth.numerical_linear * scale_to(parts["numerical_linear"], params.numerical_linear_std)
    truth.numerical_quadratic = truth.numerical_quadratic * scale_to(parts["numerical_nonlinear"],
                                                                     params.numerical_nonlinear_std)


# ------------------------------------------------------------------------------- one block of displays
def _sample_block(seq: np.random.SeedSequence, displays: int, cards: dict[str, int], truth: WideDeepTruth,
                  params: WideDeepParams) -> dict:
    """`displays` displays: sizes, days, train/test, stored features, the clicked row, the score's parts."""
    rng = np.random.default_rng(seq)
    x = truth.extra
    sizes = 2 + rng.binomial(10, params.display_extra_ads_p, size=displays)
    day = rng.integers(1, params.days + 1, size=displays)
    to_train = (day <= params.train_days) & (rng.random(displays) < params.train_share)
    # request side, one per display
    document = zipf_ids(rng, displays, cards["document_id"], params.zipf_exponent, params.missing_rate)
    geo = zipf_ids(rng, displays, cards["geo_location"], params.zipf_exponent, params.missing_rate)
    state = x["geo_state"][geo]
    source = x["document_source"][document]
    request = {"document_id": document,
               "platform": zipf_ids(rng, displays, cards["platform"], params.zipf_exponent, params.missing_rate),
               "source_id": source, "publisher_id": x["source_publisher"][source], "geo_location": geo,
               "geo_location_country": x["state_country"][state], "geo_location_state": state}
    # ad side, one per row
    rows = int(sizes.sum())
    ad = zipf_ids(rng, rows, cards["ad_id"], params.ad_zipf_exponent, 0.0)
    campaign = x["ad_campaign"][ad]
    promo = x["ad_document_promo"][ad]
    source_promo = x["document_promo_source"][promo]
    item = {"ad_id": ad, "campaign_id": campaign, "advertiser_id": x["campaign_advertiser"][campaign],
            "document_id_promo": promo, "source_id_promo": source_promo,
            "publisher_id_promo": x["source_promo_publisher"][source_promo]}
    display_of_row = np.repeat(np.arange(displays), sizes)
    columns = []
    for f in FEATURES:
        if f.name in item:
            columns.append(item[f.name][:, None])
        elif f.name in request:
            columns.append(request[f.name][display_of_row][:, None])
        else:
            columns.append(x[f"document_{f.name}"][document[display_of_row]])
    categorical = np.concatenate(columns, axis=1).astype(np.int32)
    beta = x["beta"]
    numerical = rng.beta(beta[0], beta[1], size=(rows, beta.shape[1])).astype(np.float16)
    parts = truth.components(numerical, categorical)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    # Gumbel-max: the argmax of score + Gumbel noise is a draw from the display's softmax
    noisy = np.sum(list(parts.values()), axis=0) + rng.gumbel(size=rows)
    label = noisy == np.maximum.reduceat(noisy, starts)[display_of_row]
    return {"sizes": sizes, "day": day, "to_train": to_train, "numerical": numerical, "categorical": categorical,
            "parts": parts, "label": label}


# ------------------------------------------------------------------------------- the dataset
def _concat(blocks: list[dict], key: str) -> np.ndarray:
    return np.concatenate([b[key] for b in blocks])


def _generate_log(cards: dict[str, int], rows: int, seed: int, truth: WideDeepTruth, params: WideDeepParams) -> dict:
    """Whole displays, block after block, until the log holds at least `rows` rows."""
    blocks, total, block = [], 0, 0
    while total < rows:
        b = _sample_block(np.random.SeedSequence([seed, GENERATOR_VERSION, 1, block]), BLOCK_DISPLAYS, cards,
                          truth, params)
        cum = np.cumsum(b["sizes"])
        keep = int(np.searchsorted(cum, rows - total)) + 1 if cum[-1] >= rows - total else b["sizes"].size
        kept_rows = int(cum[keep - 1])
        blocks.append({"sizes": b["sizes"][:keep], "day": b["day"][:keep], "to_train": b["to_train"][:keep],
                       "numerical": b["numerical"][:kept_rows], "categorical": b["categorical"][:kept_rows],
                       "label": b["label"][:kept_rows],
                       **{f"part/{k}": v[:kept_rows] for k, v in b["parts"].items()}})
        total += kept_rows
        block += 1
    log = {key: _concat(blocks, key) for key in blocks[0]}
    order = np.lexsort((np.arange(log["day"].size), log["day"]))  # by day, then generation order
    display_id = np.empty(order.size, np.int64)
    display_id[order] = np.arange(1, order.size + 1)
    log["display_id"] = display_id
    return log


def _rows_of(displays: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Row indices of the given displays, in that order, each display's rows adjacent."""
    counts = sizes[displays]
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(starts[displays], counts) + offsets


def _softmax_logits(score: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Logit of each row's true click probability (softmax within its display), rows display-contiguous."""
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    per_row = np.repeat(np.arange(sizes.size), sizes)
    shifted = score - np.maximum.reduceat(score, starts)[per_row]
    log_p = shifted - np.log(np.add.reduceat(np.exp(shifted), starts))[per_row]
    log_p = np.minimum(log_p, -1e-15)
    return log_p - np.log(-np.expm1(log_p))


def chance_map(sizes: np.ndarray, k: int = MAP_K) -> float:
    """Expected MAP@k of a random order of each display's ads."""
    return float(np.mean(random_order_ap(sizes, k)))


def bayes_figures(groups: np.ndarray, labels: np.ndarray, parts: dict[str, np.ndarray], sizes: np.ndarray) -> dict:
    """Bayes MAP@12 / AUC / log loss of the true scores and the ablations' MAP@12 (test rows ordered by display)."""
    score = np.sum(list(parts.values()), axis=0)
    logits = _softmax_logits(score, sizes)
    ablations = {f"without_{name}": map_at_k(groups, labels, score - parts[name]) for name in COMPONENTS}
    ablations["memorisation_only"] = map_at_k(groups, labels, parts["memorisation"])
    ablations["linear_only"] = map_at_k(groups, labels, parts["memorisation"] + parts["numerical_linear"])
    ablations["linear_with_crosses"] = map_at_k(groups, labels, parts["memorisation"] + parts["pair_memorisation"]
                                                + parts["numerical_linear"])
    ablations["chance"] = chance_map(sizes)
    return {"bayes_map_at_12": map_at_k(groups, labels, score), "bayes_auc": exact_auc(labels, logits),
            "bayes_logloss": log_loss_from_logits(labels, logits), "ablation_map_at_12": ablations}


def _write(out_dir: str, spec: FeatureSpec, mapping: str, log: dict, rows: np.ndarray) -> None:
    group = np.repeat(log["display_id"], log["sizes"])
    with SplitBinaryWriter(out_dir, spec, mapping) as writer:
        for start in range(0, rows.size, WRITE_ROWS):
            idx = rows[start:start + WRITE_ROWS]
            writer.write(log["label"][idx], log["numerical"][idx], log["categorical"][idx], group[idx])


def generate_widedeep(out_dir: str, preset: str = "widedeep_tiny", rows: Optional[int] = None, seed: int = 12345,
                      params: Optional[WideDeepParams] = None, max_rows: Optional[int] = None) -> FeatureSpec:
    """Write the `train` and `test` mappings, feature_spec.yaml and the ground truth into `out_dir`.

    `rows`: rows of the whole log (whole displays, so up to 11 more), split by the reference's rule
    (about 2/3 train, 1/3 test); None: the preset's default. `max_rows` caps every table further.
    """
    params = params or WideDeepParams()
    started = time.time()
    cards = preset_tables(preset, max_rows)
    rows = WIDEDEEP_PRESETS[preset].rows if rows is None else int(rows)
    if rows < 2:
        raise ValueError(f"rows must be >= 2 (one display), got {rows}")
    truth = build_truth(cards, seed, params)
    log = _generate_log(cards, rows, seed, truth, params)
    sizes = log["sizes"]
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    train = np.flatnonzero(log["to_train"])
    train = train[np.random.default_rng(np.random.SeedSequence([seed, GENERATOR_VERSION, 2])).permutation(train.size)]
    test = np.flatnonzero(~log["to_train"])
    test = test[np.argsort(log["display_id"][test])]
    spec = dataset_spec(cards)
    os.makedirs(out_dir, exist_ok=True)
    train_rows, test_rows = _rows_of(train, starts, sizes), _rows_of(test, starts, sizes)
    _write(out_dir, spec, TRAIN_MAPPING, log, train_rows)
    _write(out_dir, spec, TEST_MAPPING, log, test_rows)
    truth.save(os.path.join(out_dir, GROUND_TRUTH_FILE))
    figures = (bayes_figures(np.repeat(log["display_id"][test], sizes[test]), log["label"][test_rows],
                             {k: log[f"part/{k}"][test_rows] for k in COMPONENTS}, sizes[test])
               if test.size else {})
    spec.metadata = {
        "num_rows": {TRAIN_MAPPING: int(train_rows.size), TEST_MAPPING: int(test_rows.size)},
        "num_displays": {TRAIN_MAPPING: int(train.size), TEST_MAPPING: int(test.size)},
        "seed": int(seed),
        "pair_features": [list(pair) for pair in PAIR_FEATURES],
        **figures,
        "positive_rate": {TRAIN_MAPPING: float(train.size / max(train_rows.size, 1)),
                          TEST_MAPPING: float(test.size / max(test_rows.size, 1))},
        "generator": {"name": "dlrm.data.synthetic.widedeep_generator", "version": GENERATOR_VERSION, "preset": preset,
                      "rows": rows, "max_rows": max_rows, "seed": int(seed), "block_displays": BLOCK_DISPLAYS,
                      "params": asdict(params), "ground_truth": GROUND_TRUTH_FILE,
                      "seconds": round(time.time() - started, 3)},
    }
    spec.save(out_dir)
    return spec


def is_widedeep_generated(directory: str, preset: str, rows: int, seed: int) -> bool:
    """True if `directory` holds exactly this log from this generator version (safe to reuse)."""
    from dlrm.data.format.errors import SpecError

    try:
        spec = FeatureSpec.load(directory).validate()
        generator = spec.metadata.get("generator", {})
        wanted = {"name": "dlrm.data.synthetic.widedeep_generator", "version": GENERATOR_VERSION, "preset": preset,
                  "rows": rows, "max_rows": None, "seed": seed}
        return all(generator.get(key) == value for key, value in wanted.items())
    except (SpecError, OSError, KeyError, ValueError, TypeError, AttributeError):
        return False


def generate_widedeep_atomically(directory: str, preset: str, rows: int, seed: int) -> None:
    """`generate_widedeep` into a temporary directory renamed over `directory` (an outdated dataset, never
    another directory: `dlrm.output_dir`) once complete."""
    with dataset_dir(directory, "--synthetic_dir").staged(overwrite=True) as tmp:
        generate_widedeep(tmp, preset, rows, seed)
