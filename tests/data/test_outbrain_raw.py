"""Raw Outbrain CSV generator: Kaggle's headers and value formats, the files' relationships and proportions,
one click per display of 2..12 ads, nulls and heavy tails where the real data has them, deterministic bytes
(plain and gzip), a Bayes file the hidden model reproduces from the CSVs, and the command line."""
import gzip
import json
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from dlrm.data.outbrain import (
    LAST_TRAIN_DAY,
    MAX_DAYS_SINCE_PUBLISHED,
    MS_PER_DAY,
    NULL,
    RAW_FILES,
    TIMESTAMP_OFFSET_MS,
)
from dlrm.data.synthetic.outbrain_click_model import build_click_model, expected_ap
from dlrm.data.synthetic.outbrain_displays import MAX_ADS
from dlrm.data.synthetic.outbrain_raw import BAYES_FILE, SUMMARY_FILE, generate_outbrain_raw, main
from dlrm.data.synthetic.outbrain_world import build_world, country_group
from dlrm.exact_metrics import random_order_ap
from tests.support import ROOT
from tests.support.datasets import files_of

CLICKS, SEED = 20_000, 7
MODULE = "dlrm.data.synthetic.outbrain_raw"


def read(directory, stem: str) -> pd.DataFrame:
    return pd.read_csv(os.path.join(directory, f"{stem}.csv"), na_values=[NULL], keep_default_na=False)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("outbrain_raw")
    summary = generate_outbrain_raw(str(out), CLICKS, SEED)
    tables = {stem: read(out, stem) for stem in RAW_FILES}
    return out, summary, tables


