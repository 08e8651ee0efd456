"""The raw Outbrain CSV files as Kaggle wrote them: a header line, comma-separated, nulls `\\N`.

Rows are formatted by Python's `%` on whole blocks (fast, and the same bytes on every run); gzip files
carry no name or time in their header, so equal content gives equal bytes too.
"""
from __future__ import annotations

import gzip
import os
from typing import BinaryIO, Callable, Sequence

import numpy as np

from dlrm.data.outbrain import MS_PER_DAY, NULL, RAW_FILES
from dlrm.data.synthetic.outbrain_displays import Displays, Events
from dlrm.data.synthetic.outbrain_world import AspectTable, Documents, World, entity_hex, uuid_text

FORMAT_ROWS = 1 << 16  # rows formatted at once
ASPECT_FILES = {"topics": "documents_topics", "entities": "documents_entities", "categories": "documents_categories"}


class CsvFile:
    """One output CSV, `<stem>.csv`, or `<stem>.csv.gz` when `compress`."""

    def __init__(self, directory: str, stem: str, columns: Sequence[str], compress: bool = False):
        self.name = f"{stem}.csv.gz" if compress else f"{stem}.csv"
        self.rows = 0
        self._columns = len(columns)
        self._raw = open(os.path.join(directory, self.name), "wb")
        self._out: BinaryIO | gzip.GzipFile = self._raw
        if compress:
            self._out = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, mtime=0, compresslevel=6)
        self._out.write((",".join(columns) + "\n").encode())

    def write(self, *columns: np.ndarray) -> None:
        """Append rows given as columns of equal length (ints, floats, str; `\\N` for a null)."""
        total = len(columns[0])
        template = ",".join(["%s"] * self._columns) + "\n"
        for start in range(0, total, FORMAT_ROWS):
            stop = min(start + FORMAT_ROWS, total)
            cells = np.empty((stop - start, self._columns), dtype=object)
            for j, column in enumerate(columns):
                cells[:, j] = column[start:stop]
            self._out.write(((template * (stop - start)) % tuple(cells.ravel().tolist())).encode())
        self.rows += total

    def close(self) -> None:
        if self._out is not self._raw:
            self._out.close()
        self._raw.close()


def raw_file(directory: str, stem: str, compress: bool) -> CsvFile:
    """One of the seven input files, its columns as the preprocessing reads them."""
    return CsvFile(directory, stem, RAW_FILES[stem], compress)


def with_nulls(values: np.ndarray, null: np.ndarray) -> np.ndarray:
    """`values` as objects, `\\N` where `null`."""
    cells = values.astype(object)
    cells[null] = NULL
    return cells


def publish_time_text(ms: np.ndarray) -> np.ndarray:
    """`YYYY-MM-DD HH:MM:SS` (UTC) of epoch milliseconds."""
    text = np.datetime_as_string(ms.astype("datetime64[ms]").astype("datetime64[s]"), unit="s")
    return np.char.replace(text, "T", " ")


def write_events(out: CsvFile, world: World, events: Events) -> None:
    geo = with_nulls(world.locations.geo[np.maximum(events.location, 0)], events.location < 0)
    out.write(events.display_id, uuid_text(world, events.user), events.page, events.timestamp,
              with_nulls(events.platform, events.platform == 0), geo)


def write_clicks(out: CsvFile, displays: Displays) -> None:
    shown = displays.ads > 0
    clicked = np.arange(displays.ads.shape[1]) == displays.clicked[:, None]
    out.write(np.repeat(displays.events.display_id, displays.sizes), displays.ads[shown],
              clicked[shown].astype(np.int64))


def write_bayes(out: CsvFile, displays: Displays) -> None:
    out.write(displays.events.display_id, displays.events.timestamp // MS_PER_DAY,
              np.round(displays.expected_ap, 9))


def write_promoted_content(directory: str, world: World, compress: bool) -> int:
    ads = world.ads
    return _write_table(directory, "promoted_content", compress, np.arange(1, ads.count + 1), ads.document[1:],
                        ads.campaign[1:], ads.advertiser[1:])


def write_documents_meta(directory: str, documents: Documents, compress: bool) -> int:
    ids = np.flatnonzero(documents.in_meta)
    publish = with_nulls(publish_time_text(documents.publish_ms[ids]), ~documents.publish_known[ids])
    return _write_table(directory, "documents_meta", compress, ids,
                        with_nulls(documents.source[ids], documents.source[ids] == 0),
                        with_nulls(documents.publisher[ids], documents.publisher[ids] == 0), publish)


def write_aspects(directory: str, aspect: str, table: AspectTable, compress: bool,
                  id_text: Callable[[np.ndarray], np.ndarray]) -> int:
    """documents_<aspect>: a document's rows in descending confidence, documents ascending."""
    valid = table.ids >= 0
    documents = np.broadcast_to(np.arange(table.ids.shape[0])[:, None], table.ids.shape)[valid]
    return _write_table(directory, ASPECT_FILES[aspect], compress, documents, id_text(table.ids[valid]),
                        table.confidence[valid])


def write_documents(directory: str, documents: Documents, compress: bool) -> dict[str, int]:
    """documents_meta and the three aspect tables; rows per file stem."""
    return {"documents_meta": write_documents_meta(directory, documents, compress),
            "documents_topics": write_aspects(directory, "topics", documents.topics, compress, _same),
            "documents_entities": write_aspects(directory, "entities", documents.entities, compress,
                                                lambda ids: entity_hex(documents, ids)),
            "documents_categories": write_aspects(directory, "categories", documents.categories, compress, _same)}


def _same(ids: np.ndarray) -> np.ndarray:
    return ids


def _write_table(directory: str, stem: str, compress: bool, *columns: np.ndarray) -> int:
    out = raw_file(directory, stem, compress)
    try:
        out.write(*columns)
    finally:
        out.close()
    return out.rows
