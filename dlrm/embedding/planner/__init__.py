"""Where every embedding table lives: a pure-Python placement planner (no TensorFlow).

Given the tables (`dlrm.features.TableConfig`: name, rows, dim, hotness, combiner), the world size and a
`ShardingConfig`, `plan_embeddings` decides for each table one of four layouts and the rank of every
piece. The stages, one module each:

- `layout`:            the checked sizes; each table's kind (``replicated``, ``row_sliced``, ``column_sliced``,
                       ``table_wise``) and its cut into pieces (`dlrm.embedding.pieces.TablePiece`);
- `strategies`:        which rank holds each piece (``basic`` round robin, ``memory_balanced`` by default),
                       building an `assignment.Assignment`;
- `lookup_balance`:    ``memory_balanced``'s last step: whole pieces moved to even out the lookup load;
- `budget`:            `plan_embeddings`, and the smallest per-rank budget that works when the tables do not fit;
- `plan`:              the result (`Plan`: placements with owned pieces, rank loads) and its JSON form;
- `exchange_estimate`: the all-to-all bytes per rank and step of a plan at a global batch (`exchange_bytes`;
                       the all-to-all itself is `dlrm.embedding.exchange`);
- `describe` and `cli`: ``python -m dlrm.embedding.planner`` (sizes read and printed by `dlrm.sizes`).

Memory counts rows x dim of every table, weights plus optimizer slots (`optimizer_slots` extra copies,
see `dlrm.embedding.optimizer_slots`). Lookup load counts embedding elements fetched per global sample
(hotness x columns, and for row slices the share of rows, assuming ids spread uniformly — real Criteo
ids are numbered by descending frequency, so the first row range is hotter than this estimate).

``python -m dlrm.embedding.planner --preset t0 --world_size 8 --rank_memory 80GiB`` prints a plan;
``--global_batch_size 65536`` adds the exchange estimate on 8 ... 1024 ranks.
"""
from dlrm.embedding.planner.budget import minimum_rank_memory, plan_embeddings
from dlrm.embedding.planner.exchange_estimate import ExchangeEstimate, RankTraffic, exchange_bytes
from dlrm.embedding.planner.plan import OwnedPiece, Plan, PlanError, RankLoad, TablePlacement
from dlrm.embedding.planner.strategies import STRATEGIES

__all__ = ["STRATEGIES", "ExchangeEstimate", "OwnedPiece", "Plan", "PlanError", "RankLoad", "RankTraffic",
           "TablePlacement", "exchange_bytes", "minimum_rank_memory", "plan_embeddings"]