@pytest.fixture(scope="module")
def displays(generated):
    """The click displays as the hidden model takes them, rebuilt from the CSVs, and the model."""
    out, _, tables = generated
    clicks, events = tables["clicks_train"], tables["events"].set_index("display_id")
    ids = clicks.display_id.to_numpy()
    count = int(ids.max())
    sizes = np.bincount(ids - 1, minlength=count)
    column = np.arange(ids.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    ads = np.zeros((count, MAX_ADS), dtype=np.int64)
    ads[ids - 1, column] = clicks.ad_id.to_numpy()
    clicked = np.zeros(count, dtype=np.int64)
    clicked[ids[clicks.clicked == 1] - 1] = column[clicks.clicked.to_numpy() == 1]
    event = events.loc[np.arange(1, count + 1)]
    world = build_world(CLICKS, SEED)
    model = build_click_model(world, SEED)
    inputs = dict(page=event.document_id.to_numpy(), timestamp=event.timestamp.to_numpy(),
                  platform=event.platform.fillna(0).astype(np.int64).to_numpy(),
                  country=country_group(event.geo_location.to_numpy(dtype=object)), ads=ads)
    return dict(model=model, sizes=sizes, clicked=clicked, score=model.score(**inputs), **inputs)


def test_headers_and_value_formats(generated):
    out, summary, tables = generated
    for stem, columns in RAW_FILES.items():
        with open(out / f"{stem}.csv") as text:
            assert text.readline().rstrip("\n") == ",".join(columns)
            body = text.read()
        assert ",," not in body and ",\n" not in body  # a null is written \N, never empty
    events, meta = tables["events"], tables["documents_meta"]
    assert events.uuid.str.fullmatch(r"[0-9a-f]{14}").all()
    assert tables["documents_entities"].entity_id.str.fullmatch(r"[0-9a-f]{32}").all()
    geo = events.geo_location.dropna()
    assert geo.str.fullmatch(r"[A-Z0-9]{2}(>[A-Z0-9]{2}(>\d{3})?)?").all()
    forms = geo.str.count(">").value_counts(normalize=True)
    assert forms[2] > 0.7 and forms[1] > 0.05 and forms[0] > 0.005  # CC>SS>DMA mostly, CC>SS and CC too
    assert set(events.platform.dropna()) == {1, 2, 3}
    assert meta.publish_time.dropna().str.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d").all()
    for aspect in ("topics", "entities", "categories"):
        confidence = tables[f"documents_{aspect}"].confidence_level
        assert confidence.gt(0).all() and confidence.le(1).all() and confidence.nunique() > 0.9 * confidence.size
    categories = tables["documents_categories"].category_id
    assert categories.between(1000, 9999).all() and 80 <= categories.nunique() <= 97
    topics = tables["documents_topics"].topic_id
    assert topics.between(0, 299).all() and topics.nunique() > 250
    assert summary["rows"] == {stem: len(table) for stem, table in tables.items()}


def test_relationships_and_proportions(generated):
    _, summary, tables = generated
    clicks, events, ads, meta = (tables[s] for s in ("clicks_train", "events", "promoted_content", "documents_meta"))
    displays = clicks.display_id.nunique()
    assert events.display_id.is_unique and ads.ad_id.is_unique and meta.document_id.is_unique
    assert clicks.display_id.isin(events.display_id).all() and clicks.ad_id.isin(ads.ad_id).all()
    extra = events[~events.display_id.isin(clicks.display_id)]
    assert extra.display_id.min() == displays + 1 and len(extra) == pytest.approx(0.37 * displays, rel=0.02)
    assert len(clicks) == CLICKS
    assert len(clicks) / clicks.ad_id.nunique() == pytest.approx(180, rel=0.2)  # Kaggle: 87M / 479k
    assert len(clicks) / len(meta) == pytest.approx(29, rel=0.1)
    assert len(ads) / ads.campaign_id.nunique() == pytest.approx(8, rel=0.15)
    assert ads.campaign_id.nunique() / ads.advertiser_id.nunique() == pytest.approx(8, rel=0.5)  # few at this size
    for documents in (events.document_id, ads.document_id):
        in_meta = documents.drop_duplicates().isin(meta.document_id).mean()
        assert 0.95 < in_meta <= 1
    assert not pd.Index(events.document_id).append(pd.Index(ads.document_id)).isin(meta.document_id).all()
    coverage = {"topics": (0.83, 4.5), "entities": (0.60, 3.0), "categories": (0.94, 2.0)}  # Kaggle's shares
    for aspect, (covered, rows_per_document) in coverage.items():
        table = tables[f"documents_{aspect}"]
        assert table.document_id.drop_duplicates().isin(meta.document_id).mean() > 0.95
        assert meta.document_id.isin(table.document_id).mean() == pytest.approx(covered, abs=0.05), aspect
        assert len(table) / table.document_id.nunique() == pytest.approx(rows_per_document, rel=0.1), aspect
        assert not table.duplicated(["document_id", table.columns[1]]).any()
    assert tables["documents_entities"].entity_id.nunique() > 100


def test_one_click_per_display_of_2_to_12_ads_over_days_0_to_12(generated):
    _, summary, tables = generated
    clicks, events = tables["clicks_train"], tables["events"]
    per_display = clicks.groupby("display_id")
    assert (per_display.clicked.sum() == 1).all() and set(clicks.clicked) == {0, 1}
    sizes = per_display.size()
    assert sizes.between(2, 12).all() and sizes.mean() == pytest.approx(5.16, abs=0.1)
    assert not clicks.duplicated(["display_id", "ad_id"]).any()
    assert list(sizes.index) == list(range(1, len(sizes) + 1))  # numbered from 1
    shown = events[events.display_id.isin(clicks.display_id)].sort_values("display_id")
    assert shown.timestamp.is_monotonic_increasing  # in time order
    assert sorted((shown.timestamp // MS_PER_DAY).unique()) == list(range(13))
    later = events[~events.display_id.isin(clicks.display_id)].timestamp // MS_PER_DAY
    assert later.min() >= 0 and later.max() == 14 and (later >= 13).mean() == pytest.approx(0.5, abs=0.1)


def test_nulls_where_the_real_data_has_them(generated):
    _, _, tables = generated
    events, meta = tables["events"], tables["documents_meta"]
    assert 0 < events.platform.isna().mean() < 0.01
    assert 0 < events.geo_location.isna().mean() < 0.02
    assert 0.1 < meta.publisher_id.isna().mean() < 0.3 and 0.2 < meta.publish_time.isna().mean() < 0.4
    assert events[["display_id", "uuid", "document_id", "timestamp"]].notna().all().all()
    published = pd.to_datetime(meta.publish_time.dropna()).astype("int64") // 10**6
    days = (TIMESTAMP_OFFSET_MS - published) / MS_PER_DAY
    assert (days > MAX_DAYS_SINCE_PUBLISHED + 13).sum() > 3 and (days < -MAX_DAYS_SINCE_PUBLISHED).sum() > 3
    assert ((days > 0) & (days < 365)).mean() > 0.5


def test_heavy_tails(generated):
    """Zipf-like: the top tenth of the ads, campaigns and ad documents take a third of the clicks_train rows
    or more (about 40% of the rows go to the top 1% of the ads at 1M clicks)."""
    _, _, tables = generated
    clicks = tables["clicks_train"].merge(tables["promoted_content"], on="ad_id", suffixes=("", "_promo"))
    for column in ("ad_id", "campaign_id", "document_id"):
        counts = clicks[column].value_counts().to_numpy()
        assert counts[: max(1, counts.size // 10)].sum() / counts.sum() > 0.3, column
        assert counts[0] > 8 * np.median(counts), column
    pages = tables["events"].document_id.value_counts().to_numpy()
    assert pages[: pages.size // 10].sum() / pages.sum() > 0.4


def test_same_seed_same_bytes_other_seed_other_bytes(generated, tmp_path):
    out, _, _ = generated
    generate_outbrain_raw(str(tmp_path / "same"), CLICKS, SEED)
    generate_outbrain_raw(str(tmp_path / "other"), CLICKS, SEED + 1)
    first, same, other = files_of(out), files_of(tmp_path / "same"), files_of(tmp_path / "other")
    assert first.keys() == same.keys() == {f"{stem}.csv" for stem in RAW_FILES} | {BAYES_FILE, SUMMARY_FILE}
    assert first == same
    for name in first:
        assert other[name] != first[name], name


def test_gzip_holds_the_same_content(generated, tmp_path):
    out, _, _ = generated
    summary = generate_outbrain_raw(str(tmp_path), CLICKS, SEED, gzip=True)
    for stem in RAW_FILES:
        with open(tmp_path / f"{stem}.csv.gz", "rb") as packed:
            data = packed.read()
        assert data[4:8] == b"\0\0\0\0"  # no time in the header: equal content, equal bytes
        assert gzip.decompress(data) == (out / f"{stem}.csv").read_bytes(), stem
        assert not (tmp_path / f"{stem}.csv").exists()
    assert (tmp_path / BAYES_FILE).read_bytes() == (out / BAYES_FILE).read_bytes()
    assert summary["files"]["events"] == "events.csv.gz" and summary["gzip"]


def test_the_model_reproduces_the_bayes_file(generated, displays):
    out, summary, _ = generated
    bayes = pd.read_csv(out / BAYES_FILE)
    assert list(bayes.display_id) == list(range(1, len(displays["sizes"]) + 1))
    assert (bayes.day.to_numpy() == displays["timestamp"] // MS_PER_DAY).all()
    recomputed = expected_ap(displays["score"])
    assert np.abs(recomputed - bayes.expected_ap.to_numpy()).max() < 1e-8
    train_days = bayes.day <= LAST_TRAIN_DAY
    figures = summary["bayes_map_at_12"]
    assert figures["all"] == pytest.approx(bayes.expected_ap.mean(), abs=1e-6)
    assert figures[f"days_0_{LAST_TRAIN_DAY}"] == pytest.approx(bayes.expected_ap[train_days].mean(), abs=1e-6)
    assert figures[f"days_{LAST_TRAIN_DAY + 1}_12"] == pytest.approx(bayes.expected_ap[~train_days].mean(), abs=1e-6)
    chance = summary["random_map_at_12"]["all"]
    assert chance == pytest.approx(random_order_ap(displays["sizes"]).mean(), abs=1e-6) and 0.43 < chance < 0.5
    assert 0.65 < figures["all"] < 0.8 and figures["all"] > chance + 0.15


def test_the_clicks_follow_the_model(displays):
    score, clicked, sizes = displays["score"], displays["clicked"], displays["sizes"]
    probability = np.exp(score - score.max(axis=1, keepdims=True))
    probability /= probability.sum(axis=1, keepdims=True)
    clicked_probability = probability[np.arange(clicked.size), clicked]
    assert clicked_probability.mean() > np.mean(1 / sizes) + 0.05
    rank = np.argsort(np.argsort(-score, axis=1, kind="stable"), axis=1)[np.arange(clicked.size), clicked] + 1
    realised = np.mean(1 / rank)  # MAP@12 of ranking by the true score (at most 12 ads)
    assert realised == pytest.approx(expected_ap(score).mean(), abs=0.025)


def test_similarity_and_freshness_are_the_engineered_features(generated, displays):
    """The model's TF-IDF cosine is the rule's over every document of the written table, its days since
    published the rule's from the written publish times."""
    _, _, tables = generated
    model = displays["model"]
    rows = np.random.default_rng(0).choice(displays["page"].size, 400, replace=False)
    page, timestamp, ads = displays["page"][rows], displays["timestamp"][rows], displays["ads"][rows, 0]
    document = model.world.ads.document[ads]
    for aspect, similarity in (("topics", model.topic_similarity), ("categories", model.category_similarity)):
        table = tables[f"documents_{aspect}"].set_axis(["document", "aspect", "confidence"], axis=1)
        df = table.groupby("aspect").document.nunique()
        table["weight"] = table.confidence * np.log(table.document.nunique() / table.aspect.map(df))
        table["weight"] /= np.sqrt((table.weight**2).groupby(table.document).transform("sum"))
        pairs = pd.DataFrame({"pair": np.arange(rows.size), "page": page, "ad": document})
        joined = (pairs.merge(table, left_on="page", right_on="document")
                  .merge(table, left_on=["ad", "aspect"], right_on=["document", "aspect"], suffixes=("_page", "_ad")))
        expected = (joined.weight_page * joined.weight_ad).groupby(joined.pair).sum().reindex(pairs.pair, fill_value=0)
        got = similarity(page, document[:, None])[:, 0]
        assert np.abs(got - expected.to_numpy()).max() < 1e-9 and (got > 0.05).mean() > 0.1, aspect
    meta = tables["documents_meta"].set_index("document_id")
    published = pd.to_datetime(meta.publish_time.reindex(document)).astype("int64").to_numpy() // 10**6
    known = meta.publish_time.reindex(document).notna().to_numpy()
    days = np.floor_divide(TIMESTAMP_OFFSET_MS + timestamp - published, MS_PER_DAY)
    days = np.where((days >= 0) & (days <= MAX_DAYS_SINCE_PUBLISHED), days, 0)
    got = model.days_since_published(document[:, None], timestamp)[:, 0]
    assert (got[known] == days[known]).all() and (got[~known] == model.null_publish_days).all()
    assert known.sum() > 100 and (~known).sum() > 20 and model.null_publish_days > 0


def run_cli(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", MODULE, *flags], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def test_cli_writes_and_prints_a_summary(tmp_path):
    result = run_cli("--out", str(tmp_path / "raw"), "--clicks", "3000", "--seed", "3", "--gzip")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed["rows"]["clicks_train"] == 3000 and printed["seed"] == 3 and printed["seconds"] >= 0
    assert printed["bayes_map_at_12"]["all"] > printed["random_map_at_12"]["all"]
    written = json.loads((tmp_path / "raw" / SUMMARY_FILE).read_text())
    assert written["rows"] == printed["rows"] and written["gzip"] is True
    assert sorted(os.listdir(tmp_path / "raw")) == sorted([f"{stem}.csv.gz" for stem in RAW_FILES]
                                                          + [BAYES_FILE, SUMMARY_FILE])
    assert not [name for name in os.listdir(tmp_path) if name != "raw"]  # the staging directory is gone


def test_cli_refuses_a_non_empty_out_and_replaces_only_its_own(tmp_path, capsys):
    out = tmp_path / "raw"
    assert main(["--out", str(out), "--clicks", "500"]) == 0
    before = (out / "clicks_train.csv").read_bytes()
    capsys.readouterr()
    assert main(["--out", str(out), "--clicks", "600"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "already holds" in error and "--overwrite" in error
    assert (out / "clicks_train.csv").read_bytes() == before
    assert main(["--out", str(out), "--clicks", "600", "--overwrite"]) == 0
    assert json.loads((out / SUMMARY_FILE).read_text())["clicks"] == 600
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    capsys.readouterr()
    assert main(["--out", str(other), "--clicks", "500", "--overwrite"]) == 1
    assert "holds no" in capsys.readouterr().err and (other / "notes.txt").read_text() == "keep"


@pytest.mark.parametrize("flags, message", [
    (["--clicks", "zero"], "argument --clicks: expected a positive integer, got 'zero'"),
    (["--clicks", "1"], "argument --clicks: expected at least 2"),
    (["--clicks", "10", "--seed", "-1"], "argument --seed: expected a seed"),
])
def test_cli_bad_flag_is_the_usage_and_one_error_line_and_exit_2(tmp_path, flags, message):
    result = run_cli("--out", str(tmp_path / "raw"), *flags)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    usage, error = result.stderr.split("\n", 1)[0], result.stderr.strip().split("\n")[-1]
    assert usage.startswith("usage: python -m dlrm.data.synthetic.outbrain_raw") and message in error
    assert not os.path.exists(tmp_path / "raw")


def test_the_api_refuses_fewer_than_two_clicks(tmp_path):
    with pytest.raises(ValueError, match="clicks must be >= 2"):
        generate_outbrain_raw(str(tmp_path), 1, SEED)
    assert math.isclose(random_order_ap(np.array([2]))[0], 0.75)
