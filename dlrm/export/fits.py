"""Does the model fit one host? Checked before anything is read or allocated.

The export holds every table whole in one process (the planner's one-rank plan gives their bytes,
weights only: no optimizer slots). That is compared with `--max_memory` when given and with the memory
this process can get (`dlrm.embedding.memory_check.available_memory`); larger models take the path of
docs/export.md, "Models larger than one host".
"""
from __future__ import annotations

from typing import Optional

from dlrm.embedding.memory_check import available_memory
from dlrm.embedding.planner import plan_embeddings
from dlrm.export.errors import ExportError
from dlrm.features import FeatureContract
from dlrm.sizes import format_bytes


def table_bytes(contract: FeatureContract) -> int:
    """Bytes of every table, whole, in one process (weights only)."""
    return plan_embeddings(contract.tables, 1, optimizer_slots=0).total_memory_bytes


def check_fits_one_host(contract: FeatureContract, max_memory: Optional[int]) -> int:
    """The tables' bytes; raises ExportError naming both figures when they exceed the smaller limit."""
    need = table_bytes(contract)
    have, why = available_memory()
    if max_memory is not None and max_memory < have:
        have, why = max_memory, "--max_memory"
    if need > have:
        raise ExportError(
            f"the embedding tables need {format_bytes(need)} in one process but only {format_bytes(have)} is "
            f"available ({why}): this model is too large to export on one host; export the dense part and the "
            f"tables' shards per rank instead (docs/export.md, 'Models larger than one host')")
    return need
